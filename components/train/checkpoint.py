"""Checkpoints: a Hugging Face folder plus everything needed to resume exactly.

The folder's layout is declared once, in ``termrl.artifacts.checkpoint``
(``CheckpointFolder``): the final policy at the root, ``train_metrics.parquet``,
``training_state/`` (state.json, optimizer, scheduler, RNG, π_old, the LoRA adapter)
and one complete copy per saved step under ``checkpoints/step-NNNNNN/``.

A checkpoint folder is written under a temporary name and renamed when
complete, so a run killed mid-save leaves the previous checkpoint as the
latest. Resume loads the newest ``step-*`` folder.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import torch
from torch import nn

from components.train.deepspeed_backend import (
    gathered_state_dict,
    load_engine_state,
    save_engine_state,
)
from components.train.modeling import DistEnv
from termrl.artifacts.checkpoint import CheckpointFolder
from termrl.artifacts.metrics import write_train_metrics
from termrl.errors import ArtifactError

__all__ = [
    "CheckpointState",
    "latest_checkpoint",
    "load_checkpoint",
    "load_old_logprobs",
    "publish_final",
    "save_checkpoint",
]

CheckpointState = dict[str, Any]


def latest_checkpoint(out: str | Path) -> Path | None:
    """The newest complete step checkpoint under ``out``, or ``None``."""
    steps = CheckpointFolder(out).steps()
    return steps[-1].root if steps else None


def _rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _full_states(
    model: nn.Module, optimizer: torch.optim.Optimizer, env: DistEnv
) -> tuple[dict, dict]:
    """Unsharded model and optimizer state (a collective under FSDP2 and ZeRO-3).

    Under DeepSpeed the optimizer state is saved by DeepSpeed itself (``{}`` here).
    """
    if env.backend == "deepspeed":
        return gathered_state_dict(model), {}
    if env.backend != "fsdp2":
        return model.state_dict(), optimizer.state_dict()
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return (
        get_model_state_dict(model, options=options),
        get_optimizer_state_dict(model, optimizer, options=options),
    )


def _write_model(
    folder: Path,
    model: nn.Module,
    state: dict,
    tokenizer: Any,
    *,
    finetune: str,
    export: str,
    base_model: str,
) -> None:
    """The HF folder: merged weights, or the adapter with its base's path."""
    if finetune == "full":
        model.save_pretrained(folder, state_dict=state, safe_serialization=True)
    else:
        adapter = CheckpointFolder(folder).adapter
        model.save_pretrained(adapter, state_dict=state, safe_serialization=True)
        _set_base_reference(adapter, base_model)
        if export == "adapter":
            for item in adapter.iterdir():
                shutil.copy2(item, folder / item.name)
        else:
            _merge_adapter(base_model, adapter, folder)
    tokenizer.save_pretrained(folder)


def _set_base_reference(adapter: Path, base_model: str) -> None:
    config_path = adapter / "adapter_config.json"
    config = json.loads(config_path.read_text())
    config["base_model_name_or_path"] = str(Path(base_model).resolve())
    config_path.write_text(json.dumps(config, indent=2))


def _merge_adapter(base_model: str, adapter: Path, folder: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(base_model, dtype=torch.float32)
    merged = PeftModel.from_pretrained(base, adapter).merge_and_unload()
    merged.save_pretrained(folder, safe_serialization=True)


def save_checkpoint(
    out: Path,
    *,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    tokenizer: Any,
    env: DistEnv,
    state: CheckpointState,
    old_logprobs: dict[str, torch.Tensor],
    metrics: list[dict[str, Any]],
    keep: int,
) -> Path:
    """Write ``step``'s checkpoint (all processes call this; rank 0 writes the model)."""
    final = CheckpointFolder(out).step(step).root
    tmp = final.with_name(f".{final.name}.tmp")
    layout = CheckpointFolder(tmp)
    model_state, optimizer_state = _full_states(model, optimizer, env)
    if env.is_main:
        if tmp.exists():
            shutil.rmtree(tmp)
        layout.state_dir.mkdir(parents=True)
    env.barrier()
    torch.save(_rng_state(), layout.rng(env.rank))
    if env.backend == "deepspeed":
        save_engine_state(model, layout.deepspeed)
    if env.is_main:
        finetune, export, base = state["finetune"], state["export"], state["base_model"]
        hf_model = model.module if env.backend == "deepspeed" else model
        _write_model(
            tmp, hf_model, model_state, tokenizer, finetune=finetune, export=export, base_model=base
        )
        if env.backend != "deepspeed":  # DeepSpeed saved both in its own folder
            torch.save(optimizer_state, layout.optimizer)
            torch.save(scheduler.state_dict(), layout.scheduler)
        torch.save(old_logprobs, layout.old_logprobs)
        write_train_metrics(layout.train_metrics, metrics)
        # written last: a step checkpoint counts as complete once its state file exists
        layout.state_file.write_text(json.dumps({**state, "step": step}, indent=2))
    env.barrier()
    if env.is_main:
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        for old in sorted(CheckpointFolder(out).steps_dir.glob("step-*"))[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    env.barrier()
    return final


def load_old_logprobs(folder: Path) -> dict[str, torch.Tensor]:
    """π_old per episode id, as computed when the stage first started."""
    try:
        return torch.load(CheckpointFolder(folder).old_logprobs, weights_only=True)
    except (OSError, RuntimeError) as exc:
        raise ArtifactError(f"{folder}: unreadable old_logprobs.pt: {exc}") from exc


def load_checkpoint(
    folder: Path,
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    env: DistEnv,
) -> list[dict[str, Any]]:
    """Restore optimizer, scheduler and RNG (weights were loaded with the model).

    Returns the metrics rows up to the checkpoint's step; their count is the step
    to continue from.
    """
    from termrl.artifacts.metrics import read_train_metrics

    layout = CheckpointFolder(folder)
    try:
        if env.backend != "deepspeed":
            optimizer_state = torch.load(layout.optimizer, weights_only=False)
            scheduler.load_state_dict(torch.load(layout.scheduler, weights_only=False))
        rng_file = layout.rng(env.rank)
        rng = torch.load(rng_file if rng_file.is_file() else layout.rng(0), weights_only=False)
    except (OSError, ValueError, RuntimeError) as exc:
        raise ArtifactError(f"{folder}: unreadable checkpoint: {exc}") from exc
    if env.backend == "deepspeed":
        load_engine_state(model, layout.deepspeed)
    elif env.backend == "fsdp2":
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_optimizer_state_dict,
        )

        set_optimizer_state_dict(
            model, optimizer, optimizer_state, options=StateDictOptions(full_state_dict=True)
        )
    else:
        optimizer.load_state_dict(optimizer_state)
    _set_rng_state(rng)
    metrics = read_train_metrics(layout.train_metrics).to_pylist()
    return metrics


def publish_final(out: Path, checkpoint: Path, metrics: list[dict[str, Any]]) -> None:
    """Copy the last checkpoint to ``out``'s root so ``out`` itself loads as a model."""
    for item in checkpoint.iterdir():
        target = out / item.name
        if item.is_dir():
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(item, target)
        else:
            shutil.copy2(item, target)
    write_train_metrics(CheckpointFolder(out).train_metrics, metrics)
