"""The exit-grace hooks: a finished pytest run that a leftover thread keeps alive ends in time.

Run for real here: a pytest process with the hooks on its PYTHONPATH, as the
test phase gives them to a task's tests (``termrl.tbcompat.testphase``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from termrl.errors import ConfigError
from termrl.tbcompat import testphase
from termrl.tbcompat.testphase import EXIT_GRACE_SEC, exit_grace_sec

HOOKS = Path(testphase.__file__).parent / "pyhooks"
LEAVES_A_THREAD = """
import threading, time

def test_leaves_a_thread_running():
    threading.Thread(target=time.sleep, args=(3600,), name="leftover").start()
    assert {outcome}
"""


def _pytest(tmp_path: Path, outcome: str, grace: str | None, timeout: float):
    (tmp_path / "test_thread.py").write_text(LEAVES_A_THREAD.format(outcome=outcome))
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    env["PYTHONPATH"] = str(HOOKS)
    if grace is not None:
        env["TERMRL_EXIT_GRACE_SEC"] = grace
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_thread.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return done, time.monotonic() - started


@pytest.mark.parametrize(("outcome", "status"), [("True", 0), ("False", 1)])
def test_a_finished_run_ends_with_pytests_status_after_the_grace_period(tmp_path, outcome, status):
    done, took = _pytest(tmp_path, outcome, "1", timeout=120)  # the thread sleeps an hour
    assert done.returncode == status, done.stdout + done.stderr
    assert ("1 passed" if status == 0 else "1 failed") in done.stdout
    assert "ending it with pytest's exit status" in done.stderr and "leftover" in done.stderr
    assert took < 120


def test_without_the_setting_pytest_waits_for_the_thread_as_harbor_does(tmp_path):
    with pytest.raises(subprocess.TimeoutExpired):
        _pytest(tmp_path, "True", None, timeout=15)


def test_the_children_of_the_tests_do_not_inherit_the_plugin(tmp_path):
    (tmp_path / "test_env.py").write_text(
        "import os\n\ndef test_env():\n    assert 'PYTEST_PLUGINS' not in os.environ\n"
    )
    env = {**os.environ, "PYTHONPATH": str(HOOKS), "TERMRL_EXIT_GRACE_SEC": "5"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_env.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("value", "grace"), [(None, EXIT_GRACE_SEC), ("12", 12.0), ("wait", None), ("0", None)]
)
def test_the_grace_setting(monkeypatch, value, grace):
    if value is None:
        monkeypatch.delenv("TERMRL_EXIT_GRACE_SEC", raising=False)
    else:
        monkeypatch.setenv("TERMRL_EXIT_GRACE_SEC", value)
    assert exit_grace_sec() == grace


def test_a_bad_grace_setting_is_named(monkeypatch):
    monkeypatch.setenv("TERMRL_EXIT_GRACE_SEC", "soon")
    with pytest.raises(ConfigError, match="TERMRL_EXIT_GRACE_SEC"):
        exit_grace_sec()
