"""Made-up series histories for tests and benchmarks of trend detection: the typed records `trends.history`
reads from MLflow, one run an hour from a fixed start (run ids run0000, run0001, ...)."""

from __future__ import annotations

import numpy as np

from yolo_mlops import names
from yolo_mlops.trends.history import HistoryRun
from yolo_mlops.trends.trend import DetectionSettings

T0_MS = 1_700_000_000_000
HOUR_MS = 3_600_000


def history_run(
    i: int,
    metrics: dict[str, float],
    versions: dict[str, str],
    night: str,
    *,
    series: str = "s",
    label: str = "sim",
    every_ms: int = HOUR_MS,
) -> HistoryRun:
    """The i-th run of a series, `every_ms` after the one before, its step time its step-time metric."""
    return HistoryRun(
        run_id=f"run{i:04d}",
        experiment_id="1",
        start_time_ms=T0_MS + i * every_ms,
        series=series,
        label=label,
        metrics=metrics,
        versions=versions,
        night=night,
        profiled_steps=5,
        step_time_ms=metrics[names.STEP_TIME_P50],
    )


# ---- operator series ---------------------------------------------------------------------------------------


def operator_levels(ops: int = 30, step_ms: float = 100.0, decay: float = 0.85) -> dict[str, float]:
    """`ops` operators' self times (ms per profiled step) that make up 95% of a `step_ms` step, each `decay` of the
    one before, as a real CPU profile falls off (at 0.85: the largest 15% of the step, the 10th 3.5%, the 20th
    0.7%), keyed by their op/cpu metric (`aten::sim_op_00` the largest)."""
    weights = decay ** np.arange(ops)
    weights = 0.95 * step_ms * weights / weights.sum()
    return {names.operator_metric("operator", f"aten::sim_op_{i:02d}"): float(w) for i, w in enumerate(weights)}


def logged_operators(ops: dict[str, float], step_ms: float) -> dict[str, float]:
    """What a run logs of these operators (analysis/operators.py's rule): every one at 1% of the step or more, at
    least the 20 largest and at most 30, with op/step_ms and op/floor_ms (the largest left out, 0 if none)."""
    from yolo_mlops.analysis import operators

    ranked = sorted(ops.items(), key=lambda kv: -kv[1])
    kept = [
        kv
        for i, kv in enumerate(ranked)
        if i < operators.MAX_LOGGED and (i < operators.MIN_LOGGED or kv[1] >= operators.FLOOR_SHARE * step_ms)
    ]
    floor = ranked[len(kept)][1] if len(ranked) > len(kept) else 0.0
    return dict(kept) | {names.OP_STEP_MS: step_ms, names.OP_FLOOR_MS: floor}


def operator_history(
    nights: int,
    per_night: int = 3,
    *,
    levels: dict[str, float] | None = None,
    step_ms: float = 100.0,
    op_noise: float = 0.06,
    step_noise: float = 0.03,
    load_noise: float = 0.0,
    slowed: tuple[str, int, float] | None = None,
    torch_from: int | None = None,
    renamed: tuple[str, str, int] | None = None,
    without_tables: tuple[int, ...] = (),
    seed: int = 0,
    first: int = 0,
    torch_every: int | None = None,
    night_offset: int = 0,
    night_noise: float = 0.0,
    night_seed: int | None = None,
    preempted: float = 0.0,
    preempt_ms: float = 2.0,
) -> list[HistoryRun]:
    """A series of `nights` nights of `per_night` runs with operator metrics as a run logs them (op/cpu/* of the
    20 largest and any other at 1% of the step, op/step_ms, op/floor_ms: `logged_operators`) and the step time
    they add up to, a new commit every night.

    Noise: each operator `op_noise` (relative, independent), the step's rest `step_noise`, and a run-wide factor
    of sd `load_noise` (the machine's load) on everything. `slowed` = (metric, night, factor): that operator's
    time x factor from that night on (the step time grows by what it adds); `torch_from`: the night torch
    changes (2.14.1 -> 2.15.0); `renamed` = (old, new, night): the operator is named `new` from that night on;
    `without_tables`: run indices that logged no operator (older runs, failed windows); `torch_every`: torch
    changes every that many nights instead; `first` and `night_offset`: where the run ids and nights start (runs
    of a night already in a history: its confirmation runs); `night_noise`: a factor of that sd shared by a
    night's runs (the machine's state that night), drawn from `night_seed` (default `seed`) and the night, so
    the confirmation runs of a night share it. `preempted`: the chance a run was preempted inside its profiled
    window, which adds `preempt_ms` a profiled step to one operator (drawn by its share of the time, as the
    operator running when the core was taken) and to the step."""
    levels = operator_levels(30, step_ms) if levels is None else levels
    rng = np.random.default_rng(seed)
    rest = step_ms - sum(levels.values())
    runs = []
    for night in range(nights):
        night_rng = np.random.default_rng([seed if night_seed is None else night_seed, night + night_offset])
        night_factor = 1.0 + night_noise * float(night_rng.standard_normal())
        for k in range(per_night):
            i = first + night * per_night + k
            load = (1.0 + load_noise * rng.standard_normal()) * night_factor
            ops = {m: v * (1 + op_noise * rng.standard_normal()) * load for m, v in levels.items()}
            if slowed is not None and night >= slowed[1]:
                ops[slowed[0]] *= slowed[2]
            if preempted:  # its own stream: the histories without preemption stay as they were
                lost = np.random.default_rng([seed, 7919, i])
                if lost.random() < preempted:
                    times = np.array(list(ops.values()))
                    hit = list(ops)[int(lost.choice(len(ops), p=times / times.sum()))]
                    ops[hit] += preempt_ms
            step = sum(ops.values()) + rest * (1 + step_noise * rng.standard_normal()) * load
            if renamed is not None and night >= renamed[2]:
                ops[renamed[1]] = ops.pop(renamed[0])
            metrics = {names.STEP_TIME_P50: step}
            if i not in without_tables:
                metrics |= logged_operators(ops, step)
            n = night + night_offset
            torch = "2.15.0" if torch_from is not None and n >= torch_from else "2.14.1"
            if torch_every:
                torch = f"2.{14 + n // torch_every}.0"
            versions = {"commit": f"{n + 1:08x}" + "c0ffee" * 5 + "ab", "torch": torch}
            runs.append(history_run(i, metrics, versions, f"n{n:03d}"))
    return runs


def operator_nights(
    series: int,
    nights: int,
    *,
    history_nights: int = 8,
    per_night: int = 3,
    ops: int = 40,
    decay: float = 0.85,
    confirm_repeats: int = 3,
    op_noise: float = 0.06,
    load_noise: float = 0.02,
    night_noise: float = 0.0,
    slowed: tuple[int, float] | None = None,
    seed: int = 0,
    preempted: float = 0.0,
    settings: DetectionSettings | None = None,
) -> dict[str, float]:
    """Nightly judging of simulated series with `ops` operator series each (a new commit every night, torch
    changing on every 5th), `nights` nights judged after `history_nights`, as the nightly flow judges them:
    `trend.verdict` over the history up to the night, and a night that opens an operator regression re-measured
    by `confirm_repeats` runs from the same level as the night (`confirm.judge`). `slowed` = (rank, factor): the
    operator of that rank (0 = the largest) x factor from the first judged night on (judged on that night only).

    Returns counts: series-nights judged, operator series and operator tests summed over them, nights opening
    an operator event each test at its own level (no multiplicity control), nights opening one after the
    operator family's Holm (`opened`), alerts (opened and confirmed), and for `slowed` whether the slowed
    operator was found and whether step time moved. `preempted`: the chance a run (confirmation runs included) was
    preempted (`operator_history`); `settings`: the judging's (default DetectionSettings())."""
    from yolo_mlops.trends import confirm, trend

    levels = operator_levels(ops, decay=decay)
    target = list(levels)[slowed[0]] if slowed is not None else None
    keys = ("series_nights", "op_series", "op_tests", "raw_opened", "opened", "alerts", "found", "step_found")
    counts = dict.fromkeys(keys, 0.0)
    for s in range(series):
        total = history_nights + (1 if slowed is not None else nights)
        series_seed = seed * 100_003 + s
        runs = operator_history(
            total,
            per_night,
            levels=levels,
            op_noise=op_noise,
            load_noise=load_noise,
            night_noise=night_noise,
            slowed=(target, history_nights, slowed[1]) if target is not None and slowed is not None else None,
            torch_every=5,
            seed=series_seed,
            preempted=preempted,
        )
        for night in range(history_nights, total):
            upto = runs[: (night + 1) * per_night]
            tonight = {r.run_id for r in upto[-per_night:]}
            t = trend.series_trend(upto, settings or DetectionSettings())
            by_id = {r.run_id: r for r in t.runs}
            first_ms = min(by_id[i].start_time_ms for i in tonight)
            raw = [trend._night_events(m, by_id, first_ms, t.settings) for m in t.operators]
            v = trend.verdict(t, tonight)
            counts["series_nights"] += 1
            counts["op_series"] += len(raw)
            counts["op_tests"] += 2 * len(raw) + sum(len(n.boundaries) for n in raw)
            counts["raw_opened"] += any(n.changes or n.moved for n in raw)
            op_bad = [m for m in confirm.needs_confirmation(v) if trend.is_operator(m)]
            counts["opened"] += bool(op_bad)
            counts["step_found"] += v.per_metric.get(names.STEP_TIME_P50) == "regression"
            counts["found"] += target is not None and v.per_metric.get(target) == "regression"
            if op_bad and confirm_repeats:
                extra = operator_history(
                    1,
                    confirm_repeats,
                    levels=levels,
                    op_noise=op_noise,
                    load_noise=load_noise,
                    slowed=(target, 0, slowed[1]) if target is not None and slowed is not None else None,
                    night_noise=night_noise,
                    seed=series_seed * 1_009 + night + 7,
                    night_seed=series_seed,
                    first=len(runs) + 1000,
                    night_offset=night,
                    torch_every=5,
                    preempted=preempted,
                )
                judged, outcome = confirm.judge(
                    trend.series_trend(upto + extra, settings or DetectionSettings()),
                    tonight,
                    {r.run_id for r in extra},
                    tuple(op_bad),
                )
                counts["alerts"] += outcome.confirmed
    return counts
