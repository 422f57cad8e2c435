"""The verify stage admits scheduled-jobs tasks at every difficulty, on real podman sandboxes.

Verify once rejected every one of them: its state-replay probe counted cron words as
asking for a live process (a cron job is a crontab file the tests read and run as cron
would), and the hard solution carried a chmod that changed nothing, which ablation flagged.
Admission here means the golden solution passes, doing nothing fails, every step is checked
and the tests pass on the solution's replayed files: each check is asserted by name.
"""

from __future__ import annotations

import json

import pytest

from components.synthesize.generate import make_task
from components.verify.config import VerifyConfig
from components.verify.stage import main
from termrl.artifacts import read_verdicts, save_tasks

pytestmark = [pytest.mark.podman, pytest.mark.slow]


def _verify_one(difficulty: str, seed: int, tmp_path) -> dict:
    task = make_task("scheduled-jobs", difficulty, seed)
    save_tasks(tmp_path / "tasks.parquet", [task])
    config = VerifyConfig(
        tasks=str(tmp_path / "tasks.parquet"),
        out=str(tmp_path / "verdicts.parquet"),
        admitted=str(tmp_path / "admitted.parquet"),
        repeats=1,
        judges=(),
        progress=False,
    )
    main(config)
    [row] = read_verdicts(config.out).to_pylist()
    return row


def _assert_admitted(row: dict) -> None:
    checks = json.loads(row["checks"])
    outcomes = {name: check["outcome"] for name, check in checks.items()}
    assert row["admitted"] and row["reason"] == "admitted", (row["task_id"], checks)
    assert outcomes["ground_truth"] == "pass" and outcomes["noop"] == "pass", outcomes
    # The tests pass on the replayed crontab alone, and that is not held against them.
    assert outcomes["state_replay"] == "pass", checks["state_replay"]
    assert checks["state_replay"]["tests_passed"] is True
    assert outcomes["ablation"] in ("pass", "skipped"), checks["ablation"]


@pytest.mark.ci
def test_verify_admits_an_easy_scheduled_job(base_images, tmp_path):
    _assert_admitted(_verify_one("easy", 0, tmp_path))


@pytest.mark.parametrize(("difficulty", "seed"), [("medium", 1), ("hard", 2)])
def test_verify_admits_medium_and_hard_scheduled_jobs(base_images, tmp_path, difficulty, seed):
    _assert_admitted(_verify_one(difficulty, seed, tmp_path))
