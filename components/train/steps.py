"""The optimizer-step loop: plan, micro-batches, gradient accumulation, metrics, checkpoints.

A step's episodes are fixed by ``plan_steps`` (a seeded shuffle per epoch), so
a resumed run replays exactly the steps an uninterrupted run would have taken.
Within a step:

    step episodes ── normalisation weights over the whole step (all ranks, all micro-batches),
      │              one set for the RL chunks and one for the imitation chunks
      ├─ their shared prompt prefix: one forward without gradients, its cache reused below
      └─ rank r takes episodes r, r + world, ...; split into micro-batches
           └─ each micro-batch: log πθ -> rl_weight · L_RL + λ_IL · L_IL
                                -> backward (loss · world: FSDP averages)
      └─ clip grad norm -> optimizer step -> scheduler step -> one metrics row

Every rank runs the same number of micro-batches (a rank short of episodes
runs a zero-weight copy), because FSDP's collectives must line up.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from components.train.advantages import token_normalisation
from components.train.checkpoint import publish_final, save_checkpoint
from components.train.config import TrainConfig
from components.train.data import TrainEpisode
from components.train.loss import LossFn, imitation_loss
from components.train.modeling import DistEnv, MicroBatch, collate, token_logprobs
from components.train.prefix import SharedPrefix, attending, encode_shared_prefix
from termrl.artifacts.checkpoint import CheckpointFolder
from termrl.artifacts.metrics import write_train_metrics

__all__ = ["StepRunner", "plan_steps"]


def plan_steps(
    num_episodes: int, per_step: int, epochs: int, seed: int, max_steps: int | None
) -> list[list[int]]:
    """Episode indices of every optimizer step: a seeded shuffle per epoch, cut into steps."""
    steps: list[list[int]] = []
    for epoch in range(epochs):
        order = torch.randperm(
            num_episodes, generator=torch.Generator().manual_seed(seed * 1009 + epoch)
        )
        steps += [order[i : i + per_step].tolist() for i in range(0, num_episodes, per_step)]
    return steps[:max_steps] if max_steps is not None else steps


@dataclass
class StepRunner:
    """Holds the set-up pieces and runs the planned steps from ``start_step``."""

    config: TrainConfig
    env: DistEnv
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    tokenizer: Any
    pad_id: int
    bf16: bool
    episodes: list[TrainEpisode]
    steps: list[list[int]]
    start_step: int
    loss_fn: LossFn
    normalise: Any
    data_stats: dict[str, Any]
    metrics: list[dict[str, Any]]
    state: dict[str, Any]
    old_logprobs: dict[str, torch.Tensor]
    out: Path
    il_lambda: float
    """λ_IL of this stage (il_weight · il_decay ** iteration)."""
    share_prefix: bool
    """Run each step's shared prompt prefix once, without gradients."""
    last_saved: Path | None = field(default=None)
    lr: float = 0.0
    """The learning rate the latest step used."""

    @property
    def steps_per_epoch(self) -> int:
        per_step = self.config.micro_batch_size * self.config.grad_accum_steps * self.env.world
        return max(1, math.ceil(len(self.episodes) / per_step))

    def run(self) -> None:
        bar = tqdm(
            total=len(self.steps),
            initial=self.start_step,
            desc=f"train {self.config.mode}",
            disable=not (self.env.is_main and self.config.progress),
            file=sys.stderr,
        )
        for index in range(self.start_step, len(self.steps)):
            row = self.step(index)
            self.metrics.append(row)
            if self.env.is_main:
                write_train_metrics(CheckpointFolder(self.out).train_metrics, self.metrics)
            bar.update(1)
            bar.set_postfix(loss=f"{row['loss']:.4f}", clip=f"{row['ratio/clip_fraction']:.2f}")
            every = self.config.save_every_steps
            if every and (index + 1) % every == 0 and index + 1 < len(self.steps):
                self.save(index + 1)
        bar.close()

    def save(self, step: int) -> Path:
        self.last_saved = save_checkpoint(
            self.out,
            step=step,
            model=self.model,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            tokenizer=self.tokenizer,
            env=self.env,
            state=self.state,
            old_logprobs=self.old_logprobs,
            metrics=self.metrics,
            keep=self.config.keep_checkpoints,
        )
        return self.last_saved

    def finish(self) -> dict[str, Any]:
        """Save the final checkpoint and copy it to the output root."""
        final = self.save(len(self.metrics))
        if self.env.is_main:
            publish_final(self.out, final, self.metrics)
        self.env.barrier()
        return {
            "out": self.out,
            "steps": len(self.metrics),
            "resumed_at_step": self.start_step,
            "last": self.metrics[-1] if self.metrics else None,
        }

    def _micro_batches(self, step_episodes: list[TrainEpisode]) -> list[list[int]]:
        """Indices (into the step) this rank runs, in micro-batches; -1 is a zero-weight filler."""
        mine = list(range(self.env.rank, len(step_episodes), self.env.world))
        per_rank = math.ceil(len(step_episodes) / self.env.world)
        count = math.ceil(per_rank / self.config.micro_batch_size)
        mine += [-1] * (count * self.config.micro_batch_size - len(mine))
        size = self.config.micro_batch_size
        return [mine[i : i + size] for i in range(0, len(mine), size)]

    def step(self, index: int) -> dict[str, Any]:
        """One optimizer step; returns its metrics row."""
        began = time.perf_counter()
        env = self.env
        step_episodes = [self.episodes[i] for i in self.steps[index]]
        weights, il_weights = self._step_weights(step_episodes)
        micro_batches = self._micro_batches(step_episodes)
        # loss, clipped, kept, ratio sum, tokens, RL loss, imitation loss
        totals = torch.zeros(7, dtype=torch.float64)
        extremes = torch.tensor(
            [-math.inf, -math.inf], dtype=torch.float64
        )  # ratio max, −ratio min
        self.model.train()
        prefix = None
        if (
            self.share_prefix
        ):  # every rank holds the same step episodes, so ranks run this forward together
            prefix = encode_shared_prefix(self.model, step_episodes, env.device, bf16=self.bf16)
        with attending(
            self.model, prefix
        ):  # open over backward too: it recomputes checkpointed layers
            for j, members in enumerate(micro_batches):
                chosen = [step_episodes[i] if i >= 0 else step_episodes[0] for i in members]
                chosen_weights = [
                    weights[i] if i >= 0 else torch.zeros_like(weights[0]) for i in members
                ]
                chosen_il = [
                    il_weights[i] if i >= 0 else torch.zeros_like(il_weights[0]) for i in members
                ]
                last = j == len(micro_batches) - 1
                if env.backend == "fsdp2":
                    self.model.set_requires_gradient_sync(last)  # reduce-scatter once per step
                elif env.backend == "deepspeed":
                    self.model.set_gradient_accumulation_boundary(last)
                batch = collate(chosen, chosen_weights, self.pad_id, chosen_il)
                loss, rl_loss, il_loss, stats = self._loss(batch, prefix)
                if env.backend == "deepspeed":
                    self.model.backward(loss * env.world, scale_wrt_gas=False)
                else:
                    (loss * env.world).backward()
                kept = float(stats["kept"])
                real_tokens = sum(step_episodes[i].input_ids.numel() for i in members if i >= 0)
                totals += torch.tensor(
                    [
                        loss.item(),
                        float(stats["clip_fraction"]) * kept,
                        kept,
                        float(stats["ratio_mean"]) * kept,
                        real_tokens,
                        rl_loss.item(),
                        il_loss.item(),
                    ],
                    dtype=torch.float64,
                )
                if kept:
                    extremes = torch.maximum(
                        extremes,
                        torch.tensor(
                            [float(stats["ratio_max"]), -float(stats["ratio_min"])],
                            dtype=torch.float64,
                        ),
                    )
        grad_norm = self._clip_and_step()
        totals = env.all_sum(totals)
        extremes = env.all_max(extremes)
        elapsed = time.perf_counter() - began
        return self._row(index, step_episodes, totals, extremes, grad_norm, elapsed)

    def _loss(self, batch: MicroBatch, prefix: SharedPrefix | None):
        """L = rl_weight · L_RL + λ_IL · L_IL of one micro-batch -> (L, L_RL, L_IL, RL stats).

        The two terms see disjoint chunks (sampled vs demonstrated); either may be 0,
        as in a step of demonstrations only, and L still has a graph to backward through.
        """
        config = self.config
        logp = token_logprobs(
            self.model,
            batch,
            self.env.device,
            bf16=self.bf16,
            prefix=prefix,
            temperature=config.temperature,
        )
        device = logp.device
        token_chunk = batch.token_chunk.to(device)
        rl_loss, stats = self.loss_fn(
            logp,
            batch.old_logp.to(device),
            token_chunk,
            batch.advantages.to(device),
            batch.loss_mask.to(device),
            normalisation=batch.normalisation.to(device),
            eps_low=config.eps_low,
            eps_high=config.eps_high,
        )
        il_loss, _ = imitation_loss(
            logp,
            token_chunk,
            batch.returns.to(device),
            batch.il_mask.to(device),
            normalisation=batch.il_normalisation.to(device),
        )
        return config.rl_weight * rl_loss + self.il_lambda * il_loss, rl_loss, il_loss, stats

    def _step_weights(
        self, step_episodes: list[TrainEpisode]
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """RL and imitation normalisation weights over the whole step, split back per episode.

        RL uses the configured normalisation over its kept chunks; imitation is always a
        token mean over the step's imitation tokens (w_k = n_k / Σ n).
        """
        sizes = [e.num_chunks for e in step_episodes]
        chunk_tokens = torch.cat([e.chunk_tokens for e in step_episodes])
        chunk_episode = torch.cat(
            [torch.full((e.num_chunks,), i) for i, e in enumerate(step_episodes)]
        )
        weights = self.normalise(
            chunk_tokens, torch.cat([e.chunk_keep for e in step_episodes]), chunk_episode
        )
        imitate = torch.cat([e.chunk_imitate for e in step_episodes])
        il_weights = token_normalisation(chunk_tokens, imitate, chunk_episode)
        return list(weights.split(sizes)), list(il_weights.split(sizes))

    def _clip_and_step(self) -> float:
        self.lr = self.scheduler.get_last_lr()[0]
        if self.env.backend == "deepspeed":
            self.model.step()  # clips, steps optimizer and scheduler, zeroes gradients
            norm = self.model.get_global_grad_norm()
            return float(norm) if norm is not None else math.nan
        params = [p for p in self.model.parameters() if p.requires_grad]
        norm = torch.nn.utils.clip_grad_norm_(params, self.config.max_grad_norm)
        if hasattr(norm, "full_tensor"):
            norm = norm.full_tensor()
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(norm)

    def _row(self, index, step_episodes, totals, extremes, grad_norm, elapsed) -> dict[str, Any]:
        """The step's metrics row (names: ``termrl.artifacts.metrics``); ``data_stats`` joins it."""
        loss, clipped, kept, ratio_sum, tokens, rl_loss, il_loss = totals.tolist()
        advantages = torch.tensor([e.advantage for e in step_episodes if not e.is_expert])
        if not advantages.numel():
            advantages = torch.zeros(1)  # a step of demonstrations only
        rl_tokens = sum(int((e.chunk_tokens * e.chunk_keep).sum()) for e in step_episodes)
        il_tokens = sum(int((e.chunk_tokens * e.chunk_imitate).sum()) for e in step_episodes)
        loss_tokens = max(rl_tokens + il_tokens, 1)
        kept_div = max(kept, 1.0)
        row = {
            "step": index + 1,
            "mode": self.config.mode,
            "objective": self.config.objective,
            "epoch": index // self.steps_per_epoch,
            "loss": loss,  # rl_weight · loss/rl + λ_IL · loss/il
            "loss/rl": rl_loss,
            "loss/il": il_loss,
            "loss/il_lambda": self.il_lambda,
            "optim/lr": self.lr,
            "optim/grad_norm": grad_norm,
            "advantage/positive": int((advantages > 0).sum()),
            "advantage/negative": int((advantages < 0).sum()),
            "advantage/expert": sum(e.is_expert for e in step_episodes),
            "advantage/mean": float(advantages.mean()),
            "advantage/std": float(advantages.std(unbiased=False)),
            "ratio/mean": ratio_sum / kept_div,
            "ratio/max": extremes[0].item() if kept else 1.0,
            "ratio/min": -extremes[1].item() if kept else 1.0,
            "ratio/clip_fraction": clipped / kept_div,
            "tokens/rl_share": rl_tokens / loss_tokens,
            "tokens/il_share": il_tokens / loss_tokens,
            "tokens/per_sec": tokens / elapsed if elapsed > 0 else 0.0,
            "tokens/kept_units": int(kept),  # chunks (ipa) or tokens (token level) in the loss
            "time/step_sec": elapsed,
        }
        row.update(self.data_stats)
        return row
