"""The train stage's one configuration: every knob, its default and why.

``TrainConfig`` is filled from defaults, then a YAML/JSON file, then command
line overrides; ``validate()`` reports every problem at once. Values derived
from other values (the learning rate when none is given, the dtype, the
distributed back-end) are computed in one place, ``resolved()``.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from termrl.errors import ConfigError
from termrl.settings import build_config, read_settings_file

__all__ = [
    "DISTRIBUTED",
    "DTYPES",
    "EXPORTS",
    "FINETUNES",
    "MODES",
    "NORMALISATIONS",
    "OBJECTIVES",
    "SCHEDULES",
    "TrainConfig",
    "load_config",
]

MODES = ("positive-only", "full")
OBJECTIVES = ("ipa", "token")
NORMALISATIONS = ("token", "chunk", "sequence")
FINETUNES = ("lora", "full")
EXPORTS = ("merged", "adapter")
SCHEDULES = ("constant", "linear", "cosine")
DTYPES = ("auto", "float32", "bfloat16")
DISTRIBUTED = ("auto", "none", "fsdp2", "deepspeed")


@dataclass
class TrainConfig:
    """Everything the train stage needs. Paths first, then the objective, then optimisation."""

    trajectories: str = ""
    """The trajectories artifact (Parquet, one row per chunk) to train on."""
    demonstrations: str | None = None
    """Optional second trajectories artifact of demonstrations (``source: expert`` episodes,
    as the demonstrate stage writes them), trained with the imitation term alongside
    ``trajectories``. Episode ids must not repeat across the two."""
    model: str = ""
    """The starting policy: a Hugging Face folder; '' is the embedded default policy (SmolLM2-135M,
    prepared on first use, as rollout and eval default to). π_old is its log-probabilities."""
    out: str = ""
    """Output checkpoint folder: the final HF model at its root, step checkpoints under
    ``checkpoints/``, per-step metrics in ``train_metrics.parquet``."""
    mode: str = "positive-only"
    """``positive-only`` (phase 1: negative-advantage episodes get weight 0, the seed's
    conservative start) or ``full`` (phase 2: negatives too, scaled by ``negative_weight``)."""
    resume: bool = False
    """Continue from the latest complete checkpoint under ``out`` instead of starting over."""

    # --- objective -----------------------------------------------------------------------
    objective: str = "ipa"
    """``ipa``: importance ratio and clipping per interaction chunk (the seed's IPA).
    ``token``: token-level GRPO, kept as the baseline for comparison."""
    normalisation: str = "token"
    """How chunk losses are averaged over a step: ``token`` (each chunk weighs its token
    count; GRPO's token mean), ``chunk`` (every kept chunk equal) or ``sequence`` (every
    episode equal, its chunks sharing its weight)."""
    eps_low: float = 0.2
    """Lower clip: a chunk ratio below 1 − eps_low stops pushing a negative chunk down.
    PPO's 0.2; a chunk ratio is a geometric mean of token ratios, so it clips less often."""
    eps_high: float = 0.2
    """Upper clip: a chunk ratio above 1 + eps_high stops pushing a positive chunk up."""
    std_normalise: bool = True
    """Divide group-centred rewards by the group's std. A switch because the seed saw
    removing the std crash training on one data set and stabilise it on another."""
    gamma: float = 1.0
    """Discount over chunks: chunk c of C gets γ^(C−1−c) of the episode advantage. 1.0 is
    the plain outcome reward; lower values credit the last interactions more."""
    negative_weight: float = 1.0
    """Full mode: global weight on negative-advantage chunks. The seed lowered it when
    negatives started to dominate the update; 1.0 is unweighted RL."""
    mismatch_threshold: float = 0.5
    """Mask a whole chunk when mean |log π_old − log μ| over its tokens exceeds this (nats).
    Well above the measured llama.cpp-Q4 vs fp32 gap (mean 0.07), so quantisation noise
    passes while a chunk whose average token probability ratio leaves ~[0.6, 1.65] goes.
    Chunks without μ (an engine that reports no log-probabilities) are not checked."""
    max_episode_tokens: int | None = None
    """Mask episodes whose full token stream is longer (reason ``too_long``); ``None``
    means the model's ``max_position_embeddings``."""

    # --- imitation: L = rl_weight · L_RL(sampled chunks) + λ_IL · L_IL(expert chunks) --------
    rl_weight: float = 1.0
    """Weight of the RL term (``objective``) on the chunks the policy sampled. 0 turns RL off:
    policy episodes are excluded (``mask/rl_off``) and the stage only imitates."""
    il_weight: float = 1.0
    """λ_IL at curriculum iteration 0: the weight of the imitation term, the return-weighted
    log-likelihood of demonstrations (``source: expert`` episodes). The schedule is
    λ_IL = il_weight · il_decay ** iteration. 0 turns imitation off: expert episodes are
    excluded (``mask/imitation_off``) and the stage is pure RL."""
    il_decay: float = 0.5
    """Factor λ_IL shrinks by per curriculum iteration (in (0, 1]): demonstrations carry a
    policy that earns no reward yet, then RL on its own successes takes over (the IPA
    report's imitation + RL mix). 1 keeps λ_IL constant."""
    iteration: int = 0
    """The curriculum iteration this stage trains in (0-based; the pipeline passes it). Only
    λ_IL's schedule reads it."""

    temperature: float | None = None
    """The temperature the rollout sampled at: log πθ is taken at it (softmax of logits / T),
    as μ was; the imitation term is the expert tokens' log-likelihood at the same temperature.
    None reads it from the trajectories, which record it (``sampling_temperature``); set it only
    for a file older than trajectories 1.3 (one that records it must agree)."""

    # --- model and optimisation ----------------------------------------------------------
    finetune: str = "lora"
    """``lora`` (peft adapters; less memory, not faster on CPU) or ``full``."""
    lora_rank: int = 16
    """LoRA rank: 16 is a common middle ground for RL fine-tuning of small models."""
    lora_alpha: int = 32
    """LoRA scaling numerator (scale = alpha / rank = 2)."""
    lora_target_modules: list[str] | str = "all-linear"
    """Which linear layers get adapters; peft's ``all-linear`` covers attention and MLP."""
    export: str = "merged"
    """The final model for the next stage: ``merged`` weights (loads anywhere as is) or the
    ``adapter`` plus a reference to its base model. Full fine-tuning is always merged."""
    learning_rate: float | None = None
    """Peak learning rate; ``None`` picks 1e-5 for LoRA and 1e-6 for full fine-tuning (the
    usual RL-from-instruct magnitudes: adapters need roughly ten times more)."""
    weight_decay: float = 0.0
    """AdamW weight decay; 0 because RL updates are small corrections to a good model."""
    adam_betas: tuple[float, float] = (0.9, 0.999)
    """AdamW betas (the PyTorch defaults)."""
    max_grad_norm: float = 1.0
    """Clip the global gradient norm; the usual guard against one bad batch."""
    warmup_steps: int = 0
    """Linear warm-up steps. 0 by default because each stage trains a few steps on one
    rollout batch; a stage-local warm-up would repeat at every curriculum round."""
    schedule: str = "constant"
    """After warm-up: ``constant``, ``linear`` decay to 0 or ``cosine`` decay to 0."""
    micro_batch_size: int = 1
    """Episodes per forward pass (per process). Episodes are long; 1 avoids padding."""
    grad_accum_steps: int = 4
    """Micro-batches per optimizer step (per process)."""
    epochs: int = 1
    """Passes over the trajectories. π_old stays the starting policy, so later passes are
    PPO-style off-policy updates kept in check by the clipping."""
    max_steps: int | None = None
    """Stop after this many optimizer steps (``None``: run all epochs)."""
    seed: int = 0
    """Seeds the data order (per epoch) and torch's RNG."""
    dtype: str = "auto"
    """``auto``: bf16 autocast on a GPU that supports it, fp32 otherwise (bf16 matmuls are
    ~40x slower on this kind of CPU)."""
    gradient_checkpointing: bool = False
    """Recompute activations in backward to fit long episodes in memory."""
    share_prompt_prefix: bool = True
    """Encode the token prefix every episode of a step starts with (the system prompt) once
    per step, without gradients, and reuse its key/value cache for every micro-batch. No
    loss falls on prompt tokens, so only the gradient through the prompt's encoding is lost;
    a SmolLM2-135M step went from ~40 s to ~5 s. Used when ≥ 16 tokens are shared and the
    model attends to a plain key/value cache. ``false``: always the full forward."""
    distributed: str = "auto"
    """``auto``: FSDP2 when launched by torchrun with more than one process, else ``none``.
    ``deepspeed``: ZeRO through DeepSpeed (GPU clusters; needs the ``deepspeed`` extra)."""
    deepspeed_zero_stage: int = 2
    """ZeRO stage for ``distributed: deepspeed`` (1, 2 or 3)."""
    deepspeed_config: str | None = None
    """Optional DeepSpeed JSON whose keys override the generated configuration."""
    save_every_steps: int = 10
    """Write a resumable checkpoint every N optimizer steps (and always at the end)."""
    keep_checkpoints: int = 2
    """How many step checkpoints to keep; older ones are deleted after a newer one lands."""
    progress: bool = True
    """Show a progress bar (rank 0 only)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Free-form notes copied into the checkpoint's training state (e.g. the pipeline run)."""

    # -------------------------------------------------------------------------------------
    def validate(self) -> None:
        """Raise ``ConfigError`` listing every problem found."""
        problems = [
            *self._choice_problems(),
            *self._input_problems(),
            *self._objective_problems(),
            *self._optimisation_problems(),
        ]
        if problems:
            raise ConfigError(problems)

    def _choice_problems(self) -> list[str]:
        """Settings that name one of a fixed set of options."""
        problems = []
        for name, options in [
            ("mode", MODES),
            ("objective", OBJECTIVES),
            ("normalisation", NORMALISATIONS),
            ("finetune", FINETUNES),
            ("export", EXPORTS),
            ("schedule", SCHEDULES),
            ("dtype", DTYPES),
            ("distributed", DISTRIBUTED),
        ]:
            if getattr(self, name) not in options:
                problems.append(
                    f"{name}={getattr(self, name)!r} must be one of {', '.join(options)}"
                )
        return problems

    def _input_problems(self) -> list[str]:
        """The input artifacts and the output folder."""
        problems = []
        for name in ("trajectories", "out"):
            if not getattr(self, name):
                problems.append(f"{name} is required")
        if self.trajectories and not Path(self.trajectories).is_file():
            problems.append(f"trajectories file {self.trajectories} does not exist")
        if self.demonstrations and not Path(self.demonstrations).is_file():
            problems.append(f"demonstrations file {self.demonstrations} does not exist")
        if self.model and not (Path(self.model) / "config.json").is_file():
            problems.append(f"model {self.model} is not a Hugging Face folder (no config.json)")
        return problems

    def _objective_problems(self) -> list[str]:
        """The loss: clipping, returns, term weights, the mismatch mask."""
        problems = []
        if not 0 <= self.eps_low < 1:
            problems.append(f"eps_low={self.eps_low} must be in [0, 1)")
        if self.eps_high < 0:
            problems.append(f"eps_high={self.eps_high} must be >= 0")
        if not 0 < self.gamma <= 1:
            problems.append(f"gamma={self.gamma} must be in (0, 1]")
        if self.negative_weight < 0:
            problems.append(f"negative_weight={self.negative_weight} must be >= 0")
        for name in ("rl_weight", "il_weight"):
            if getattr(self, name) < 0:
                problems.append(f"{name}={getattr(self, name)} must be >= 0")
        if self.rl_weight == 0 and self.il_weight == 0:
            problems.append("rl_weight and il_weight are both 0: nothing would be trained")
        if not 0 < self.il_decay <= 1:
            problems.append(f"il_decay={self.il_decay} must be in (0, 1]")
        if self.iteration < 0:
            problems.append(f"iteration={self.iteration} must be >= 0")
        if self.temperature is not None and self.temperature <= 0:
            problems.append(
                f"temperature={self.temperature} must be > 0 (the rollout's sampling temperature)"
            )
        if self.mismatch_threshold <= 0:
            problems.append(f"mismatch_threshold={self.mismatch_threshold} must be > 0")
        return problems

    def _optimisation_problems(self) -> list[str]:
        """Sizes, steps, the optimizer and DeepSpeed."""
        problems = []
        positive_ints = [
            "lora_rank",
            "lora_alpha",
            "micro_batch_size",
            "grad_accum_steps",
            "epochs",
            "keep_checkpoints",
        ]
        for name in positive_ints:
            if getattr(self, name) < 1:
                problems.append(f"{name}={getattr(self, name)} must be >= 1")
        for name in ("max_episode_tokens", "max_steps"):
            value = getattr(self, name)
            if value is not None and value < 1:
                problems.append(f"{name}={value} must be >= 1 (or null)")
        if self.warmup_steps < 0 or self.save_every_steps < 0:
            problems.append("warmup_steps and save_every_steps must be >= 0")
        if self.learning_rate is not None and self.learning_rate <= 0:
            problems.append(f"learning_rate={self.learning_rate} must be > 0")
        if self.max_grad_norm <= 0:
            problems.append(f"max_grad_norm={self.max_grad_norm} must be > 0")
        if self.deepspeed_zero_stage not in (1, 2, 3):
            problems.append(f"deepspeed_zero_stage={self.deepspeed_zero_stage} must be 1, 2 or 3")
        if self.deepspeed_config and not Path(self.deepspeed_config).is_file():
            problems.append(f"deepspeed_config {self.deepspeed_config} does not exist")
        if len(self.adam_betas) != 2 or not all(0 <= b < 1 for b in self.adam_betas):
            problems.append(f"adam_betas={self.adam_betas} must be two numbers in [0, 1)")
        return problems

    def with_sampling_temperature(self) -> TrainConfig:
        """This config with ``temperature`` read from the trajectories (see the field)."""
        from termrl.artifacts.trajectories import sampling_temperature

        return dataclasses.replace(
            self, temperature=sampling_temperature(self.trajectories, self.temperature)
        )

    def resolved(self) -> dict[str, Any]:
        """Derived values, computed once: learning rate, dtype name, distributed back-end, λ_IL."""
        import torch

        lr = self.learning_rate
        if lr is None:
            lr = 1e-5 if self.finetune == "lora" else 1e-6
        dtype = self.dtype
        if dtype == "auto":
            gpu_bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
            dtype = "bfloat16" if gpu_bf16 else "float32"
        distributed = self.distributed
        if distributed == "auto":
            distributed = "fsdp2" if int(os.environ.get("WORLD_SIZE", "1")) > 1 else "none"
        il_lambda = self.il_weight * self.il_decay**self.iteration
        return {
            "learning_rate": lr,
            "dtype": dtype,
            "distributed": distributed,
            "il_lambda": il_lambda,
        }

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["adam_betas"] = list(self.adam_betas)
        return data


def load_config(path: str | os.PathLike | None = None, **overrides: Any) -> TrainConfig:
    """Defaults, then the YAML/JSON file at ``path``, then ``overrides`` (``None`` skipped).

    Unknown keys are errors (all reported together): a misspelt knob must not be
    silently ignored.
    """
    given = {key: value for key, value in overrides.items() if value is not None}
    return build_config(TrainConfig, read_settings_file(TrainConfig, path), given)
