"""Each detector fires on a series showing its precursor and stays silent on noisy healthy ones."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter

import pytest

from components.health.detectors import (
    Thresholds,
    behaviour_spike,
    detect,
    failed_length_tail,
    falling_advantage,
    negative_share_growth,
    reward_collapse,
    spiking_patterns,
)
from tests.components.health.series import (
    healthy_run,
    negative_counts,
    sink_advantage,
    tail_lengths,
    with_outcome,
    with_patterns,
    with_steps,
)

T = Thresholds()


# --- healthy series --------------------------------------------------------------------------------


def test_a_healthy_run_raises_nothing_at_any_iteration() -> None:
    run = healthy_run(10, seed=0)
    # the run is noisy: success moves between iterations, the longest failure and the negative share wobble
    assert max(h.success_rate for h in run) - min(h.success_rate for h in run) > 0.2
    assert len({h.failed_max_tokens for h in run}) == len(run)
    for k in range(1, len(run) + 1):
        assert detect(run[:k], T) == [], f"iteration {k - 1}"


def test_false_alarms_are_rare_over_many_healthy_runs() -> None:
    """200 simulated runs judged after each of 10 iterations: a precursor fires on about 0.6 % of
    the judgements (measured on 1,000 runs), a collapse on none of these."""
    fired: Counter[str] = Counter()
    judgements = 0
    for seed in range(200):
        run = healthy_run(10, seed=seed)
        for k in range(1, len(run) + 1):
            judgements += 1
            fired.update(f.name for f in detect(run[:k], T))
    assert fired["reward_collapse"] == 0
    assert sum(fired.values()) / judgements <= 0.015, fired


# --- falling advantage -----------------------------------------------------------------------------


def test_falling_advantage_fires_on_a_drift_over_tens_of_steps() -> None:
    run = healthy_run(8, seed=3)
    assert falling_advantage(run, T) is None
    finding = falling_advantage(sink_advantage(run, 1.5), T)
    assert finding is not None and finding.severity == "warning"
    assert finding.evidence["steps"] == T.advantage_window
    assert finding.evidence["fall"] >= 1.0 and finding.evidence["t"] <= -T.advantage_t
    assert "tighten clipping" in finding.mitigation


def test_falling_advantage_fitted_slope_by_hand() -> None:
    # 16 steps: y = -0.05 x ± 0.05 (+ on even x). The noise adds Σ(x - 7.5)(±0.05) / Σ(x - 7.5)²
    # = (8 pairs × -1 × 0.05) / 340 = -0.001176 to the slope: -0.051176 per step, a fall of
    # 0.051176 × 15 = 0.7676 over the window.
    ys = [-0.05 * x + (0.05 if x % 2 == 0 else -0.05) for x in range(16)]
    run = [
        with_steps(
            h,
            {
                "advantage/mean": ys[8 * i : 8 * i + 8],
                "advantage/positive": [1] * 8,
                "advantage/negative": [1] * 8,
            },
        )
        for i, h in enumerate(healthy_run(2, seed=1))
    ]
    finding = falling_advantage(run, T)
    assert finding is not None
    assert finding.evidence["slope"] == pytest.approx(-0.051176, abs=1e-6)
    assert finding.evidence["fall"] == pytest.approx(0.7676, abs=1e-4)
    assert "fell by 0.77 over the last 16 steps" in finding.reason
    # no new signal in the latest iteration: no new verdict on the old steps
    assert (
        falling_advantage(
            [
                run[0],
                with_steps(run[1], {"advantage/positive": [0] * 8, "advantage/negative": [0] * 8}),
            ],
            T,
        )
        is None
    )
    # the first 10 steps alone: too short a line to judge
    short = [
        run[0],
        with_steps(run[1], {"advantage/positive": [1, 1] + [0] * 6, "advantage/negative": [0] * 8}),
    ]
    assert sum(len(h.advantage_steps) for h in short) == 10 and falling_advantage(short, T) is None


def test_falling_advantage_ignores_a_fall_within_the_noise() -> None:
    # 16 steps of ±0.8 around a line falling by 0.05 per step: the fitted line falls by 1.03
    # (slope -0.05 - 8 × 0.8 / 340), but the residuals are so large that t is only -1.5
    ys = [-0.05 * x + (0.8 if x % 2 == 0 else -0.8) for x in range(16)]
    run = [
        with_steps(
            h,
            {
                "advantage/mean": ys[8 * i : 8 * i + 8],
                "advantage/positive": [1] * 8,
                "advantage/negative": [1] * 8,
            },
        )
        for i, h in enumerate(healthy_run(2, seed=1))
    ]
    assert falling_advantage(run, T) is None
    assert falling_advantage(run, dataclasses.replace(T, advantage_t=1.0)) is not None


# --- failed-length tail ----------------------------------------------------------------------------


def test_failed_length_tail_fires_when_lengths_rise_and_failures_stay_flat() -> None:
    run = healthy_run(8, seed=5)
    assert failed_length_tail(run, T) is None
    finding = failed_length_tail(tail_lengths(run, [400, 1300, 4200], passed=[12, 13, 12]), T)
    assert finding is not None
    assert (
        "400 → 1300 → 4200 response tokens over iterations 5–7 while failures stayed at 19–20"
        in finding.reason
    )
    assert finding.evidence["baseline_tokens"] == 400 and finding.evidence["latest_tokens"] == 4200


@pytest.mark.parametrize(
    ("lengths", "passed"),
    [
        (
            [400, 1300, 4200],
            [18, 12, 6],
        ),  # failures grew 14 → 26: more failures, not a few extreme ones
        ([400, 1300, 1100], [12, 13, 12]),  # not rising throughout
        ([400, 700, 1100], [12, 13, 12]),  # rising, but only 2.75×
    ],
)
def test_failed_length_tail_stays_silent_otherwise(lengths: list[int], passed: list[int]) -> None:
    assert failed_length_tail(tail_lengths(healthy_run(8, seed=5), lengths, passed), T) is None


# --- negative share --------------------------------------------------------------------------------


def test_negative_share_growth_fires_when_negatives_come_to_dominate() -> None:
    run = healthy_run(6, seed=2)
    assert negative_share_growth(run, T) is None
    finding = negative_share_growth(
        negative_counts(run, [(3, 2), (2, 3), (1, 4)]), T
    )  # 0.4 → 0.6 → 0.8
    assert finding is not None
    assert "0.40 → 0.60 → 0.80 over iterations 3–5" in finding.reason
    assert "negative_weight" in finding.mitigation


@pytest.mark.parametrize(
    "per_step",
    [
        [(2, 2), (2, 3), (1, 3)],  # 0.5 → 0.6 → 0.75: a rise of 0.25, within a batch's wobble
        [(3, 2), (2, 3), (2, 3)],  # 0.4 → 0.6 → 0.6: stopped rising
        [(4, 1), (3, 2), (2, 3)],  # 0.2 → 0.4 → 0.6: rising fast, but not dominant yet
    ],
)
def test_negative_share_growth_stays_silent_otherwise(per_step: list[tuple[int, int]]) -> None:
    assert negative_share_growth(negative_counts(healthy_run(6, seed=2), per_step), T) is None


# --- reward collapse -------------------------------------------------------------------------------


def test_reward_collapse_fires_far_below_the_best_earlier_iteration() -> None:
    run = [
        with_outcome(h, p)
        for h, p in zip(healthy_run(6, seed=4), [8, 11, 12, 14, 13, 2], strict=True)
    ]
    finding = reward_collapse(run, T)
    # best 14/32 = 0.4375 at iteration 3, now 2/32 = 0.0625: drop 0.375;
    # se = sqrt(0.4375·0.5625/32 + 0.0625·0.9375/32) = 0.09758, z = 3.84
    assert finding is not None and finding.severity == "critical"
    assert finding.evidence["best"] == 0.4375 and finding.evidence["best_iteration"] == 3
    assert finding.evidence["z"] == pytest.approx(0.375 / math.sqrt(0.009521), rel=1e-3)
    assert "success rate 0.06 at iteration 5, down from 0.44 at iteration 3" in finding.reason


def test_reward_collapse_ignores_a_dip_within_batch_noise() -> None:
    # 7/32 = 0.22 is half of 0.44 and 0.22 below it, but only z = 1.9 for two batches of 32
    run = [
        with_outcome(h, p)
        for h, p in zip(healthy_run(6, seed=4), [8, 11, 12, 14, 13, 7], strict=True)
    ]
    assert reward_collapse(run, T) is None
    assert reward_collapse(run[:1], T) is None  # nothing earlier to fall from


def _on_other_tasks(h, prefix: str):
    return dataclasses.replace(h, tasks={f"{prefix}{t}": m for t, m in h.tasks.items()})


def test_reward_collapse_compares_only_iterations_that_share_a_task() -> None:
    """Phase 2 rolls out on another, harder pool: its first rate is no fall from phase 1's."""
    run = [
        with_outcome(h, p)
        for h, p in zip(healthy_run(6, seed=4), [8, 11, 12, 14, 13, 0], strict=True)
    ]
    assert reward_collapse(run, T) is not None  # on the same tasks: a collapse
    harder = run[:-1] + [_on_other_tasks(run[-1], "medium-")]
    assert reward_collapse(harder, T) is None
    # ... and a later fall within the new pool is one again
    later = harder + [_on_other_tasks(with_outcome(run[-1], 0), "medium-")]
    later[-2] = _on_other_tasks(with_outcome(run[-1], 14), "medium-")
    finding = reward_collapse(later, T)
    assert finding is not None and finding.evidence["best"] == 14 / run[-1].episodes


# --- behaviour spike -------------------------------------------------------------------------------


def test_behaviour_spike_names_the_patterns_and_the_tasks() -> None:
    run = healthy_run(6, seed=6)
    assert behaviour_spike(run, T) is None
    loops = {"task-1": 4, "task-2": 4, "task-3": 4, "task-5": 2}
    spiked = run[:-1] + [
        with_patterns(run[-1], {"loop": loops, "destructive": {"task-4": 4, "task-6": 1}})
    ]
    finding = behaviour_spike(spiked, T)
    assert finding is not None
    assert spiking_patterns(finding) == ["loop", "destructive"]
    assert finding.evidence["loop_episodes"] == 14 and finding.evidence["loop_rate"] == 14 / 32
    assert finding.evidence["loop_baseline"] < 0.2 and finding.evidence["destructive_episodes"] == 5
    assert finding.tasks == ("task-1", "task-2", "task-3", "task-4", "task-5", "task-6")
    assert "loop 14/32 episodes (44%" in finding.reason


def test_behaviour_spike_ignores_a_few_stray_flags() -> None:
    run = healthy_run(6, seed=6)
    stray = run[:-1] + [
        with_patterns(run[-1], {"test_access": {"task-0": 2}, "destructive": {"task-7": 1}})
    ]
    assert behaviour_spike(stray, T) is None
    assert behaviour_spike(run[:1], T) is None  # a spike is a change: nothing earlier, no judgement


def test_behaviour_spike_needs_a_large_rise_not_only_a_significant_one() -> None:
    # 320-episode batches: loops 38 → 64 (12 % → 20 %) is z = (64 - 38) / √38 = 4.2, but a rise of 0.08
    run = [
        dataclasses.replace(
            h, rollout={**h.rollout, "rollout/episodes": 320.0, "rollout/loop_episodes": 38.0}
        )
        for h in healthy_run(4, seed=6)
    ]
    run[-1] = dataclasses.replace(
        run[-1], rollout={**run[-1].rollout, "rollout/loop_episodes": 64.0}
    )
    assert behaviour_spike(run, T) is None
    run[-1] = dataclasses.replace(
        run[-1], rollout={**run[-1].rollout, "rollout/loop_episodes": 110.0}
    )
    assert spiking_patterns(behaviour_spike(run, T)) == ["loop"]  # 34 %: a rise of 0.22
