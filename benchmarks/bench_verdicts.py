"""Benchmark: nightly verdicts — false alerts, steps alerted within a night, drifts, detection power, speed.

1. False alerts per 1,000 series-nights: stationary histories (Gaussian and Student t(3) noise, 1% of the
   level), 60 runs of history, then nights of 3 runs; a night alerts when its runs open a change point the
   bad way (up) (`trend.verdict`), and with confirmation only when 3 more runs confirm it (`confirm.judge`).
2. Steps of 2, 3 and 5 noise sd at tonight's first run: the share alerted within that night, with confirmation
   (and with a night effect as large as the run noise: the floor). Confirmation runs at tonight's level,
   worse, at another level after a load shift, and back at baseline: the share `confirm.judge` confirms, and
   the confirmation test's own rate (runs or nights as the unit); a lasting step dismissed on its first night:
   alerted on the nights after.
3. Drifts of 2-30% over 200 runs (noise 1%), judged night by night from run 12: events per drift (new drift
   verdicts + new change points; goal 1) and the runs until the first.
4. Minimum detectable shift: the prediction (`power.min_detectable_shift`) against the detector's simulated
   power at 0.8 / 1.0 / 1.2 x the prediction (goal: 90% crossed inside that range).
5. Known changes: power of the direct test of a version boundary (Welch, p <= 0.01) against the blind search.
6. Speed: `drift.analyze` (change points + drift) over 1,000 runs x 8 metrics.

Series come from numpy's default_rng with fixed seeds, so every figure is reproducible.

    .venv/bin/python benchmarks/bench_verdicts.py [--series 250] [--seeds 200] [--drift-seeds 30]
        [--confirm-seeds 2000] [--sections false,steps,confirmation]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from yolo_mlops import names
from yolo_mlops.render import fmt, markdown_table
from yolo_mlops.stats import nights_t_test, student_t
from yolo_mlops.trends import candidates, changepoint, confirm, drift, power, trend
from yolo_mlops.trends.history import HistoryRun

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # tests/histories.py: the run records
from bench_changepoint import history as cp_history  # noqa: E402
from harness import Stopwatch  # noqa: E402
from histories import history_run  # noqa: E402

HISTORY, NIGHT, CONFIRM = 60, 3, 3


def noise(rng, n: int, heavy: bool) -> np.ndarray:
    return rng.standard_t(3, n) / np.sqrt(3.0) if heavy else rng.standard_normal(n)


def records(values, nights_of: int = NIGHT, start_night: int = 0) -> list[HistoryRun]:
    """One step-time value per run, 3 runs a night, an hour apart: what `trends.history` reads from MLflow."""
    return [
        history_run(i, {names.STEP_TIME_P50: float(v)}, {}, f"n{start_night + i // nights_of}")
        for i, v in enumerate(values)
    ]


def opens_regression(z: np.ndarray, first: int) -> bool:
    """`trend.verdict` over the history: a change point (the worst where several) starts among the night's runs
    (from `first`) and goes up (step time: the bad way)."""
    runs = records(z)
    return trend.verdict(trend.series_trend(runs), {r.run_id for r in runs[first:]}).status == "regression"


def confirmed(z: np.ndarray, first: int, night: int = NIGHT) -> bool:
    """`confirm.judge` after the confirmation runs z[first + night:]: the regression holds."""
    runs = records(z)
    tonight = {r.run_id for r in runs[first : first + night]}
    return confirm.judge(
        trend.series_trend(runs), tonight, {r.run_id for r in runs[first + night :]}, (names.STEP_TIME_P50,)
    )[1].confirmed


def bench_false_alerts(series: int, nights: int = 20) -> str:
    rows = []
    for heavy in (False, True):
        raw = alerts = total = 0
        for s in range(series):
            rng = np.random.default_rng(50_000 + s)
            z = 100 + noise(rng, HISTORY + nights * NIGHT, heavy)
            for night in range(nights):
                first = HISTORY + night * NIGHT
                total += 1
                if opens_regression(z[: first + NIGHT], first):
                    raw += 1
                    again = np.r_[z[: first + NIGHT], 100 + noise(rng, CONFIRM, heavy)]
                    alerts += confirmed(again, first)
        rows.append(
            [
                "Student t(3)" if heavy else "Gaussian",
                total,
                fmt(1000 * raw / total, ".2f"),
                fmt(1000 * alerts / total, ".2f"),
            ]
        )
    return markdown_table(
        ["noise", "series-nights", "alerts / 1,000 without confirmation", "... with confirmation (3 runs)"], rows
    )


def bench_steps(seeds: int) -> str:
    """Steps at tonight's first run, 3 runs a night (the default), and repeats='auto' with target_shift_pct at
    3 noise sd (the runs `power.repeats_needed` picks for 60 runs of 1% noise, as `nightly.repeats_needed`; as
    many confirmation runs, `Night.confirmation_repeats`). The last rows add a night effect as large as the run
    noise (one offset per night, shared by tonight's and the confirmation runs): no test of one night can tell
    a step from a slow night there, so they show the floor the false-alert goal sets."""
    auto, _ = power.repeats_needed(1.0, HISTORY, 3.0, 8, changepoint.DEFAULT_MAX_PVALUE)  # at power.AUTO_POWER
    rows = []
    cases = ((2.0, NIGHT, 0.0), (3.0, NIGHT, 0.0), (5.0, NIGHT, 0.0), (3.0, auto, 0.0), (5.0, NIGHT, 1.0))
    for sd, night, night_sd in cases:
        again = max(CONFIRM, night)
        opened = alerted = 0
        for s in range(seeds):
            rng = np.random.default_rng(s)
            z = 100 + rng.standard_normal(HISTORY + night + again)
            offsets = np.repeat(rng.standard_normal(HISTORY // NIGHT + 1), NIGHT)
            z[:HISTORY] += night_sd * offsets[:HISTORY]
            z[HISTORY:] += sd + night_sd * offsets[-1]
            if opens_regression(z[: HISTORY + night], HISTORY):
                opened += 1
                alerted += confirmed(z, HISTORY, night)
        label = f"{sd:g} sd, " + (f"repeats='auto' ({night} runs tonight)" if night != NIGHT else "3 runs tonight")
        label += f", a night effect of {night_sd:g} run sd" if night_sd else ""
        rows.append([label, again, fmt(100 * opened / seeds, ".1f"), fmt(100 * alerted / seeds, ".1f")])
    return markdown_table(
        ["step (noise 1%, 60 runs before)", "confirmation runs", "% opened tonight", "% alerted tonight"], rows
    )


# a night's watched metrics (name, level, noise sd): CPU runs log 3, GPU runs 7; images/s is images over the
# step times (it moves with step time), the others have noise of their own
NIGHT_METRICS_CPU = (
    (names.STEP_TIME_P50, 100.0, 1.0),
    (names.IMAGES_PER_S, 40.0, None),
    (names.DATA_WAIT_PCT, 5.0, 0.5),
)
NIGHT_METRICS_GPU = NIGHT_METRICS_CPU + (
    (names.GPU_SM_UTIL_MEAN, 80.0, 1.0),
    (names.GPU_DRAM_BW_UTIL_MEAN, 40.0, 1.0),
    (names.GPU_MEM_USED_MAX, 6.0, 0.01),
    (names.GPU_ENERGY_PER_IMAGE, 2.0, 0.02),
)


def _metric_values(rng, n: int, heavy: bool, metrics) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for name, level, sd in metrics:
        if sd is None:  # images/s: 4000 images per 100 s of step time, plus 0.2% of its own
            out[name] = level * 100.0 / out[names.STEP_TIME_P50] * (1 + 0.002 * noise(rng, n, heavy))
        else:
            out[name] = level + sd * noise(rng, n, heavy)
    return out


def _metric_records(values: dict[str, np.ndarray], versions: list[dict[str, str]]) -> list[HistoryRun]:
    """Run i logs values[metric][i] for every metric and ran `versions[i]`, 3 runs a night."""
    return [
        history_run(i, {k: float(v[i]) for k, v in values.items()}, dict(versions[i]), f"n{i // NIGHT}")
        for i in range(len(versions))
    ]


def _night_records(values: dict[str, np.ndarray]) -> list[HistoryRun]:
    """The HISTORY runs of the history at commit c0, then a new commit every night."""
    n = len(values[names.STEP_TIME_P50])
    return _metric_records(values, [{"commit": f"c{max(0, (i - HISTORY) // NIGHT + 1)}"} for i in range(n)])


def bench_night(series: int, nights: int = 20) -> str:
    """False alerts per series-night as the nightly flow meets them: every watched metric (3 on CPU, 7 on GPU),
    a new commit every night (so every night is also a version boundary tested at 1% for each metric), the
    worst of them deciding (`trend.verdict`), then 3 confirmation runs (`confirm.judge`, Holm over the metrics
    re-measured)."""
    rows = []
    for label, metrics in (("CPU (3 metrics)", NIGHT_METRICS_CPU), ("GPU (7 metrics)", NIGHT_METRICS_GPU)):
        for heavy in (False, True):
            raw = alerts = total = 0
            for s in range(series):
                rng = np.random.default_rng([60_000 + s, heavy, len(metrics)])
                values = _metric_values(rng, HISTORY + nights * NIGHT, heavy, metrics)
                for night in range(nights):
                    first = HISTORY + night * NIGHT
                    total += 1
                    runs = _night_records({k: v[: first + NIGHT] for k, v in values.items()})
                    tonight = {r.run_id for r in runs[first:]}
                    v = trend.verdict(trend.series_trend(runs), tonight)
                    if v.status != "regression":
                        continue
                    raw += 1
                    again = _metric_values(rng, CONFIRM, heavy, metrics)
                    both = {k: np.r_[values[k][: first + NIGHT], again[k]] for k in values}
                    runs = _night_records(both)
                    extra = {r.run_id for r in runs[first + NIGHT :]}
                    for r in runs[first + NIGHT :]:  # the confirmation runs ran tonight's commit
                        r.versions["commit"] = runs[first].versions["commit"]
                    alerts += confirm.judge(trend.series_trend(runs), tonight, extra, confirm.needs_confirmation(v))[
                        1
                    ].confirmed
            rows.append(
                [
                    label,
                    "Student t(3)" if heavy else "Gaussian",
                    total,
                    fmt(1000 * raw / total, ".2f"),
                    fmt(1000 * alerts / total, ".2f"),
                ]
            )
    return markdown_table(
        [
            "runs",
            "noise",
            "series-nights",
            "regressions opened / 1,000 (no confirmation)",
            "alerts / 1,000 with 3 confirmation runs",
        ],
        rows,
    )


# correlated watched metrics: (name, level, run noise sd, correlation with step time's run noise); images/s is
# derived from step time as above
FAMILY_CPU = (
    (names.STEP_TIME_P50, 100.0, 1.0, 1.0),
    (names.IMAGES_PER_S, 40.0, None, None),
    (names.DATA_WAIT_PCT, 5.0, 0.5, 0.5),
)
FAMILY_GPU = FAMILY_CPU + (
    (names.GPU_SM_UTIL_MEAN, 80.0, 1.0, -0.6),
    (names.GPU_DRAM_BW_UTIL_MEAN, 40.0, 1.0, -0.6),
    (names.GPU_MEM_USED_MAX, 6.0, 0.01, 0.0),
    (names.GPU_ENERGY_PER_IMAGE, 2.0, 0.02, 0.6),
)
NEW_COMMIT_SHARE, NEW_TORCH_SHARE = 0.3, 0.05  # nights whose runs carry a new commit / a new torch


def _family_values(rng, n: int, metrics, night_sd: float, night_offsets: np.ndarray) -> dict[str, np.ndarray]:
    """n runs whose nights' shared offsets are `night_offsets` (one per run, in run noise sd units of step time,
    drawn per night by the caller): each metric's run noise is correlated with step time's, and the night's
    offset moves every metric by its correlation (a busy night is slow in step time and low in utilisation)."""
    common = rng.standard_normal(n)
    out: dict[str, np.ndarray] = {}
    for name, level, sd, rho in metrics:
        if sd is None:
            out[name] = level * 100.0 / out[names.STEP_TIME_P50] * (1 + 0.002 * rng.standard_normal(n))
            continue
        own = rho * common + np.sqrt(1 - rho * rho) * rng.standard_normal(n)
        out[name] = level + sd * (own + night_sd * (rho if rho else 1.0) * night_offsets)
    return out


def bench_family(series: int, nights: int = 20, night_sds: tuple[float, ...] = (0.0, 0.5, 1.0)) -> str:
    """False events per series-night of stationary series as the nightly flow judges them: every watched metric
    (correlated), a new commit on 30% of nights and a new torch on 5%, a night-level random effect shared by a
    night's runs and its confirmation runs (sd in run-noise units), 60 runs of history then 20 judged nights.
    Each night: the events of `trend.verdict` (each test at its own level), then held to Holm over the night's
    family (`confirm.night_family`); regressions among them re-measured by 3 confirmation runs (`confirm.judge`)."""
    rows = []
    for label, metrics in (("CPU (3 metrics)", FAMILY_CPU), ("GPU (7 metrics)", FAMILY_GPU)):
        for night_sd in night_sds:
            total = 0
            counts = {"opened": 0, "opened_family": 0, "alerts": 0, "alerts_family": 0, "drift_family": 0, "tests": 0}
            for s in range(series):
                rng = np.random.default_rng([80_000 + s, len(metrics), int(100 * night_sd)])
                n_nights = HISTORY // NIGHT + nights
                offsets = np.repeat(rng.standard_normal(n_nights), NIGHT)
                values = _family_values(rng, n_nights * NIGHT, metrics, night_sd, offsets)
                versions, commit, torch_version = [], 0, 0
                for _ in range(n_nights):
                    commit += bool(rng.random() < NEW_COMMIT_SHARE)
                    torch_version += bool(rng.random() < NEW_TORCH_SHARE)
                    versions += [{"commit": f"c{commit}", "torch": f"2.{torch_version}"}] * NIGHT
                for night in range(nights):
                    first = HISTORY + night * NIGHT
                    total += 1
                    runs = _metric_records(
                        {k: v[: first + NIGHT] for k, v in values.items()}, versions[: first + NIGHT]
                    )
                    tonight = {r.run_id for r in runs[first:]}
                    series_trend = trend.series_trend(runs)
                    raw = trend.verdict(series_trend, tonight)
                    held = confirm.night_family(series_trend, raw, tonight)
                    counts["tests"] += len(confirm.night_tests(series_trend, raw, tonight))
                    counts["drift_family"] += held.status == "drift"
                    for key, v in (("", raw), ("_family", held)):
                        if v.status != "regression":
                            continue
                        counts["opened" + key] += 1
                        again = _family_values(rng, CONFIRM, metrics, night_sd, offsets[first : first + CONFIRM])
                        both = {k: np.r_[values[k][: first + NIGHT], again[k]] for k in values}
                        runs_c = _metric_records(both, versions[: first + NIGHT] + [versions[first]] * CONFIRM)
                        extra = {r.run_id for r in runs_c[first + NIGHT :]}
                        counts["alerts" + key] += confirm.judge(
                            trend.series_trend(runs_c), tonight, extra, confirm.needs_confirmation(v)
                        )[1].confirmed
            per = {k: fmt(1000 * v / total, ".2f") for k, v in counts.items() if k != "tests"}
            rows.append(
                [
                    label,
                    f"{night_sd:g}",
                    total,
                    fmt(counts["tests"] / total, ".1f"),
                    per["opened"],
                    per["opened_family"],
                    per["alerts"],
                    per["alerts_family"],
                    per["drift_family"],
                ]
            )
    return markdown_table(
        [
            "runs",
            "night effect sd",
            "series-nights",
            "tests a night",
            "regressions opened / 1,000, each test at its level",
            "... Holm over the night",
            "alerts / 1,000 (3 confirmation runs), each test at its level",
            "... Holm over the night",
            "drift verdicts / 1,000, Holm over the night",
        ],
        rows,
    )


# (label, tonight's level, the confirmation runs' level, noise sd of the confirmation runs), in % of the level
CONFIRMATION_CASES = (
    ("at tonight's level (+30%)", 30.0, 30.0, 1.0),
    ("worse (+30% tonight, +40% confirmation)", 30.0, 40.0, 1.0),
    ("load shift (+300% tonight, +260% confirmation)", 300.0, 260.0, 1.0),
    ("load shift, noisier (+300% tonight, +260% confirmation at 10% noise)", 300.0, 260.0, 10.0),
    ("back at baseline (+30% tonight, blip)", 30.0, 0.0, 1.0),
    ("back at baseline (+5 sd tonight, blip)", 5.0, 0.0, 1.0),
)


def bench_confirmation(seeds: int) -> str:
    """30 runs at 100 +- 1, a night of 3 runs at a new level, 3 confirmation runs at another (or the same) one:
    how often `confirm.judge` confirms, among the nights that opened a regression."""
    rows = []
    for label, night_pct, again_pct, again_sd in CONFIRMATION_CASES:
        opened = held = 0
        for s in range(seeds):
            rng = np.random.default_rng(90_000 + s)
            z = np.r_[
                100 + rng.standard_normal(30),
                100 + night_pct + rng.standard_normal(NIGHT),
                100 + again_pct + again_sd * rng.standard_normal(CONFIRM),
            ]
            if opens_regression(z[: 30 + NIGHT], 30):
                opened += 1
                held += confirmed(z, 30)
        rows.append([label, opened, fmt(100 * held / max(opened, 1), ".1f")])
    table = markdown_table(
        ["confirmation runs (30 runs at 100 +- 1 before; 3 tonight, 3 confirmation)", "nights opened", "% confirmed"],
        rows,
    )
    alpha = trend.DetectionSettings().confirm_pvalue
    rng, draws = np.random.default_rng(1), 50_000
    calibration = []
    for before in (30, 60):  # the run-level test alone, confirmation runs drawn from the baseline level
        held = sum(
            student_t(rng.standard_normal(before), rng.standard_normal(CONFIRM), "greater") <= alpha
            for _ in range(draws)
        )
        calibration.append(f"runs as the unit, {before} runs before: {100 * held / draws:.3f}%")
    for night_sd in (0.0, 1.0):  # the nights test: 20 nights of 3 before, the confirmation night sharing an offset
        held = 0
        for _ in range(draws):
            base = [rng.standard_normal(NIGHT) + night_sd * rng.standard_normal() for _ in range(HISTORY // NIGHT)]
            again = rng.standard_normal(CONFIRM) + night_sd * rng.standard_normal()
            held += nights_t_test(base, again).pvalue <= alpha
        calibration.append(f"nights as the unit, a night effect of {night_sd:g} run sd: {100 * held / draws:.3f}%")
    return table + f"\n\nThe one-sided test at {100 * alpha:g}% on {draws:,} fresh draws: " + "; ".join(calibration)


def bench_suspected_then_established(seeds: int, nights: int = 4) -> str:
    """A lasting +5 sd step whose confirmation runs were unlucky (dismissed): the nights after it, the level is
    re-opened (its first run's night is tagged `suspected`) and alerted once established."""
    alerted_by: list[int] = []
    for s in range(seeds):
        rng = np.random.default_rng(70_000 + s)
        z = np.r_[100 + rng.standard_normal(30), 105 + rng.standard_normal(NIGHT + nights * (NIGHT + CONFIRM))]
        runs = records(z[: 30 + NIGHT])
        suspected = {r.run_id for r in runs[30:]}
        found = None
        for night in range(1, nights + 1):
            first = 30 + NIGHT + (night - 1) * (NIGHT + CONFIRM)
            history = [
                replace(r, verdicts={names.trend_metric_tag(names.STEP_TIME_P50): "suspected"})
                if r.run_id in suspected
                else r
                for r in records(z[: first + NIGHT + CONFIRM])
            ]
            tonight = {r.run_id for r in history[first : first + NIGHT]}
            v = trend.verdict(trend.series_trend(history[: first + NIGHT]), tonight)
            if v.status != "regression":
                break
            verdict, c = confirm.judge(
                trend.series_trend(history),
                tonight,
                {r.run_id for r in history[first + NIGHT :]},
                (names.STEP_TIME_P50,),
            )
            if c.confirmed:
                found = night
                break
            suspected |= {r.run_id for r in history[first:]}
        alerted_by.append(found or 0)
    rows = [
        [f"night {n} after the dismissed one", fmt(100 * sum(1 for a in alerted_by if a and a <= n) / seeds, ".1f")]
        for n in range(1, nights + 1)
    ]
    return markdown_table(["lasting +5 sd step dismissed on its first night", "% alerted by then"], rows)


def bench_drifts(seeds: int, n: int = 200) -> str:
    rows = []
    for total in (2.0, 5.0, 10.0, 30.0):
        events, delays, final_one = [], [], 0
        for s in range(seeds):
            rng = np.random.default_rng(s)
            z = 100 + rng.standard_normal(n) + np.linspace(0, total, n)
            count, first_at = 0, None
            for end in range(12, n + 1, NIGHT):
                a = drift.analyze(z[:end])
                new_steps = [c for c in a.steps if c.index >= end - NIGHT]
                new_drift = (
                    a.drift is not None
                    and not any(  # trend.verdict's rule: not shown by earlier histories
                        (p := drift.analyze(z[: end - NIGHT - back]).drift) is not None and not a.drift.slope_differs(p)
                        for back in drift.LOOKBACK_RUNS
                        if end - NIGHT - back >= drift.MIN_DRIFT_POINTS
                    )
                )
                count += len(new_steps[-1:]) + new_drift
                if (new_steps or new_drift) and first_at is None:
                    first_at = end
            final = drift.analyze(z)
            final_one += final.drift is not None and not final.steps
            events.append(count)
            delays.append(first_at if first_at is not None else float("nan"))
        found = [d for d in delays if d == d]
        rows.append(
            [
                f"+{total:g}% over {n} runs",
                fmt(100 * sum(e == 1 for e in events) / seeds, ".0f"),
                fmt(statistics.mean(events), ".2f"),
                fmt(100 * final_one / seeds, ".0f"),
                fmt(statistics.median(found), ".0f") if found else "-",
            ]
        )
    return markdown_table(
        [
            "drift (noise 1%)",
            "% with exactly 1 event, nightly",
            "mean events",
            "% one drift and no change point at the end",
            "median runs until the first event",
        ],
        rows,
    )


def bench_power(seeds: int) -> str:
    rows = []
    for m, k in ((20, 3), (30, 3), (60, 3), (100, 3), (30, 5), (60, 2)):
        d = power.min_detectable_shift(1.0, m, k)
        sims = [power.simulate(1.0, m, k, f * d, seeds) for f in (0.8, 1.0, 1.2)]
        heavy = power.simulate(1.0, m, k, d, seeds, heavy_tails=True)
        rows.append([m, k, fmt(d, ".2f"), *(fmt(100 * x, ".0f") for x in sims), fmt(100 * heavy, ".0f")])
    return markdown_table(
        [
            "runs before",
            "runs tonight",
            "predicted shift (noise sd)",
            "% found at 0.8x",
            "% at 1.0x (target 90)",
            "% at 1.2x",
            "% at 1.0x, t(3) noise",
        ],
        rows,
    )


def bench_candidates(seeds: int) -> str:
    rows = []
    for before, after, shift_sd in ((6, 6, 1.0), (6, 6, 1.8), (6, 6, 3.0), (3, 3, 3.0), (3, 3, 5.0), (30, 3, 3.0)):
        moved = blind = 0
        for s in range(seeds):
            rng = np.random.default_rng(s)
            z = 100 + rng.standard_normal(before + after)
            z[before:] += shift_sd
            labels = [{"torch": "a"}] * before + [{"torch": "b"}] * after
            moved += candidates.check_boundaries(z, labels)[0].moved
            blind += any(abs(c.index - before) <= 1 for c in changepoint.detect(z))
        rows.append(
            [
                f"{before} vs {after} runs, {shift_sd:g} sd",
                fmt(100 * moved / seeds, ".0f"),
                fmt(100 * blind / seeds, ".0f"),
            ]
        )
    false = sum(
        candidates.check_boundaries(
            100 + np.random.default_rng(s).standard_normal(12), [{"t": "a"}] * 6 + [{"t": "b"}] * 6
        )[0].moved
        for s in range(10 * seeds)
    )
    rows.append(["6 vs 6 runs, no shift (false alarms)", fmt(100 * false / (10 * seeds), ".2f"), "-"])
    return markdown_table(
        ["version boundary", "% reported by the direct test (p <= 0.01)", "% found by the blind search (p <= 0.001)"],
        rows,
    )


def bench_speed(repeats: int = 5) -> str:
    rows = []
    for kind in ("stationary", "realistic", "busy"):
        data = cp_history(kind)
        times = []
        for _ in range(repeats):
            with Stopwatch() as watch:
                for v in data:
                    drift.analyze(v)
            times.append(watch.seconds)
        rows.append([kind, fmt(statistics.median(times), ".3f"), fmt(max(times), ".3f")])
    return markdown_table(["history (8 metrics x 1,000 runs)", "median s (change points + drift)", "max s"], rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=250, help="stationary series (20 nights each) per noise")
    parser.add_argument("--seeds", type=int, default=200, help="seeds per step / power / candidate cell")
    parser.add_argument("--drift-seeds", type=int, default=30)
    parser.add_argument("--confirm-seeds", type=int, default=2000, help="seeds per confirmation case")
    parser.add_argument("--night-series", type=int, default=100, help="series (20 nights each) per row of 'night'")
    parser.add_argument("--family-series", type=int, default=100, help="series (20 nights each) per row of 'family'")
    parser.add_argument(
        "--night-sds",
        type=lambda text: tuple(float(x) for x in text.split(",")),
        default=(0.0, 0.5, 1.0),
        help="the night effects of 'family' (sd in run-noise units), comma-separated",
    )
    parser.add_argument(
        "--sections",
        help="comma-separated: speed, false, steps, night, family, confirmation, "
        "suspected, drifts, power, candidates (default: all)",
    )
    args = parser.parse_args()
    sections = {
        "speed": ("Speed", bench_speed),
        "false": ("False alerts on stationary histories", lambda: bench_false_alerts(args.series)),
        "steps": ("Steps alerted within one night", lambda: bench_steps(args.seeds)),
        "night": (
            "False alerts per series-night, every watched metric and a new commit every night",
            lambda: bench_night(args.night_series),
        ),
        "family": (
            "False events per series-night, the night's tests as one family (correlated metrics, version "
            "changes on some nights, a night-level random effect)",
            lambda: bench_family(args.family_series, night_sds=args.night_sds),
        ),
        "confirmation": (
            "Confirmation runs at tonight's level, worse, after a load shift, back at baseline",
            lambda: bench_confirmation(args.confirm_seeds),
        ),
        "suspected": (
            "A lasting step dismissed on its first night",
            lambda: bench_suspected_then_established(args.seeds),
        ),
        "drifts": ("Drifts", lambda: bench_drifts(args.drift_seeds)),
        "power": ("Minimum detectable shift against simulation", lambda: bench_power(args.seeds)),
        "candidates": ("Known changes: direct test against the blind search", lambda: bench_candidates(args.seeds)),
    }
    wanted = args.sections.split(",") if args.sections else list(sections)
    unknown = [w for w in wanted if w not in sections]
    if unknown:
        parser.error(f"--sections: unknown {', '.join(unknown)}; one of {', '.join(sections)}")
    for name in wanted:
        title, run = sections[name]
        with Stopwatch() as watch:
            table = run()
        print(f"### {title}\n\n{table}\n\n({watch.seconds:.0f} s)\n", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
