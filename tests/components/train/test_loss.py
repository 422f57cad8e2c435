"""Hand-computed IPA and token-level losses and gradients on tiny tensors.

Each case writes the arithmetic out. Gradients are taken with respect to
``logp`` (the policy's token log-probabilities), whose closed form is
∂L/∂logp_t = −m_k w_k A_k ρ_k / n_k when the unclipped term is the minimum,
and 0 once the clip binds. For the imitation loss it is ∂L/∂logp_t = −m_k w_k R_k / n_k.
"""

from __future__ import annotations

import math

import pytest
import torch

from components.train.advantages import (
    chunk_mismatch,
    chunk_normalisation,
    full_signal,
    positive_only,
    sequence_normalisation,
    token_normalisation,
)
from components.train.loss import chunk_mean, imitation_loss, ipa_loss, token_level_loss

E = math.e


def run(loss_fn, log_ratios, token_chunk, advantages, keep, weights, eps=(0.2, 0.2)):
    """Evaluate ``loss_fn`` with old_logp = 0, so logp equals the per-token log-ratio."""
    logp = torch.tensor(log_ratios, dtype=torch.float64, requires_grad=True)
    loss, stats = loss_fn(
        logp,
        torch.zeros_like(logp),
        torch.tensor(token_chunk),
        torch.tensor(advantages, dtype=torch.float64),
        torch.tensor(keep),
        normalisation=torch.tensor(weights, dtype=torch.float64),
        eps_low=eps[0],
        eps_high=eps[1],
    )
    loss.backward()
    return loss.item(), logp.grad.tolist(), stats


def test_chunk_mean():
    # chunk 0: (1 + 3) / 2 = 2; chunk 1: 5 / 1 = 5; chunk 2 has no tokens -> 0
    out = chunk_mean(torch.tensor([1.0, 3.0, 5.0]), torch.tensor([0, 0, 1]), 3)
    assert out.tolist() == [2.0, 5.0, 0.0]


def test_ipa_positive_unclipped():
    # one chunk, 2 tokens, log-ratios [0.1, 0.3] -> mean 0.2 -> ρ = e^0.2 = 1.2214 < 1.28
    # A = 1, w = 1: L = −ρ·A = −1.2214
    # ∂L/∂logp_t = −A·ρ/n = −1.2214 / 2 = −0.6107 for both tokens
    loss, grad, stats = run(ipa_loss, [0.1, 0.3], [0, 0], [1.0], [True], [1.0], eps=(0.2, 0.28))
    rho = E**0.2
    assert loss == pytest.approx(-rho)
    assert grad == pytest.approx([-rho / 2, -rho / 2])
    assert stats["clip_fraction"].item() == 0.0
    assert stats["ratio_mean"].item() == pytest.approx(rho)


def test_ipa_positive_clipped_has_no_gradient():
    # log-ratios [0.5, 0.5] -> ρ = e^0.5 = 1.6487 > 1.2 -> min(1.6487·1, 1.2·1) = 1.2
    # L = −1.2, and the clipped branch is constant in logp: gradient 0
    loss, grad, stats = run(ipa_loss, [0.5, 0.5], [0, 0], [1.0], [True], [1.0])
    assert loss == pytest.approx(-1.2)
    assert grad == [0.0, 0.0]
    assert stats["clip_fraction"].item() == 1.0


def test_ipa_negative_clipped_and_unclipped():
    # chunk 0: log-ratio −0.5 -> ρ = 0.6065 < 0.8, A = −1:
    #   min(−0.6065, 0.8·−1 = −0.8) = −0.8 -> clipped, term 0.8, gradient 0
    # chunk 1: log-ratio 0.2 -> ρ = 1.2214, A = −1:
    #   min(−1.2214, clip 1.2·−1 = −1.2) = −1.2214 -> unclipped (pessimistic), term 1.2214
    # chunk normalisation w = [1/2, 1/2]: L = (0.8 + 1.2214) / 2 = 1.0107
    # ∂L/∂logp (chunk 1, n = 1) = −w·A·ρ = −0.5·(−1)·1.2214 = +0.6107
    loss, grad, stats = run(ipa_loss, [-0.5, 0.2], [0, 1], [-1.0, -1.0], [True, True], [0.5, 0.5])
    assert loss == pytest.approx((0.8 + E**0.2) / 2)
    assert grad == pytest.approx([0.0, 0.5 * E**0.2])
    assert stats["clip_fraction"].item() == 0.5


def test_ipa_token_vs_chunk_normalisation():
    # chunk 0: 1 token, ρ = 1, A = 2; chunk 1: 3 tokens, ρ = 1, A = −1
    lengths, keep, episode = torch.tensor([1, 3]), torch.tensor([True, True]), torch.tensor([0, 0])
    # token normalisation: w = [1/4, 3/4]
    #   L = −(1/4)·2 − (3/4)·(−1) = −0.5 + 0.75 = 0.25
    #   grad chunk 0: −w·A·ρ/n = −(1/4)·2/1 = −0.5; chunk 1: −(3/4)·(−1)/3 = +0.25 each
    w = token_normalisation(lengths, keep, episode)
    assert w.tolist() == [0.25, 0.75]
    loss, grad, _ = run(ipa_loss, [0.0] * 4, [0, 1, 1, 1], [2.0, -1.0], [True, True], w.tolist())
    assert loss == pytest.approx(0.25)
    assert grad == pytest.approx([-0.5, 0.25, 0.25, 0.25])
    # chunk normalisation: w = [1/2, 1/2]
    #   L = −(1/2)·2 + (1/2)·1 = −0.5
    #   grad chunk 0: −(1/2)·2 = −1; chunk 1: −(1/2)·(−1)/3 = +1/6 each
    w = chunk_normalisation(lengths, keep, episode)
    assert w.tolist() == [0.5, 0.5]
    loss, grad, _ = run(ipa_loss, [0.0] * 4, [0, 1, 1, 1], [2.0, -1.0], [True, True], w.tolist())
    assert loss == pytest.approx(-0.5)
    assert grad == pytest.approx([-1.0, 1 / 6, 1 / 6, 1 / 6])


def test_sequence_normalisation_weights():
    # episode 0 has 2 kept chunks, episode 1 has 1 kept and 1 masked chunk
    # 2 episodes -> each weighs 1/2, shared among its kept chunks:
    # w = [1/4, 1/4, 1/2, 0]
    w = sequence_normalisation(
        torch.tensor([5, 2, 7, 3]),
        torch.tensor([True, True, True, False]),
        torch.tensor([0, 0, 1, 1]),
    )
    assert w.tolist() == [0.25, 0.25, 0.5, 0.0]


def test_token_normalisation_ignores_masked_tokens():
    # kept chunks have 1 + 3 tokens; the masked chunk's 10 tokens are not in the denominator
    w = token_normalisation(
        torch.tensor([1, 10, 3]),
        torch.tensor([True, False, True]),
        torch.zeros(3, dtype=torch.long),
    )
    assert w.tolist() == [0.25, 0.0, 0.75]


def test_mismatch_mask_drops_whole_chunk():
    # old − μ per token: chunk 0 [0.1, −0.3] -> mean |Δ| 0.2 (kept at threshold 0.5)
    #                    chunk 1 [0.4, −0.8] -> mean |Δ| 0.6 (masked whole)
    old = torch.tensor([0.1, -0.3, 0.4, -0.8])
    mu = torch.zeros(4)
    chunk = torch.tensor([0, 0, 1, 1])
    mismatch = chunk_mismatch(old, mu, chunk, 2)
    assert mismatch.tolist() == pytest.approx([0.2, 0.6])
    keep = mismatch <= 0.5
    assert keep.tolist() == [True, False]
    # the loss: chunk 1 has a huge log-ratio (would overflow exp) but is masked:
    # only chunk 0 counts, ρ_0 = e^0 = 1, A = 1, token normalisation w = [1, 0]
    #   L = −1; grad chunk 0 tokens −1·1/2 = −0.5; chunk 1 tokens exactly 0 (no NaN)
    w = token_normalisation(torch.tensor([2, 2]), keep, torch.zeros(2, dtype=torch.long))
    loss, grad, stats = run(
        ipa_loss, [0.0, 0.0, 500.0, 500.0], chunk.tolist(), [1.0, 1.0], keep.tolist(), w.tolist()
    )
    assert loss == pytest.approx(-1.0)
    assert grad == [-0.5, -0.5, 0.0, 0.0]
    assert stats["kept"].item() == 1


def test_positive_only_mode_drops_negatives_but_keeps_clipping():
    # raw advantages [1, −1, 0.5, 0]: positive-only keeps [T, F, T, F]
    adv, keep = positive_only(
        torch.tensor([1.0, -1.0, 0.5, 0.0]), torch.ones(4, dtype=torch.bool), negative_weight=0.3
    )
    assert keep.tolist() == [True, False, True, False]
    # one token per chunk, log-ratios [0.5, 0.0, 0.1, 0.0]; token normalisation over kept: w = [1/2, 0, 1/2, 0]
    # chunk 0: ρ = e^0.5 = 1.6487 clipped to 1.2 -> term −1.2·1 = −1.2, grad 0 (still clipped: RL, not SFT)
    # chunk 2: ρ = e^0.1 = 1.1052, A = 0.5 -> term −0.5526, grad −(1/2)·0.5·1.1052 = −0.2763
    # L = (−1.2 − 0.5526) / 2 = −0.8763
    w = token_normalisation(torch.ones(4, dtype=torch.long), keep, torch.zeros(4, dtype=torch.long))
    loss, grad, stats = run(
        ipa_loss, [0.5, 0.0, 0.1, 0.0], [0, 1, 2, 3], adv.tolist(), keep.tolist(), w.tolist()
    )
    assert loss == pytest.approx((-1.2 - 0.5 * E**0.1) / 2)
    assert grad == pytest.approx([0.0, 0.0, -0.25 * E**0.1, 0.0])
    assert stats["clip_fraction"].item() == 0.5


def test_full_mode_weights_negatives():
    # raw advantages [1, −1, 0]; negative weight 0.3 -> [1, −0.3, 0]; zero-advantage chunk not kept
    adv, keep = full_signal(
        torch.tensor([1.0, -1.0, 0.0]), torch.ones(3, dtype=torch.bool), negative_weight=0.3
    )
    assert adv.tolist() == pytest.approx([1.0, -0.3, 0.0])
    assert keep.tolist() == [True, True, False]
    # one token each, ρ = 1 everywhere, chunk normalisation w = [1/2, 1/2, 0]
    # L = −(1/2)·1 − (1/2)·(−0.3) = −0.35; grad [−0.5, +0.15, 0]
    w = chunk_normalisation(torch.ones(3, dtype=torch.long), keep, torch.zeros(3, dtype=torch.long))
    loss, grad, _ = run(
        ipa_loss, [0.0, 0.0, 0.0], [0, 1, 2], adv.tolist(), keep.tolist(), w.tolist()
    )
    assert loss == pytest.approx(-0.35)
    assert grad == pytest.approx([-0.5, 0.15, 0.0])


def test_token_level_clips_per_token_where_ipa_does_not():
    # one chunk of 2 tokens, log-ratios [0.4, −0.2], A = 1, eps 0.2, w = 1
    # IPA: mean 0.1 -> ρ = e^0.1 = 1.1052 (inside the clip range)
    #   L = −1.1052; grad each token −1.1052 / 2 = −0.5526
    loss, grad, _ = run(ipa_loss, [0.4, -0.2], [0, 0], [1.0], [True], [1.0])
    assert loss == pytest.approx(-(E**0.1))
    assert grad == pytest.approx([-(E**0.1) / 2] * 2)
    # token level: token weights w/n = 1/2
    #   token 0: r = e^0.4 = 1.4918 > 1.2 -> clipped, term −1.2, grad 0
    #   token 1: r = e^−0.2 = 0.8187, unclipped, term −0.8187, grad −(1/2)·0.8187 = −0.4094
    #   L = (−1.2 − 0.8187) / 2 = −1.0094
    loss, grad, stats = run(token_level_loss, [0.4, -0.2], [0, 0], [1.0], [True], [1.0])
    assert loss == pytest.approx((-1.2 - E**-0.2) / 2)
    assert grad == pytest.approx([0.0, -(E**-0.2) / 2])
    assert stats["clip_fraction"].item() == 0.5


def test_token_level_masked_chunk_contributes_nothing():
    # chunk 0 kept (2 tokens, A = −1, log-ratios 0), chunk 1 masked (log-ratio 300)
    # token normalisation over kept tokens: w = [1, 0] -> per-token weight 1/2
    # L = −(1/2)(−1) · 2 = 1; grad per kept token −(1/2)(−1)(1) = +0.5; masked tokens 0
    loss, grad, _ = run(
        token_level_loss, [0.0, 0.0, 300.0], [0, 0, 1], [-1.0, 1.0], [True, False], [1.0, 0.0]
    )
    assert loss == pytest.approx(1.0)
    assert grad == [0.5, 0.5, 0.0]


def test_ipa_and_token_level_agree_on_one_token_chunks():
    # with one token per chunk the chunk ratio is the token ratio: both losses are equal
    g = torch.Generator().manual_seed(0)
    log_ratios = (torch.randn(6, generator=g) * 0.3).tolist()
    adv = torch.randn(6, generator=g).tolist()
    keep = [True, True, False, True, True, True]
    w = [1 / 5] * 6
    a = run(ipa_loss, log_ratios, list(range(6)), adv, keep, w)
    b = run(token_level_loss, log_ratios, list(range(6)), adv, keep, w)
    assert a[0] == pytest.approx(b[0])
    assert a[1] == pytest.approx(b[1])


def run_imitation(logps, token_chunk, returns, il_mask, weights):
    logp = torch.tensor(logps, dtype=torch.float64, requires_grad=True)
    loss, stats = imitation_loss(
        logp,
        torch.tensor(token_chunk),
        torch.tensor(returns, dtype=torch.float64),
        torch.tensor(il_mask),
        normalisation=torch.tensor(weights, dtype=torch.float64),
    )
    loss.backward()
    return loss.item(), logp.grad.tolist(), stats


def test_imitation_loss_is_the_return_weighted_token_mean():
    # chunk 0: 2 tokens, log p [−1, −3], R = 1;  chunk 1: 1 token, log p [−2], R = 0.5
    # chunk 2: 1 token, not an imitation chunk (its log p of −1e4 must not matter)
    # token normalisation over imitation tokens (3): w = [2/3, 1/3, 0]
    w = token_normalisation(
        torch.tensor([2, 1, 1]), torch.tensor([True, True, False]), torch.zeros(3, dtype=torch.long)
    )
    assert w.tolist() == pytest.approx([2 / 3, 1 / 3, 0.0])
    # chunk means: c0 = (−1 − 3)/2 = −2, c1 = −2
    # L = −( (2/3)·1·(−2) + (1/3)·0.5·(−2) ) = 4/3 + 1/3 = 5/3
    #   = the token mean −(1/3)·(1·(−1) + 1·(−3) + 0.5·(−2)) = 5/3
    # ∂L/∂logp: chunk 0 tokens −(2/3)·1/2 = −1/3; chunk 1 −(1/3)·0.5/1 = −1/6; chunk 2: 0
    loss, grad, stats = run_imitation(
        [-1.0, -3.0, -2.0, -1e4], [0, 0, 1, 2], [1.0, 0.5, 1.0], [True, True, False], w.tolist()
    )
    assert loss == pytest.approx(5 / 3)
    assert grad == pytest.approx([-1 / 3, -1 / 3, -1 / 6, 0.0])
    assert stats["kept"].item() == 2


def test_imitation_micro_batches_add_up_to_the_step():
    # the same step as above, split in two micro-batches with the step's weights:
    # batch 1 = chunk 0: −(2/3)·1·(−2) = 4/3;  batch 2 = chunks 1, 2: −(1/3)·0.5·(−2) = 1/3
    # 4/3 + 1/3 = 5/3, the whole step's loss
    first, _, _ = run_imitation([-1.0, -3.0], [0, 0], [1.0], [True], [2 / 3])
    second, _, _ = run_imitation([-2.0, -1e4], [0, 1], [0.5, 1.0], [True, False], [1 / 3, 0.0])
    assert first == pytest.approx(4 / 3)
    assert second == pytest.approx(1 / 3)
    assert first + second == pytest.approx(5 / 3)


def test_imitation_has_no_ratio_or_clip():
    # unlike IPA, a chunk already far above its old probability keeps its full push:
    # one chunk of 2 tokens at log p 0 (probability 1), R = 1, w = 1 -> L = −0 = 0, grad −1/2 each
    loss, grad, _ = run_imitation([0.0, 0.0], [0, 0], [1.0], [True], [1.0])
    assert loss == 0.0
    assert grad == pytest.approx([-0.5, -0.5])
