"""The health stage, top to bottom: judge the curriculum after an iteration.

main(config)
  ├─ validate; the previous health report (the run so far), or a new one
  ├─ per new iteration, oldest first:
  │     read_iteration(rollout metrics, train output)   global + per-task rollout metrics,
  │                                                     train steps, the options train ran with
  │     report.judge(...)                               verdict(history) (verdict.py)
  └─ write the report (JSON), print each verdict with its reasons and settings
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components.health.config import HealthConfig
from components.health.history import TRAIN_COLUMNS, TrainKnobs
from components.health.report import HealthReport, read_report, write_report
from termrl.artifacts import read_rollout_metrics, read_train_metrics
from termrl.artifacts.checkpoint import CheckpointFolder, read_train_state
from termrl.errors import ArtifactError

__all__ = ["IterationFiles", "headline_metrics", "main", "next_iteration", "read_iteration"]


@dataclass
class IterationFiles:
    """One iteration's metrics as read from its artifacts (``HealthReport.judge``'s arguments)."""

    train: list[dict[str, Any]]
    rollout: dict[str, float]
    tasks: dict[str, dict[str, float]]
    knobs: TrainKnobs


def read_iteration(rollout_metrics: Path, train_folder: Path) -> IterationFiles:
    """An iteration's rollout metrics (global and per task), train steps and train options."""
    rollout: dict[str, float] = {}
    tasks: dict[str, dict[str, float]] = defaultdict(dict)
    for row in read_rollout_metrics(rollout_metrics).to_pylist():
        if row["scope"] == "global":
            rollout[row["metric"]] = row["value"]
        elif row["scope"] == "task":
            tasks[row["key"]][row["metric"]] = row["value"]
    table = read_train_metrics(CheckpointFolder(train_folder).train_metrics)
    train = table.select(list(TRAIN_COLUMNS)).to_pylist()
    try:
        config = read_train_state(train_folder)["config"]
        # the config's learning rate is None when train picked its default; the steps record it
        lr = config["learning_rate"] or max(
            (r["optim/lr"] for r in train if r["optim/lr"] is not None), default=None
        )
        knobs = TrainKnobs(
            mode=config["mode"],
            learning_rate=lr,
            eps_low=config["eps_low"],
            eps_high=config["eps_high"],
            negative_weight=config["negative_weight"],
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ArtifactError(
            f"{CheckpointFolder(train_folder).state_file}: no usable train config: {exc!r}"
        ) from exc
    if knobs.learning_rate is None:
        raise ArtifactError(f"{train_folder}: no learning rate in its config or its steps")
    return IterationFiles(train, rollout, dict(tasks), knobs)


def main(config: HealthConfig) -> HealthReport:
    """Run the stage as configured (the command line and the KFP component call this)."""
    config.validate()
    report = (
        read_report(config.previous)
        if config.previous
        else HealthReport(start_policy=config.start_policy)
    )
    for i, rollout_metrics in enumerate(config.rollout_metrics):
        files = read_iteration(rollout_metrics, config.train_folder(i))
        report.judge(
            train=files.train,
            rollout=files.rollout,
            tasks=files.tasks,
            checkpoint=str(config.train_folder(i)),
            knobs=files.knobs,
            thresholds=config.thresholds,
            mitigations=config.mitigations,
        )
    write_report(config.out, report)
    for line in report.lines():
        print(line)
    return report


def headline_metrics(report: HealthReport) -> dict[str, float]:
    """The latest verdict (one 0/1 value per kind) and its number of findings, for the Kubeflow UI."""
    last = report.verdicts[-1]
    return {
        "health/iteration": float(report.history[-1].iteration),
        "health/findings": float(len(last.findings)),
        **{
            f"health/{kind}": float(last.kind == kind)
            for kind in ("healthy", "mitigate", "rollback")
        },
    }


def next_iteration(
    report: HealthReport, train_options: dict[str, Any], rollout_options: dict[str, Any]
) -> tuple[str, int, dict[str, Any], dict[str, Any]]:
    """What the curriculum's next iteration gets: the verdict, the iteration whose checkpoint
    it continues from (a rollback's target, else the one just judged), and the run's own train
    and rollout options with every setting the verdicts made on top."""
    data = report.to_dict()
    last = report.verdicts[-1]
    target = last.to_iteration if last.to_iteration is not None else data["iteration"]
    return (
        last.kind,
        target,
        {**train_options, **data["options"]["train"]},
        {**rollout_options, **data["options"]["rollout"]},
    )
