"""The IPA objective and its token-level GRPO baseline, as pure functions.

The unit of IPA (the seed's Interaction-Perceptive Agentic Policy Optimization)
is the interaction chunk: the tokens of one assistant turn that ends in an
environment interaction. Everything arrives flattened over the response tokens
of a micro-batch, with ``token_chunk`` naming each token's chunk:

    logp, old_logp, token_chunk            [N]   one entry per response token
    advantages, loss_mask, normalisation   [K]   one entry per chunk

``normalisation`` is a per-chunk weight computed once per optimizer step by one
of the functions in ``components.train.advantages`` (token, chunk or sequence
normalisation over the *whole* step, so micro-batch losses simply add up).
The two objectives share one signature and are picked once at set-up; neither
contains a switch.

``imitation_loss`` is the third term: the return-weighted log-likelihood of
the chunks of demonstrations, with the same flattened layout. The trainer adds
it to the RL term (``rl_weight · L_RL + λ_IL · L_IL``); the two see disjoint
chunks (an RL chunk was sampled by the policy, an imitation chunk was not).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

__all__ = ["LossFn", "chunk_mean", "imitation_loss", "ipa_loss", "token_level_loss"]


def chunk_mean(values: Tensor, token_chunk: Tensor, num_chunks: int) -> Tensor:
    """Mean of ``values`` [N] over each chunk's tokens -> [K] (0 for a chunk with no tokens)."""
    sums = values.new_zeros(num_chunks).index_add(0, token_chunk, values)  # [K]
    counts = torch.bincount(token_chunk, minlength=num_chunks).clamp(min=1)  # [K]
    return sums / counts


def _ratio_stats(ratio: Tensor, clipped: Tensor, keep: Tensor) -> dict[str, Tensor]:
    """Detached statistics over the kept units (chunks or tokens)."""
    kept = keep.sum()
    denominator = kept.clamp(min=1)
    far = torch.where(keep, ratio, torch.ones_like(ratio))
    return {
        "kept": kept.detach(),
        "clip_fraction": ((clipped & keep).sum() / denominator).detach(),
        "ratio_mean": ((ratio * keep).sum() / denominator).detach(),
        "ratio_max": far.max().detach() if far.numel() else ratio.new_ones(()),
        "ratio_min": far.min().detach() if far.numel() else ratio.new_ones(()),
    }


def ipa_loss(
    logp: Tensor,
    old_logp: Tensor,
    token_chunk: Tensor,
    advantages: Tensor,
    loss_mask: Tensor,
    *,
    normalisation: Tensor,
    eps_low: float,
    eps_high: float,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Chunk-level clipped policy loss.

    For chunk k with tokens t ∈ k (n_k of them), advantage A_k, kept flag m_k and
    normalisation weight w_k:

        ρ_k = exp( (1/n_k) Σ_{t∈k} (log πθ(t) − log π_old(t)) )
        L   = − Σ_k m_k w_k min( ρ_k A_k, clip(ρ_k, 1 − eps_low, 1 + eps_high) A_k )

    so ∂L/∂log πθ(t) = − m_k w_k A_k ρ_k / n_k while the unclipped term is the
    minimum, and 0 once the clip binds (A_k > 0, ρ_k > 1 + eps_high or A_k < 0,
    ρ_k < 1 − eps_low). Masked chunks (m_k = 0) get their log-ratio set to 0 before
    exponentiating, so they can neither overflow nor leak a NaN gradient.
    """
    num_chunks = advantages.shape[0]
    log_ratio = chunk_mean(logp - old_logp, token_chunk, num_chunks)  # [K]
    log_ratio = torch.where(loss_mask, log_ratio, torch.zeros_like(log_ratio))  # [K]
    ratio = log_ratio.exp()  # [K]
    unclipped = ratio * advantages  # [K]
    clipped = ratio.clamp(1 - eps_low, 1 + eps_high) * advantages  # [K]
    per_chunk = -torch.minimum(unclipped, clipped)  # [K]
    loss = torch.where(loss_mask, per_chunk * normalisation, torch.zeros_like(per_chunk)).sum()
    stats = _ratio_stats(ratio.detach(), clipped.detach() < unclipped.detach(), loss_mask)
    return loss, stats


def token_level_loss(
    logp: Tensor,
    old_logp: Tensor,
    token_chunk: Tensor,
    advantages: Tensor,
    loss_mask: Tensor,
    *,
    normalisation: Tensor,
    eps_low: float,
    eps_high: float,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Token-level GRPO: the baseline IPA is compared with.

    Every token t of chunk k = k(t) carries its chunk's advantage, mask and
    weight, the latter spread evenly over the chunk's tokens:

        r_t = exp(log πθ(t) − log π_old(t))
        L   = − Σ_t m_k (w_k / n_k) min( r_t A_k, clip(r_t, 1 − eps_low, 1 + eps_high) A_k )

    With token normalisation (w_k = n_k / Σ n) this is GRPO's token mean.
    """
    num_chunks = advantages.shape[0]
    counts = torch.bincount(token_chunk, minlength=num_chunks).clamp(min=1)  # [K]
    # index_select, not x[idx]: advanced indexing is ~100x slower on CPU here
    token_keep = loss_mask.index_select(0, token_chunk)  # [N]
    token_weight = (normalisation / counts).index_select(0, token_chunk)  # [N]
    token_adv = advantages.index_select(0, token_chunk)  # [N]
    log_ratio = torch.where(token_keep, logp - old_logp, torch.zeros_like(logp))  # [N]
    ratio = log_ratio.exp()  # [N]
    unclipped = ratio * token_adv  # [N]
    clipped = ratio.clamp(1 - eps_low, 1 + eps_high) * token_adv  # [N]
    per_token = -torch.minimum(unclipped, clipped)  # [N]
    loss = torch.where(token_keep, per_token * token_weight, torch.zeros_like(per_token)).sum()
    stats = _ratio_stats(ratio.detach(), clipped.detach() < unclipped.detach(), token_keep)
    return loss, stats


def imitation_loss(
    logp: Tensor,
    token_chunk: Tensor,
    returns: Tensor,
    il_mask: Tensor,
    *,
    normalisation: Tensor,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Return-weighted negative log-likelihood of the expert chunks.

    For chunk k with tokens t ∈ k (n_k of them), return R_k (its episode's reward),
    imitation flag m_k and normalisation weight w_k:

        L_IL = − Σ_k m_k w_k R_k (1/n_k) Σ_{t∈k} log πθ(t)

    so ∂L_IL/∂log πθ(t) = − m_k w_k R_k / n_k: no ratio and no clip, because nothing
    here was sampled from the policy. With w_k = n_k / Σ_{m_j} n_j (token normalisation
    over the step's imitation tokens) this is the token mean of −R·log πθ over the step,
    and micro-batch losses add up to it. Masked chunks add exactly 0.
    """
    num_chunks = returns.shape[0]
    chunk_logp = chunk_mean(logp, token_chunk, num_chunks)  # [K]
    per_chunk = -returns * chunk_logp  # [K]
    loss = torch.where(il_mask, per_chunk * normalisation, torch.zeros_like(per_chunk)).sum()
    return loss, {"kept": il_mask.sum().detach()}


LossFn = Callable[..., tuple[Tensor, dict[str, Tensor]]]
"""The common signature of ``ipa_loss`` and ``token_level_loss``."""
