"""Quarantine and behaviour shaping through the stage's own code, without sandboxes.

``without_quarantined`` + ``check_mode_runs`` + ``plan_groups`` is what
``rollout`` runs before any episode; ``_finish`` is the merge that turns
finished episodes (part files) into the trajectories and metrics artifacts.
"""

from __future__ import annotations

import pytest

from components.rollout.config import RolloutConfig
from components.rollout.env_manager import plan_groups
from components.rollout.stage import _finish, check_mode_runs, fingerprint, without_quarantined
from components.rollout.writer import PartWriter
from termrl.artifacts import Task, read_rollout_metrics, read_trajectories
from termrl.errors import ConfigError
from tests.components.rollout.records import record

TASKS = [Task(id=f"t{i}", instruction=f"task {i}") for i in range(4)]


def test_quarantined_tasks_are_left_out_of_the_plan():
    drawable = without_quarantined(TASKS, ("t1", "t3", "not-a-task"))
    assert [t.id for t in drawable] == ["t0", "t2"]
    plans = plan_groups(drawable, 6, seed=0, policy_version=0)
    assert [p.task.id for p in plans] == ["t0", "t2"] * 3  # the groups cycle over the rest
    # a changed quarantine is a different rollout: its parts are not resumed
    config = RolloutConfig()
    assert fingerprint(config, drawable) != fingerprint(config, without_quarantined(TASKS, ("t1",)))
    assert without_quarantined(TASKS, ()) == TASKS


def test_quarantining_every_task_is_refused():
    with pytest.raises(ConfigError, match="quarantine leaves out every one of the 4 task"):
        without_quarantined(TASKS, ("t0", "t1", "t2", "t3"))


def test_cli_native_mode_refuses_every_multi_step_task_up_front():
    tasks = [*TASKS, *(Task(id=f"m{i}", instruction="", steps=[{"name": "a"}]) for i in range(2))]
    check_mode_runs(RolloutConfig(), tasks)  # roll-managed runs them
    with pytest.raises(ConfigError) as info:
        check_mode_runs(RolloutConfig(mode="cli-native"), tasks)
    assert [p.split(" has ")[0] for p in info.value.problems] == ["task m0", "task m1"]
    check_mode_runs(RolloutConfig(mode="cli-native"), TASKS)


def test_the_merge_records_shaping_and_the_quarantine(tmp_path):
    config = RolloutConfig(
        out=tmp_path / "traj.parquet",
        group_size=2,
        groups=2,
        loop_penalty=0.1,
        destructive_penalty=0.5,
        test_access_penalty=0.25,
    )
    writer = PartWriter(config.parts_dir, {})
    for episode in [
        record(0, 0, task="t0", finished_at=1.0),
        record(0, 1, task="t0", commands=("pytest",) * 3, exit_codes=(1, 1, 1), finished_at=2.0),
        record(1, 0, task="t2", commands=("ls /tests", "rm -rf /"), success=False, finished_at=3.0),
        record(1, 1, task="t2", success=False, finished_at=4.0),
    ]:
        writer.write(episode)
    summary = _finish(config, writer, 1.0, 4, quarantined=2)
    rows = read_trajectories(config.out).to_pylist()
    shaping = {r["episode_id"]: (r["reward"], r["shaping"]) for r in rows}
    # the outcome reward is untouched; the looping pass gets −0.1, the destructive test reader −0.75
    assert shaping == {
        "g0-e0": (1.0, 0.0),
        "g0-e1": (1.0, pytest.approx(-0.1)),
        "g1-e0": (0.0, pytest.approx(-0.75)),
        "g1-e1": (0.0, 0.0),
    }
    metrics = {
        r["metric"]: r["value"]
        for r in read_rollout_metrics(config.metrics_path).to_pylist()
        if r["scope"] == "global"
    }
    assert metrics["rollout/quarantined_tasks"] == 2 and metrics["rollout/episodes_shaped"] == 2
    assert metrics["rollout/loop_episodes"] == 1 and metrics["rollout/destructive_episodes"] == 1
    assert "  quarantine: 2 task(s) left out" in summary.lines
    assert any(line.startswith("  shaping: 2 episode(s) penalised") for line in summary.lines)
