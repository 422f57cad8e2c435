"""One curriculum iteration's metrics, as the health check reads them.

    IterationMetrics
    ├── iteration, policy, checkpoint   which policy the rollout ran, which one train produced
    ├── train      per optimizer step: the train_metrics columns the detectors read
    ├── rollout    the global rollout metrics (``rollout/...``)
    ├── tasks      per task: episodes, success_rate, <pattern>_episodes
    ├── knobs      the train options the iteration ran with (TrainKnobs)
    ├── applied    mitigation settings in force while it ran (issued by earlier verdicts)
    └── verdict    the health check's verdict kind after it (None until judged)

The rollout metrics of iteration i measure ``policy`` (the policy *before* train
i); train i then produces ``checkpoint``. So a collapse seen in iteration i's
rollout condemns ``policy``, not ``checkpoint``. Policies are named by labels
(the stage uses the checkpoint folder's path); labels only need to be
consistent within a run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

__all__ = ["PATTERNS", "TRAIN_COLUMNS", "IterationMetrics", "TrainKnobs"]

TRAIN_COLUMNS = (
    "step",
    "mode",
    "optim/lr",
    "advantage/positive",
    "advantage/negative",
    "advantage/mean",
    "data/failed_max_response_tokens",
)
"""The train_metrics columns the detectors read (all in the artifact's required schema)."""

PATTERNS = ("loop", "destructive", "test_access", "tampering")
"""The behaviour monitor's episode flags (``rollout/<pattern>_episodes``, per task ``<pattern>_episodes``)."""


@dataclass(frozen=True)
class TrainKnobs:
    """The train options a mitigation may change, as the iteration's train stage ran them."""

    mode: str
    """``positive-only`` or ``full``: ``negative_weight`` only acts in ``full``."""
    learning_rate: float
    """The peak learning rate actually used (the config's, or the largest ``optim/lr`` of its steps)."""
    eps_low: float
    eps_high: float
    negative_weight: float


_KNOBS = {f.name for f in dataclasses.fields(TrainKnobs)}


@dataclass(frozen=True)
class IterationMetrics:
    """Everything the health check knows about one iteration (see the module docstring)."""

    iteration: int
    policy: str
    checkpoint: str
    train: tuple[dict[str, Any], ...]
    rollout: dict[str, float]
    tasks: dict[str, dict[str, float]]
    knobs: TrainKnobs
    applied: dict[str, Any] = field(default_factory=dict)
    verdict: str | None = None

    @property
    def episodes(self) -> int:
        return int(self.rollout.get("rollout/episodes", 0))

    @property
    def success_rate(self) -> float:
        return self.rollout.get("rollout/success_rate", 0.0)

    @property
    def failed_trajectories(self) -> int:
        """Episodes that did not pass (``rollout/failed_episodes`` counts infrastructure failures only)."""
        return self.episodes - round(self.success_rate * self.episodes)

    @property
    def failed_max_tokens(self) -> int | None:
        """The longest failed trajectory's response tokens the train stage saw (None: no steps)."""
        values = [
            r["data/failed_max_response_tokens"]
            for r in self.train
            if r.get("data/failed_max_response_tokens") is not None
        ]
        return max(values) if values else None

    @property
    def negative_share(self) -> float | None:
        """negative / (positive + negative) advantage episodes over the steps (None: no signal)."""
        positive = sum(r.get("advantage/positive") or 0 for r in self.train)
        negative = sum(r.get("advantage/negative") or 0 for r in self.train)
        return negative / (positive + negative) if positive + negative else None

    @property
    def advantage_steps(self) -> list[float]:
        """Per-step advantage means of the steps that carried signal: a step whose episodes all
        have advantage 0 (a group of equal rewards) reports 0 and says nothing about the drift."""
        return [
            float(r["advantage/mean"])
            for r in self.train
            if (r.get("advantage/positive") or 0) + (r.get("advantage/negative") or 0) > 0
            and r.get("advantage/mean") is not None
        ]

    def pattern_episodes(self, pattern: str) -> int:
        return int(self.rollout.get(f"rollout/{pattern}_episodes", 0))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, without ``verdict`` (the report stores the whole verdict beside it)."""
        data = dataclasses.asdict(self)
        data["train"] = [{k: r.get(k) for k in TRAIN_COLUMNS} for r in self.train]
        del data["verdict"]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], verdict: str | None = None) -> IterationMetrics:
        return cls(
            iteration=int(data["iteration"]),
            policy=str(data["policy"]),
            checkpoint=str(data["checkpoint"]),
            train=tuple(data["train"]),
            rollout=dict(data["rollout"]),
            tasks=dict(data["tasks"]),
            knobs=TrainKnobs(
                **{k: v for k, v in data["knobs"].items() if k in _KNOBS}
            ),  # older reports had more
            applied=dict(data.get("applied", {})),
            verdict=verdict,
        )
