"""The checkpoint artifact: the folder a train stage writes, declared once.

    OUT/                                  CheckpointFolder(OUT)
    ├── config.json, model.safetensors, tokenizer files   the final policy (OUT loads as a model;
    │   (or adapter_config.json + adapter_model.safetensors with the base's path)   LoRA export)
    ├── train_metrics.parquet             .train_metrics: per optimizer step (train_metrics schema)
    ├── training_state/                   .state_dir
    │   ├── state.json                    .state_file: step, the TrainConfig it ran with, base model
    │   ├── optimizer.pt, scheduler.pt    .optimizer, .scheduler
    │   ├── rng-rank<r>.pt                .rng(rank)
    │   ├── deepspeed/                    .deepspeed: DeepSpeed's own engine state instead
    │   ├── old_logprobs.pt               .old_logprobs: π_old per episode (fixed for the stage)
    │   └── adapter/                      .adapter: LoRA only, the trainable adapter, unmerged
    └── checkpoints/                      .steps_dir
        └── step-000010/                  .step(10): a CheckpointFolder of the same layout

Train (``components/train/checkpoint.py``) writes and resumes from it; health
(``components/health``) reads ``train_metrics.parquet`` and the config in
``state.json``. Both go through this class: no other module spells a path inside it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from termrl.errors import ArtifactError

__all__ = ["CheckpointFolder", "read_train_state"]


@dataclass(frozen=True)
class CheckpointFolder:
    """Paths inside one train output folder (the final one, or a step checkpoint)."""

    root: Path

    def __init__(self, root: str | os.PathLike) -> None:
        object.__setattr__(self, "root", Path(root))

    @property
    def train_metrics(self) -> Path:
        return self.root / "train_metrics.parquet"

    @property
    def state_dir(self) -> Path:
        return self.root / "training_state"

    @property
    def state_file(self) -> Path:
        return self.state_dir / "state.json"

    @property
    def optimizer(self) -> Path:
        return self.state_dir / "optimizer.pt"

    @property
    def scheduler(self) -> Path:
        return self.state_dir / "scheduler.pt"

    def rng(self, rank: int) -> Path:
        return self.state_dir / f"rng-rank{rank}.pt"

    @property
    def deepspeed(self) -> Path:
        return self.state_dir / "deepspeed"

    @property
    def old_logprobs(self) -> Path:
        return self.state_dir / "old_logprobs.pt"

    @property
    def adapter(self) -> Path:
        return self.state_dir / "adapter"

    @property
    def steps_dir(self) -> Path:
        return self.root / "checkpoints"

    def step(self, step: int) -> CheckpointFolder:
        return CheckpointFolder(self.steps_dir / f"step-{step:06d}")

    def steps(self) -> list[CheckpointFolder]:
        """The complete step checkpoints (their state file written last), oldest first."""
        if not self.steps_dir.is_dir():
            return []
        found = sorted(self.steps_dir.glob("step-*"))
        return [c for c in map(CheckpointFolder, found) if c.state_file.is_file()]


def read_train_state(folder: str | os.PathLike) -> dict[str, Any]:
    """``state.json`` of a train output folder: ``step``, ``config`` (the TrainConfig as a dict)
    and the base model; a missing or unreadable file is an ``ArtifactError``."""
    path = CheckpointFolder(folder).state_file
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ArtifactError(f"{path}: unreadable train state: {exc}") from exc
    if not isinstance(state, dict):
        raise ArtifactError(f"{path}: train state is not a JSON object")
    return state
