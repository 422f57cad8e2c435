"""End to end: Harbor 1.4 tasks import and run as Harbor runs them, offline.

- ``separate-verifier``: ``environment_mode = "separate"``; the tests run in a
  fresh sandbox of the task's image (with its own network, none) fed only the
  ``artifacts`` and what the ``collect`` command wrote to /logs/artifacts; a
  scratch file the solution left elsewhere must not reach them;
- ``agent-user``: ``[agent].user`` a non-root user (the solution's files are
  its own), ``[verifier].user = "root"`` (the tests read a root-only file),
  ``workdir``, ``[environment.env]``, ``[solution.env]``, ``[verifier.env]``;
- ``multi-step``: two ``[[steps]]`` in one sandbox, each with its own
  instruction, solution and tests over the task's shared ``tests/``; the first
  gates the second (``min_reward``), the reward is their mean.

The oracle must pass each and doing nothing must fail each.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from components.eval.config import EvalConfig
from components.eval.stage import main
from termrl.artifacts.eval_results import read_eval_results
from termrl.sandbox.settings import SandboxSettings
from termrl.taskfolders import import_task_folders

FIXTURES = Path(__file__).parents[1] / "fixtures" / "harbor-1.4"
ALL_TASKS = ["agent-user", "multi-step", "separate-verifier"]


@pytest.mark.slow
@pytest.mark.podman
@pytest.mark.parametrize(
    ("task_ids", "backend"),
    [
        pytest.param(["separate-verifier"], "podman", marks=pytest.mark.ci, id="ci"),
        pytest.param(ALL_TASKS, "podman", id="all"),
        pytest.param(["agent-user"], "bwrap", id="agent-user-bwrap"),
    ],
)
def test_oracle_passes_and_nop_fails_on_harbor_1_4_tasks(task_ids, backend, base_images, tmp_path):
    tasks = {t.id: t for t in import_task_folders([FIXTURES]).tasks}
    assert sorted(tasks) == ALL_TASKS
    rows = {}
    for agent in ("oracle", "nop"):
        config = EvalConfig(
            tasks=str(FIXTURES),
            agent=agent,
            out=str(tmp_path / f"{agent}.parquet"),
            task_ids=task_ids,
            sandbox=SandboxSettings(backend),
            progress=False,
        )
        main(config)
        rows[agent] = {r["task_id"]: r for r in read_eval_results(config.out).to_pylist()}
    assert {t: r["passed"] for t, r in rows["oracle"].items()} == dict.fromkeys(task_ids, True), {
        t: (r["error"], (r["test_output"] or "")[-1500:])
        for t, r in rows["oracle"].items()
        if not r["passed"]
    }
    # Each nop trial reached the tests, which ran and failed (not a broken environment).
    assert {t: (r["passed"], r["failure_mode"]) for t, r in rows["nop"].items()} == dict.fromkeys(
        task_ids, (False, "wrong-result")
    ), {t: (r["error"], (r["test_output"] or "")[-1500:]) for t, r in rows["nop"].items()}
    if "multi-step" in task_ids:
        # The oracle scored both steps; nop's first step missed its min_reward, so the second never ran.
        assert rows["oracle"]["multi-step"]["test_output"].count("=== step ") == 2
        assert rows["nop"]["multi-step"]["test_output"].count("=== step ") == 1
