"""Which operators of a series are judged, and their values run by run.

Every profiled run logs the operators that make up its profiled step as `op/cpu/<operator>` (self CPU time)
and, on GPUs, `op/device/<operator>` (self device time), ms per profiled step, with `op/step_ms` and
`op/floor_ms` (analysis/operators.py). A series judges, per kind, each operator at JUDGED_SHARE of the profiled
step or more and at least the JUDGED_TOP largest, by their mean over the newest night's runs or the SELECTION_RUNS
runs before it (so an operator that vanished tonight is judged as well as one that appeared).

Values (`with_values`): a run that logged operators gives each judged operator its logged value; one it did not
log reads 0 where the run's `op/floor_ms` is below CENSORED of the operator's level (it vanished) and a gap where it
is not (near the cut); a run without `op/floor_ms` (no key_averages tables) is a gap in every series, never a zero.

Outliers (`set_aside`): a value more than `DetectionSettings.outlier_sds` robust sds from its night's median (log
scale, nights of 3 runs or more) is a gap, listed with the series: a run preempted inside its window adds the lost
time to whichever operator ran. The sd is the median absolute difference of two runs of a night over the newest
nights, over PAIR_MAD. A change of level moves the whole night, its median with it: nothing is set aside.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import numpy as np

from yolo_mlops import names
from yolo_mlops.trends.history import HistoryRun

JUDGED_SHARE = 0.01  # an operator at this share of the profiled step or more is judged
JUDGED_TOP = 20  # and at least this many of each kind (the largest)
SELECTION_RUNS = 12  # the runs before the newest night whose means also pick operators
CENSORED = 0.5  # an operator a run did not log reads 0 only where the run's floor is below this part of its level
PAIR_MAD = 0.6744897501960817 * 2**0.5  # median |x - y| of two independent normal draws, in their sd
NOISE_NIGHTS = 70  # the newest nights (of 3 runs or more) whose pairs set an operator's noise


def logged(run: HistoryRun) -> bool:
    """The run logged its operators (it had key_averages tables)."""
    return names.OP_FLOOR_MS in run.metrics


def newest_night(runs: list[HistoryRun]) -> set[str]:
    """The run ids of the newest run's night (its benchmark night), or the newest run alone."""
    last = runs[-1]
    if last.night is None:
        return {last.run_id}
    return {r.run_id for r in runs if r.night == last.night}


def select(runs: list[HistoryRun], newest: set[str] | None = None) -> list[str]:
    """The operator metrics judged over these runs (module doc), largest first within each kind."""
    with_ops = [r for r in runs if logged(r)]
    if not with_ops:
        return []
    newest = newest_night(with_ops) if newest is None else newest
    tonight = [r for r in with_ops if r.run_id in newest] or with_ops[-1:]
    first = min(i for i, r in enumerate(with_ops) if r.run_id in {t.run_id for t in tonight})
    before = with_ops[max(0, first - SELECTION_RUNS) : first]
    chosen: dict[str, float] = {}
    for window in (tonight, before):
        if not window:
            continue
        step = float(np.mean([r.metrics.get(names.OP_STEP_MS, np.nan) for r in window]))
        for prefix in (names.OP_HOST_PREFIX, names.OP_DEVICE_PREFIX):
            means: dict[str, float] = {}
            for r in window:
                for metric, value in r.metrics.items():
                    if metric.startswith(prefix):
                        means[metric] = means.get(metric, 0.0) + value / len(window)
            ranked = sorted(means.items(), key=lambda kv: (-kv[1], kv[0]))
            for i, (metric, mean) in enumerate(ranked):
                if i < JUDGED_TOP or (step == step and mean >= JUDGED_SHARE * step):
                    chosen[metric] = max(chosen.get(metric, 0.0), mean)
    return sorted(chosen, key=lambda m: (not m.startswith(names.OP_HOST_PREFIX), -chosen[m], m))


def with_values(runs: list[HistoryRun], metrics: list[str]) -> list[HistoryRun]:
    """The runs, each run that logged operators given a value for the operators of `metrics` it did not log: 0
    where its floor lies below CENSORED of the operator's level, else none (module doc); runs that logged no
    operator are left as they are (a gap in every operator series)."""
    levels = {m: float(np.median(v)) for m in metrics if (v := [r.metrics[m] for r in runs if m in r.metrics])}
    out = []
    for r in runs:
        if logged(r):
            floor = r.metrics[names.OP_FLOOR_MS]
            zeros = [m for m in metrics if m not in r.metrics and floor < CENSORED * levels.get(m, 0.0)]
            if zeros:
                r = replace(r, metrics={**r.metrics, **dict.fromkeys(zeros, 0.0)})
        out.append(r)
    return out


def step_ms(runs: list[HistoryRun]) -> float | None:
    """The mean profiled step (op/step_ms) of the runs that logged it, else their step time p50; None if neither."""
    values = [r.metrics[names.OP_STEP_MS] for r in runs if names.OP_STEP_MS in r.metrics]
    if not values:
        values = [r.step_time_ms for r in runs if r.step_time_ms is not None]
    return float(np.mean(values)) if values else None


def set_aside(runs: list[HistoryRun], metrics: list[str], sds: float) -> tuple[list[HistoryRun], dict[str, list[str]]]:
    """The runs with each operator value that is an outlier of its night removed (module doc), and the run ids
    set aside by metric. `sds` <= 0 sets nothing aside; so does an operator whose noise reads 0."""
    if sds <= 0:
        return runs, {}
    nights: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(runs):
        if r.night is not None:
            nights[r.night].append(i)
    groups = [g for g in nights.values() if len(g) >= 3]
    if not groups:
        return runs, {}
    removed: dict[int, list[str]] = defaultdict(list)
    out: dict[str, list[str]] = {}
    for metric in metrics:
        flagged = _outliers([[runs[i].metrics.get(metric, 0.0) for i in g] for g in groups], sds)
        ids = [groups[g][k] for g, k in flagged]
        for i in ids:
            removed[i].append(metric)
        if ids:
            out[metric] = [runs[i].run_id for i in sorted(ids)]
    screened = [
        replace(r, metrics={m: v for m, v in r.metrics.items() if m not in removed[i]}) if i in removed else r
        for i, r in enumerate(runs)
    ]
    return screened, out


def _outliers(nights: list[list[float]], sds: float) -> list[tuple[int, int]]:
    """(night, position) of every value beyond `sds` robust sds of its night's median, on the log scale; nights
    with a value that is not positive (an operator vanished, appeared or not logged) are neither judged nor read
    for the noise. Nights of equal size are judged as one array."""
    by_size: dict[int, list[int]] = defaultdict(list)
    for g, values in enumerate(nights):
        if all(v > 0 for v in values):
            by_size[len(values)].append(g)
    logs = {k: np.log(np.array([nights[g] for g in gs], dtype=float)) for k, gs in by_size.items()}
    newest = sorted((g for gs in by_size.values() for g in gs), reverse=True)[:NOISE_NIGHTS]
    cutoff = min(newest, default=0)
    pairs = []
    for k, gs in by_size.items():
        rows = logs[k][np.array(gs) >= cutoff]
        i, j = np.triu_indices(k, 1)
        pairs.append(np.abs(rows[:, i] - rows[:, j]).ravel())
    every = np.concatenate(pairs) if pairs else np.empty(0)
    sd = float(np.median(every)) / PAIR_MAD if every.size else 0.0
    if not sd > 0:
        return []
    found = []
    for k, gs in by_size.items():
        z = logs[k]
        far = np.abs(z - np.median(z, axis=1, keepdims=True)) > sds * sd
        found += [(gs[row], col) for row, col in zip(*np.nonzero(far), strict=True)]
    return found
