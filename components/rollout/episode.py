"""One rollout episode in a real sandbox (the seed's TerminalBenchEnv + one TrajEnvManager step).

    TaskSandboxes.open ─► decide/execute (the shared agent) ─► terminate ─► reward
    (image built once,    run_episode(engine, session, ...)   (done, max    run_tests: tests
     fresh session, set-                                       turns, ...)   uploaded only now
     up leftovers removed)

A multi-step task (Harbor's ``[[steps]]``, ``termrl.multistep``) is one episode
and one conversation: each step's instruction comes as a new user turn of the
same token stream once the previous step's agent turns ended and its tests
scored it (``run_episode(..., after=previous)``); the steps run while each
reaches its ``min_reward``, and the episode's reward combines the scored
steps' by the task's strategy (``termrl.multistep.combine``), so every chunk
carries the episode's reward as in a single-step episode. Each step gets the
rollout's ``max_turns`` and an agent lifetime capped by the step's agent
timeout, as eval gives each step its own budget. The steps' own rewards are
kept in ``RolloutEpisode.step_rewards`` (rollout metrics ``step/<k>/...``).

Every failure is caught at the step where it happens and kept as the
episode's ``failure_type`` (the ``termrl.errors`` class name), so mask &
filter can tell an unrecoverable failure (placeholder) from a transient one
(drop flag) later. Nothing here decides masks: an ``RolloutEpisode`` is the
raw outcome, written as soon as the episode ends.

Every command the agent runs goes through ``RecordingSession``, whose log
(command, exit status, timeout) feeds the drop flag (a tool call that timed
out is a transient failure) and behaviour monitoring.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from termrl.agent.demonstration import ReplayEngine
from termrl.agent.loop import AgentConfig, run_episode
from termrl.artifacts.tasks import Task
from termrl.errors import (
    ConfigError,
    EpisodeError,
    RewardFailed,
    TermrlError,
    TransientError,
    UnrecoverableError,
    failure_type,
)
from termrl.llm.engine import Engine
from termrl.multistep import below_min_reward, combine, task_steps
from termrl.sandbox.manager import SandboxManager
from termrl.sandbox.session import Session
from termrl.taskrun import DEFAULT_AGENT_TIMEOUT_SEC, TaskSandboxes, TestOutcome, run_tests

__all__ = [
    "AgentStep",
    "EpisodeIds",
    "RolloutEpisode",
    "ExecRecord",
    "RecordingSession",
    "SandboxEpisodeRunner",
    "roll_managed_step",
]


@dataclass(frozen=True)
class EpisodeIds:
    """Where an episode sits in the batch."""

    episode_id: str
    group_id: str
    group_index: int
    episode_index: int
    anchor: int = 1
    """Chunk-initialized resampling: chunks 1 … anchor−1 of the task's demonstration are
    replayed, the policy samples from chunk ``anchor`` on (1: from scratch)."""


@dataclass
class ExecRecord:
    """One command the agent ran."""

    command: str
    exit_code: int | None
    timed_out: bool
    duration_sec: float


@dataclass
class RolloutEpisode:
    """One rollout episode: the agent's ``AgentEpisode`` with its reward and ids, before mask & filter."""

    ids: EpisodeIds
    task_id: str
    policy_version: int
    mode: str
    chunks: list[dict[str, Any]] = field(default_factory=list)
    """Chunk columns of the trajectories artifact, one dict per assistant turn."""
    reward: float = 0.0
    success: bool = False
    rewarded: bool = False
    """True when the tests ran and produced a reward."""
    stop_reason: str = "error"
    failure_type: str | None = None
    error: str | None = None
    trainable: bool = False
    episode_tokens: int = 0
    tampering: tuple[str, ...] = ()
    """What the agent changed that scoring ran (``termrl.tampering.find_tampering``); the
    episode is masked as unrecoverable (``verifier_tampering``) when there is any."""
    sandbox_broken: bool = False
    """Scoring's own set-up could not run in the sandbox the agent left (``TestOutcome.unscorable``):
    a failure with reward 0 like any other, counted by the monitor."""
    execs: list[ExecRecord] = field(default_factory=list)
    step_rewards: list[float] = field(default_factory=list)
    """A multi-step task's scored steps' rewards, in order (those after a step below its
    min_reward did not run); empty for a single-step task."""
    wall_sec: float = 0.0
    finished_at: float = 0.0
    """Wall-clock time (epoch seconds) the episode ended: orders group completion."""

    @property
    def timed_out_execs(self) -> int:
        return sum(e.timed_out for e in self.execs)

    @property
    def response_tokens(self) -> int:
        return sum(len(c["response_ids"]) for c in self.chunks)


class RecordingSession:
    """An ``ExecSession`` that logs every command before handing it to the real session."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.log: list[ExecRecord] = []

    async def exec(self, cmd: str, timeout: float | None = None) -> Any:
        started = time.monotonic()
        try:
            result = await self.session.exec(cmd, timeout)
        except TermrlError:
            self.log.append(ExecRecord(cmd, None, False, time.monotonic() - started))
            raise
        self.log.append(ExecRecord(cmd, result.exit_code, result.timed_out, result.duration))
        return result


class AgentStep(Protocol):
    """Runs the agent in a ready session; returns ``termrl.agent.loop.AgentEpisode``-like.

    A multi-step task's episode calls it once per step, ``task`` being the step
    (``termrl.multistep.task_steps``): ``after`` is the previous step's result, whose
    conversation the step continues (None for the first), and ``budget_sec`` the step's agent
    timeout, which caps the episode lifetime. A single-step task: one call, both None.
    """

    def __call__(
        self,
        session: Session,
        recorder: RecordingSession,
        task: Task,
        ids: EpisodeIds,
        *,
        after: Any = None,
        budget_sec: float | None = None,
    ) -> Awaitable[Any]: ...


def roll_managed_step(
    engine: Engine, agent: AgentConfig, demonstrations: Mapping[str, Sequence[str]] | None = None
) -> AgentStep:
    """The roll-managed agent step: termrl's own agent loop, on ``engine``.

    An episode with ``ids.anchor = k > 1`` first replays the k−1 expert responses of its
    task's demonstration (``demonstrations``: task id → response texts) through the same
    loop, so the sandbox and the context hold what the expert did; the policy then gets
    the usual ``max_turns`` of its own. Replayed chunks are marked ``replayed``. A
    multi-step task is never anchored (``anchors.anchor_picker`` gives it anchor 1): its
    demonstration would have to cover every step.

    A step of a multi-step task continues the previous step's conversation (``after``) with
    ``max_turns`` turns of its own, under a lifetime (and command timeouts) capped by
    ``budget_sec``, as eval's policy agent runs a step.
    """

    async def step(
        session: Session,
        recorder: RecordingSession,
        task: Task,
        ids: EpisodeIds,
        *,
        after: Any = None,
        budget_sec: float | None = None,
    ) -> Any:
        config = agent if budget_sec is None else agent.within(budget_sec)
        if ids.anchor <= 1 or after is not None:
            return await run_episode(engine, recorder, task.instruction, config, after=after)
        expert = list((demonstrations or {}).get(task.id, ()))[: ids.anchor - 1]
        if len(expert) < ids.anchor - 1:
            raise ConfigError(
                f"task {task.id}: anchor {ids.anchor} needs {ids.anchor - 1} demonstration chunks"
            )
        replay = ReplayEngine(
            engine.tokenizer, expert, then=engine, context_window=config.context_window
        )
        result = await run_episode(
            replay,
            recorder,
            task.instruction,
            replace(config, max_turns=config.max_turns + len(expert)),
        )
        for chunk in result.chunks:
            chunk.replayed = chunk.chunk_index < len(expert)
        return result

    return step


class SandboxEpisodeRunner:
    """Runs episodes in sandboxes of one ``SandboxManager``; one call, one ``RolloutEpisode``.

    Sandboxes come from ``termrl.taskrun.TaskSandboxes``: task images are
    built once per environment (a failed build is remembered, so the task's
    other episodes fail at once with the same ``EnvInitFailed`` instead of
    rebuilding) and set-up leftovers are removed before the agent starts.
    A sandbox lives ``sandbox_lifetime_sec(verifier timeout)``, summed over the steps of a
    multi-step task.
    """

    def __init__(
        self,
        manager: SandboxManager,
        agent_step: AgentStep,
        *,
        mode: str,
        policy_version: int,
        sandbox_lifetime_sec: Callable[[float], float],
        verifier_timeout_sec: float | None = None,
    ) -> None:
        self.manager = manager
        self.agent_step = agent_step
        self.mode = mode
        self.policy_version = policy_version
        self.sandbox_lifetime_sec = sandbox_lifetime_sec
        self.verifier_timeout_sec = verifier_timeout_sec
        self.sandboxes = TaskSandboxes(manager, lifetime_sec=self._lifetime_sec)

    def _lifetime_sec(self, task: Task) -> float:
        return sum(
            self.sandbox_lifetime_sec(
                self.verifier_timeout_sec or step.verifier_timeout_sec or 180.0
            )
            for step in task_steps(task)
        )

    async def __call__(self, task: Task, ids: EpisodeIds) -> RolloutEpisode:
        record = RolloutEpisode(
            ids=ids, task_id=task.id, policy_version=self.policy_version, mode=self.mode
        )
        started = time.monotonic()
        try:
            await self._run(task, ids, record)
        except EpisodeError as exc:
            record.failure_type, record.error = failure_type(exc), str(exc)[-4000:]
            record.stop_reason = "error" if not record.chunks else record.stop_reason
        except Exception as exc:  # every failure must end up classified
            # A backend call failed in a way no boundary translated; keep it classified.
            record.failure_type, record.error = "UnexpectedError", f"{type(exc).__name__}: {exc}"
        record.wall_sec = time.monotonic() - started
        record.finished_at = time.time()
        return record

    async def _run(self, task: Task, ids: EpisodeIds, record: RolloutEpisode) -> None:
        """Each step of the task (one for most tasks): the agent's turns, then the step's tests."""
        async with self.sandboxes.open(task) as session:
            recorder = RecordingSession(session)
            scored: list[TestOutcome] = []
            result = None
            try:
                for index, step in enumerate(task_steps(task)):
                    result = await self.agent_step(
                        session, recorder, step, ids, after=result, budget_sec=_budget(task, step)
                    )
                    _add_part(record, result, first=index == 0)
                    if result.failure_type is not None:
                        record.failure_type, record.error = result.failure_type, result.error
                        return
                    scored.append(await self._score(session, step))
                    if below_min_reward(task, index, scored[-1]):
                        break
            finally:
                record.execs = recorder.log
            outcome = combine(task, scored)
            record.reward, record.success, record.rewarded = outcome.reward, outcome.passed, True
            record.tampering = outcome.tampering
            record.sandbox_broken = bool(outcome.unscorable)
            record.step_rewards = [o.reward for o in scored] if task.steps else []

    async def _score(self, session: Session, step: Task) -> TestOutcome:
        try:
            return await run_tests(session, step, timeout=self.verifier_timeout_sec)
        except (UnrecoverableError, TransientError):
            raise
        except (TermrlError, OSError, ValueError) as exc:
            raise RewardFailed(f"task {step.id}: scoring failed: {exc}") from exc


def _budget(task: Task, step: Task) -> float | None:
    """A step's agent budget, as eval gives it; None for a single-step task (the rollout's
    episode lifetime alone bounds it)."""
    return (step.agent_timeout_sec or DEFAULT_AGENT_TIMEOUT_SEC) if task.steps else None


def _add_part(record: RolloutEpisode, result: Any, *, first: bool) -> None:
    """Add one step's agent turns (``result``) to the episode: its chunks go on the one stream."""
    record.chunks += [c if isinstance(c, dict) else c.to_row() for c in result.chunks]
    record.stop_reason = result.stop_reason
    record.trainable = result.trainable and (first or record.trainable)
    record.episode_tokens = result.episode_tokens  # the whole stream so far
