"""taskrun: how a task's outcome is read (unit level; the real-sandbox tests are below)."""

from __future__ import annotations

from pathlib import Path

import pytest

from termrl.artifacts import Task, TaskFile
from termrl.taskfolders import read_task_folder
from termrl.taskrun import parse_pytest_report, solution_steps

FIXTURES = Path(__file__).parent / "fixtures" / "tasks"

PYTEST_OK = """\
============================= test session starts ==============================
collected 2 items

../tests/test_outputs.py ..                                              [100%]

=========================== short test summary info ============================
PASSED ../tests/test_outputs.py::test_reversed_file_exists
PASSED ../tests/test_outputs.py::test_reversed_order
============================== 2 passed in 0.01s ===============================
"""


def test_pytest_report_needs_a_pass_and_no_failure_or_error():
    assert parse_pytest_report(PYTEST_OK)
    assert not parse_pytest_report(PYTEST_OK.replace("PASSED ../tests/test_outputs.py::test_reversed_order",
                                                      "FAILED ../tests/test_outputs.py::test_reversed_order - x"))
    assert not parse_pytest_report(PYTEST_OK + "ERROR ../tests/test_outputs.py - ImportError\n")
    assert not parse_pytest_report("collected 0 items\n")  # nothing passed
    # A test *named* PASSED inside a line is not a report line.
    assert not parse_pytest_report("test_outputs.py::test_PASSED FAILED\n")


def test_solution_steps_come_from_the_command_or_the_yaml_list():
    hello = read_task_folder(FIXTURES / "harbor" / "hello-file")
    assert solution_steps(hello) == ["bash /solution/solve.sh"]
    runnable = read_task_folder(FIXTURES / "legacy" / "utilities" / "make-runnable")
    assert solution_steps(runnable) == ["chmod +x /app/greet.sh", "/app/greet.sh"]


def test_a_broken_solution_yaml_is_reported_with_the_task_id():
    task = Task(id="t", instruction="x", solution_command=None,
                solution_files=[TaskFile("solution.yaml", b"- command: [unclosed\n")])
    with pytest.raises(ValueError, match="task t: unreadable solution.yaml"):
        solution_steps(task)


async def score_fixture(relative: str, *, solve: bool):
    from termrl.sandbox import SandboxManager, SandboxSpec
    from termrl.taskrun import run_solution, run_tests

    task = read_task_folder(FIXTURES / relative)
    async with SandboxManager() as manager, await manager.create(SandboxSpec.from_task(task)) as session:
        await session.exec("cd / && mkdir -p /tmp/elsewhere && cd /tmp/elsewhere", timeout=10)
        if solve:
            solution = await run_solution(session, task)
            assert solution.exit_code == 0 and not solution.timed_out, solution.output
        return await run_tests(session, task)


@pytest.mark.podman
@pytest.mark.parametrize("relative", ["harbor/hello-file", "legacy/utilities/make-runnable"])
async def test_solution_passes_and_doing_nothing_fails_in_a_real_sandbox(relative):
    solved = await score_fixture(relative, solve=True)
    assert solved.passed and solved.reward == 1.0, solved.output
    untouched = await score_fixture(relative, solve=False)
    assert not untouched.passed and untouched.reward == 0.0
