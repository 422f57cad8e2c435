"""Chunk-initialized resampling: anchor choice, rollback state, and anchored episodes in real sandboxes."""

from __future__ import annotations

import json

import pytest

from components.demonstrate.config import DemonstrateConfig
from components.demonstrate.stage import demonstrate
from components.rollout.anchors import (
    anchor_picker,
    load_demonstrations,
    next_rollback_state,
    read_state,
)
from components.rollout.config import RolloutConfig
from components.rollout.stage import rollout
from components.synthesize.generate import make_task, task_seed
from termrl.artifacts.tasks import Task, save_tasks
from termrl.artifacts.trajectories import read_trajectories, write_trajectories
from tests.agent.scripted import ScriptedEngine

DONE = '<tool_call>\n{"name": "done", "arguments": {}}\n</tool_call>'
DEMOS = {"a": ["c1", "c2", "c3"], "b": ["c1"]}


def test_parallel_anchors_spread_over_the_demonstration_and_skip_tasks_without_one():
    pick = anchor_picker("parallel", DEMOS, seed=0, state={})
    anchors = {pick(i, Task(id="a", instruction="")) for i in range(200)}
    assert anchors == {1, 2, 3}
    assert {pick(i, Task(id="b", instruction="")) for i in range(50)} == {1}
    assert {pick(i, Task(id="nodemo", instruction="")) for i in range(50)} == {1}
    assert [pick(i, Task(id="a", instruction="")) for i in range(20)] == [
        pick(i, Task(id="a", instruction="")) for i in range(20)
    ]
    # A task's consecutive groups cover its anchors evenly; seeds shift where they start.
    for seed in range(5):
        pick = anchor_picker("parallel", DEMOS, seed=seed, state={})
        assert sorted(pick(v, Task(id="a", instruction="")) for v in range(6)) == [1, 1, 2, 2, 3, 3]


def test_a_multi_step_task_always_starts_from_scratch():
    multi = Task(id="a", instruction="", steps=[{"name": "one"}, {"name": "two"}])
    for anchoring in ("parallel", "rollback"):
        pick = anchor_picker(anchoring, DEMOS, seed=0, state={"a": 3})
        assert {pick(i, multi) for i in range(20)} == {1}


def test_a_demonstrations_closing_done_is_no_anchor(tmp_path):
    calls = [("bash", {"command": "ls"}), ("bash", {"command": "touch x"}), ("done", {})]
    rows = [
        {
            "episode_id": "e",
            "group_id": "expert:t",
            "task_id": "t",
            "policy_version": 0,
            "chunk_index": i,
            "prompt_ids": [1],
            "response_ids": [2],
            "response_logprobs": [0.0],
            "reward": 1.0,
            "success": True,
            "stop_reason": "done",
            "masked": False,
            "drop": False,
            "placeholder": False,
            "trainable": True,
            "num_chunks": 3,
            "episode_tokens": 6,
            "source": "expert",
            "replayed": True,
            "response_text": f"{name} {args}",
            "action": json.dumps([{"name": name, "arguments": args}]),
        }
        for i, (name, args) in enumerate(calls)
    ]
    write_trajectories(tmp_path / "demos.parquet", rows)
    assert load_demonstrations(tmp_path / "demos.parquet") == {
        "t": [f"{n} {a}" for n, a in calls[:2]]
    }


def test_rollback_starts_at_the_last_chunk_and_moves_earlier_once_learned():
    pick = anchor_picker("rollback", DEMOS, seed=0, state={})
    assert pick(0, Task(id="a", instruction="")) == 3
    state = next_rollback_state(
        {}, [("a", 3, True), ("a", 3, False), ("b", 1, False)], DEMOS, threshold=0.5
    )
    assert state == {"a": 2, "b": 1}
    state = next_rollback_state(state, [("a", 2, False), ("a", 2, False)], DEMOS, threshold=0.5)
    assert state == {"a": 2, "b": 1}
    state = next_rollback_state(state, [("a", 2, True), ("a", 1, False)], DEMOS, threshold=0.5)
    assert state == {"a": 1, "b": 1}
    assert next_rollback_state(state, [("a", 1, True)], DEMOS, threshold=0.5)["a"] == 1


@pytest.mark.podman
async def test_anchored_groups_replay_the_expert_prefix_and_mark_it(
    tmp_path, base_images, tiny_tokenizer
):
    # Any medium task (it looks, acts and checks). Not a service one: its sandboxes mostly
    # wait (the test took 84 s, 22 s of them CPU, against 22 s with this task).
    task = make_task("text-processing", "medium", task_seed(5, 0))
    save_tasks(tmp_path / "tasks.parquet", [task])
    demos = tmp_path / "demos.parquet"
    await demonstrate(
        DemonstrateConfig(tasks=tmp_path / "tasks.parquet", out=demos, progress=False),
        [task],
        tiny_tokenizer,
    )
    expert = load_demonstrations(demos)[task.id]
    steps = len(expert)  # the commands (a medium one looks, acts and checks); its done is no anchor
    chunks = {r["chunk_index"] for r in read_trajectories(demos).to_pylist()}
    assert steps >= 2 and len(chunks) == steps + 1  # the commands, then done

    # Rollback starts at the last command: the ones before it are replayed, the policy gives it.
    policy = ScriptedEngine(tiny_tokenizer, [expert[-1], DONE] * 2)
    config = RolloutConfig(
        tasks=tmp_path / "tasks.parquet",
        out=tmp_path / "traj.parquet",
        group_size=2,
        groups=1,
        redundancy=0,
        concurrency=1,
        max_turns=3,
        demonstrations=demos,
        anchoring="rollback",
    )
    summary = await rollout(config, [task], policy)

    rows = read_trajectories(config.out).to_pylist()
    assert {r["anchor"] for r in rows} == {steps} and all(r["source"] == "policy" for r in rows)
    for episode in {r["episode_id"] for r in rows}:
        chunks = sorted(
            (r for r in rows if r["episode_id"] == episode), key=lambda r: r["chunk_index"]
        )
        assert [c["replayed"] for c in chunks] == [True] * (steps - 1) + [False, False]
        assert [c["response_text"] for c in chunks] == [*expert, DONE]
        assert chunks[0]["success"]
    assert summary.episodes == 2
    assert read_state(config.anchor_state_path) == {task.id: steps - 1}  # all passed: earlier

    # One command earlier, a done-only policy fails: the rollback state stays.
    config.out, config.anchor_state = tmp_path / "traj2.parquet", config.anchor_state_path
    config.anchor_state_out = tmp_path / "anchors2.json"
    await rollout(config, [task], ScriptedEngine(tiny_tokenizer, [DONE] * 64))
    rows = read_trajectories(config.out).to_pylist()
    assert {r["anchor"] for r in rows} == {steps - 1} and not any(r["success"] for r in rows)
    for episode in {r["episode_id"] for r in rows}:
        replayed = [r["replayed"] for r in rows if r["episode_id"] == episode]
        assert sorted(replayed, reverse=True) == [True] * (steps - 2) + [False]
    assert read_state(config.anchor_state_out) == {task.id: steps - 1}
