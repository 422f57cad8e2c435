"""Medium demonstrations: several turns (look, act, check), and each replays to a pass.

The replay test runs the demonstrate stage on one medium task of every family in real podman
sandboxes (slow: about 24 image builds); the shape test reads the same demonstrations' commands.
"""

from __future__ import annotations

import pytest

from components.demonstrate.config import DemonstrateConfig
from components.demonstrate.stage import main
from components.synthesize.families import FAMILIES
from components.synthesize.generate import make_task, task_seed
from components.verify.readonly import reads_only
from termrl.agent.demonstration import demonstration_commands
from termrl.artifacts.tasks import save_tasks
from termrl.artifacts.trajectories import read_trajectories

SEED = 35
ACT_ONLY = {
    # The task is to write a program or a hook from a spec: nothing to look at first.
    "git",
    "shell-scripting",
    "python-bugfix",  # looks (cat) and rewrites the file; its check would run the code
    # They look and check, with commands verify's ablation treats as acting or inert
    # (``cd dir && sha256sum -c``, ``git apply --check``, a loop over ``od``, ``bash -lc``, ``ps``).
    "checksums",
    "diff-patch",
    "compression",
    "shell-env",
    "process-control",
}
"""Families whose medium demonstrations do not both start and end with a step that only reads."""


def medium_tasks() -> list:
    return [make_task(family, "medium", task_seed(SEED, i)) for i, family in enumerate(FAMILIES)]


def test_medium_demonstrations_look_act_and_check():
    for task in medium_tasks():
        commands = demonstration_commands(task)
        assert len(commands) >= 2, f"{task.family}: one turn: {commands}"
        assert any(not reads_only(c) for c in commands), f"{task.family}: nothing acts"
        if task.family not in ACT_ONLY:
            assert len(commands) >= 3 and reads_only(commands[0]) and reads_only(commands[-1]), (
                f"{task.family}: does not look first and check last: {commands}"
            )


@pytest.mark.slow
@pytest.mark.podman
def test_every_medium_demonstration_replays_to_a_pass(tmp_path, base_images, tiny_model_dir):
    tasks = medium_tasks()
    save_tasks(tmp_path / "tasks.parquet", tasks)
    config = DemonstrateConfig(
        tasks=tmp_path / "tasks.parquet",
        out=tmp_path / "demos.parquet",
        model=str(tiny_model_dir),
        every_phrasing=False,  # the same commands under every voice (test_stage.py)
        progress=False,
    )

    summary = main(config)

    assert summary.dropped == {} and summary.demonstrations == len(tasks) == len(FAMILIES)
    rows = read_trajectories(config.out).to_pylist()
    turns: dict[str, int] = {}
    for row in rows:
        assert row["success"] and row["reward"] == 1.0 and row["stop_reason"] == "done"
        turns[row["task_id"]] = turns.get(row["task_id"], 0) + 1
    # Every bash turn of the solution, then done.
    assert turns == {t.id: len(demonstration_commands(t)) + 1 for t in tasks}
