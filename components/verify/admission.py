"""The admission gate: from one task's check outcomes to a verdicts row and a decision.

A task is admitted only when every *required* check passes (``pass``, or
``skipped`` where there was nothing to measure); otherwise the reason is the
first failed required check in ``CHECKS`` order. The judges and the no-op's
runs are recorded whether required or not; the two probes (ablation, state
replay) run only when required (a set only measured on may skip them). What
ran feeds ``false_positive_risk``:

    false_positive_risk = max(share of no-op runs whose tests passed,
                              share of ablated steps the tests did not check,
                              1.0 if the state replay found process-only-as-files tests,
                              share of answering judges that flagged)

— the strongest single sign that the tests accept work that was not done.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from components.verify.config import CHECKS
from components.verify.outcomes import CheckOutcome

__all__ = ["Verdict", "decide", "false_positive_risk", "summary"]


def decide(outcomes: dict[str, CheckOutcome], require: tuple[str, ...]) -> tuple[bool, str]:
    """(admitted, reason): "admitted", or the name of the first failed required check."""
    for name in CHECKS:
        if name in require and not outcomes[name].ok:
            return False, name
    return True, "admitted"


def false_positive_risk(outcomes: dict[str, CheckOutcome]) -> float:
    """The strongest measured sign of a false positive, in [0, 1] (see the module docstring)."""
    signs = [0.0]
    noop_runs = [r for r in outcomes["noop"].runs if r is not None]
    if noop_runs:
        signs.append(sum(noop_runs) / len(noop_runs))
    probes = outcomes["ablation"].detail.get("probes") or []
    measured = [p for p in probes if p["tests_passed"] is not None]
    if measured:
        signs.append(sum(1 for p in measured if p["tests_passed"]) / len(measured))
    if outcomes["state_replay"].outcome == "fail":
        signs.append(1.0)
    judges = [j for j in outcomes["judges"].detail.get("judges") or [] if j["verdict"] != "error"]
    if judges:
        signs.append(sum(1 for j in judges if j["verdict"] == "flag") / len(judges))
    return max(signs)


@dataclass
class Verdict:
    """One task's verification: every check's outcome and the admission decision."""

    task_id: str
    outcomes: dict[str, CheckOutcome]
    admitted: bool
    reason: str
    seconds: float

    @classmethod
    def of(
        cls,
        task_id: str,
        outcomes: dict[str, CheckOutcome],
        require: tuple[str, ...],
        seconds: float,
    ) -> Verdict:
        missing = [c for c in CHECKS if c not in outcomes]
        if missing:
            raise ValueError(f"task {task_id}: no outcome for {', '.join(missing)}")
        admitted, reason = decide(outcomes, require)
        return cls(task_id, outcomes, admitted, reason, seconds)

    @property
    def why(self) -> str:
        """The failed check's own explanation (empty when admitted)."""
        return "" if self.admitted else self.outcomes[self.reason].reason

    def to_row(self) -> dict[str, Any]:
        """The task's row of the verdicts artifact."""
        o = self.outcomes
        probes = o["ablation"].detail.get("probes") or []
        return {
            "task_id": self.task_id,
            "admitted": self.admitted,
            "reason": self.reason,
            "ground_truth_passed": o["ground_truth"].outcome == "pass",
            "ground_truth_runs": o["ground_truth"].runs,
            "noop_passed": any(r for r in o["noop"].runs if r is not None),
            "noop_runs": o["noop"].runs,
            "flaky": o["flakiness"].outcome == "fail",
            "ablation": probes,
            "unchecked_steps": [p["step"] for p in probes if p["tests_passed"]],
            "state_replay_passed": o["state_replay"].detail.get("tests_passed"),
            "judges": o["judges"].detail.get("judges") or [],
            "false_positive_risk": false_positive_risk(o),
            "checks": json.dumps({name: o[name].to_json() for name in CHECKS}, sort_keys=True),
            "duration_sec": self.seconds,
        }


def summary(verdicts: list[Verdict]) -> str:
    """A few lines for the end of a run: admitted and rejected tasks by reason."""
    admitted = [v for v in verdicts if v.admitted]
    rejected = Counter(v.reason for v in verdicts if not v.admitted)
    lines = [
        f"verify: {len(admitted)} of {len(verdicts)} tasks admitted, {len(verdicts) - len(admitted)} rejected"
    ]
    for reason, count in sorted(rejected.items(), key=lambda kv: (-kv[1], kv[0])):
        lines.append(f"  rejected by {reason}: {count}")
        for v in [v for v in verdicts if not v.admitted and v.reason == reason][:5]:
            lines.append(f"    {v.task_id}: {v.why[:160]}")
    return "\n".join(lines)
