"""The bounds every command and flow that judges runs puts on its error rate and its smallest effect.

`yolo-mlops trends`, `fleet` and `bisect` (and the `bisect` flow) take a p-value bound and a smallest effect;
one rule for each, so a value one command accepts the others accept too, and each refusal is one line naming
the flag as the user typed it.
"""

from __future__ import annotations

from yolo_mlops.errors import ConfigError

MAX_EFFECT = 1.0  # a smallest effect is a fraction: 0.05 = 5%; 1 would be a doubling, beyond any threshold


def check_pvalue(flag: str, value: float) -> float:
    """A significance level / error rate: strictly between 0 and 1 (0 never reports, 1 always does)."""
    if not 0 < value < 1:
        raise ConfigError(f"{flag} {value:g}: must be a probability in (0, 1), e.g. 0.01")
    return value


def check_fraction(flag: str, value: float) -> float:
    """A smallest effect, a fraction of the level in [0, 1): 0.05 = 5%."""
    if not 0 <= value < MAX_EFFECT:
        raise ConfigError(
            f"{flag} {value:g}: must be a fraction in [0, {MAX_EFFECT:g}) (0.05 = 5%; {value:g} "
            f"would mean {100 * value:g}%)"
        )
    return value
