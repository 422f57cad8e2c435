"""The health report: the run's iterations, each with the verdict it got (the stage's JSON artifact).

    {
      "schema": "termrl.health/2",
      "iteration": 4,                         the latest iteration judged
      "verdict": "healthy" | "mitigate" | "rollback",
      "action": "...", "reasons": ["<detector>: <reason with numbers>", ...],
      "settings": {"train.eps_high": 0.1, ...},     this verdict's changes
      "to_checkpoint": null | "<label>", "to_iteration": null | int,   rollback only (−1: start)
      "quarantine": [task ids newly quarantined],
      "lifted": ["train.eps_high", ...],       settings dropped: the run's own options apply again
      "findings": [{"name", "severity", "reason", "mitigation", "evidence", "tasks"}, ...],
      "next_policy": "<label>",               what the next iteration's rollout should run
      "options": {"train": {...}, "rollout": {...}},  every setting in force for the next iteration
      "start_policy": "<label>",              the policy the run's first rollout ran
      "history": [{IterationMetrics fields, "health": {that iteration's verdict}}, ...]
    }

The next health step reads the report back (``previous``) and adds one
iteration: its ``history`` is the state carried from iteration to iteration.
Schema 2 keeps each step's train columns under train_metrics 2.0's names
(``optim/lr``, ``advantage/mean``, ...); a schema 1 report is refused.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from components.health.detectors import Thresholds
from components.health.history import IterationMetrics, TrainKnobs
from components.health.verdict import Mitigations, Verdict, stage_options, verdict
from termrl.errors import ArtifactError

__all__ = ["SCHEMA", "HealthReport", "read_report", "write_report"]

SCHEMA = "termrl.health/2"


@dataclass
class HealthReport:
    """The run's judged iterations; ``verdicts[i]`` is the verdict after ``history[i]``."""

    history: list[IterationMetrics] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    start_policy: str = "start"
    """The policy the run's first rollout ran (the last-resort rollback target)."""

    @property
    def applied(self) -> dict[str, Any]:
        """Every setting in force for the next iteration: all verdicts' changes and lifts, in order."""
        settings: dict[str, Any] = {}
        for v in self.verdicts:
            settings.update(v.settings)
            for key in v.lifted:
                settings.pop(key, None)
        return settings

    @property
    def next_policy(self) -> str:
        """The policy the next iteration's rollout runs: the rollback target or the newest checkpoint."""
        if not self.history:
            return self.start_policy
        last = self.verdicts[-1]
        return last.to_checkpoint if last.to_checkpoint is not None else self.history[-1].checkpoint

    def judge(
        self,
        *,
        train: Sequence[dict[str, Any]],
        rollout: dict[str, float],
        tasks: dict[str, dict[str, float]],
        checkpoint: str,
        knobs: TrainKnobs,
        thresholds: Thresholds,
        mitigations: Mitigations,
    ) -> Verdict:
        """Add the iteration that just ran (from ``next_policy``, with ``applied``) and judge the run."""
        metrics = IterationMetrics(
            iteration=len(self.history),
            policy=self.next_policy,
            checkpoint=checkpoint,
            train=tuple(train),
            rollout=rollout,
            tasks=tasks,
            knobs=knobs,
            applied=self.applied,
        )
        result = verdict([*self.history, metrics], thresholds, mitigations)
        self.history.append(replace(metrics, verdict=result.kind))
        self.verdicts.append(result)
        return result

    def to_dict(self) -> dict[str, Any]:
        if not self.history:
            raise ValueError("an empty health report has no verdict")
        last = self.verdicts[-1].to_dict()
        return {
            "schema": SCHEMA,
            "iteration": self.history[-1].iteration,
            "verdict": last.pop("kind"),
            **last,
            "next_policy": self.next_policy,
            "options": stage_options(self.applied),
            "start_policy": self.start_policy,
            "history": [
                {**h.to_dict(), "health": v.to_dict()}
                for h, v in zip(self.history, self.verdicts, strict=True)
            ],
        }

    def lines(self) -> list[str]:
        """One line per iteration's verdict, then the latest verdict's reasons and settings."""
        lines = []
        for h, v in zip(self.history, self.verdicts, strict=True):
            line = f"health · iteration {h.iteration}: {v.kind.upper()}"
            line += f" (success {h.success_rate:.0%} of {h.episodes})" if h.episodes else ""
            lines.append(line + (f" — {v.action}" if v.action else ""))
        last = self.verdicts[-1]
        lines += [f"  {reason}" for reason in last.reasons]
        lines += [f"  set {key} = {value}" for key, value in last.settings.items()]
        lines += [f"  lift {key}" for key in last.lifted]
        return lines


def write_report(path: str | os.PathLike, report: HealthReport) -> None:
    """Write atomically (temp file, then rename), as every artifact is."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(report.to_dict(), f, indent=1)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_report(path: str | os.PathLike) -> HealthReport:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ArtifactError(f"cannot read health report {path}: {exc}") from exc
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ArtifactError(f"{path} is not a health report ({SCHEMA})")
    verdicts = [Verdict.from_dict(entry["health"]) for entry in data["history"]]
    history = [
        IterationMetrics.from_dict(entry, v.kind)
        for entry, v in zip(data["history"], verdicts, strict=True)
    ]
    return HealthReport(history, verdicts, data["start_policy"])


def to_html(report: HealthReport) -> str:
    """The report's HTML section: a plot of each iteration's signals, then its verdict and reasons."""
    import html

    from termrl.figures import plt, png_base64

    iterations = [h.iteration for h in report.history]
    advantage = [
        sum(h.advantage_steps) / len(h.advantage_steps) if h.advantage_steps else None
        for h in report.history
    ]
    negative = [h.negative_share for h in report.history]
    figure, axis = plt.subplots(figsize=(6.4, 3.2))
    axis.plot(
        iterations, [h.success_rate for h in report.history], "o-", label="rollout success rate"
    )
    for values, label in ((negative, "negative share"), (advantage, "advantage mean")):
        points = [(i, v) for i, v in zip(iterations, values, strict=True) if v is not None]
        if points:
            axis.plot(*zip(*points, strict=True), "s--", label=label)
    colours = {"healthy": "#2a2", "mitigate": "#d90", "rollback": "#c22"}
    for h, v in zip(report.history, report.verdicts, strict=True):
        axis.axvline(h.iteration, color=colours[v.kind], alpha=0.25, linewidth=6)
    axis.set_xlabel("iteration (band: verdict, green healthy / amber mitigate / red rollback)")
    axis.set_xticks(iterations)
    axis.legend(fontsize=8)
    png = png_base64(figure)

    rows = []
    for h, v in zip(report.history, report.verdicts, strict=True):
        reasons = "<br>".join(html.escape(r) for r in v.reasons) or "–"
        settings = (
            ", ".join(f"{html.escape(k)} = {html.escape(str(x))}" for k, x in v.settings.items())
            or "–"
        )
        rows.append(
            f"<tr><td>{h.iteration}</td><td>{v.kind}</td><td>{h.success_rate:.0%} of {h.episodes}</td>"
            f"<td style='text-align:left'>{html.escape(v.action) or '–'}</td>"
            f"<td style='text-align:left'>{reasons}</td><td style='text-align:left'>{settings}</td></tr>"
        )
    return (
        f'<figure><img alt="health signals" src="data:image/png;base64,{png}">'
        "<figcaption>Rollout success, negative share and advantage mean per RL iteration</figcaption></figure>"
        "<table><tr><th>iteration</th><th>verdict</th><th>rollout success</th><th>action</th>"
        "<th>reasons</th><th>settings</th></tr>" + "".join(rows) + "</table>"
        f"<p>The next iteration (or eval) got: {html.escape(report.next_policy)}</p>"
    )
