"""The statistics of a bisection: is bad slower than good at all, and is a candidate commit good or bad.

Pure functions over numpy arrays (scipy's t distribution); no I/O. A value is the *slowness* of one run:
log of the metric (`perf/step_time_ms_p50`), or minus its log for a higher-is-better metric
(`perf/images_per_s`). Logs, because run-to-run noise is multiplicative: a busier machine slows every
commit by the same factor, so a shift in log units is the same slowdown whatever the machine's level.

**Noise.** One pooled standard deviation s of log values, *within* groups (a group: the runs of one commit in
one step), over every group measured so far, with sum(n_i - 1) degrees of freedom. It assumes every commit
has the same relative noise, which holds for a workload on one machine; pooling gives a few runs per commit
a usable noise estimate (Welch's test with 2-3 runs a side has 1-4 degrees of freedom and is
anti-conservative; see docs/trends.md, fleet view).

**Premise** (step 0, bad vs good, interleaved): the shift D = mean(bad) - mean(good), t = D / (s sqrt(1/n_b +
1/n_g)). *Regression* when t's one-sided p <= alpha/L and exp(D) - 1 >= min_effect; *no regression* when
the upper one-sided bound says the slowdown is below min_effect (p <= alpha/L), or when max_repeats runs a
side still show neither.

**Step k** (candidate vs a fresh good, interleaved): the candidate's shift d = mean(cand) - mean(good) is
compared with half the premise's shift:

    t = (d - D/2) / (s sqrt(1/n_c + 1/n_g + (1/n_B + 1/n_G) / 4))

(the premise's D is an estimate too: its variance enters with weight 1/4). *Bad* when P(T >= t) <= alpha/L
(the candidate's shift is beyond half of the good-to-bad shift: closer to bad), *good* when P(T <= t) <=
alpha/L, otherwise one more interleaved pair of runs, up to max_repeats a side; then *inconclusive*.

**Error rate.** L = max_repeats - repeats + 1 looks at a step, each at alpha/L: by the union bound a step
decides *bad* for a candidate whose true shift is at most D/2 with probability at most alpha (and *good*
for one at least D/2), even for a candidate exactly half-way. A candidate at the good or at the bad level -
a regression from one commit - is misjudged far less often; `simulate` measures how often, and how often
a step stays inconclusive, as a function of D / noise (docs/trends.md has the table;
`python -m yolo_mlops.bisect.decide` prints it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.special import stdtr, stdtrit

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
class Noise:
    sd: float  # pooled within-group standard deviation of log values
    df: int


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


def pooled_noise(groups: Sequence[Sequence[float]]) -> Noise:
    """Pooled standard deviation within groups (each centred on its own mean)."""
    ss, df = 0.0, 0
    for g in groups:
        x = np.asarray(g, dtype=float)
        if len(x) > 1:
            ss += float(((x - x.mean()) ** 2).sum())
            df += len(x) - 1
    return Noise(math.sqrt(ss / df) if df else float("nan"), df)


def _t(diff: float, noise: Noise, weights: float) -> float:
    se = noise.sd * math.sqrt(weights)
    if not se > 0:  # identical runs (no noise at all): the sign alone decides
        return math.copysign(math.inf, diff) if diff else 0.0
    return diff / se


def _p_above(t: float, df: int) -> float:
    """P(T >= t) for Student's t with df degrees of freedom."""
    if df <= 0:
        return 1.0
    return float(stdtr(df, -t))


def step_decision(candidate: Sequence[float], good: Sequence[float], ref_bad: Sequence[float],
                  ref_good: Sequence[float], noise: Noise, alpha_look: float, looks: int = 1) -> Decision:
    """One look at a step: the candidate's shift against half of the premise's good-to-bad shift."""
    c, g, rb, rg = (np.asarray(x, dtype=float) for x in (candidate, good, ref_bad, ref_good))
    d = float(c.mean() - g.mean())
    half = float(rb.mean() - rg.mean()) / 2.0
    t = _t(d - half, noise, 1 / len(c) + 1 / len(g) + (1 / len(rb) + 1 / len(rg)) / 4)
    p_bad, p_good = _p_above(t, noise.df), _p_above(-t, noise.df)
    verdict = BAD if p_bad <= alpha_look else GOOD if p_good <= alpha_look else INCONCLUSIVE
    return Decision(verdict, d, half, t, noise.df, p_bad, p_good, len(c), len(g), looks)


def premise_decision(bad: Sequence[float], good: Sequence[float], noise: Noise, alpha_look: float,
                     min_effect: float, looks: int = 1, last: bool = False) -> Decision:
    """Bad vs good: regression (slower beyond noise by at least min_effect), no_regression, or inconclusive
    (more runs wanted; at the `last` look an undecided premise is no_regression)."""
    b, g = np.asarray(bad, dtype=float), np.asarray(good, dtype=float)
    d = float(b.mean() - g.mean())
    weights = 1 / len(b) + 1 / len(g)
    t = _t(d, noise, weights)
    p_slower = _p_above(t, noise.df)  # H0: no slowdown at all
    floor = math.log1p(min_effect)
    p_below_floor = _p_above(-_t(d - floor, noise, weights), noise.df)  # H0: slowdown >= min_effect
    if p_slower <= alpha_look and d >= floor:
        verdict = REGRESSION
    elif p_below_floor <= alpha_look or last:
        verdict = NO_REGRESSION
    else:
        verdict = INCONCLUSIVE
    return Decision(verdict, d, floor, t, noise.df, p_slower, p_below_floor, len(b), len(g), looks)


def shift_interval(after: Sequence[float], before: Sequence[float], noise: Noise, level: float = 0.95
                   ) -> tuple[float, float, float]:
    """Relative change (fraction) of the geometric mean from `before` to `after`, with its `level` interval."""
    a, b = np.asarray(after, dtype=float), np.asarray(before, dtype=float)
    d = float(a.mean() - b.mean())
    if noise.df <= 0 or not noise.sd >= 0:
        return math.expm1(d), float("nan"), float("nan")
    half = float(stdtrit(noise.df, 0.5 + level / 2)) * noise.sd * math.sqrt(1 / len(a) + 1 / len(b))
    return math.expm1(d), math.expm1(d - half), math.expm1(d + half)


# the sequential procedures, shared by the runner (real runs) and the simulation (generated values) ----------

Measure = Callable[[int], tuple[float, float]]  # pair index -> (good value, other value), measured interleaved


@dataclass
class Sides:
    good: list[float]
    other: list[float]


def run_premise(measure: Measure, settings: Settings) -> tuple[Decision, Sides]:
    """Step 0: pairs of (good, bad) runs until the premise decides or max_repeats a side were run."""
    sides = Sides([], [])
    look = 0
    while True:
        while len(sides.good) < settings.repeats + look:
            g, b = measure(len(sides.good))
            sides.good.append(g)
            sides.other.append(b)
        look += 1
        noise = pooled_noise([sides.good, sides.other])
        decision = premise_decision(sides.other, sides.good, noise, settings.alpha_look, settings.min_effect,
                                    looks=look, last=look >= settings.looks)
        if decision.verdict != INCONCLUSIVE:
            return decision, sides


def run_step(measure: Measure, settings: Settings, premise: Sides, earlier: Sequence[Sequence[float]] = ()
             ) -> tuple[Decision, Sides]:
    """Step k: pairs of (good, candidate) runs until the step decides or max_repeats a side were run.
    `earlier`: the groups of earlier steps (their noise joins the pool)."""
    sides = Sides([], [])
    look = 0
    while True:
        while len(sides.good) < settings.repeats + look:
            g, c = measure(len(sides.good))
            sides.good.append(g)
            sides.other.append(c)
        look += 1
        noise = pooled_noise([premise.good, premise.other, *earlier, sides.good, sides.other])
        decision = step_decision(sides.other, sides.good, premise.other, premise.good, noise,
                                 settings.alpha_look, looks=look)
        if decision.verdict != INCONCLUSIVE or look >= settings.looks:
            return decision, sides


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


def simulate_step(effect_sd: float, truth: str, settings: Settings = Settings(), trials: int = 4000,
                  seed: int = 0) -> SimulatedRates:
    """Error rates of one bisection step over generated normal log values (noise sd 1): the premise's groups
    are drawn at good (0) and bad (effect_sd), the step's good at 0 and its candidate at 0, effect_sd / 2
    or effect_sd (`truth` good, half, bad)."""
    level = {"good": 0.0, "half": effect_sd / 2, "bad": effect_sd}[truth]
    rng = np.random.default_rng(seed)
    counts = {BAD: 0, GOOD: 0, INCONCLUSIVE: 0}
    runs = 0
    for _ in range(trials):
        premise = Sides(list(rng.normal(0.0, 1.0, settings.repeats)),
                        list(rng.normal(effect_sd, 1.0, settings.repeats)))
        decision, sides = run_step(lambda _i: (rng.normal(0.0, 1.0), rng.normal(level, 1.0)), settings, premise)
        counts[decision.verdict] += 1
        runs += len(sides.other)
    return SimulatedRates(effect_sd, truth, trials, counts[BAD] / trials, counts[GOOD] / trials,
                          counts[INCONCLUSIVE] / trials, runs / trials)


def simulate_premise(effect_sd: float, settings: Settings = Settings(), trials: int = 4000, seed: int = 0,
                     noise_sd: float = 0.05) -> tuple[float, float]:
    """(regression found, mean runs a side) of the premise when bad is slower by effect_sd noise sds, with the
    noise at `noise_sd` (log units; min_effect is a fraction, so the noise level matters here)."""
    rng = np.random.default_rng(seed)
    found, runs = 0, 0
    for _ in range(trials):
        decision, sides = run_premise(lambda _i: (rng.normal(0.0, noise_sd), rng.normal(effect_sd * noise_sd,
                                                                                        noise_sd)), settings)
        found += decision.verdict == REGRESSION
        runs += len(sides.good)
    return found / trials, runs / trials


def simulation_table(settings_list: Sequence[Settings] = (Settings(), Settings(repeats=2, max_repeats=4)),
                     effects: Sequence[float] = (3.0, 5.0, 8.0, 12.0), trials: int = 4000) -> str:
    lines = ["| repeats..max | alpha | D / noise sd | candidate | decided bad | decided good | inconclusive | "
             "runs a side |", "|---|---|---|---|---|---|---|---|"]
    for s in settings_list:
        for effect in effects:
            for truth in ("good", "half", "bad"):
                r = simulate_step(effect, truth, s, trials)
                lines.append(f"| {s.repeats}..{s.max_repeats} | {s.alpha} | {effect:g} | {truth} | "
                             f"{100 * r.decided_bad:.2f}% | {100 * r.decided_good:.2f}% | "
                             f"{100 * r.inconclusive:.1f}% | {r.runs_per_side:.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(simulation_table())
    s = Settings()
    for effect in (0.0, 1.0, 3.0):
        found, runs = simulate_premise(effect, s)
        print(f"premise, noise 5%, bad slower by {effect:g} sd: regression found {100 * found:.2f}%, "
              f"{runs:.2f} runs a side")
