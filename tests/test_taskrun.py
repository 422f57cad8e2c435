"""taskrun: how a task's outcome is read, and how a task gets its sandbox (unit level; real-sandbox tests below)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from termrl.artifacts import Task, TaskFile
from termrl.errors import EnvInitFailed, ResetFailed, RewardFailed, SandboxDied, SandboxUnavailable
from termrl.reward import parse_pytest_report
from termrl.sandbox.spec import SandboxSpec
from termrl.taskfolders import read_task_folder
from termrl.taskrun import solution_steps
from termrl.taskrun.scoring import _write_host_dirs

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
    assert not parse_pytest_report(
        PYTEST_OK.replace(
            "PASSED ../tests/test_outputs.py::test_reversed_order",
            "FAILED ../tests/test_outputs.py::test_reversed_order - x",
        )
    )
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
    task = Task(
        id="t",
        instruction="x",
        solution_command=None,
        solution_files=[TaskFile("solution.yaml", b"- command: [unclosed\n")],
    )
    with pytest.raises(ValueError, match="task t: unreadable solution.yaml"):
        solution_steps(task)


async def score_fixture(relative: str, *, solve: bool):
    from termrl.sandbox import SandboxManager, SandboxSpec
    from termrl.taskrun import run_solution, run_tests

    task = read_task_folder(FIXTURES / relative)
    async with (
        SandboxManager() as manager,
        await manager.create(SandboxSpec.from_task(task)) as session,
    ):
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


# --- TaskSandboxes: the one path from a task to a ready sandbox -----------------------------------

LEFTOVER_DOCKERFILE = (
    b"FROM termrl/base:bookworm\nWORKDIR /app\n"
    b"RUN mkdir -p /tests /solution /logs/verifier && echo 'assert True' > /tests/test_secret.py"
    b" && echo 'echo the answer' > /solution/solve.sh && echo 1 > /logs/verifier/reward.txt\n"
)
"""An image whose set-up left a task's tests, solution and a reward file behind."""

FIND_LEFTOVERS = (
    "for p in /tests /solution /logs/verifier; do [ -e $p ] && echo FOUND $p; done; true"
)


@dataclass
class _Result:
    output: str = ""
    exit_code: int | None = 0
    timed_out: bool = False


@dataclass
class _Session:
    reset: _Result | Exception = field(default_factory=_Result)
    commands: list[str] = field(default_factory=list)
    closed: bool = False

    async def exec(self, command: str, timeout: float = 60.0) -> _Result:
        self.commands.append(command)
        if isinstance(self.reset, Exception):
            raise self.reset
        return self.reset

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        self.closed = True


class _Manager:
    """Builds and creates in-process; counts builds, records the specs it was asked for."""

    def __init__(self, session: _Session | None = None, build: Exception | None = None):
        self.session, self.build, self.builds, self.specs = session or _Session(), build, 0, []

    async def build_image(self, spec) -> str:
        self.builds += 1
        if self.build is not None:
            raise self.build
        return "img"

    async def create(self, spec) -> _Session:
        self.specs.append(spec)
        return self.session


def _task(task_id: str, dockerfile: bytes = b"FROM x\n") -> Task:
    return Task(
        id=task_id,
        instruction="x",
        environment_files=[TaskFile("Dockerfile", dockerfile)],
        verifier_timeout_sec=42.0,
    )


async def test_open_builds_each_image_once_and_removes_leftovers_before_handing_out():
    from termrl.taskrun import TaskSandboxes

    manager = _Manager()
    sandboxes = TaskSandboxes(manager, lifetime_sec=lambda task: 10 * task.verifier_timeout_sec)
    for task in (_task("a"), _task("b")):  # one environment, one image
        manager.session = _Session()
        async with sandboxes.open(task) as session:
            assert session.commands == [
                "rm -rf /solution /tests /logs/verifier; "
                "[ ! -e /solution ] && [ ! -e /tests ] && [ ! -e /logs/verifier ]"
            ]
            assert not session.closed
        assert session.closed
    assert manager.builds == 1
    assert [s.lifetime_sec for s in manager.specs] == [420.0, 420.0]
    assert (
        TaskSandboxes(manager).spec(_task("a")).lifetime_sec == SandboxSpec.lifetime_sec
    )  # the default


async def test_a_failed_build_is_remembered_for_every_task_with_that_image():
    from termrl.taskrun import TaskSandboxes

    manager = _Manager(build=EnvInitFailed("image build failed (exit status 3)"))
    sandboxes = TaskSandboxes(manager)
    for task in (_task("a"), _task("b")):
        with pytest.raises(EnvInitFailed, match="exit status 3"):
            async with sandboxes.open(task):
                pass
    assert manager.builds == 1 and manager.specs == []
    manager.build = SandboxUnavailable("engine down")  # not remembered: the next caller tries again
    with pytest.raises(SandboxUnavailable):
        await sandboxes.build(_task("c", b"FROM y\n"))
    manager.build = None
    await sandboxes.build(_task("c", b"FROM y\n"))
    assert manager.builds == 3


@pytest.mark.parametrize(
    ("reset", "raised"),
    [
        (_Result("rm: cannot remove", 1), ResetFailed),
        (_Result("", None, True), ResetFailed),
        (SandboxUnavailable("podman exec failed"), ResetFailed),
        (SandboxDied("gone"), SandboxDied),
    ],
)
async def test_leftovers_that_stay_fail_the_reset_and_transient_errors_pass_through(reset, raised):
    from termrl.taskrun import TaskSandboxes

    manager = _Manager(_Session(reset))
    with pytest.raises(raised):
        async with TaskSandboxes(manager).open(_task("a")):
            pytest.fail("a session whose leftovers stayed was handed out")
    assert manager.session.closed


@pytest.mark.podman
async def test_open_hands_out_a_sandbox_without_the_images_set_up_leftovers(podman):
    from termrl.taskrun import TaskSandboxes

    task = _task("leftovers", LEFTOVER_DOCKERFILE)
    async with await podman.create(
        SandboxSpec.from_task(task)
    ) as bare:  # the image does carry them
        assert (await bare.exec(FIND_LEFTOVERS, timeout=30)).output.split() == [
            "FOUND",
            "/tests",
            "FOUND",
            "/solution",
            "FOUND",
            "/logs/verifier",
        ]
    async with TaskSandboxes(podman).open(task) as session:
        assert (await session.exec(FIND_LEFTOVERS, timeout=30)).output.strip() == ""
    assert podman.sessions == []


def test_scorings_host_directories_take_the_uploads_path_rule(tmp_path):
    """The tests written on the host for a private scoring follow the same rule as an upload into the
    sandbox: nested paths keep their mode, a path leaving /tests is refused."""
    tests, verifier = _write_host_dirs(str(tmp_path), [TaskFile("sub/test.sh", b"echo\n", 0o755)])
    assert (Path(tests) / "sub" / "test.sh").read_bytes() == b"echo\n"
    assert (Path(tests) / "sub" / "test.sh").stat().st_mode & 0o777 == 0o755
    assert Path(verifier).stat().st_mode & 0o777 == 0o777 and not any(Path(verifier).iterdir())
    for i, bad in enumerate(("../escape", "/etc/x", "a/../../b")):
        (tmp_path / str(i)).mkdir()
        with pytest.raises(RewardFailed, match="outside /tests"):
            _write_host_dirs(str(tmp_path / str(i)), [TaskFile(bad, b"")])
