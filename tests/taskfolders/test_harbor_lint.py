"""Harbor's own linter on termrl's exports: no schema findings (unknown config fields).

Harbor (``harbor`` on the package index) needs Python >= 3.12. The test uses
``$TERMRL_HARBOR_PYTHON`` or the first ``python3.14``/``python3.13``/``python3.12``
on PATH, installs Harbor into a fresh venv from the package index, and skips
with that reason when there is no such Python (the project itself runs on 3.11).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from termrl.artifacts.tasks import Task, TaskFile
from termrl.taskfolders import export_tasks, import_task_folders

FIXTURES = Path(__file__).parents[1] / "fixtures"
HARBOR = "harbor==0.26.*"


def _python_312() -> str | None:
    candidates = [os.environ.get("TERMRL_HARBOR_PYTHON", "")] + [
        shutil.which(f"python3.{m}") or "" for m in (14, 13, 12)
    ]
    for python in filter(None, candidates):
        done = subprocess.run(
            [python, "-c", "import sys; print(sys.version_info >= (3, 12))"],
            capture_output=True,
            text=True,
        )
        if done.stdout.strip() == "True":
            return python
    return None


@pytest.mark.slow
def test_harbor_lint_finds_no_schema_problems_in_exports(tmp_path):
    python = _python_312()
    if python is None:
        pytest.skip(
            "Harbor needs Python >= 3.12: set TERMRL_HARBOR_PYTHON or put python3.12+ on PATH"
        )
    subprocess.run([python, "-m", "venv", str(tmp_path / "venv")], check=True)
    subprocess.run(
        [str(tmp_path / "venv" / "bin" / "pip"), "install", "-q", HARBOR], check=True, timeout=900
    )
    tasks = import_task_folders([FIXTURES / "terminal-bench", FIXTURES / "tb-corpus"]).tasks
    tasks.append(
        Task(
            id="generated",
            instruction="Serve on the port.",
            source="synthetic",
            seed=3,
            metadata={"generator": "port-server", "port": 8123},
            environment_files=[TaskFile("Dockerfile", b"FROM debian:bookworm\n")],
            test_files=[TaskFile("test.sh", b"echo 1 > /logs/verifier/reward.txt\n", 0o755)],
        )
    )
    export_tasks(tasks, tmp_path / "out")
    done = subprocess.run(
        [str(tmp_path / "venv" / "bin" / "harbor"), "lint", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    print(done.stdout[-5000:], done.stderr[-2000:])
    assert "unknown-config-field" not in done.stdout + done.stderr
