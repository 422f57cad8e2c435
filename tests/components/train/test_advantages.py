"""Hand-computed advantages: group normalisation (with and without std) and chunk returns."""

from __future__ import annotations

import pytest
import torch

from components.train.advantages import chunk_advantages, group_advantages


def test_group_advantages_with_and_without_std():
    # group 0: rewards [1, 0, 0, 1] -> mean 0.5, population std 0.5
    #   with std: (r − 0.5) / 0.5 = [1, −1, −1, 1];  without: [0.5, −0.5, −0.5, 0.5]
    # group 1: a single episode -> r − mean = 0 either way
    # group 2: rewards [3, 3] -> equal, 0 (the 1e-6 keeps 0/0 away)
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 3.0, 3.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 2, 2])
    with_std = group_advantages(rewards, groups, std_normalise=True)
    assert with_std.tolist() == pytest.approx([1, -1, -1, 1, 0, 0, 0], abs=1e-5)
    without = group_advantages(rewards, groups, std_normalise=False)
    assert without.tolist() == pytest.approx([0.5, -0.5, -0.5, 0.5, 0, 0, 0])


def test_group_advantages_uneven_group():
    # rewards [1, 0, 0] -> mean 1/3; deviations [2/3, −1/3, −1/3]
    # population var = (4/9 + 1/9 + 1/9) / 3 = 2/9 -> std 0.4714
    # A = [0.6667/0.4714, −0.3333/0.4714, ...] = [1.4142, −0.7071, −0.7071]
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0]), torch.tensor([0, 0, 0]), std_normalise=True)
    assert adv.tolist() == pytest.approx([2**0.5, -(2**-0.5), -(2**-0.5)], rel=1e-5)


def test_chunk_returns_discount_over_chunks():
    # episode 0: A = 1, 3 chunks, γ = 0.5 -> [0.5², 0.5¹, 0.5⁰] = [0.25, 0.5, 1]
    # episode 1: A = −2, 1 chunk -> [−2]
    out = chunk_advantages(
        torch.tensor([1.0, -2.0]), torch.tensor([0, 0, 0, 1]), torch.tensor([0, 1, 2, 0]), gamma=0.5
    )
    assert out.tolist() == [0.25, 0.5, 1.0, -2.0]
    # γ = 1: every chunk carries the episode advantage
    out = chunk_advantages(torch.tensor([1.0, -2.0]), torch.tensor([0, 0, 0, 1]), torch.tensor([0, 1, 2, 0]), gamma=1.0)
    assert out.tolist() == [1.0, 1.0, 1.0, -2.0]
