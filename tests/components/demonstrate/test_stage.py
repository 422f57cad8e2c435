"""The demonstrate stage on real sandboxes: replays pass, broken solutions are counted, reruns resume.

A multi-step task gets no demonstration (rollout never anchors one): counted, never a crash.
"""

from __future__ import annotations

import dataclasses

import pytest

from components.demonstrate.config import DemonstrateConfig
from components.demonstrate.stage import main
from components.synthesize.generate import make_task, task_seed
from termrl.artifacts.tasks import TaskFile, save_tasks
from termrl.artifacts.trajectories import read_trajectories
from termrl.taskfolders import read_task_folder
from tests.taskfolders.test_harbor14_run import FIXTURES

pytestmark = pytest.mark.podman


def test_demonstrations_replay_to_a_pass_and_resume(tmp_path, base_images, tiny_model_dir):
    good = make_task("files-permissions", "easy", task_seed(3, 0))
    broken = dataclasses.replace(
        make_task("git", "easy", task_seed(3, 1)),
        id="broken",
        solution_files=[TaskFile("solve.sh", b"true\n")],
    )
    no_solution = dataclasses.replace(
        make_task("git", "easy", task_seed(3, 2)),
        id="bare",
        solution_files=[],
        solution_command=None,
    )
    multi_step = read_task_folder(FIXTURES / "multi-step")
    save_tasks(tmp_path / "tasks.parquet", [good, broken, no_solution, multi_step])
    config = DemonstrateConfig(
        tasks=tmp_path / "tasks.parquet",
        out=tmp_path / "demos.parquet",
        model=str(tiny_model_dir),
        progress=False,
    )

    summary = main(config)

    assert (summary.tasks, summary.demonstrations) == (4, 1)
    assert summary.dropped == {
        "replay failed its tests": 1,
        "the task has no solution": 1,
        "multi-step task": 1,
    }
    rows = read_trajectories(config.out).to_pylist()
    assert {r["task_id"] for r in rows} == {good.id}
    assert all(r["source"] == "expert" and r["replayed"] and r["success"] for r in rows)
    assert [r["chunk_index"] for r in rows] == list(range(len(rows)))
    assert rows[-1]["action"] == '[{"name": "done", "arguments": {}}]'
    assert "[exit code: 0]" in rows[0]["observation"]

    parts = sorted(p.name for p in config.parts_dir.iterdir())
    again = main(config)  # every task is done: nothing runs, the same artifact comes out
    assert sorted(p.name for p in config.parts_dir.iterdir()) == parts
    assert again.demonstrations == 1 and read_trajectories(config.out).to_pylist() == rows
