"""Multi-step tasks (Harbor's ``[[steps]]``): steps in order in one sandbox, each scored, one reward.

A multi-step task is run as a sequence of single-step tasks (``task_steps``),
in the one sandbox ``TaskSandboxes.open`` gave, as Harbor's multi-step trial
runs them:

    for each step, in order:
        the agent works on the step's instruction        (the caller's ``act``)
        run_tests(session, step)                          the step's tests: the task's tests/ with the
                                                          step's tests/ over them; its own reward
        stop here when the reward is below the step's min_reward
    the task's reward: mean of the steps that were scored (Harbor's default), or the final one's

Eval and verify run them so (``run_steps``, or the same calls in eval's trial).
A policy's work on every step is one conversation, each step's instruction a
new user turn of it, in a rollout episode (``components.rollout.episode``) and
in an eval trial (``components.eval.agents.PolicyAgent``) alike.

A step is the task with the step's instruction, its ``solution/`` (run by the
oracle as ``bash /solution/solve.sh``), its tests, and its agent and verifier
timeouts, verifier env and user over the task's. Everything else (image,
user, network, env) is the task's: the sandbox is the same throughout.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from termrl.artifacts.tasks import Task, TaskFile
from termrl.taskrun import SOLUTION_DIR, TaskSession, TestOutcome, run_tests

__all__ = ["StepsOutcome", "combine", "below_min_reward", "run_steps", "task_steps"]

log = logging.getLogger("termrl.multistep")

SOLVE = f"bash {SOLUTION_DIR}/solve.sh"


def _under(files: dict[str, TaskFile], folder: str) -> list[TaskFile]:
    prefix = f"{folder}/"
    return [
        TaskFile(p[len(prefix) :], f.data, f.mode)
        for p, f in sorted(files.items())
        if p.startswith(prefix)
    ]


def task_steps(task: Task) -> list[Task]:
    """The tasks the steps of ``task`` run as, in order; ``[task]`` for a single-step task."""
    if not task.steps:
        return [task]
    out = []
    for step in task.steps:
        prefix = f"{step['name']}/"
        mine = {f.path[len(prefix) :]: f for f in task.step_files if f.path.startswith(prefix)}
        tests = {f.path: f for f in task.test_files} | {f.path: f for f in _under(mine, "tests")}
        solution = _under(mine, "solution")
        out.append(
            replace(
                task,
                instruction=mine["instruction.md"].data.decode(),
                solution_files=solution,
                solution_command=SOLVE if any(f.path == "solve.sh" for f in solution) else None,
                test_files=[tests[p] for p in sorted(tests)],
                agent_timeout_sec=step.get("agent_timeout_sec") or task.agent_timeout_sec,
                verifier_timeout_sec=step.get("verifier_timeout_sec") or task.verifier_timeout_sec,
                verifier_env={**task.verifier_env, **(step.get("verifier_env") or {})},
                verifier_user=step.get("verifier_user") or task.verifier_user,
                steps=[],
                step_files=[],
                reward_strategy=None,
            )
        )
    return out


def below_min_reward(task: Task, index: int, outcome: TestOutcome) -> bool:
    """Whether step ``index``'s reward misses its ``min_reward`` (Harbor then stops the trial there).

    A number gates the reward; a table gates each key, and termrl's reward has one key, ``reward``
    (import refuses any other).
    """
    threshold = task.steps[index].get("min_reward") if task.steps else None
    if isinstance(threshold, dict):
        threshold = threshold.get("reward")
    return threshold is not None and outcome.reward < threshold


@dataclass
class StepsOutcome:
    """A multi-step task's verdict: the combined outcome and each scored step's."""

    outcome: TestOutcome
    steps: list[TestOutcome] = field(default_factory=list)
    stopped_at: int | None = None
    """The step whose reward missed its min_reward (the later ones did not run); None: all ran."""


def combine(task: Task, outcomes: list[TestOutcome]) -> TestOutcome:
    """One outcome from the steps' (in order; those not run are absent), by ``task.reward_strategy``."""
    if len(outcomes) == 1 and not task.steps:
        return outcomes[0]
    if task.reward_strategy == "final":
        reward = outcomes[-1].reward
    else:
        reward = sum(o.reward for o in outcomes) / len(outcomes)
    output = "".join(
        f"=== step {s['name']}: reward {o.reward:g}\n{o.output}"
        for s, o in zip(task.steps, outcomes, strict=False)
    )
    return TestOutcome(
        passed=reward >= 1.0 and len(outcomes) == len(task.steps),
        reward=reward,
        output=output,
        duration=sum(o.duration for o in outcomes),
        timed_out=any(o.timed_out for o in outcomes),
        exit_code=outcomes[-1].exit_code,
        tampering=tuple(t for o in outcomes for t in o.tampering),
        unscorable="; ".join(o.unscorable for o in outcomes if o.unscorable),
    )


async def run_steps(
    session: TaskSession, task: Task, act: Callable[[Task], Awaitable[Any]]
) -> StepsOutcome:
    """Each step in order: ``act(step)`` (the agent's work on it), then its tests; stop below a min_reward."""
    scored: list[TestOutcome] = []
    stopped_at = None
    for index, step in enumerate(task_steps(task)):
        await act(step)
        scored.append(await run_tests(session, step))
        if below_min_reward(task, index, scored[-1]):
            log.info(
                "task %s: step %d scored %g, below its min_reward: the rest do not run",
                task.id,
                index + 1,
                scored[-1].reward,
            )
            stopped_at = index
            break
    return StepsOutcome(combine(task, scored), scored, stopped_at)
