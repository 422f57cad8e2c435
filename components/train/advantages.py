"""Everything the loss takes as given, computed once per stage or per step.

    rewards ──group_advantages──► A_e ──chunk_advantages(γ)──► A_k
    A_k ──positive_only | full_signal──► (A_k weighted, loss_mask)
    π_old, μ ──chunk_mismatch──► |Δ|_k ──(> threshold)──► mismatch mask
    loss_mask, chunk sizes ──token | chunk | sequence_normalisation──► w_k

The mode functions and the normalisation functions are variants with one
signature each, picked once at set-up (``MODE_FUNCTIONS``,
``NORMALISATION_FUNCTIONS``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from components.train.loss import chunk_mean

__all__ = [
    "MODE_FUNCTIONS",
    "NORMALISATION_FUNCTIONS",
    "chunk_advantages",
    "chunk_mismatch",
    "chunk_normalisation",
    "full_signal",
    "group_advantages",
    "positive_only",
    "sequence_normalisation",
    "token_normalisation",
]

_STD_EPS = 1e-6


def group_advantages(rewards: Tensor, group_index: Tensor, *, std_normalise: bool) -> Tensor:
    """Group-normalised outcome reward per episode.

        A_e = (r_e − mean_g) / (std_g + 1e-6)    (std_normalise)
        A_e =  r_e − mean_g                      (otherwise)

    ``std_g`` is the population std (divide by n), so a two-episode group with one
    success gets ±1. A group of one, or of equal rewards, gets 0: no signal.
    """
    num_groups = int(group_index.max()) + 1 if group_index.numel() else 0
    rewards = rewards.double()  # [E]
    counts = torch.bincount(group_index, minlength=num_groups).double()  # [G]
    mean = rewards.new_zeros(num_groups).index_add(0, group_index, rewards) / counts  # [G]
    centred = rewards - mean[group_index]  # [E]
    if not std_normalise:
        return centred.float()
    var = rewards.new_zeros(num_groups).index_add(0, group_index, centred**2) / counts  # [G]
    return (centred / (var.sqrt()[group_index] + _STD_EPS)).float()


def chunk_advantages(
    episode_advantages: Tensor, chunk_episode: Tensor, chunk_position: Tensor, *, gamma: float
) -> Tensor:
    """Discounted chunk-level return of the outcome advantage.

    The outcome arrives after the last chunk, so chunk c of an episode with C chunks
    gets A_k = γ^(C−1−c) · A_e (γ = 1: every chunk carries the episode's advantage).
    """
    num_episodes = episode_advantages.shape[0]
    num_chunks = torch.zeros(num_episodes, dtype=torch.long).index_add(
        0, chunk_episode, torch.ones_like(chunk_episode)
    )  # [E]
    steps_to_end = num_chunks[chunk_episode] - 1 - chunk_position  # [K]
    return episode_advantages[chunk_episode] * gamma ** steps_to_end.float()  # [K]


def positive_only(
    advantages: Tensor, loss_mask: Tensor, *, negative_weight: float
) -> tuple[Tensor, Tensor]:
    """Phase 1: keep only chunks with A > 0; they still go through ratio, clip and norm.

    ``negative_weight`` is accepted for a common signature and has no effect.
    Zero-advantage chunks are dropped too: they carry no signal and would only
    dilute the normalisation.
    """
    del negative_weight
    return advantages, loss_mask & (advantages > 0)


def full_signal(
    advantages: Tensor, loss_mask: Tensor, *, negative_weight: float
) -> tuple[Tensor, Tensor]:
    """Phase 2: keep positives and negatives; negatives scaled by the global weight.

    Scaling the advantage equals scaling the chunk's clipped term, because
    min(ρ·wA, clip(ρ)·wA) = w·min(ρA, clip(ρ)A) for w ≥ 0.
    """
    weighted = torch.where(advantages < 0, advantages * negative_weight, advantages)  # [K]
    return weighted, loss_mask & (advantages != 0)


def chunk_mismatch(
    old_logp: Tensor, mu_logp: Tensor, token_chunk: Tensor, num_chunks: int
) -> Tensor:
    """Mean |log π_old − log μ| over each chunk's tokens -> [K] (nats)."""
    return chunk_mean((old_logp - mu_logp).abs(), token_chunk, num_chunks)


def token_normalisation(chunk_tokens: Tensor, loss_mask: Tensor, chunk_episode: Tensor) -> Tensor:
    """w_k = n_k / Σ_kept n: the step's loss is a mean over kept tokens."""
    kept_tokens = (chunk_tokens * loss_mask).sum().clamp(min=1)
    return chunk_tokens.float() * loss_mask / kept_tokens  # [K]


def chunk_normalisation(chunk_tokens: Tensor, loss_mask: Tensor, chunk_episode: Tensor) -> Tensor:
    """w_k = 1 / #kept chunks: every kept chunk counts the same, whatever its length."""
    return loss_mask.float() / loss_mask.sum().clamp(min=1)  # [K]


def sequence_normalisation(
    chunk_tokens: Tensor, loss_mask: Tensor, chunk_episode: Tensor
) -> Tensor:
    """w_k = 1 / (#episodes with a kept chunk · #kept chunks of k's episode)."""
    num_episodes = int(chunk_episode.max()) + 1 if chunk_episode.numel() else 0
    per_episode = torch.zeros(num_episodes).index_add(0, chunk_episode, loss_mask.float())  # [E]
    episodes = (per_episode > 0).sum().clamp(min=1)
    return loss_mask.float() / (per_episode[chunk_episode].clamp(min=1) * episodes)  # [K]


ModeFn = Callable[..., tuple[Tensor, Tensor]]
NormalisationFn = Callable[[Tensor, Tensor, Tensor], Tensor]

MODE_FUNCTIONS: dict[str, ModeFn] = {"positive-only": positive_only, "full": full_signal}
NORMALISATION_FUNCTIONS: dict[str, NormalisationFn] = {
    "token": token_normalisation,
    "chunk": chunk_normalisation,
    "sequence": sequence_normalisation,
}
