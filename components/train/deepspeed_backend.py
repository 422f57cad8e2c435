"""DeepSpeed ZeRO as the distributed back-end (``distributed: deepspeed``), for GPU clusters.

The trainer keeps its own loop: it hands DeepSpeed a ``torch.optim`` optimizer
and the scheduler (a DeepSpeed ``optimizer`` section would compile a C++ Adam),
marks the accumulation boundary itself (so a short last step still works), and
calls ``backward(loss, scale_wrt_gas=False)`` because the loss is already
normalised over the whole step. DeepSpeed averages gradients over ranks, like
FSDP, so the caller multiplies the loss by the world size.

Checkpoints: the HF folder holds gathered weights (ZeRO-3 consolidates them);
optimizer shards and scheduler go to ``training_state/deepspeed`` through
DeepSpeed's own ``save_checkpoint``.

On CPU DeepSpeed runs with gloo but builds a small C++ comm op on first use
(about 40 s); set ``TORCH_EXTENSIONS_DIR`` to a cache to pay that once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from termrl.errors import ConfigError

__all__ = [
    "deepspeed_config",
    "gathered_state_dict",
    "load_engine_state",
    "save_engine_state",
    "wrap_deepspeed",
]

CHECKPOINT_TAG = "state"


def deepspeed_config(
    *,
    micro_batch_size: int,
    grad_accum_steps: int,
    world: int,
    zero_stage: int,
    max_grad_norm: float,
    bf16: bool,
    overrides_file: str | None,
) -> dict[str, Any]:
    """The generated DeepSpeed configuration, with a user JSON's keys on top."""
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": micro_batch_size,
        "gradient_accumulation_steps": grad_accum_steps,
        "train_batch_size": micro_batch_size * grad_accum_steps * world,
        "gradient_clipping": max_grad_norm,
        "zero_optimization": {"stage": zero_stage},
        "bf16": {"enabled": bf16},
        "zero_allow_untested_optimizer": True,  # a plain torch.optim.AdamW
        "steps_per_print": 1 << 30,
    }
    if overrides_file:
        config.update(json.loads(Path(overrides_file).read_text()))
    return config


def wrap_deepspeed(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    config: dict[str, Any],
) -> nn.Module:
    """The DeepSpeed engine around ``model``; it owns the optimizer and scheduler steps."""
    try:
        import deepspeed
    except ImportError as exc:
        raise ConfigError(
            "distributed: deepspeed needs the deepspeed package: DS_BUILD_OPS=0 pip install 'termrl[deepspeed]'"
        ) from exc
    engine, _, _, _ = deepspeed.initialize(
        model=model, optimizer=optimizer, lr_scheduler=scheduler, config=config
    )
    return engine


def gathered_state_dict(engine: nn.Module) -> dict[str, torch.Tensor]:
    """Full weights of the wrapped module (a collective under ZeRO-3; rank 0 gets them)."""
    if engine.zero_optimization_stage() == 3:
        return engine._zero3_consolidated_16bit_state_dict()
    return engine.module.state_dict()


def save_engine_state(engine: nn.Module, folder: Path) -> None:
    """Optimizer shards, scheduler and module through DeepSpeed (all ranks call this)."""
    engine.save_checkpoint(str(folder), tag=CHECKPOINT_TAG)


def load_engine_state(engine: nn.Module, folder: Path) -> None:
    path, _ = engine.load_checkpoint(
        str(folder), tag=CHECKPOINT_TAG, load_optimizer_states=True, load_lr_scheduler_states=True
    )
    if path is None:
        raise ConfigError(f"DeepSpeed could not load its state from {folder}")
