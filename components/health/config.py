"""The health stage's one configuration: every knob, its default and why."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from components.health.detectors import Thresholds
from components.health.verdict import Mitigations
from termrl.artifacts.checkpoint import CheckpointFolder
from termrl.errors import ConfigError

__all__ = ["HealthConfig"]


@dataclass
class HealthConfig:
    """Everything the health stage needs. The iterations to add, oldest first, then the report."""

    rollout_metrics: list[Path] = field(default_factory=list)
    """Each new iteration's rollout metrics artifact (long format), oldest first."""
    train: list[Path] = field(default_factory=list)
    """Each new iteration's train output: the checkpoint folder, or the ``train_metrics.parquet``
    at its root (the folder's ``training_state/state.json`` gives the options it ran with).
    Its path is the checkpoint's label in the report."""
    previous: Path | None = None
    """The health report of the iterations before these (the pipeline passes the previous
    health step's); None starts a new run. Without it, the new iterations are judged in turn
    as if each verdict had been followed, which is what the pipeline does."""
    start_policy: str = "start"
    """Label of the policy the run's first rollout ran (the rollback target of last resort);
    only read when there is no ``previous`` report."""
    out: Path = Path("health.json")
    """The health report to write (JSON): the latest verdict, its reasons and settings, the options
    in force for the next iteration and the history the next health step continues."""
    thresholds: Thresholds = field(default_factory=Thresholds)
    mitigations: Mitigations = field(default_factory=Mitigations)

    def train_folder(self, index: int) -> Path:
        path = self.train[index]
        return path.parent if path.suffix == ".parquet" else path

    def validate(self) -> None:
        """Raise one ``ConfigError`` listing every problem."""
        problems = self.thresholds.problems() + self.mitigations.problems()
        if not self.rollout_metrics:
            problems.append(
                "no iteration to judge: give at least one rollout metrics and train output"
            )
        if len(self.rollout_metrics) != len(self.train):
            problems.append(
                f"{len(self.rollout_metrics)} rollout metrics but {len(self.train)} train "
                "outputs: give one of each per iteration"
            )
        for path in self.rollout_metrics:
            if not path.is_file():
                problems.append(f"rollout metrics {str(path)!r} does not exist")
        for i in range(len(self.train)):
            folder = self.train_folder(i)
            layout = CheckpointFolder(folder)
            for needed in (layout.train_metrics, layout.state_file):
                if not needed.is_file():
                    problems.append(
                        f"train output {str(self.train[i])!r} has no {needed.relative_to(folder)}"
                    )
        if self.previous is not None and not self.previous.is_file():
            problems.append(f"previous health report {str(self.previous)!r} does not exist")
        if problems:
            raise ConfigError(problems)
