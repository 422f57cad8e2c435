"""The command line, killed mid-run and rerun: finished episodes are kept, not redone."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest
from click.testing import CliRunner

from components.rollout.cli import rollout
from termrl.artifacts import read_trajectories, save_tasks
from tests.components.rollout.policy import broken_build_task, garbage_reward_task, word_task

ROOT = Path(__file__).resolve().parents[3]


def test_bad_options_are_reported_together(tmp_path):
    result = CliRunner().invoke(
        rollout,
        [
            "--tasks",
            str(tmp_path / "none.parquet"),
            "--group-size",
            "0",
            "--groups",
            "1",
            "--max-turns",
            "1",
            "--out",
            str(tmp_path / "t.parquet"),
            "--set",
            "drop_ratio_limit=2",
        ],
    )
    assert result.exit_code == 1
    for fragment in ("group_size must be at least 1", "drop_ratio_limit", "does not exist"):
        assert fragment in result.output
    result = CliRunner().invoke(
        rollout,
        [
            "--tasks",
            "x",
            "--group-size",
            "1",
            "--groups",
            "1",
            "--max-turns",
            "1",
            "--out",
            "t.parquet",
            "--set",
            "no_such_field=1",
        ],
    )
    assert "unknown setting 'no_such_field'" in result.output
    # --set may name a field an option also sets: it wins, and its value is checked like any other.
    result = CliRunner().invoke(
        rollout,
        [
            "--tasks",
            str(tmp_path / "none.parquet"),
            "--group-size",
            "1",
            "--groups",
            "1",
            "--max-turns",
            "1",
            "--out",
            str(tmp_path / "t.parquet"),
            "--redundancy",
            "1",
            "--set",
            "redundancy=-1",
        ],
    )
    assert result.exit_code == 1 and "redundancy" in result.output and result.exception is not None
    assert isinstance(result.exception, SystemExit), result.exception


def _parts(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in folder.glob("ep-*.parquet")}


@pytest.mark.podman
@pytest.mark.slow
def test_a_killed_rollout_resumes_without_losing_finished_episodes(
    base_image, tiny_model_dir, tmp_path
):
    tasks = [
        word_task("kr-a", "ant"),
        word_task("kr-b", "bee"),
        broken_build_task("kr-broken"),
        garbage_reward_task("kr-garbage"),
    ]
    save_tasks(tmp_path / "tasks.parquet", tasks)
    out = tmp_path / "trajectories.parquet"
    argv = [
        sys.executable,
        "-m",
        "components.rollout",
        "--tasks",
        str(tmp_path / "tasks.parquet"),
        "--model",
        str(tiny_model_dir),
        "--group-size",
        "2",
        "--groups",
        "4",
        "--redundancy",
        "0",
        "--max-turns",
        "2",
        "--concurrency",
        "2",
        "--out",
        str(out),
        "--set",
        "max_new_tokens=24",
        "--set",
        "context_window=2048",
        "--set",
        "keep_parts=true",
    ]
    parts_dir = out.with_name(out.name + ".parts")
    first = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 600
    while len(_parts(parts_dir)) < 3 and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    before = _parts(parts_dir)
    assert 3 <= len(before) < 8, first.stdout.read().decode()[-3000:]
    assert not out.exists()
    kept = {name: read_trajectories(parts_dir / name).to_pylist() for name in before}

    second = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    ran_now = int(re.search(r"rollout: 8 episodes \((\d+) run now\)", second.stdout).group(1))
    assert ran_now == 8 - len(before)
    after = _parts(parts_dir)
    assert all(after[name] == mtime for name, mtime in before.items())  # never rewritten
    episodes: dict[str, list[dict]] = defaultdict(list)
    for row in read_trajectories(out).to_pylist():
        episodes[row["episode_id"]].append(row)
    assert len(episodes) == 8
    for rows in kept.values():
        final = episodes[rows[0]["episode_id"]]
        if not rows[0]["placeholder"]:
            # The same sampled tokens: the episode was kept, not run again.
            assert [r["response_ids"] for r in final] == [r["response_ids"] for r in rows]
    failures = {rows[0]["task_id"]: rows[0]["failure_type"] for rows in episodes.values()}
    assert failures["kr-broken"] == "EnvInitFailed" and failures["kr-garbage"] == "RewardFailed"
    assert failures["kr-a"] is None and failures["kr-b"] is None
