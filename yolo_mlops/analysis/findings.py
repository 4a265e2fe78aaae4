"""The finding model: what one diagnosis rule found, how bad it is, the evidence it measured, what it could save
(savings.py) and the sweep variants that try its remedies (the remedy table of yolo_mlops/remedies.py).
`Finding.to_dict()` is one entry of findings.json.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

from yolo_mlops.analysis.model import to_builtins
from yolo_mlops.analysis.savings import Saving

HIGH, MEDIUM, LOW = "high", "medium", "low"
SEVERITY_ORDER = {HIGH: 0, MEDIUM: 1, LOW: 2}


@dataclass
class Finding:
    rule: str
    severity: str  # high | medium | low
    title: str
    evidence: dict[str, float | str]
    recommended_variants: list[str] = field(default_factory=list)
    saving: Saving | None = None  # None: the trace holds no time this finding accounts for
    no_saving_reason: str | None = None  # why there is no saving, when the finding costs no step time

    def to_dict(self) -> dict:
        return cast(dict, to_builtins(self))  # a dataclass converts to a dict

    def line(self) -> str:
        """One line: severity, title, what it could save, what to try."""
        saving = self.saving.text() if self.saving else (self.no_saving_reason or "saving not estimable from the trace")
        variants = ", ".join(self.recommended_variants) or "a code change"
        return f"[{self.severity}] {self.title}; {saving}; try: {variants}"


def severity_at(value: float, high: float) -> str:
    """High from the rule's `high` line on, else medium (the rule fired: its warning line is reached)."""
    return HIGH if value >= high else MEDIUM


def evidence_of(**values: float | str | None) -> dict[str, float | str]:
    """A finding's evidence: the values measured, floats to 2 decimals; those not measured (None) left out."""
    return {k: round(v, 2) if isinstance(v, float) else v for k, v in values.items() if v is not None}
