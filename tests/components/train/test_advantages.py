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
    adv = group_advantages(
        torch.tensor([1.0, 0.0, 0.0]), torch.tensor([0, 0, 0]), std_normalise=True
    )
    assert adv.tolist() == pytest.approx([2**0.5, -(2**-0.5), -(2**-0.5)], rel=1e-5)


def test_chunk_returns_discount_over_chunks():
    # episode 0: A = 1, 3 chunks, γ = 0.5 -> [0.5², 0.5¹, 0.5⁰] = [0.25, 0.5, 1]
    # episode 1: A = −2, 1 chunk -> [−2]
    out = chunk_advantages(
        torch.tensor([1.0, -2.0]), torch.tensor([0, 0, 0, 1]), torch.tensor([0, 1, 2, 0]), gamma=0.5
    )
    assert out.tolist() == [0.25, 0.5, 1.0, -2.0]
    # γ = 1: every chunk carries the episode advantage
    out = chunk_advantages(
        torch.tensor([1.0, -2.0]), torch.tensor([0, 0, 0, 1]), torch.tensor([0, 1, 2, 0]), gamma=1.0
    )
    assert out.tolist() == [1.0, 1.0, 1.0, -2.0]


def test_shaping_gives_a_group_of_equal_outcomes_a_signal(tmp_path):
    # four passes, one of them in a retry loop (shaping −0.1): without shaping the group is uniform
    # (every advantage 0); with it, the shaped rewards are [1, 1, 1, 0.9]
    #   mean 0.975, deviations [0.025, 0.025, 0.025, −0.075], population std √0.001875 = 0.0433
    #   A = [1/√3, 1/√3, 1/√3, −√3] = [0.577, 0.577, 0.577, −1.732]
    from components.train.config import TrainConfig
    from components.train.data import load_episodes
    from components.train.trainer import prepare_episodes
    from termrl.artifacts.trajectories import write_trajectories

    from .conftest import episode_rows

    def advantages(loop_shaping: float) -> dict[str, float]:
        data = []
        for name in ("a", "b", "c", "looped"):
            data += episode_rows(
                episode_id=name,
                group_id="g",
                chunks=[([1], [2, 3])],
                logprobs=[[-0.5] * 2],
                reward=1.0,
                shaping=loop_shaping if name == "looped" else 0.0,
            )
        path = tmp_path / f"t{loop_shaping}.parquet"
        write_trajectories(path, data)
        episodes = load_episodes(path, max_episode_tokens=100)
        stats = prepare_episodes(episodes, TrainConfig(mode="full"))
        assert stats["data/shaped"] == (1 if loop_shaping else 0)
        return {e.episode_id: e.advantage for e in episodes}

    assert advantages(0.0) == {"a": 0.0, "b": 0.0, "c": 0.0, "looped": 0.0}
    shaped = advantages(-0.1)
    expected = [3**-0.5] * 3 + [-(3**0.5)]
    assert [shaped[e] for e in ("a", "b", "c", "looped")] == pytest.approx(expected, rel=1e-4)


def test_a_failure_that_ran_out_of_turns_sets_the_baseline_but_is_not_trained(tmp_path):
    # three passes and one failure masked by rollout as max-turns: rewards [1, 1, 1, 0]
    #   mean 0.75, population std √0.1875 = 0.433, A = [1/√3, 1/√3, 1/√3, −√3]
    # positive-only keeps the three passes' chunks (A > 0); the truncated failure trains nothing.
    from components.train.config import TrainConfig
    from components.train.data import load_episodes
    from components.train.trainer import prepare_episodes
    from termrl.artifacts.trajectories import write_trajectories

    from .conftest import episode_rows

    data = []
    for name in ("a", "b", "c", "truncated"):
        failed = name == "truncated"
        flags = {"masked": True, "mask_reason": "max-turns"} if failed else {}
        data += episode_rows(
            episode_id=name,
            group_id="g",
            chunks=[([1], [2, 3])],
            logprobs=[[-0.5] * 2],
            reward=0.0 if failed else 1.0,
            **flags,
        )
    write_trajectories(tmp_path / "t.parquet", data)
    episodes = load_episodes(tmp_path / "t.parquet", max_episode_tokens=100)
    stats = prepare_episodes(episodes, TrainConfig(mode="positive-only"))
    by_id = {e.episode_id: e for e in episodes}
    assert [by_id[n].advantage for n in ("a", "b", "c", "truncated")] == pytest.approx(
        [3**-0.5] * 3 + [-(3**0.5)], rel=1e-4
    )
    assert stats["data/positive"] == 3
    assert [bool(by_id[n].chunk_keep.any()) for n in ("a", "b", "c", "truncated")] == [
        True,
        True,
        True,
        False,
    ]
