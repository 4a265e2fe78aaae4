"""The statistics of a bisection: is bad slower than good at all, and is a candidate commit good or bad.

Pure functions over numpy arrays (the t tests are `yolo_mlops.stats`'); no I/O. A value is the *slowness* of one
run: the log of the metric, or minus it for a higher-is-better metric, since run-to-run noise is multiplicative.
The premise (bad vs good), each step (a candidate against half the premise's shift, with noise pooled within
groups), the error rate per step and the tests of named profile entries (`run_premise_named`, `name_figure`) are
in docs/trends.md ("Bisect"); `simulate` and `simulate_bisection` measure the error rates
(`python -m yolo_mlops.bisect.decide`, benchmarks/bench_bisect.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from yolo_mlops.stats import Noise, pooled_noise, shift_t, t_pvalue, t_quantile, t_value
from yolo_mlops.trends.attribution import EntryKind, Key

Verdict = Literal["bad", "good", "inconclusive", "regression", "no_regression"]  # of a step; of the premise
BAD: Verdict = "bad"
GOOD: Verdict = "good"
INCONCLUSIVE: Verdict = "inconclusive"
REGRESSION: Verdict = "regression"
NO_REGRESSION: Verdict = "no_regression"


@dataclass(frozen=True)
class Settings:
    repeats: int = 3  # runs a side at the first look
    max_repeats: int = 6  # runs a side at most (one more interleaved pair per further look)
    alpha: float = 0.01  # error bound of one decision, over all its looks
    min_effect: float = 0.05  # smallest slowdown (fraction) the premise calls a regression

    @property
    def looks(self) -> int:
        return self.max_repeats - self.repeats + 1

    @property
    def alpha_look(self) -> float:
        return self.alpha / self.looks


@dataclass(frozen=True)
class Decision:
    verdict: Verdict  # bad | good | inconclusive (step), regression | no_regression (premise)
    shift: float  # candidate (bad) minus good, log units
    threshold: float  # what the shift was compared with (D/2 at a step; log(1 + min_effect) at the premise)
    t: float
    df: int
    p_bad: float  # one-sided p of "the shift is beyond the threshold"
    p_good: float  # one-sided p of the opposite
    n_candidate: int
    n_good: int
    looks: int  # looks this decision took

    @property
    def shift_pct(self) -> float:
        return 100.0 * math.expm1(self.shift)


def step_decision(
    candidate: Sequence[float],
    good: Sequence[float],
    ref_bad: Sequence[float],
    ref_good: Sequence[float],
    noise: Noise,
    alpha_look: float,
    looks: int = 1,
) -> Decision:
    """One look at a step: the candidate's shift against half of the premise's good-to-bad shift."""
    c, g, rb, rg = (np.asarray(x, dtype=float) for x in (candidate, good, ref_bad, ref_good))
    d = float(c.mean() - g.mean())
    half = float(rb.mean() - rg.mean()) / 2.0
    se = noise.sd * math.sqrt(1 / len(c) + 1 / len(g) + (1 / len(rb) + 1 / len(rg)) / 4)
    t = t_value(d - half, se)
    p_bad, p_good = t_pvalue(d - half, se, noise.df, "greater"), t_pvalue(d - half, se, noise.df, "less")
    verdict = BAD if p_bad <= alpha_look else GOOD if p_good <= alpha_look else INCONCLUSIVE
    return Decision(verdict, d, half, t, noise.df, p_bad, p_good, len(c), len(g), looks)


def premise_decision(
    bad: Sequence[float],
    good: Sequence[float],
    noise: Noise,
    alpha_look: float,
    min_effect: float,
    looks: int = 1,
    last: bool = False,
) -> Decision:
    """Bad vs good: regression (slower beyond noise by at least min_effect), no_regression, or inconclusive
    (more runs wanted; at the `last` look an undecided premise is no_regression)."""
    b, g = np.asarray(bad, dtype=float), np.asarray(good, dtype=float)
    d = float(b.mean() - g.mean())
    se = noise.sd * math.sqrt(1 / len(b) + 1 / len(g))
    t = t_value(d, se)
    p_slower = t_pvalue(d, se, noise.df, "greater")  # H0: no slowdown at all
    floor = math.log1p(min_effect)
    p_below_floor = t_pvalue(d - floor, se, noise.df, "less")  # H0: slowdown >= min_effect
    if p_slower <= alpha_look and d >= floor:
        verdict = REGRESSION
    elif p_below_floor <= alpha_look or last:
        verdict = NO_REGRESSION
    else:
        verdict = INCONCLUSIVE
    return Decision(verdict, d, floor, t, noise.df, p_slower, p_below_floor, len(b), len(g), looks)


def shift_interval(
    after: Sequence[float], before: Sequence[float], noise: Noise, level: float = 0.95
) -> tuple[float, float, float]:
    """Relative change (fraction) of the geometric mean from `before` to `after`, with its `level` interval."""
    a, b = np.asarray(after, dtype=float), np.asarray(before, dtype=float)
    d = float(a.mean() - b.mean())
    if noise.df <= 0 or not noise.sd >= 0:
        return math.expm1(d), float("nan"), float("nan")
    half = t_quantile(0.5 + level / 2, noise.df) * noise.sd * math.sqrt(1 / len(a) + 1 / len(b))
    return math.expm1(d), math.expm1(d - half), math.expm1(d + half)


# the sequential procedures, shared by the runner (real runs) and the simulation (generated values) ----------

Measure = Callable[[int], tuple[float, float]]  # pair index -> (good value, other value), measured interleaved


@dataclass
class Sides:
    good: list[float]
    other: list[float]


def _look_until_decided(
    measure: Measure, settings: Settings, judge: Callable[[Sides, int], Decision]
) -> tuple[Decision, Sides]:
    """`repeats` pairs, then one more pair a look, each look judged by `judge`, until it decides or the last
    look (`settings.looks`: max_repeats a side) was taken."""
    sides = Sides([], [])
    look = 0
    while True:
        while len(sides.good) < settings.repeats + look:
            good, other = measure(len(sides.good))
            sides.good.append(good)
            sides.other.append(other)
        look += 1
        decision = judge(sides, look)
        if decision.verdict != INCONCLUSIVE or look >= settings.looks:
            return decision, sides


def run_premise(measure: Measure, settings: Settings) -> tuple[Decision, Sides]:
    """Step 0: pairs of (good, bad) runs until the premise decides or max_repeats a side were run."""

    def judge(sides: Sides, look: int) -> Decision:
        noise = pooled_noise([sides.good, sides.other])
        return premise_decision(
            sides.other,
            sides.good,
            noise,
            settings.alpha_look,
            settings.min_effect,
            looks=look,
            last=look >= settings.looks,
        )

    return _look_until_decided(measure, settings, judge)


def run_step(
    measure: Measure, settings: Settings, premise: Sides, earlier: Sequence[Sequence[float]] = ()
) -> tuple[Decision, Sides]:
    """Step k: pairs of (good, candidate) runs until the step decides or max_repeats a side were run.
    `earlier`: the groups of earlier steps (their noise joins the pool)."""

    def judge(sides: Sides, look: int) -> Decision:
        noise = pooled_noise([premise.good, premise.other, *earlier, sides.good, sides.other])
        return step_decision(
            sides.other, sides.good, premise.other, premise.good, noise, settings.alpha_look, looks=look
        )

    return _look_until_decided(measure, settings, judge)


# simulation -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SimulatedRates:
    effect_sd: float  # the good-to-bad shift in noise standard deviations (log units)
    truth: str  # where the candidate really is: good | half | bad
    trials: int
    decided_bad: float
    decided_good: float
    inconclusive: float
    runs_per_side: float  # mean runs of the candidate (= of the good) per step

    @property
    def wrong(self) -> float:
        return {"good": self.decided_bad, "bad": self.decided_good}.get(self.truth, float("nan"))


def simulate_step(
    effect_sd: float, truth: str, settings: Settings = Settings(), trials: int = 4000, seed: int = 0
) -> SimulatedRates:
    """Error rates of one bisection step over generated normal log values (noise sd 1): the premise's groups
    are drawn at good (0) and bad (effect_sd), the step's good at 0 and its candidate at 0, effect_sd / 2
    or effect_sd (`truth` good, half, bad)."""
    level = {"good": 0.0, "half": effect_sd / 2, "bad": effect_sd}[truth]
    rng = np.random.default_rng(seed)
    counts = {BAD: 0, GOOD: 0, INCONCLUSIVE: 0}
    runs = 0
    for _ in range(trials):
        premise = Sides(
            list(rng.normal(0.0, 1.0, settings.repeats)), list(rng.normal(effect_sd, 1.0, settings.repeats))
        )
        decision, sides = run_step(lambda _i: (rng.normal(0.0, 1.0), rng.normal(level, 1.0)), settings, premise)
        counts[decision.verdict] += 1
        runs += len(sides.other)
    return SimulatedRates(
        effect_sd,
        truth,
        trials,
        counts[BAD] / trials,
        counts[GOOD] / trials,
        counts[INCONCLUSIVE] / trials,
        runs / trials,
    )


def simulate_premise(
    effect_sd: float, settings: Settings = Settings(), trials: int = 4000, seed: int = 0, noise_sd: float = 0.05
) -> tuple[float, float]:
    """(regression found, mean runs a side) of the premise when bad is slower by effect_sd noise sds, with the
    noise at `noise_sd` (log units; min_effect is a fraction, so the noise level matters here)."""
    rng = np.random.default_rng(seed)
    found, runs = 0, 0
    for _ in range(trials):
        decision, sides = run_premise(
            lambda _i: (rng.normal(0.0, noise_sd), rng.normal(effect_sd * noise_sd, noise_sd)), settings
        )
        found += decision.verdict == REGRESSION
        runs += len(sides.good)
    return found / trials, runs / trials


def simulation_table(
    settings_list: Sequence[Settings] = (Settings(), Settings(repeats=2, max_repeats=4)),
    effects: Sequence[float] = (3.0, 5.0, 8.0, 12.0),
    trials: int = 4000,
) -> str:
    lines = [
        "| repeats..max | alpha | D / noise sd | candidate | decided bad | decided good | inconclusive | runs a side |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in settings_list:
        for effect in effects:
            for truth in ("good", "half", "bad"):
                r = simulate_step(effect, truth, s, trials)
                lines.append(
                    f"| {s.repeats}..{s.max_repeats} | {s.alpha} | {effect:g} | {truth} | "
                    f"{100 * r.decided_bad:.2f}% | {100 * r.decided_good:.2f}% | "
                    f"{100 * r.inconclusive:.1f}% | {r.runs_per_side:.2f} |"
                )
    return "\n".join(lines)


if __name__ == "__main__":
    print(simulation_table())
    s = Settings()
    for effect in (0.0, 1.0, 3.0):
        found, runs = simulate_premise(effect, s)
        print(
            f"premise, noise 5%, bad slower by {effect:g} sd: regression found {100 * found:.2f}%, "
            f"{runs:.2f} runs a side"
        )


# deciding on what moved: the operators (or phases) that carry the shift -----------------------------------


FIGURE_KINDS: tuple[EntryKind, ...] = ("operator", "device", "phase")
ENTRY_MIN_SHARE = 0.01  # a named entry moves the step by at least this fraction of the good step time: an
# operator of a few microseconds that moved beyond its own tiny noise does not carry a step-time shift


@dataclass(frozen=True)
class Figure:
    """The entries a bisection decides on: each run's value is log(rest_ms + the named entries' ms per step),
    the run's step time had only those entries moved (rest_ms: the good runs' step time minus the entries'
    good mean). Log units, so its shift reads as a step-time shift and min_effect applies to it alike."""

    kind: EntryKind
    names: tuple[str, ...]
    rest_ms: float
    good_ms: float  # the named entries' mean ms/step over the premise's good runs
    bad_ms: float  # over its bad runs
    entry_p: tuple[float, ...]  # each named entry's one-sided p in the premise (bad slower than good)
    tested: int  # entries tested in the premise (the Bonferroni factor)
    alpha_entry: float  # the level each entry passed

    def ms(self, entries: Mapping[Key, float]) -> float:
        return sum(entries.get((self.kind, n), 0.0) for n in self.names)

    def value(self, entries: Mapping[Key, float]) -> float:
        return math.log(self.rest_ms + self.ms(entries))

    def label(self) -> str:
        return " + ".join(self.names)


def name_figure(
    good: Sequence[Mapping[Key, float]],
    bad: Sequence[Mapping[Key, float]],
    good_step_ms: float,
    alpha_look: float,
    min_effect: float,
) -> Figure | None:
    """The entries that moved beyond noise between the premise's good and bad runs, or None.

    Every entry of the kinds in FIGURE_KINDS is tested on its own, bad slower than good (pooled t on its
    log(rest + ms) values, the noise of its two groups), at alpha_look / K for K entries tested (Bonferroni:
    with no entry changed, any passes with probability at most alpha_look); an entry whose mean moved by less
    than ENTRY_MIN_SHARE of the good step is not tested. Of the kinds with passing entries,
    operators or device kernels, whichever add the most ms/step, else phases, are named (entries of one kind
    do not overlap: self times, or phases of the step); their sum must shift the step by at least min_effect."""
    keys = sorted({k for runs in (good, bad) for e in runs for k in e if k[0] in FIGURE_KINDS})
    if not keys or len(good) < 2 or len(bad) < 2 or not good_step_ms > 0:
        return None
    alpha_entry = alpha_look / len(keys)
    passing: dict[EntryKind, list[tuple[str, float, float]]] = {}  # kind -> (name, delta ms, p)
    for kind, name in keys:
        g = np.array([e.get((kind, name), 0.0) for e in good])
        b = np.array([e.get((kind, name), 0.0) for e in bad])
        rest = good_step_ms - float(g.mean())
        if not rest > 0 or b.mean() - g.mean() < ENTRY_MIN_SHARE * good_step_ms:
            continue
        vg, vb = np.log(rest + g), np.log(rest + b)
        p = shift_t(vg, vb, pooled_noise([vg, vb]), "greater")
        if p <= alpha_entry:
            passing.setdefault(kind, []).append((name, float(b.mean() - g.mean()), p))
    if not passing:
        return None
    # operators and device kernels first (the finer views); phases only when no operator or kernel passed
    finest: list[EntryKind] = [k for k in passing if k != "phase"] or list(passing)
    kind = max(finest, key=lambda k: sum(delta for _, delta, _ in passing[k]))
    chosen = sorted(passing[kind], key=lambda x: -x[1])
    names = tuple(n for n, _, _ in chosen)
    good_ms = float(np.mean([sum(e.get((kind, n), 0.0) for n in names) for e in good]))
    bad_ms = float(np.mean([sum(e.get((kind, n), 0.0) for n in names) for e in bad]))
    rest = good_step_ms - good_ms
    if not rest > 0 or math.log((rest + bad_ms) / (rest + good_ms)) < math.log1p(min_effect):
        return None
    return Figure(kind, names, rest, good_ms, bad_ms, tuple(p for _, _, p in chosen), len(keys), alpha_entry)


@dataclass(frozen=True)
class Observation:
    """One profiled run as a step sees it: its slowness (log step time) and its profile's entries (ms/step;
    None when the run has no profiler tables)."""

    slowness: float
    step_ms: float | None = None
    entries: Mapping[Key, float] | None = None


Observe = Callable[[int], tuple[Observation, Observation]]  # pair index -> (good run, other run), interleaved


@dataclass
class Premise:
    decision: Decision  # the one that decided: step time's, or the figure's when it named entries
    step_time: Decision  # step time's own (its p at alpha / 2 when the figure was tested too)
    figure: Figure | None
    step_sides: Sides  # slowness of the good and bad runs
    figure_sides: Sides | None  # the figure's values of the same runs
    observations: list[tuple[Observation, Observation]]


def run_premise_named(observe: Observe, settings: Settings) -> Premise:
    """Step 0 deciding on step time and on what moved: pairs of (good, bad) runs until one decides.

    When every run of the first look has a profile, alpha is split: step time is tested at alpha/2 over its
    looks, the entries at alpha/2 over looks and entries (`name_figure`), so the premise calls a regression
    that is not there with probability at most alpha. A figure named at any look decides (its entries carry
    the shift beyond noise); otherwise step time decides as `run_premise`. Without profiles: `run_premise`."""
    obs: list[tuple[Observation, Observation]] = []
    look = 0
    split: bool | None = None
    while True:
        while len(obs) < settings.repeats + look:
            obs.append(observe(len(obs)))
        look += 1
        if split is None:
            split = all(o.entries is not None and o.step_ms for pair in obs for o in pair)
        alpha_look = settings.alpha_look / 2 if split else settings.alpha_look
        sides = Sides([g.slowness for g, _ in obs], [b.slowness for _, b in obs])
        last = look >= settings.looks
        step = premise_decision(
            sides.other,
            sides.good,
            pooled_noise([sides.good, sides.other]),
            alpha_look,
            settings.min_effect,
            looks=look,
            last=last,
        )
        figure = None
        if split:
            good_step = float(np.mean([g.step_ms for g, _ in obs]))
            figure = name_figure(
                [g.entries or {} for g, _ in obs],
                [b.entries or {} for _, b in obs],
                good_step,
                alpha_look,
                settings.min_effect,
            )
        if figure is not None:
            fsides = Sides(
                [figure.value(g.entries or {}) for g, _ in obs], [figure.value(b.entries or {}) for _, b in obs]
            )
            fnoise = pooled_noise([fsides.good, fsides.other])
            fdecision = premise_decision(fsides.other, fsides.good, fnoise, alpha_look, settings.min_effect, looks=look)
            fdecision = Decision(
                REGRESSION,
                fdecision.shift,
                fdecision.threshold,
                fdecision.t,
                fdecision.df,
                max(figure.entry_p),
                fdecision.p_good,
                fdecision.n_candidate,
                fdecision.n_good,
                look,
            )
            return Premise(fdecision, step, figure, sides, fsides, obs)
        if step.verdict != INCONCLUSIVE:
            return Premise(step, step, None, sides, None, obs)


def simulate_bisection(
    effect_sd: float,
    commits: int = 8,
    figure_noise: float | None = 0.1,
    settings: Settings = Settings(),
    trials: int = 1000,
    seed: int = 0,
    null_entries: int = 200,
    step_sd: float = 0.05,
    max_runs: int = 30,
) -> dict[str, float]:
    """Whole bisections over generated runs: `commits` after good, one of them (uniformly drawn) slows the step
    by effect_sd run-to-run sds of log step time (step_sd). With `figure_noise` (the sd of the slowing
    operator's ms/step over the sd of step time, at its slow level; a tenth of it at its fast level: an
    operator made ten times slower) each run also has a profile: that operator carrying the whole shift, and
    `null_entries` others that never move (each with a tenth of its ms as noise of its own). None: no profiles,
    step time decides. Returns the fractions named right (and right within max_runs runs), wrong, inconclusive, no
    regression, decided on the figure, and the mean and largest runs per bisection."""
    rng = np.random.default_rng(seed)
    shift, step_ms = effect_sd * step_sd, 100.0
    base = step_ms * math.expm1(shift) / 9.0  # the operator's ms at good: ten times that at bad adds the shift
    op_sd = (figure_noise or 0.0) * step_sd * step_ms  # its ms/step sd at the slow level
    null_ms = rng.uniform(0.5, 5.0, null_entries)
    names = [f"op{i}" for i in range(null_entries)]
    counts = {"right": 0, "right_within": 0, "wrong": 0, "inconclusive": 0, "no_regression": 0, "figure": 0}
    runs: list[int] = []

    def observe(commit: int, slow_at: int) -> Observation:
        bad = commit >= slow_at
        slowness = math.log(step_ms) + (shift if bad else 0.0) + float(rng.normal(0.0, step_sd))
        if figure_noise is None:
            return Observation(slowness)
        op = base * 10 + rng.normal(0.0, op_sd) if bad else base + rng.normal(0.0, op_sd / 10)
        entries: dict[Key, float] = {("operator", "planted"): max(float(op), 0.0)}
        nulls = null_ms * (1 + rng.normal(0.0, 0.1, null_entries))
        entries.update(zip([("operator", n) for n in names], nulls.tolist(), strict=True))
        return Observation(slowness, math.exp(slowness), entries)

    for _ in range(trials):
        slow_at = int(rng.integers(1, commits + 1))  # commits 1..commits; 0 is good
        log: list[int] = []

        def pair(commit: int, at: int = slow_at, log: list[int] = log) -> Observe:
            def measured(_i: int) -> tuple[Observation, Observation]:
                log.append(2)
                return observe(0, at), observe(commit, at)

            return measured

        premise = run_premise_named(pair(commits), settings)
        verdict = "no_regression"
        if premise.decision.verdict == REGRESSION:
            counts["figure"] += premise.figure is not None
            first_bad = _simulated_search(premise, pair, commits, settings)
            verdict = "inconclusive" if first_bad is None else "right" if first_bad == slow_at else "wrong"
        counts[verdict] += 1
        runs.append(sum(log))
        counts["right_within"] += verdict == "right" and runs[-1] <= max_runs
    rates: dict[str, float] = {k: v / trials for k, v in counts.items()}
    rates.update(runs_mean=float(np.mean(runs)), runs_max=float(np.max(runs)))
    return rates


def _simulated_search(premise: Premise, pair: Callable[[int], Observe], commits: int, settings: Settings) -> int | None:
    """The bisection after a premise that named a regression, over commits 1..commits of a simulated range: the
    first bad commit, or None where a step stayed undecided. Each step decides on the premise's figure (or on step
    time) with the earlier steps' sides as history, as `search.bisect` does."""
    figure = premise.figure
    psides = premise.figure_sides if premise.figure_sides is not None else premise.step_sides

    def value(o: Observation) -> float:
        return figure.value(o.entries or {}) if figure is not None else o.slowness

    lo, hi = 0, commits
    earlier: list[list[float]] = []
    while hi - lo > 1:
        mid = (lo + hi) // 2
        measure = pair(mid)

        def values(i: int, measure: Observe = measure) -> tuple[float, float]:
            g, c = measure(i)
            return value(g), value(c)

        decision, sides = run_step(values, settings, psides, earlier)
        earlier += [sides.good, sides.other]
        if decision.verdict == BAD:
            hi = mid
        elif decision.verdict == GOOD:
            lo = mid
        else:
            return None
    return hi
