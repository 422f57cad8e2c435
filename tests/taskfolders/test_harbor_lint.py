"""Harbor's own linter on termrl's exports: no schema or task-file findings in any of them.

Harbor (``harbor`` on the package index) needs Python >= 3.12. The test uses
``$TERMRL_HARBOR_PYTHON``, else the first ``python3.14``/``python3.13``/``python3.12``
on PATH, else pyenv's newest (``$PYENV_ROOT`` or ~/.pyenv, ``versions/*/bin/python3.1[2-9]``),
and skips with that reason when there is none (the project itself runs on 3.11).
Harbor is installed from the package index into a venv kept under the termrl cache
(``$TERMRL_CACHE/harbor-venv/harbor-<version>-py<python>``), reused while it works.

``harbor lint`` takes explicit task folders, so every exported folder is linted
on its own with ``--json`` and the findings are parsed: a folder that Harbor
could not lint fails the test, and the number linted must equal the number
exported, so it never passes by linting nothing. Harbor's compose checks run
``docker compose config``; without the Docker CLI and its Compose plugin the
folders with an ``environment/docker-compose.yaml`` are left out, and the test
prints which and why. Design recommendations (``shared-verifier``: run the
verifier in a separate sandbox) are not schema problems and are allowed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from termrl.artifacts.tasks import Task, TaskFile
from termrl.sandbox.base_images import cache_root
from termrl.taskfolders import export_tasks, import_task_folders

FIXTURES = Path(__file__).parents[1] / "fixtures"
HARBOR_VERSION = "0.26"
SCHEMA_RULES = {"unknown-config-field", "invalid-task-config", "invalid-task-files"}


def _python_312() -> str | None:
    """A Python >= 3.12 for Harbor: $TERMRL_HARBOR_PYTHON, then PATH, then pyenv's (newest first)."""
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    candidates = [
        os.environ.get("TERMRL_HARBOR_PYTHON", ""),
        *(shutil.which(f"python3.{m}") or "" for m in (14, 13, 12)),
        *sorted(
            (str(p) for p in pyenv.glob("versions/*/bin/python3.1[2-9]")),
            key=lambda p: [int(n) if n.isdigit() else 0 for n in Path(p).parts[-3].split(".")],
            reverse=True,
        ),
    ]
    for python in filter(None, candidates):
        try:
            done = subprocess.run(
                [python, "-c", "import sys; print(sys.version_info >= (3, 12))"],
                capture_output=True,
                text=True,
                timeout=60,
            )
        except OSError:
            continue
        if done.stdout.strip() == "True":
            return python
    return None


def _harbor(python: str) -> Path:
    """Harbor's CLI, from a venv under the termrl cache (made, or remade, when it does not work)."""
    version = subprocess.run(
        [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    venv = cache_root() / "harbor-venv" / f"harbor-{HARBOR_VERSION}-py{version}"
    harbor = venv / "bin" / "harbor"
    if (venv / ".complete").exists():
        works = subprocess.run([str(harbor), "--version"], capture_output=True, timeout=120)
        if works.returncode == 0:
            return harbor
    shutil.rmtree(
        venv, ignore_errors=True
    )  # a venv cannot be moved: built in place, marked when done
    venv.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=300)
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", f"harbor=={HARBOR_VERSION}.*"],
        check=True,
        timeout=900,
    )
    (venv / ".complete").touch()
    return harbor


def _compose_available() -> bool:
    try:
        done = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30)
    except OSError:
        return False
    return done.returncode == 0


def _exported_tasks() -> list[Task]:
    """Every fixture task in every layout, and a generated task with family parameters."""
    report = import_task_folders(
        [FIXTURES / name for name in ("tasks", "terminal-bench", "tb-corpus", "harbor-1.4")]
    )
    assert not report.errors, report.errors
    return report.tasks + [
        Task(
            id="generated",
            instruction="Serve on the port.",
            source="synthetic",
            seed=3,
            metadata={"generator": "port-server", "port": 8123},
            environment_files=[TaskFile("Dockerfile", b"FROM debian:bookworm\n")],
            test_files=[TaskFile("test.sh", b"echo 1 > /logs/verifier/reward.txt\n", 0o755)],
        )
    ]


@pytest.mark.slow
def test_harbor_lint_finds_no_schema_problems_in_exports(tmp_path):
    python = _python_312()
    if python is None:
        pytest.skip(
            "Harbor needs Python >= 3.12: set TERMRL_HARBOR_PYTHON, put python3.12+ on PATH "
            "or install one with pyenv"
        )
    harbor = _harbor(python)
    folders = export_tasks(_exported_tasks(), tmp_path / "out")
    compose = [f for f in folders if (f / "environment" / "docker-compose.yaml").exists()]
    left_out = [] if _compose_available() else compose
    if left_out:
        print(
            f"left out (Harbor's compose checks need `docker compose`, which is not here): "
            f"{', '.join(f.name for f in left_out)}"
        )

    findings: dict[str, list[dict]] = {}
    for folder in folders:
        if folder in left_out:
            continue
        done = subprocess.run(
            [str(harbor), "lint", "--json", str(folder)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        # 0: no findings, 1: findings; anything else is Harbor failing to lint the folder.
        assert done.returncode in (0, 1), (folder.name, done.returncode, done.stderr[-2000:])
        findings[folder.name] = json.loads(done.stdout)
    for name, found in findings.items():
        rules = sorted({f["rule"] for f in found}) or ["none"]
        print(f"{name}: {', '.join(rules)}")

    assert len(findings) == len(folders) - len(left_out) > 0
    problems = [
        f"{name}: {Path(f['path']).relative_to(tmp_path / 'out')} [{f['rule']}] {f['message']}"
        for name, found in findings.items()
        for f in found
        if f["rule"] in SCHEMA_RULES
    ]
    assert problems == [], "\n".join(problems)
