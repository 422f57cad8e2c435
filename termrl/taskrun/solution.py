"""The task's reference solution: its steps, and running them in the sandbox under the agent timeout."""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass

import yaml

from termrl.artifacts.tasks import Task
from termrl.sandbox.spec import resolve_env
from termrl.taskrun.session import DEFAULT_AGENT_TIMEOUT_SEC, SOLUTION_DIR, TaskSession
from termrl.tbcompat.timing import warn_if_tight

__all__ = ["SolutionOutcome", "run_solution", "solution_steps"]


@dataclass(frozen=True)
class SolutionOutcome:
    """What running the reference solution did."""

    exit_code: int | None
    timed_out: bool
    duration: float
    output: str


def solution_steps(task: Task) -> list[str]:
    """The solution as shell commands: the task's command, or a solution.yaml's list."""
    if task.solution_command:
        return [task.solution_command]
    spec = next((f for f in task.solution_files if f.path == "solution.yaml"), None)
    if spec is None:
        return []
    try:
        entries = yaml.safe_load(spec.data.decode())
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ValueError(f"task {task.id}: unreadable solution.yaml: {exc}") from exc
    if not isinstance(entries, list):
        raise ValueError(f"task {task.id}: solution.yaml is not a list of commands")
    steps = []
    for entry in entries:
        command = entry.get("command") if isinstance(entry, dict) else entry
        if not isinstance(command, str):
            raise ValueError(f"task {task.id}: solution.yaml entry without a command: {entry!r}")
        steps.append(command)
    return steps


def _in_workdir(session: TaskSession, command: str, env: dict[str, str]) -> str:
    assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    # A subshell: the agent's shell state (cwd, functions, aliases) must not leak in.
    return f"(cd {shlex.quote(session.workdir)} && {assignments} {command})"


async def run_solution(
    session: TaskSession, task: Task, *, timeout: float | None = None
) -> SolutionOutcome:
    """Upload the solution files to /solution and run the solution under the agent timeout."""
    timeout = timeout or task.agent_timeout_sec or DEFAULT_AGENT_TIMEOUT_SEC
    if task.solution_files:
        await session.upload_files(task.solution_files, SOLUTION_DIR)
    solution_env = {**resolve_env(task.env), **resolve_env(task.solution_env)}
    started = time.monotonic()
    outputs: list[str] = []
    exit_code: int | None = 0
    for step in solution_steps(task):
        remaining = timeout - (time.monotonic() - started)
        if remaining <= 0:
            return SolutionOutcome(None, True, time.monotonic() - started, "".join(outputs))
        result = await session.exec(_in_workdir(session, step, solution_env), timeout=remaining)
        outputs.append(result.output)
        exit_code = result.exit_code
        if result.timed_out:
            return SolutionOutcome(None, True, time.monotonic() - started, "".join(outputs))
    warn_if_tight(task.id, "the solution", time.monotonic() - started, timeout)
    return SolutionOutcome(exit_code, False, time.monotonic() - started, "".join(outputs))
