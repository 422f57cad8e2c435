"""End to end: the Terminal-Bench fixtures build and score in podman through the eval stage.

The oracle (reference solutions, solution.yaml steps in order) must pass every
task and doing nothing must fail every one, with the tests run the official
way: copied to /tests only at test time, run from the image's WORKDIR with
TEST_DIR=/tests, no network, scored by pytest's report (1.0) or the reward
file (Harbor). The task folders must come out of it byte for byte unchanged.
"""

from __future__ import annotations

import hashlib
import os

import pytest

from components.eval.config import EvalConfig
from components.eval.stage import main
from termrl.artifacts.eval_results import read_eval_results
from termrl.sandbox import SandboxSpec
from termrl.taskfolders import import_task_folders
from termrl.tbcompat.timing import oracle_timeout_warnings

from .conftest import TB_FIXTURES

ALL_TASKS = ["active-users", "sum-column", "word-frequency", "yaml-to-json"]
CI_TASKS = ["active-users"]
"""A 1.0 task on a stand-in the base images already hold (Harbor's format runs by default in
test_compat_fixtures.py): the others start from python-3-13 bookworm, whose stand-in compiles
CPython on first use (about 15 minutes on a fresh machine), so they run in the slow set."""


def _snapshot(root) -> dict[str, tuple[str, int]]:
    return {
        str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest(), os.stat(p).st_mode)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.mark.slow
@pytest.mark.podman
@pytest.mark.parametrize(
    "task_ids",
    [pytest.param(CI_TASKS, marks=pytest.mark.ci, id="ci"), pytest.param(ALL_TASKS, id="all")],
)
def test_oracle_passes_and_nop_fails_on_every_fixture(task_ids, base_images, tmp_path):
    before = _snapshot(TB_FIXTURES)
    tasks = [t for t in import_task_folders([TB_FIXTURES]).tasks if t.id in task_ids]
    assert sorted(t.id for t in tasks) == task_ids
    assert all(
        SandboxSpec.from_task(t).network == "none" for t in tasks
    )  # agent and tests both offline

    rows = {}
    for agent in ("oracle", "nop"):
        config = EvalConfig(
            tasks=str(TB_FIXTURES),
            agent=agent,
            out=str(tmp_path / f"{agent}.parquet"),
            task_ids=task_ids,
            progress=False,
        )
        main(config)
        rows[agent] = read_eval_results(config.out).to_pylist()
        for row in rows[agent]:
            print(
                f"{agent:6} {row['task_id']:15} passed={row['passed']} agent={row['agent_sec']:.1f}s "
                f"tests={row['test_sec']:.1f}s wall={row['wall_sec']:.1f}s"
            )

    oracle = {r["task_id"]: r for r in rows["oracle"]}
    assert {t: r["passed"] for t, r in oracle.items()} == dict.fromkeys(task_ids, True), {
        t: (r["error"], (r["test_output"] or "")[-1500:])
        for t, r in oracle.items()
        if not r["passed"]
    }
    nop = {r["task_id"]: r for r in rows["nop"]}
    # Each nop trial reached the tests, which ran and failed (not a broken environment).
    assert {
        t: (r["passed"], r["tests_passed"], r["failure_mode"]) for t, r in nop.items()
    } == dict.fromkeys(task_ids, (False, False, "wrong-result"))
    for row in rows["nop"]:
        assert (
            "FAILED" in row["test_output"] and "passed" not in row["test_output"].splitlines()[-1]
        )
    for warning in oracle_timeout_warnings(tasks, rows["oracle"]):
        print("warning:", warning)  # reported, not asserted: timings depend on the machine's load
    assert _snapshot(TB_FIXTURES) == before  # import and eval left the task bytes alone
