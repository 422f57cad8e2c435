"""Behaviour flags and the shaping penalties they turn into, on hand-built episode records."""

from __future__ import annotations

import json

import pytest

from components.rollout.behaviour import (
    BehaviourFlags,
    Penalties,
    behaviour_by_episode,
    behaviour_flags,
    episode_return,
)
from tests.components.rollout.records import record

# distinct weights, so each sum below says which penalties applied
ON = Penalties(loop=0.1, destructive=0.5, test_access=0.25)


def shaping(episode, penalties: Penalties = ON) -> float:
    return penalties.shaping(behaviour_flags(episode, loop_repeats=3))


def test_a_clean_episode_gets_no_shaping():
    clean = record(commands=("ls", "cat a.txt", "ls"), exit_codes=(0, 1, 0))
    assert behaviour_flags(clean, 3) == BehaviourFlags(
        loop=False, destructive=False, test_access=False
    )
    assert shaping(clean) == 0.0
    assert str(shaping(clean)) == "0.0"  # a plain zero, not -0.0, in the artifact


def test_a_retry_loop_is_penalised():
    # make fails with exit 2 three times in a row: −0.1
    looping = record(
        commands=("ls", "make", "make", "make"), exit_codes=(0, 2, 2, 2), success=False
    )
    assert behaviour_flags(looping, 3).loop
    assert shaping(looping) == pytest.approx(-0.1)
    # the same command succeeding three times (polling) is not a retry loop
    assert shaping(record(commands=("ls out",) * 3)) == 0.0


def test_a_destructive_command_is_penalised():
    assert shaping(record(commands=("rm -rf /",), success=False)) == pytest.approx(-0.5)


def test_reading_the_tests_is_penalised():
    assert shaping(
        record(commands=("cat /tests/test.sh", "ls"), exit_codes=(1, 0))
    ) == pytest.approx(-0.25)


def test_penalties_add_up_and_are_off_by_default():
    # all three: −(0.1 + 0.5 + 0.25) = −0.85
    everything = record(
        commands=("cat /solution/solve.sh",) * 3 + ("kill -9 -1",), exit_codes=(1, 1, 1, 0)
    )
    assert shaping(everything) == pytest.approx(-0.85)
    assert shaping(everything, Penalties()) == 0.0


def test_cli_native_episodes_are_judged_from_their_actions():
    # no exec log (the agent CLI ran the commands): the chunks' bash calls are read instead
    episode = record(commands=("rm -rf /usr",), success=False)
    episode.execs = []
    assert json.loads(episode.chunks[0]["action"])[0]["arguments"]["command"] == "rm -rf /usr"
    assert shaping(episode) == pytest.approx(-0.5)


def test_flags_are_computed_per_episode_of_the_batch():
    groups = [[record(0, 0), record(0, 1, commands=("rm -rf /",))], [record(1, 0)]]
    flags = behaviour_by_episode(groups, 3)
    assert sorted(flags) == ["g0-e0", "g0-e1", "g1-e0"]
    assert [flags[e].destructive for e in ("g0-e0", "g0-e1", "g1-e0")] == [False, True, False]


def test_with_shaping_on_two_passes_of_which_one_looped_are_a_group_with_signal():
    from components.rollout.env_manager import informative, select_complete_groups

    clean = record(1, 0, commands=("make",), finished_at=5.0)
    looped = record(
        1, 1, commands=("make", "make", "make", "make"), exit_codes=(2, 2, 2, 0), finished_at=5.0
    )
    uniform = [record(0, 0, finished_at=1.0), record(0, 1, finished_at=1.0)]
    group = [clean, looped]
    assert not informative(group)  # both passed: equal rewards
    value = episode_return(ON, loop_repeats=3)
    assert value(clean) == 1.0 and value(looped) == pytest.approx(0.9)
    assert informative(group, value)
    assert not informative(group, episode_return(Penalties(), loop_repeats=3))  # shaping off
    # dynamic sampling puts the shaped group first, though the uniform one finished first
    kept = select_complete_groups(uniform + group, 2, 1, informative_first=True, value=value)
    assert kept == [group]
    assert select_complete_groups(uniform + group, 2, 1, informative_first=True) == [
        uniform
    ]  # rewards only
