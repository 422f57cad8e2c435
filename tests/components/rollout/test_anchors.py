"""Chunk-initialized resampling: anchor choice, rollback state, and anchored episodes in real sandboxes."""

from __future__ import annotations

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
from termrl.artifacts.trajectories import read_trajectories
from tests.agent.scripted import ScriptedEngine

DONE = '<tool_call>\n{"name": "done", "arguments": {}}\n</tool_call>'
DEMOS = {"a": ["c1", "c2", "c3"], "b": ["c1"]}


def test_parallel_anchors_spread_over_the_demonstration_and_skip_tasks_without_one():
    pick = anchor_picker("parallel", DEMOS, seed=0, state={})
    anchors = {pick(i, Task(id="a", instruction="")) for i in range(200)}
    assert anchors == {1, 2, 3}
    assert {pick(i, Task(id="b", instruction="")) for i in range(50)} == {1}
    assert {pick(i, Task(id="nodemo", instruction="")) for i in range(50)} == {1}
    assert [pick(i, Task(id="a", instruction="")) for i in range(20)] == [pick(i, Task(id="a", instruction="")) for i in range(20)]


def test_rollback_starts_at_the_last_chunk_and_moves_earlier_once_learned():
    pick = anchor_picker("rollback", DEMOS, seed=0, state={})
    assert pick(0, Task(id="a", instruction="")) == 3
    state = next_rollback_state({}, [("a", 3, True), ("a", 3, False), ("b", 1, False)], DEMOS, threshold=0.5)
    assert state == {"a": 2, "b": 1}
    state = next_rollback_state(state, [("a", 2, False), ("a", 2, False)], DEMOS, threshold=0.5)
    assert state == {"a": 2, "b": 1}
    state = next_rollback_state(state, [("a", 2, True), ("a", 1, False)], DEMOS, threshold=0.5)
    assert state == {"a": 1, "b": 1}
    assert next_rollback_state(state, [("a", 1, True)], DEMOS, threshold=0.5)["a"] == 1


@pytest.mark.podman
async def test_anchored_groups_replay_the_expert_prefix_and_mark_it(tmp_path, base_images, tiny_tokenizer):
    task = make_task("files-permissions", "easy", task_seed(5, 0))
    save_tasks(tmp_path / "tasks.parquet", [task])
    demos = tmp_path / "demos.parquet"
    await demonstrate(DemonstrateConfig(tasks=tmp_path / "tasks.parquet", out=demos, progress=False),
                      [task], tiny_tokenizer)
    expert = load_demonstrations(demos)[task.id]
    assert len(expert) == 2  # the solution's one command, then done

    # A policy that only ever says done: it succeeds exactly when the expert prefix solved the task.
    policy = ScriptedEngine(tiny_tokenizer, [DONE] * 64)
    config = RolloutConfig(tasks=tmp_path / "tasks.parquet", out=tmp_path / "traj.parquet", group_size=2,
                           groups=2, redundancy=0, concurrency=2, max_turns=2, demonstrations=demos,
                           anchoring="rollback")  # fmt: skip
    summary = await rollout(config, [task], policy)

    rows = read_trajectories(config.out).to_pylist()
    assert {r["anchor"] for r in rows} == {2} and all(r["source"] == "policy" for r in rows)
    for episode in {r["episode_id"] for r in rows}:
        chunks = sorted((r for r in rows if r["episode_id"] == episode), key=lambda r: r["chunk_index"])
        assert [c["replayed"] for c in chunks] == [True, False]
        assert chunks[0]["response_text"] == expert[0] and chunks[1]["response_text"] == DONE
        assert chunks[0]["success"]
    assert summary.episodes == 4
    assert read_state(config.anchor_state_path) == {task.id: 1}  # all succeeded: move earlier

    # From anchor 1 the done-only policy fails: the rollback state stays.
    config.out, config.anchor_state = tmp_path / "traj2.parquet", config.anchor_state_path
    config.anchor_state_out = tmp_path / "anchors2.json"
    await rollout(config, [task], ScriptedEngine(tiny_tokenizer, [DONE] * 64))
    rows = read_trajectories(config.out).to_pylist()
    assert {r["anchor"] for r in rows} == {1} and not any(r["replayed"] or r["success"] for r in rows)
    assert read_state(config.anchor_state_out) == {task.id: 1}
