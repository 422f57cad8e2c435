"""Mask & filter: the seed's rules, episode by episode and group by group."""

from __future__ import annotations

import pytest

from components.rollout.mask_filter import (
    MaskRules,
    apply_mask_filter,
    classify_failure,
    episode_rows,
    episode_verdict,
    filter_groups,
)
from termrl.artifacts import read_trajectories, write_trajectories
from tests.components.rollout.records import record

RULES = MaskRules()


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("EnvInitFailed", "unrecoverable"),
        ("SandboxUnavailable", "unrecoverable"),
        ("ResetFailed", "unrecoverable"),
        ("RewardFailed", "unrecoverable"),
        ("UnexpectedError", "unrecoverable"),
        ("ExecTimeout", "transient"),
        ("SandboxDied", "transient"),
        ("NetworkError", "transient"),
        (None, None),
    ],
)
def test_failure_types_are_classified_by_the_error_tree(name, kind):
    assert classify_failure(name) == kind


def test_an_unrecoverable_failure_becomes_one_zero_mask_placeholder_row():
    env_failed = record(commands=(), stop="error", failure="EnvInitFailed", success=False)
    verdict = episode_verdict(env_failed, RULES)
    assert (verdict.masked, verdict.placeholder, verdict.drop_flag) == (True, True, False)
    assert verdict.mask_reason == "EnvInitFailed"
    [row] = episode_rows(env_failed, verdict, dropped=False)
    assert row["prompt_ids"] == row["response_ids"] == row["response_logprobs"] == []
    assert (row["reward"], row["success"], row["trainable"], row["num_chunks"]) == (
        0.0,
        False,
        False,
        0,
    )
    # A reward failure after the agent worked still yields only the placeholder row.
    reward_failed = record(commands=("ls", "cat x"), failure="RewardFailed")
    rows = episode_rows(reward_failed, episode_verdict(reward_failed, RULES), dropped=False)
    assert len(rows) == 1 and rows[0]["placeholder"] and rows[0]["failure_type"] == "RewardFailed"


def test_an_episode_that_tampered_with_scoring_is_masked_as_unrecoverable():
    """A pass scored after the agent replaced what the tests run may be forged: never a training signal."""
    forged = record(commands=("cp /bin/true /usr/local/bin/pytest",))
    forged.tampering = ("/usr/local/bin/pytest: shadows /usr/bin/pytest",)
    verdict = episode_verdict(forged, RULES)
    assert (verdict.masked, verdict.placeholder, verdict.mask_reason) == (
        True,
        True,
        "verifier_tampering",
    )
    [row] = episode_rows(forged, verdict, dropped=False)
    assert not row["trainable"] and row["mask_reason"] == "verifier_tampering"


def test_transient_failures_and_tool_timeouts_raise_the_drop_flag():
    died = record(commands=("sleep 9",), stop="error", failure="SandboxDied", success=False)
    verdict = episode_verdict(died, RULES)
    # No reward could be computed: masked, but it keeps its chunks (not a placeholder).
    assert (verdict.drop_flag, verdict.masked, verdict.placeholder) == (True, True, False)
    timed_out = record(commands=("sleep 99", "ls"), timed_out=(True, False))
    verdict = episode_verdict(timed_out, RULES)
    assert (verdict.drop_flag, verdict.masked) == (True, False)


def test_max_turn_and_long_failure_masks():
    assert (
        episode_verdict(record(stop="max-turns", success=False), RULES).mask_reason == "max-turns"
    )
    assert not episode_verdict(
        record(stop="max-turns", success=False), MaskRules(mask_max_turns=False)
    ).masked
    # A max-turn episode whose tests passed is a known positive: kept.
    assert not episode_verdict(record(stop="max-turns", success=True), RULES).masked
    # 2 chunks × 12000 response tokens = 24000 > 20000: a failed one is masked ...
    long_fail = record(commands=("ls",), success=False, response_tokens=12000)
    assert episode_verdict(long_fail, RULES).mask_reason == "long_failure"
    # ... a successful one is not, and neither is a failed one under the limit.
    assert not episode_verdict(record(commands=("ls",), response_tokens=12000), RULES).masked
    assert not episode_verdict(
        record(commands=("ls",), success=False, response_tokens=9000), RULES
    ).masked


def test_group_filter_caps_the_dropped_ratio():
    # 4 groups, 3 flagged, limit 0.5: drop 1 (1/4), drop 2 (2/4), the third would be 3/4 > 0.5.
    assert filter_groups([True, False, True, True], 0.5) == [True, False, True, False]
    # Unlike the seed's streaming counter, the first group of a batch can be dropped.
    assert filter_groups([True, False], 0.5) == [True, False]
    assert filter_groups([True, True], 0.0) == [False, False]
    assert filter_groups([True, True, True], 1.0) == [True, True, True]


def test_apply_mask_filter_drops_whole_groups_and_keeps_the_batch_shape(tmp_path):
    groups = [
        [record(0, 0), record(0, 1, commands=("sleep 99",), timed_out=(True,))],  # flagged
        [
            record(1, 0),
            record(1, 1, commands=(), stop="error", failure="EnvInitFailed", success=False),
        ],
        [record(2, 0, stop="max-turns", success=False), record(2, 1, commands=("ls", "pwd"))],
        [
            record(3, 0, commands=("x",), stop="error", failure="SandboxDied"),
            record(3, 1),
        ],  # flagged
        [
            record(4, 0),
            record(4, 1, commands=("y",), stop="error", failure="NetworkError"),
        ],  # flagged
    ]
    result = apply_mask_filter(groups, RULES)
    # Flagged groups 0, 3, 4: 1/5 and 2/5 are within 0.5, 3/5 is not.
    assert result.dropped_groups == ["g0", "g3"]
    by_episode: dict[str, list[dict]] = {}
    for row in result.rows:
        by_episode.setdefault(row["episode_id"], []).append(row)
    assert len(by_episode) == 10  # every episode is still there
    assert all(r["drop"] for e in ("g0-e0", "g0-e1", "g3-e0", "g3-e1") for r in by_episode[e])
    assert not any(r["drop"] for e in ("g4-e0", "g4-e1") for r in by_episode[e])
    assert (
        by_episode["g4-e1"][0]["masked"] and by_episode["g4-e1"][0]["mask_reason"] == "NetworkError"
    )
    assert by_episode["g1-e1"][0]["placeholder"]
    assert by_episode["g2-e0"][0]["mask_reason"] == "max-turns"
    assert [r["chunk_index"] for r in by_episode["g2-e1"]] == [0, 1, 2]
    assert result.stats["groups_dropped"] == 2 and result.stats["mask/max-turns"] == 1
    # The rows are a valid trajectories artifact.
    write_trajectories(tmp_path / "t.parquet", result.rows)
    assert read_trajectories(tmp_path / "t.parquet").num_rows == len(result.rows)


def test_every_row_carries_its_episodes_shaping_beside_the_outcome_reward(tmp_path):
    looped = record(0, 0, commands=("make", "make", "make"), exit_codes=(2, 2, 2))  # passed anyway
    clean = record(0, 1)
    env_failed = record(1, 0, commands=(), stop="error", failure="EnvInitFailed", success=False)
    shaping = {"g0-e0": -0.1, "g0-e1": 0.0, "g1-e0": -0.5}  # the placeholder's would be a bug
    result = apply_mask_filter([[looped, clean], [env_failed]], RULES, shaping)
    by_episode: dict[str, list[dict]] = {}
    for row in result.rows:
        by_episode.setdefault(row["episode_id"], []).append(row)
    assert [(r["reward"], r["shaping"]) for r in by_episode["g0-e0"]] == [
        (1.0, -0.1)
    ] * 4  # 3 calls + done
    assert {r["shaping"] for r in by_episode["g0-e1"]} == {0.0}
    assert by_episode["g1-e0"][0]["shaping"] == 0.0  # a placeholder carries nothing
    # the mean is over the episodes as written: (−0.1 + 0 + 0) / 3
    assert result.stats["episodes_shaped"] == 1 and result.stats["shaping_mean"] == pytest.approx(
        -0.1 / 3
    )
    write_trajectories(tmp_path / "t.parquet", result.rows)
    assert read_trajectories(tmp_path / "t.parquet").column("shaping").to_pylist()[:4] == [-0.1] * 4
    # no shaping given (penalties off): 0.0 on every row
    assert {r["shaping"] for r in apply_mask_filter([[looped, clean]], RULES).rows} == {0.0}
