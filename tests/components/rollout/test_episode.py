"""SandboxEpisodeRunner's failure handling, driven by an in-process manager and session.

Each step's failure must end up as the right ``failure_type`` (the real-sandbox
versions of these faults are in test_stage.py). A multi-step task's episode
goes step by step: the agent continues, each step is scored, a step below its
min_reward ends it, the reward combines the steps' (end to end in
test_stage.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field, replace
from types import SimpleNamespace

import pytest

from components.rollout.episode import EpisodeIds, SandboxEpisodeRunner
from termrl.artifacts import Task, TaskFile
from termrl.errors import EnvInitFailed, SandboxDied

TASK = Task(
    id="t",
    instruction="do it",
    environment_files=[TaskFile("Dockerfile", b"FROM x\n")],
    test_files=[TaskFile("test.sh", b"true\n", 0o755)],
)
IDS = [EpisodeIds(f"e{i}", "g", 0, i) for i in range(3)]


@dataclass
class Result:
    output: str
    exit_code: int | None = 0
    duration: float = 0.0
    timed_out: bool = False
    truncated: bool = False


@dataclass
class Session:
    reset_exit: int = 0
    reward: bytes | Exception | list[bytes] = b"1"
    """One reward for every scoring, or one per scoring in order (a multi-step task's steps)."""
    commands: list[str] = field(default_factory=list)
    closed: bool = False
    workdir: str = "/app"
    private_binds: bool = False  # the scoring path that uploads into the sandbox

    async def exec(self, command: str, timeout: float = 60.0) -> Result:
        self.commands.append(command)
        if command.startswith("rm -rf /solution"):
            return Result("/app\n", self.reset_exit)
        return Result("ok")

    async def exec_fresh(
        self, command: str, timeout: float = 60.0, *, env=None, workdir=None, user=None
    ) -> Result:
        self.commands.append(f"fresh {command}")
        if not command.startswith("f=/logs/verifier/reward.txt"):
            return Result("ok")
        if isinstance(self.reward, Exception):  # reading the reward file failed
            raise self.reward
        if isinstance(self.reward, list):
            return Result(self.reward.pop(0).decode())
        return Result(self.reward.decode())

    @contextlib.asynccontextmanager
    async def agent_stopped(self):
        self.commands.append("stop agent")
        yield
        self.commands.append("resume agent")

    @contextlib.asynccontextmanager
    async def system_paths_frozen(self):  # a backend without private binds freezes nothing
        yield

    async def upload_files(self, files, dest_dir: str) -> None:
        self.commands.append(f"upload {dest_dir}")

    async def changed_files(self):
        return None  # like a backend that cannot tell

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        self.closed = True


class Manager:
    def __init__(
        self, session: Session | None = None, build: Exception | asyncio.Event | None = None
    ):
        self.session = session or Session()
        self.build = build
        self.builds = 0

    async def build_image(self, spec) -> str:
        self.builds += 1
        if isinstance(self.build, asyncio.Event):
            await self.build.wait()
        elif self.build is not None:
            raise self.build
        return "img"

    async def create(self, spec) -> Session:
        return self.session


def _runner(manager: Manager, step=None) -> SandboxEpisodeRunner:
    async def default_step(session, recorder, task, ids, **_):
        await recorder.exec("echo hi", 5)
        chunk = {
            "chunk_index": 0,
            "prompt_ids": [1],
            "response_ids": [2],
            "response_logprobs": [-1.0],
        }
        return SimpleNamespace(
            chunks=[chunk],
            stop_reason="done",
            trainable=True,
            episode_tokens=2,
            failure_type=None,
            error=None,
        )

    return SandboxEpisodeRunner(
        manager,
        step or default_step,
        mode="roll-managed",
        policy_version=0,
        sandbox_lifetime_sec=lambda v: 100.0,
    )


async def test_a_good_episode_is_reset_run_and_rewarded():
    manager = Manager()
    record = await _runner(manager)(TASK, IDS[0])
    assert (record.failure_type, record.reward, record.success, record.rewarded) == (
        None,
        1.0,
        True,
        True,
    )
    assert manager.session.commands[0].startswith("rm -rf /solution /tests /logs/verifier")
    assert [e.command for e in record.execs] == ["echo hi"] and manager.session.closed
    # Tests are uploaded only after the agent ran.
    assert manager.session.commands.index("upload /tests") > manager.session.commands.index(
        "echo hi"
    )


async def test_a_failed_build_is_built_once_and_fails_every_episode():
    manager = Manager(build=EnvInitFailed("image build failed (exit status 3)"))
    runner = _runner(manager)
    records = await asyncio.gather(*(runner(TASK, ids) for ids in IDS))
    assert manager.builds == 1
    assert {(r.failure_type, r.stop_reason, len(r.chunks)) for r in records} == {
        ("EnvInitFailed", "error", 0)
    }


async def test_a_cancelled_builder_does_not_take_the_waiting_episodes_with_it():
    gate = asyncio.Event()
    manager = Manager(build=gate)
    runner = _runner(manager)
    builder = asyncio.create_task(runner(TASK, IDS[0]))
    await asyncio.sleep(0.01)
    waiter = asyncio.create_task(runner(TASK, IDS[1]))
    await asyncio.sleep(0.01)
    builder.cancel()
    await asyncio.sleep(0.01)
    gate.set()
    record = await waiter
    assert record.failure_type is None and manager.builds == 2


@pytest.mark.parametrize(
    ("session", "expected"),
    [
        (Session(reset_exit=1), "ResetFailed"),
        (Session(reward=b"garbage"), "RewardFailed"),
        (Session(reward=OSError("podman cp failed")), "RewardFailed"),
        (Session(reward=SandboxDied("gone")), "SandboxDied"),
    ],
)
async def test_reset_and_reward_failures_are_classified(session, expected):
    record = await _runner(Manager(session))(TASK, IDS[0])
    assert record.failure_type == expected and not record.rewarded and session.closed


async def test_agent_failures_skip_the_reward_and_unexpected_errors_are_still_classified():
    async def died(session, recorder, task, ids, **_):
        return SimpleNamespace(
            chunks=[],
            stop_reason="error",
            trainable=False,
            episode_tokens=0,
            failure_type="SandboxDied",
            error="gone",
        )

    manager = Manager()
    record = await _runner(manager, died)(TASK, IDS[0])
    assert record.failure_type == "SandboxDied" and "upload /tests" not in manager.session.commands

    async def broken(session, recorder, task, ids, **_):
        raise RuntimeError("a bug")

    record = await _runner(Manager(), broken)(TASK, IDS[0])
    assert record.failure_type == "UnexpectedError" and "a bug" in record.error


MULTI = Task(
    id="m",
    instruction="(the steps bring their own)",
    environment_files=[TaskFile("Dockerfile", b"FROM x\n")],
    test_files=[TaskFile("test.sh", b"true\n", 0o755)],
    agent_timeout_sec=100.0,
    steps=[{"name": "one", "min_reward": 1.0, "agent_timeout_sec": 10.0}, {"name": "two"}],
    step_files=[
        TaskFile("one/instruction.md", b"Do one."),
        TaskFile("two/instruction.md", b"Do two."),
    ],
)


def _steps_runner(manager: Manager, calls: list) -> SandboxEpisodeRunner:
    """A runner whose agent records each call and answers one chunk per step."""

    async def step(session, recorder, task, ids, *, after=None, budget_sec=None):
        calls.append((task.instruction, after, budget_sec))
        first = 0 if after is None else after.chunks[-1]["chunk_index"] + 1
        return SimpleNamespace(
            chunks=[{"chunk_index": first, "prompt_ids": [1], "response_ids": [2]}],
            stop_reason="done",
            trainable=True,
            episode_tokens=2 * (first + 1),
            failure_type=None,
            error=None,
        )

    return _runner(manager, step)


@pytest.mark.parametrize(("strategy", "reward"), [(None, 0.75), ("mean", 0.75), ("final", 0.5)])
async def test_a_multi_step_task_is_one_episode_scored_step_by_step(strategy, reward):
    calls: list = []
    manager = Manager(Session(reward=[b"1", b"0.5"]))
    task = replace(MULTI, reward_strategy=strategy)
    record = await _steps_runner(manager, calls)(task, IDS[0])
    assert (record.failure_type, record.rewarded, record.success) == (None, True, False)
    # mean of 1 and 0.5 = 0.75; final: the last step's 0.5
    assert record.reward == reward and record.step_rewards == [1.0, 0.5]
    # Step two continued step one's conversation, each under its own agent timeout (one: its
    # own 10 s; two: the task's 100 s), as eval budgets a step.
    assert [(instruction, budget) for instruction, _, budget in calls] == [
        ("Do one.", 10.0),
        ("Do two.", 100.0),
    ]
    assert calls[0][1] is None and calls[1][1].chunks[0]["chunk_index"] == 0
    assert [c["chunk_index"] for c in record.chunks] == [0, 1] and record.episode_tokens == 4
    # Each step was scored after its agent turns: tests uploaded twice, once after each.
    uploads = [i for i, c in enumerate(manager.session.commands) if c == "upload /tests"]
    assert len(uploads) == 2


async def test_a_step_below_its_min_reward_ends_the_episode():
    calls: list = []
    manager = Manager(Session(reward=[b"0.5", b"1"]))
    record = await _steps_runner(manager, calls)(MULTI, IDS[0])
    # step one scored 0.5 < its min_reward 1.0: step two never ran; the mean of one step is 0.5
    assert [instruction for instruction, _, _ in calls] == ["Do one."]
    assert (record.reward, record.step_rewards, record.success, record.rewarded) == (
        0.5,
        [0.5],
        False,
        True,
    )


async def test_a_single_step_task_gets_no_step_budget_and_no_step_rewards():
    calls: list = []
    record = await _steps_runner(Manager(), calls)(TASK, IDS[0])
    assert calls == [("do it", None, None)] and record.step_rewards == []
