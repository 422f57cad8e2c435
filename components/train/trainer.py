"""The train stage: trajectories + starting policy -> checkpoint + per-step metrics.

``train(config)`` reads top to bottom:

    validate -> set up (process group, model, data, π_old, masks, optimizer)
             -> resume if asked -> run the planned steps -> publish the final model

Data flow of one stage:

    episodes (data.py) ─ rollout exclusions, long failures, switched-off terms
      ├─ policy episodes: group advantages over rollout-valid ones ─ chunk returns (γ)
      │    └─ mode (positive-only | full) on sampled chunks ─ π_old (starting policy, once)
      │         └─ mismatch mask per chunk ─ drop episodes with no kept chunk
      └─ expert episodes (demonstrations): every chunk is an imitation chunk
           └─ steps over both: shuffled per epoch (seeded), split over ranks and micro-batches,
              RL and imitation normalisation weights computed over the whole step
"""

from __future__ import annotations

import dataclasses
import math
import random
from pathlib import Path
from typing import Any

import torch

from components.train.advantages import (
    MODE_FUNCTIONS,
    NORMALISATION_FUNCTIONS,
    chunk_advantages,
    chunk_mismatch,
    group_advantages,
)
from components.train.checkpoint import latest_checkpoint, load_checkpoint, load_old_logprobs
from components.train.config import TrainConfig
from components.train.data import TrainEpisode, exclusion_counts, load_episodes
from components.train.deepspeed_backend import deepspeed_config, wrap_deepspeed
from components.train.loss import ipa_loss, token_level_loss
from components.train.modeling import (
    DistEnv,
    collate,
    init_distributed,
    load_policy,
    shard_fsdp2,
    token_logprobs,
)
from components.train.prefix import attending, encode_shared_prefix
from components.train.steps import StepRunner, plan_steps
from termrl.artifacts.checkpoint import CheckpointFolder
from termrl.errors import ArtifactError, ConfigError
from termrl.llm.models import resolve_model_path

__all__ = [
    "TrainResult",
    "compute_old_logprobs",
    "flat_metrics",
    "prepare_episodes",
    "train",
]

LOSS_FUNCTIONS = {"ipa": ipa_loss, "token": token_level_loss}

TrainResult = dict[str, Any]


def train(config: TrainConfig) -> TrainResult:
    """Run the stage; returns the output folder, steps run and the final metrics row."""
    config.validate()
    if not config.model:
        config = dataclasses.replace(config, model=str(resolve_model_path(None)))
    derived = config.resolved()
    env = init_distributed(derived["distributed"])
    runner = set_up(config, derived, env)
    try:
        runner.run()
        result = runner.finish()
    finally:
        if env.world > 1 and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    return result


def flat_metrics(result: TrainResult) -> dict[str, float]:
    """The last step's numeric metrics as ``train/<name>``, with the step counts (for KFP)."""
    last = result["last"] or {}
    values = {
        f"train/{k}": float(v)
        for k, v in last.items()
        if isinstance(v, int | float) and v is not None
    }
    values["train/steps"] = float(result["steps"])
    values["train/resumed_at_step"] = float(result["resumed_at_step"])  # 0: a fresh start
    return values


def prepare_episodes(episodes: list[TrainEpisode], config: TrainConfig) -> dict[str, Any]:
    """Which chunks each term trains, and the RL advantages; returns dataset-level statistics.

    RL (``chunk_keep``) takes the chunks the policy sampled; a replayed chunk of an
    anchored episode never gets RL loss, since the policy did not choose it. Imitation
    (``chunk_imitate``) takes every chunk of a demonstration, and demonstrations stay
    out of the group advantages: their reward is a given, not an outcome of the policy.
    A policy episode's advantage is taken on its outcome reward plus rollout's behaviour
    shaping, so a penalised episode falls below its otherwise equal group mates.
    """
    for episode in episodes:
        if episode.exclusion is None and episode.is_expert and config.il_weight == 0:
            episode.exclusion = "imitation_off"
        elif episode.exclusion is None and not episode.is_expert and config.rl_weight == 0:
            episode.exclusion = "rl_off"
    valid = [e for e in episodes if e.rollout_valid and not e.is_expert]
    groups = {g: i for i, g in enumerate(sorted({e.group_id for e in valid}))}
    if valid:
        advantages = group_advantages(
            torch.tensor([e.shaped_reward for e in valid]),
            torch.tensor([groups[e.group_id] for e in valid]),
            std_normalise=config.std_normalise,
        )
        for episode, advantage in zip(valid, advantages.tolist(), strict=True):
            episode.advantage = advantage
    mode_fn = MODE_FUNCTIONS[config.mode]
    for episode in episodes:
        chunks = torch.arange(episode.num_chunks)
        raw = chunk_advantages(
            torch.tensor([episode.advantage]), torch.zeros_like(chunks), chunks, gamma=config.gamma
        )
        usable = episode.exclusion is None
        sampled = (
            torch.full((episode.num_chunks,), usable and not episode.is_expert)
            & ~episode.chunk_replayed
        )
        episode.chunk_advantages, episode.chunk_keep = mode_fn(
            raw, sampled, negative_weight=config.negative_weight
        )
        has_tokens = episode.chunk_tokens > 0
        episode.chunk_imitate = (
            torch.full((episode.num_chunks,), usable and episode.is_expert) & has_tokens
        )
    values = torch.tensor([e.advantage for e in valid]) if valid else torch.zeros(0)
    failed = [e.response_tokens for e in valid if not e.success]
    return {
        "data/episodes": len(episodes),
        "data/expert": sum(e.is_expert for e in episodes),
        "data/anchored": sum(not e.is_expert and bool(e.chunk_replayed.any()) for e in episodes),
        "data/shaped": sum(e.shaping != 0.0 for e in valid),
        "data/positive": int((values > 0).sum()),
        "data/negative": int((values < 0).sum()),
        "data/advantage_mean": float(values.mean()) if values.numel() else 0.0,
        "data/advantage_std": float(values.std(unbiased=False)) if values.numel() else 0.0,
        "data/failed_max_response_tokens": max(failed, default=0),
    }


@torch.no_grad()
def compute_old_logprobs(
    model: torch.nn.Module,
    episodes: list[TrainEpisode],
    env: DistEnv,
    *,
    micro_batch_size: int,
    bf16: bool,
    pad_id: int,
    share_prefix: bool,
    temperature: float,
) -> None:
    """π_old of every trained token, from the policy before any update of this stage.

    With ``share_prefix`` the prompt prefix common to all ``episodes`` runs once (the
    values are the full forward's; nothing here needs gradients anyway).
    """
    model.eval()
    prefix = encode_shared_prefix(model, episodes, env.device, bf16=bf16) if share_prefix else None
    with attending(model, prefix):
        for start in range(0, len(episodes), micro_batch_size):
            chunk = episodes[start : start + micro_batch_size]
            weights = [torch.zeros(e.num_chunks) for e in chunk]
            for e in chunk:
                e.old_logprobs = torch.zeros(e.response_tokens)
            batch = collate(chunk, weights, pad_id)
            logp = token_logprobs(
                model, batch, env.device, bf16=bf16, prefix=prefix, temperature=temperature
            ).cpu()
            offsets = [0]
            for e in chunk:
                offsets.append(offsets[-1] + e.response_tokens)
            for i, e in enumerate(chunk):
                e.old_logprobs = logp[offsets[i] : offsets[i + 1]].clone()
    model.train()


def apply_mismatch_mask(episodes: list[TrainEpisode], threshold: float) -> dict[str, float]:
    """Mask chunks whose mean |log π_old − log μ| exceeds ``threshold``; return statistics."""
    masked, values = 0, []
    for e in episodes:
        trained = e.token_chunk >= 0
        mu = e.mu_logprobs[trained]
        known = ~torch.isnan(mu)
        mismatch = chunk_mismatch(
            e.old_logprobs[known], mu[known], e.token_chunk[trained][known], e.num_chunks
        )
        has_mu = torch.bincount(e.token_chunk[trained][known], minlength=e.num_chunks) > 0
        e.chunk_mismatch = torch.where(has_mu, mismatch, torch.full_like(mismatch, math.nan))
        too_far = has_mu & (mismatch > threshold)
        masked += int((too_far & e.chunk_keep).sum())
        e.chunk_keep = e.chunk_keep & ~too_far
        values += mismatch[has_mu].tolist()
    return {
        "mask/mismatch": masked,
        "mismatch/mean": sum(values) / len(values) if values else 0.0,
        "mismatch/max": max(values, default=0.0),
    }


def _exclusion_stats(
    episodes: list[TrainEpisode], candidates: list[TrainEpisode], trainable: list[TrainEpisode]
) -> dict[str, int]:
    """Episode counts by exclusion reason, as ``mask/<reason>``; the contract's reasons are
    always there (0 when none)."""
    counts = {"long_failure": 0, "placeholder": 0, **exclusion_counts(episodes)}
    counts["no_kept_chunk"] = len(candidates) - len(trainable)
    return {f"mask/{reason}": n for reason, n in sorted(counts.items())}


def _schedule(config: TrainConfig, total_steps: int):
    def factor(step: int) -> float:
        if step < config.warmup_steps:
            return (step + 1) / (config.warmup_steps + 1)
        if config.schedule == "constant":
            return 1.0
        progress = (step - config.warmup_steps) / max(1, total_steps - config.warmup_steps)
        if config.schedule == "linear":
            return max(0.0, 1.0 - progress)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return factor


def set_up(config: TrainConfig, derived: dict[str, Any], env: DistEnv) -> StepRunner:
    """Model, data, masks, optimizer and scheduler; restores a checkpoint when resuming."""
    from transformers import AutoTokenizer

    config = config.with_sampling_temperature()  # the rollout's, recorded in the trajectories
    out = Path(config.out)
    resume_from = _checkpoint_to_resume(config, out)
    torch.manual_seed(config.seed)
    random.seed(config.seed)
    episodes = _load_episodes(config)
    data_stats = prepare_episodes(episodes, config)
    bf16 = derived["dtype"] == "bfloat16"
    tokenizer = AutoTokenizer.from_pretrained(config.model)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    model = _load_model(config, env, resume_from, bf16=bf16)
    candidates = [e for e in episodes if e.exclusion is None and bool(e.chunk_keep.any())]
    experts = [e for e in episodes if e.exclusion is None and bool(e.chunk_imitate.any())]
    _set_old_logprobs(
        model, candidates, experts, env, config, resume_from=resume_from, bf16=bf16, pad_id=pad_id
    )
    data_stats.update(apply_mismatch_mask(candidates, config.mismatch_threshold))
    trainable_episodes = [e for e in episodes if bool(e.chunk_keep.any() or e.chunk_imitate.any())]
    data_stats.update(_exclusion_stats(episodes, candidates + experts, trainable_episodes))
    per_step = config.micro_batch_size * config.grad_accum_steps * env.world
    steps = plan_steps(
        len(trainable_episodes), per_step, config.epochs, config.seed, config.max_steps
    )
    model, optimizer, scheduler = _optimizer_and_scheduler(
        model, config, derived, env, total_steps=len(steps), bf16=bf16
    )
    metrics: list[dict[str, Any]] = []
    if resume_from is not None:
        # last, so the restored RNG state is not disturbed by set-up
        metrics = load_checkpoint(
            resume_from, model=model, optimizer=optimizer, scheduler=scheduler, env=env
        )
    return StepRunner(
        config=config,
        env=env,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        tokenizer=tokenizer,
        pad_id=pad_id,
        bf16=bf16,
        episodes=trainable_episodes,
        steps=steps,
        start_step=len(metrics),
        loss_fn=LOSS_FUNCTIONS[config.objective],
        normalise=NORMALISATION_FUNCTIONS[config.normalisation],
        il_lambda=derived["il_lambda"],
        share_prefix=config.share_prompt_prefix,
        data_stats=data_stats,
        metrics=metrics,
        state=_run_state(config),
        old_logprobs={e.episode_id: e.old_logprobs for e in candidates},
        out=out,
    )


def _checkpoint_to_resume(config: TrainConfig, out: Path) -> Path | None:
    """The newest checkpoint in ``out`` with ``resume``; without it, ``out`` must hold none."""
    if config.resume:
        return latest_checkpoint(out)
    if latest_checkpoint(out) is not None:
        raise ConfigError(
            f"{out} already holds checkpoints; pass --resume or choose an empty folder"
        )
    return None


def _load_episodes(config: TrainConfig) -> list[TrainEpisode]:
    """Trajectories and demonstrations, cut at the model's context unless a limit is set."""
    from transformers import AutoConfig

    model_config = AutoConfig.from_pretrained(config.model)
    limit = config.max_episode_tokens or getattr(model_config, "max_position_embeddings", 1 << 30)
    return load_episodes(
        config.trajectories,
        max_episode_tokens=limit,
        demonstrations=config.demonstrations,
    )


def _load_model(
    config: TrainConfig, env: DistEnv, resume_from: Path | None, *, bf16: bool
) -> torch.nn.Module:
    """The policy on this rank's device (from the checkpoint when resuming), sharded for FSDP2."""
    model = load_policy(
        config.model,
        finetune=config.finetune,
        lora_rank=config.lora_rank,
        lora_alpha=config.lora_alpha,
        lora_target_modules=config.lora_target_modules,
        adapter_dir=CheckpointFolder(resume_from).adapter
        if resume_from and config.finetune == "lora"
        else None,
        weights_dir=resume_from,
    ).to(env.device)
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable()
        if config.finetune == "lora":
            model.enable_input_require_grads()  # frozen embeddings would cut the recomputed graph
    if env.backend == "fsdp2":
        model = shard_fsdp2(model, bf16=bf16)
    return model


def _set_old_logprobs(
    model: torch.nn.Module,
    candidates: list[TrainEpisode],
    experts: list[TrainEpisode],
    env: DistEnv,
    config: TrainConfig,
    *,
    resume_from: Path | None,
    bf16: bool,
    pad_id: int,
) -> None:
    """π_old of the RL candidates: from the starting policy, or the interrupted run's when
    resuming. Demonstrations get zeros: the imitation loss has no ratio."""
    if resume_from is None:
        # every rank computes all of them, so FSDP2's collectives line up
        compute_old_logprobs(
            model,
            candidates,
            env,
            micro_batch_size=config.micro_batch_size,
            bf16=bf16,
            pad_id=pad_id,
            share_prefix=config.share_prompt_prefix,
            temperature=config.temperature,
        )
    else:
        _restore_old_logprobs(candidates, resume_from)
    for e in experts:
        e.old_logprobs = torch.zeros(e.response_tokens)


def _restore_old_logprobs(candidates: list[TrainEpisode], resume_from: Path) -> None:
    """π_old as the interrupted run computed it; the trajectories must be the same."""
    saved = load_old_logprobs(resume_from)
    missing = [e.episode_id for e in candidates if e.episode_id not in saved]
    if missing:
        raise ArtifactError(
            f"{resume_from} was trained on other trajectories: no π_old for {len(missing)} episode(s), "
            f"e.g. {missing[0]}"
        )
    for e in candidates:
        e.old_logprobs = saved[e.episode_id]


def _optimizer_and_scheduler(
    model: torch.nn.Module,
    config: TrainConfig,
    derived: dict[str, Any],
    env: DistEnv,
    *,
    total_steps: int,
    bf16: bool,
) -> tuple[torch.nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """AdamW over the trainable parameters and the learning-rate schedule; DeepSpeed wraps
    the model (the returned one) when it is the backend."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(
        trainable,
        lr=derived["learning_rate"],
        betas=tuple(config.adam_betas),
        weight_decay=config.weight_decay,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _schedule(config, total_steps))
    if env.backend == "deepspeed":
        ds_config = deepspeed_config(
            micro_batch_size=config.micro_batch_size,
            grad_accum_steps=config.grad_accum_steps,
            world=env.world,
            zero_stage=config.deepspeed_zero_stage,
            max_grad_norm=config.max_grad_norm,
            bf16=bf16,
            overrides_file=config.deepspeed_config,
        )
        model = wrap_deepspeed(model, optimizer, scheduler, ds_config)
    return model, optimizer, scheduler


def _run_state(config: TrainConfig) -> dict[str, Any]:
    """What the checkpoints record about this run (read by health and by resume)."""
    return {
        "finetune": config.finetune,
        "export": config.export,
        "base_model": str(Path(config.model).resolve()),
        "config": config.to_dict(),
    }
