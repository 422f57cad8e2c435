"""What one verification check found: ``CheckOutcome``.

Every check ends in one of five outcomes:

    pass      the task is fine by this check
    fail      the check found a defect (the reason says which)
    error     the check could not be carried out (sandbox, build, judge endpoint...)
    skipped   there was nothing for this check to measure (K=1 for flakiness, a
              one-step solution for ablation, an empty judge panel)
    blocked   an earlier check failed and this one needs it (ablation and the
              state replay need a solution that passes and a no-op that fails)

Admission treats ``pass`` and ``skipped`` as passing and the other three as
failing (see ``admission.decide``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["OUTCOMES", "CheckOutcome", "Outcome"]

Outcome = Literal["pass", "fail", "error", "skipped", "blocked"]
OUTCOMES = ("pass", "fail", "error", "skipped", "blocked")


@dataclass
class CheckOutcome:
    """One check's result: its outcome, why, how long it took and what it measured."""

    name: str
    outcome: Outcome
    reason: str
    seconds: float = 0.0
    runs: list[bool | None] = field(default_factory=list)
    """Per repeat (ground truth, no-op): did the tests pass in that run; None if it errored."""
    detail: dict[str, Any] = field(default_factory=dict)
    """Check-specific findings (ablation probes, replayed paths, judge verdicts...)."""

    @property
    def ok(self) -> bool:
        """Whether this outcome lets a task through admission."""
        return self.outcome in ("pass", "skipped")

    def to_json(self) -> dict[str, Any]:
        """The entry of the verdicts artifact's ``checks`` JSON object."""
        entry: dict[str, Any] = {
            "outcome": self.outcome,
            "seconds": round(self.seconds, 3),
            "reason": self.reason,
        }
        if self.runs:
            entry["runs"] = self.runs
        entry.update(self.detail)
        return entry

    @classmethod
    def blocked(cls, name: str, because: str) -> CheckOutcome:
        return cls(name, "blocked", f"not run: {because}")
