"""The policy model: loading (full or LoRA), sharding, and per-token log-probabilities.

Where the model comes from:

    fresh run, full     AutoModelForCausalLM(model)                  all weights train
    fresh run, LoRA     AutoModelForCausalLM(model) + new adapter    only the adapter trains
    resume, full        AutoModelForCausalLM(checkpoint)
    resume, LoRA        AutoModelForCausalLM(model) + adapter from checkpoint

Under torchrun the model is sharded with FSDP2 (``fully_shard`` on every
decoder layer, then on the root), which runs on CPU with gloo as well.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch import Tensor, nn

from termrl.errors import ModelError

if TYPE_CHECKING:
    from components.train.prefix import SharedPrefix

__all__ = [
    "DistEnv",
    "MicroBatch",
    "collate",
    "init_distributed",
    "load_policy",
    "shard_fsdp2",
    "token_logprobs",
]


@dataclass(frozen=True)
class DistEnv:
    """Where this process sits in a (possibly one-process) run."""

    rank: int
    world: int
    device: torch.device
    backend: str  # none | fsdp2 | deepspeed

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def all_sum(self, values: Tensor) -> Tensor:
        """Sum a small CPU tensor over processes."""
        if self.world == 1:
            return values
        moved = values.to(self.device)
        dist.all_reduce(moved, op=dist.ReduceOp.SUM)
        return moved.cpu()

    def all_max(self, values: Tensor) -> Tensor:
        if self.world == 1:
            return values
        moved = values.to(self.device)
        dist.all_reduce(moved, op=dist.ReduceOp.MAX)
        return moved.cpu()


def init_distributed(backend: str) -> DistEnv:
    """Join the process group torchrun set up (if any) and pick this process's device."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available()
    device = torch.device(f"cuda:{local_rank}") if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if backend == "deepspeed":
        # DeepSpeed wants a process group even for one process
        for key, value in (
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "29511"),
            ("RANK", "0"),
            ("LOCAL_RANK", "0"),
            ("WORLD_SIZE", "1"),
        ):
            os.environ.setdefault(key, value)
    if (world > 1 or backend == "deepspeed") and not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo")
    if world == 1 and backend == "fsdp2":
        backend = "none"  # one process: nothing to shard
    return DistEnv(rank=rank, world=world, device=device, backend=backend)


def load_policy(
    model_dir: str,
    *,
    finetune: str,
    lora_rank: int,
    lora_alpha: int,
    lora_target_modules: list[str] | str,
    adapter_dir: Path | None = None,
    weights_dir: Path | None = None,
) -> nn.Module:
    """The policy in fp32 (autocast provides bf16 where used), ready to train."""
    from transformers import AutoModelForCausalLM

    source = weights_dir if (finetune == "full" and weights_dir is not None) else model_dir
    try:
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot load the policy from {source}: {exc}") from exc
    model.config.use_cache = False
    if finetune == "full":
        return model
    from peft import LoraConfig, PeftModel, get_peft_model

    if adapter_dir is not None:
        return PeftModel.from_pretrained(model, adapter_dir, is_trainable=True)
    lora = LoraConfig(
        r=lora_rank,
        lora_alpha=lora_alpha,
        lora_dropout=0.0,  # dropout would make the first ratio ≠ 1 and resume inexact
        target_modules=lora_target_modules,
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, lora)


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The transformer blocks, found by the class names transformers marks as unsplittable."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    names = set(getattr(base, "_no_split_modules", None) or [])
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise ModelError(f"cannot find decoder layers in {type(base).__name__} to shard")
    return layers


def shard_fsdp2(model: nn.Module, *, bf16: bool) -> nn.Module:
    """FSDP2: shard every decoder layer, then the root (embeddings, norm, head)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(
        param_dtype=torch.bfloat16 if bf16 else None, reduce_dtype=torch.float32 if bf16 else None
    )
    for layer in decoder_layers(model):
        fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    return model


@dataclass
class MicroBatch:
    """Padded episodes plus the flattened per-token and per-chunk tensors the loss takes."""

    input_ids: Tensor  # [B, T]
    attention_mask: Tensor  # [B, T]
    rows: Tensor  # [N] batch row of each trained token
    cols: Tensor  # [N] position of each trained token
    token_chunk: Tensor  # [N] chunk index local to this micro-batch
    old_logp: Tensor  # [N]
    advantages: Tensor  # [K]
    loss_mask: Tensor  # [K] RL chunks
    normalisation: Tensor  # [K] RL weights
    returns: Tensor  # [K] the episode's reward, R_k of the imitation loss
    il_mask: Tensor  # [K] imitation chunks
    il_normalisation: Tensor  # [K] imitation weights
    tokens: int  # real (unpadded) tokens in the batch


def collate(
    episodes: list, weights: list[Tensor], pad_id: int, il_weights: list[Tensor] | None = None
) -> MicroBatch:
    """Pad ``episodes`` (right) and flatten their trained tokens in row-major order."""
    length = max(e.input_ids.numel() for e in episodes)
    batch = len(episodes)
    input_ids = torch.full((batch, length), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((batch, length), dtype=torch.long)
    rows, cols, chunks, old, adv, keep, returns, imitate = [], [], [], [], [], [], [], []
    offset = 0
    for b, episode in enumerate(episodes):
        n = episode.input_ids.numel()
        input_ids[b, :n] = episode.input_ids
        attention_mask[b, :n] = 1
        positions = (episode.token_chunk >= 0).nonzero().squeeze(1)
        rows.append(torch.full_like(positions, b))
        cols.append(positions)
        chunks.append(episode.token_chunk[positions] + offset)
        old.append(episode.old_logprobs)
        adv.append(episode.chunk_advantages)
        keep.append(episode.chunk_keep)
        returns.append(torch.full((episode.num_chunks,), float(episode.reward)))
        imitate.append(episode.chunk_imitate)
        offset += episode.num_chunks
    if il_weights is None:
        il_weights = [torch.zeros(e.num_chunks) for e in episodes]
    return MicroBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        rows=torch.cat(rows),
        cols=torch.cat(cols),
        token_chunk=torch.cat(chunks),
        old_logp=torch.cat(old) if old else torch.zeros(0),
        advantages=torch.cat(adv),
        loss_mask=torch.cat(keep),
        normalisation=torch.cat(weights),
        returns=torch.cat(returns),
        il_mask=torch.cat(imitate),
        il_normalisation=torch.cat(il_weights),
        tokens=int(attention_mask.sum()),
    )


def token_logprobs(
    model: nn.Module,
    batch: MicroBatch,
    device: torch.device,
    *,
    bf16: bool,
    prefix: SharedPrefix | None = None,
    temperature: float = 1.0,
) -> Tensor:
    """log πθ of every trained token -> [N] (fp32), computing logits only where needed.

    πθ is taken at ``temperature`` (softmax of logits / T), the distribution the rollout
    sampled from, so that the ratio πθ/μ compares like with like.

    The logit at position p predicts token p + 1, so the head runs only on the
    positions just before trained tokens (``logits_to_keep`` as an index tensor):
    the [B, T, V] logits of a long episode never exist. With a shared ``prefix``
    (``components.train.prefix``; every row starts with it) the model runs only
    positions L … T−1 and attends to the prefix's cached keys and values; under
    gradient checkpointing the caller holds ``attending(model, prefix)`` open.
    """
    needed = torch.unique(batch.cols - 1)  # [P] sorted
    start = prefix.length if prefix is not None else 0
    if prefix is not None and not torch.equal(
        batch.input_ids[:, :start], prefix.ids.expand(batch.input_ids.shape[0], -1)
    ):
        raise ValueError("every row of the micro-batch must start with the shared prefix")
    autocast = (
        torch.autocast(device_type=device.type, dtype=torch.bfloat16)
        if bf16
        else contextlib.nullcontext()
    )
    past = prefix.cache_for(model, batch.input_ids.shape[0]) if prefix is not None else None
    with autocast:
        logits = model(
            input_ids=batch.input_ids[:, start:].to(device),
            attention_mask=batch.attention_mask.to(device),  # [B, T]: the prefix's columns too
            logits_to_keep=(needed - start).to(device),
            past_key_values=past,
            use_cache=False,
        ).logits  # [B, P, V]
    column = torch.searchsorted(needed, batch.cols - 1)  # [N]
    flat = (batch.rows * needed.numel() + column).to(device)  # [N] into [B·P]
    # index_select on flattened views: x[rows, cols] advanced indexing is far slower on CPU
    selected = logits.reshape(-1, logits.shape[-1]).index_select(0, flat).float()  # [N, V]
    if temperature != 1.0:
        selected = selected / temperature
    targets = batch.input_ids.reshape(-1).index_select(
        0, batch.rows * batch.input_ids.shape[1] + batch.cols
    )
    targets = targets.to(device)  # [N]
    picked = selected.gather(1, targets.unsqueeze(1)).squeeze(1)  # [N]
    return picked - torch.logsumexp(selected, dim=-1)  # [N]
