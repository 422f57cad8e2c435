"""Running the trials: tasks × K in sandboxes, bounded, with a progress bar.

    load_eval_tasks(config)          tasks artifact or task folders -> [Task]
    run_trials(config, tasks) -> rows    one eval-results row per (task, trial)

One trial, the official way (Terminal-Bench's execution model):

    fresh sandbox from the task's image, set-up leftovers removed   (TaskSandboxes.open)
      ─► agent phase under task.agent_timeout_sec   (agent.act)
      ─► tests under task.verifier_timeout_sec       (termrl.taskrun.run_tests)
      (a multi-step task: those two for each step in order, one reward: termrl.multistep;
       the agent carries on from its previous step, the policy agent in one conversation)
      ─► row: passed, reward, failure mode, turns, tokens, times, tool-call stats,
              the agent's transcript

A trial whose agent phase ended past its budget counts as failed and is
flagged ``over_budget`` whatever the tests say (their verdict is kept in
``tests_passed``). An agent phase still running at 1.5 × its budget + 30 s
is cancelled and its tests are not run: a half-finished command may still
hold the shell.

Each task's image is built once before its trials start; a task whose
image does not build gets ``environment-error`` rows without starting a
sandbox. At most ``config.concurrency`` sandboxes are alive at once: the
manager's ``max_sessions``, where trials queue for a slot (a trial's wall
time starts with its sandbox, not with the wait). Errors of the harness
(``termrl.errors``) become rows, never a crashed eval, and so does any
exception while scoring (a ``RewardFailed`` row: whatever the agent left in
its sandbox, one trial's scoring never cancels the others); anything else is a
bug and propagates.

A multi-step task's trial stops after a step below its ``min_reward`` (Harbor)
and after a step whose agent failed (``failure_type``), once that step is
scored: as a rollout episode ends at its agent's failure, and the policy
agent's conversation cannot go on past an error.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from components.eval.agents import Agent, TrialRun, make_agent, open_engine
from components.eval.config import EvalConfig
from components.eval.taxonomy import TrialFacts, call_stats, classify, transcript
from termrl.artifacts.tasks import Task, load_tasks
from termrl.errors import ConfigError, RewardFailed, TermrlError, failure_type
from termrl.llm.engine import Engine
from termrl.multistep import below_min_reward, combine, task_steps
from termrl.sandbox.manager import SandboxManager
from termrl.sandbox.session import Session
from termrl.taskfolders import import_task_folders
from termrl.taskrun import DEFAULT_AGENT_TIMEOUT_SEC, TaskSandboxes, TestOutcome, run_tests

__all__ = ["TEST_OUTPUT_CHARS", "hard_cap_sec", "load_eval_tasks", "run_trials", "trial_row"]

TEST_OUTPUT_CHARS = 2000
"""The tail of the tests' output kept per trial: enough to see why a trial failed."""


def load_eval_tasks(config: EvalConfig) -> list[Task]:
    """The tasks to evaluate, from a Parquet artifact or Terminal-Bench task folders."""
    path = config.tasks
    if not Path(path).is_dir():
        tasks = load_tasks(path)
    else:
        imported = import_task_folders([path])
        if imported.errors:
            raise ConfigError([f"tasks: {e}" for e in imported.errors])
        tasks = imported.tasks
    if config.task_ids:
        missing = sorted(set(config.task_ids) - {t.id for t in tasks})
        if missing:
            raise ConfigError([f"task_ids: no task {m!r} in {path}" for m in missing])
        tasks = [t for t in tasks if t.id in set(config.task_ids)]
    if not tasks:
        raise ConfigError(f"tasks: {path} holds no tasks")
    return tasks


def hard_cap_sec(budget_sec: float) -> float:
    """When a still-running agent phase is cancelled (the episode should stop itself first)."""
    return 1.5 * budget_sec + 30.0


def trial_row(
    config: EvalConfig,
    task: Task,
    trial: int,
    run: TrialRun,
    *,
    over_budget: bool,
    tests_passed: bool | None,
    reward: float,
    tests_timed_out: bool = False,
    agent_sec: float | None = None,
    test_sec: float | None = None,
    wall_sec: float | None = None,
    test_output: str | None = None,
    tampering: tuple[str, ...] = (),
    unscorable: str = "",
) -> dict[str, Any]:
    """The eval-results row of one trial (schema columns, then eval's extra columns)."""
    passed = (
        bool(tests_passed) and not over_budget and not tampering
    )  # a tampered pass may be forged
    facts = TrialFacts(
        passed=passed,
        stop_reason=run.stop_reason,
        chunks=run.chunks,
        failure_type=run.failure_type,
        over_budget=over_budget,
        tests_timed_out=tests_timed_out,
        tampered=bool(tampering),
        sandbox_broken=bool(unscorable),
    )
    stats = call_stats(run.chunks)
    return {
        "run_id": config.label(),
        "task_id": task.id,
        "trial": trial,
        "agent": config.agent,
        "model": config.model,
        "family": task.family,
        "difficulty": task.difficulty,
        "passed": passed,
        "reward": reward if not (over_budget or tampering) else 0.0,
        "failure_mode": classify(facts),
        "stop_reason": run.stop_reason,
        "turns": run.turns,
        "prompt_tokens": run.prompt_tokens,
        "completion_tokens": run.completion_tokens,
        "wall_sec": wall_sec,
        "over_budget": over_budget,
        "tool_calls": stats.tool_calls,
        "parallel_turns": stats.parallel_turns,
        "read_only_calls": stats.read_only_calls,
        "error": run.error,
        # extra columns (the contract keeps them)
        "source": task.source,
        "tests_passed": tests_passed,
        "failure_type": run.failure_type,
        "episode_tokens": run.episode_tokens,
        "calls_per_turn": stats.calls_per_turn,
        "agent_sec": agent_sec,
        "test_sec": test_sec,
        "agent_timeout_sec": task.agent_timeout_sec,
        "test_output": test_output[-TEST_OUTPUT_CHARS:] if test_output else None,
        # what the agent ran, turn by turn (taxonomy.transcript); None for the oracle and nop
        "transcript": transcript(run.chunks),
        # what the agent changed that scoring ran (termrl.tampering.find_tampering); None when nothing
        "tampering": "; ".join(tampering) or None,
    }


def _add(total: TrialRun | None, part: TrialRun) -> TrialRun:
    """The agent's work over the steps so far: ``part`` (the latest step's) added to ``total``."""
    if total is None:
        return part
    return TrialRun(
        stop_reason=part.stop_reason,
        chunks=total.chunks + part.chunks,
        turns=total.turns + part.turns,
        prompt_tokens=total.prompt_tokens + part.prompt_tokens,
        completion_tokens=total.completion_tokens + part.completion_tokens,
        # one conversation over the steps (the policy agent): the latest part's covers them all
        episode_tokens=part.episode_tokens or total.episode_tokens,
        timed_out=total.timed_out or part.timed_out,
        failure_type=part.failure_type or total.failure_type,
        error=part.error or total.error,
    )


@dataclass
class _TrialState:
    """What one trial has done so far; its row is made from this however the trial ends."""

    started: float
    """When its sandbox started (not the wait for a free slot)."""
    run: TrialRun = field(default_factory=lambda: TrialRun(stop_reason="error"))
    """The agent's work over the steps so far."""
    agent_sec: float | None = None
    over_budget: bool = False
    scored: list[TestOutcome] = field(default_factory=list)
    """The outcome of each step scored, in order."""


async def _run_one(
    sandboxes: TaskSandboxes, agent: Agent, config: EvalConfig, task: Task, trial: int
) -> dict[str, Any]:
    """One trial: each step of the task (``termrl.multistep``; one for most tasks) acted on, then scored."""
    state = _TrialState(started=time.monotonic())
    try:
        async with sandboxes.open(task) as session:
            state.started = session.started
            if not await _act_and_score_steps(session, agent, task, trial, state):
                return _row(config, task, trial, state, None)
    except TermrlError as exc:
        state.run.failure_type = failure_type(exc)
        state.run.error = f"{type(exc).__name__}: {exc}"[:4000]
        return _row(config, task, trial, state, None)
    return _row(config, task, trial, state, combine(task, state.scored))


def _row(
    config: EvalConfig, task: Task, trial: int, state: _TrialState, outcome: TestOutcome | None
) -> dict[str, Any]:
    """The trial's row; ``outcome`` None: the trial ended before its tests ran (reward 0)."""
    scoring: dict[str, Any] = {"tests_passed": None, "reward": 0.0}
    if outcome is not None:
        scoring = {
            "tests_passed": outcome.passed,
            "reward": outcome.reward,
            "tests_timed_out": outcome.timed_out,
            "test_sec": outcome.duration,
            "test_output": outcome.output,
            "tampering": outcome.tampering,
            "unscorable": outcome.unscorable,
        }
    return trial_row(
        config,
        task,
        trial,
        state.run,
        over_budget=state.over_budget,
        agent_sec=state.agent_sec,
        wall_sec=time.monotonic() - state.started,
        **scoring,
    )


async def _act_and_score_steps(
    session: Session, agent: Agent, task: Task, trial: int, state: _TrialState
) -> bool:
    """Each step in order: the agent acts (carrying on from its previous step), then the step's
    tests run. False when the trial ends before its tests: the agent phase was cancelled at
    its hard cap, or the sandbox died under the agent."""
    total: TrialRun | None = None
    part: TrialRun | None = None  # the previous step's, which the next one continues
    state.agent_sec = 0.0
    for index, step in enumerate(task_steps(task)):
        budget = step.agent_timeout_sec or DEFAULT_AGENT_TIMEOUT_SEC
        agent_started = time.monotonic()
        try:
            part = await asyncio.wait_for(
                agent.act(session, step, trial, budget, previous=part), hard_cap_sec(budget)
            )
        except TimeoutError:
            state.agent_sec += time.monotonic() - agent_started
            part = TrialRun(
                stop_reason="lifetime",
                timed_out=True,
                error=f"agent cancelled after {time.monotonic() - agent_started:.0f}s",
            )
            state.run, state.over_budget = _add(total, part), True
            return False
        step_sec = time.monotonic() - agent_started
        state.agent_sec += step_sec
        total = state.run = _add(total, part)
        state.over_budget = state.over_budget or part.timed_out or step_sec > budget
        if part.failure_type in ("SandboxDied", "SandboxUnavailable"):
            return False
        state.scored.append(await _score_step(session, task, step))
        if part.failure_type is not None or below_min_reward(task, index, state.scored[-1]):
            break
    return True


async def _score_step(session: Session, task: Task, step: Task) -> TestOutcome:
    """The step's tests. Any exception but the harness's own becomes ``RewardFailed``: a
    sandbox's content the scorer chokes on fails this trial only."""
    try:
        return await run_tests(session, step)
    except TermrlError:
        raise
    except Exception as exc:  # noqa: BLE001 - see the docstring
        raise RewardFailed(f"task {task.id}: scoring failed: {type(exc).__name__}: {exc}") from exc


async def _prebuild(
    sandboxes: TaskSandboxes, tasks: list[Task], config: EvalConfig
) -> dict[str, TermrlError]:
    """Build each distinct task image once; returns the build error of each broken task."""
    by_image: dict[str, list[Task]] = {}
    for task in tasks:
        by_image.setdefault(sandboxes.spec(task).image_key, []).append(task)
    limit = asyncio.Semaphore(config.build_concurrency)
    broken: dict[str, TermrlError] = {}

    async def build(group: list[Task]) -> None:
        async with limit:
            try:
                await sandboxes.build(group[0])
            except TermrlError as exc:
                broken.update({t.id: exc for t in group})

    async with asyncio.TaskGroup() as tg:
        for group in by_image.values():
            tg.create_task(build(group))
    return broken


async def run_trials(
    config: EvalConfig,
    tasks: list[Task],
    *,
    engine: Engine | None = None,
    on_row: Callable[[dict[str, Any]], None] | None = None,
    done: set[tuple[str, int]] | None = None,
) -> list[dict[str, Any]]:
    """Run ``config.trials`` trials of every task; rows in (task, trial) order.

    Pairs (task id, trial) in ``done`` finished in an earlier run (``components.eval.resume``):
    they are not run again, and have no row here.

    The policy agent uses ``engine`` when given (a caller that already holds
    one, e.g. a model server), else opens ``config.model`` and closes it after.
    """
    owned = engine is None and config.agent == "policy"
    if owned:
        engine = open_engine(config)
    agent = make_agent(config, engine)
    rows: dict[tuple[int, int], dict[str, Any]] = {}
    try:
        # Trials queue for a slot as long as it takes: the slots are the only bound on sandboxes.
        async with SandboxManager(
            config.sandbox,
            max_sessions=config.concurrency,
            acquire_timeout_sec=math.inf,
        ) as manager:
            sandboxes = TaskSandboxes(manager)
            broken = await _prebuild(sandboxes, tasks, config)
            bar = tqdm(
                total=len(tasks) * config.trials,
                initial=len(done or ()),
                desc=f"eval {config.label()}",
                unit="trial",
                disable=not config.progress,
            )

            async def one(index: int, task: Task, trial: int) -> None:
                if task.id in broken:
                    exc = broken[task.id]
                    run = TrialRun(
                        stop_reason="error", failure_type=failure_type(exc), error=str(exc)[:4000]
                    )
                    row = trial_row(
                        config, task, trial, run, over_budget=False, tests_passed=None, reward=0.0
                    )
                else:
                    row = await _run_one(sandboxes, agent, config, task, trial)
                rows[(index, trial)] = row
                bar.set_postfix(passed=sum(r["passed"] for r in rows.values()), refresh=False)
                bar.update(1)
                if on_row is not None:
                    on_row(row)

            try:
                async with asyncio.TaskGroup() as tg:
                    for index, task in enumerate(tasks):
                        for trial in range(config.trials):
                            if not done or (task.id, trial) not in done:
                                tg.create_task(one(index, task, trial))
            finally:
                bar.close()
    finally:
        if owned and engine is not None:
            await engine.aclose()
    return [rows[key] for key in sorted(rows)]
