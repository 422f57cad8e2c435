"""The three agents eval can put in a sandbox, behind one small interface.

    agent.act(session, task, trial, budget_sec, previous=None) -> TrialRun

- ``PolicyAgent``: the training agent itself — ``termrl.agent.run_episode``,
  the one episode harness rollout uses too — driving a transformers model
  folder or a ``litellm:`` model. The agent phase's budget becomes the
  episode's lifetime and the cap on any one command's timeout.
- ``OracleAgent``: runs the task's reference solution (``termrl.taskrun``),
  the way verification does. Must score 100 % on sound tasks.
- ``NopAgent``: does nothing. Must score 0 % on sound tasks.

Oracle and nop check the harness and the tasks; they use no model.

A multi-step task (``termrl.multistep``) gets one ``act`` per step, in one
sandbox; ``previous`` is the agent's run on the step before (None for the
first). The policy agent continues that run's conversation with the step's
instruction as a new user turn (``run_episode(..., after=...)``), as a
rollout episode does, so a policy is evaluated on a multi-step task the way
it was trained on one; an API model (``litellm:``) goes through the same
loop and continues too. Oracle and nop have no conversation and ignore it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from components.eval.config import API_PREFIX, EvalConfig
from termrl.agent.loop import AgentConfig, AgentEpisode, Chunk, run_episode
from termrl.artifacts.tasks import Task
from termrl.errors import ModelError
from termrl.llm.engine import Engine, SamplingParams
from termrl.sandbox.session import Session
from termrl.taskrun import run_solution, solution_steps

__all__ = [
    "Agent",
    "TrialRun",
    "NopAgent",
    "OracleAgent",
    "PolicyAgent",
    "make_agent",
    "open_engine",
]


@dataclass
class TrialRun:
    """What one agent phase of an eval trial did, in the terms the results and the taxonomy use."""

    stop_reason: str
    chunks: list[Chunk] = field(default_factory=list)
    turns: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    episode_tokens: int = 0
    timed_out: bool = False
    """The agent itself stopped at its budget (the solution timed out, the episode's lifetime)."""
    failure_type: str | None = None
    error: str | None = None
    episode: AgentEpisode | None = field(default=None, repr=False, compare=False)
    """The policy agent's episode, which the next step of a multi-step task continues; the
    trial only hands it back (``act(..., previous=this)``). None for the other agents."""


class Agent(Protocol):
    name: str

    async def act(
        self,
        session: Session,
        task: Task,
        trial: int,
        budget_sec: float,
        previous: TrialRun | None = None,
    ) -> TrialRun:
        """Work on ``task`` in ``session`` within ``budget_sec``; ``previous``: this agent's run
        on the previous step of a multi-step task (None for its first step or a single-step task)."""
        ...


class NopAgent:
    """Leaves the sandbox as the environment built it."""

    name = "nop"

    async def act(
        self,
        session: Session,
        task: Task,
        trial: int,
        budget_sec: float,
        previous: TrialRun | None = None,
    ) -> TrialRun:
        return TrialRun(stop_reason="done")


class OracleAgent:
    """Runs the reference solution under the agent budget."""

    name = "oracle"

    async def act(
        self,
        session: Session,
        task: Task,
        trial: int,
        budget_sec: float,
        previous: TrialRun | None = None,
    ) -> TrialRun:
        outcome = await run_solution(session, task, timeout=budget_sec)
        steps = len(solution_steps(task))
        return TrialRun(
            stop_reason="lifetime" if outcome.timed_out else "done",
            turns=steps,
            timed_out=outcome.timed_out,
            error=None
            if outcome.exit_code in (0, None)
            else f"solution exited {outcome.exit_code}",
        )


class PolicyAgent:
    """The training agent: one ``run_episode`` per trial on a shared engine (a multi-step task's
    trial: one conversation, continued step by step)."""

    name = "policy"

    def __init__(self, engine: Engine, config: EvalConfig):
        self.engine = engine
        self.config = config

    def agent_config(self, trial: int, budget_sec: float) -> AgentConfig:
        """The episode's settings for one trial under ``budget_sec`` seconds."""
        c = self.config
        seed = None if c.seed is None else c.seed + trial
        return AgentConfig(
            max_turns=c.max_turns,
            max_new_tokens=c.max_new_tokens,
            prompt_style=c.prompt_style,
            context_window=c.context_window,
            sampling=SamplingParams(
                max_new_tokens=c.max_new_tokens, temperature=c.temperature, seed=seed
            ),
        ).within(budget_sec)

    async def act(
        self,
        session: Session,
        task: Task,
        trial: int,
        budget_sec: float,
        previous: TrialRun | None = None,
    ) -> TrialRun:
        """``previous`` given: its conversation continued, ``task.instruction`` a new user turn."""
        result = await run_episode(
            self.engine,
            session,
            task.instruction,
            self.agent_config(trial, budget_sec),
            after=previous.episode if previous is not None else None,
        )
        return TrialRun(
            stop_reason=result.stop_reason,
            chunks=result.chunks,
            turns=result.num_turns,
            prompt_tokens=sum(len(c.prompt_ids) for c in result.chunks),
            completion_tokens=sum(len(c.response_ids) for c in result.chunks),
            episode_tokens=result.episode_tokens,
            timed_out=result.stop_reason == "lifetime",
            failure_type=result.failure_type,
            error=result.error,
            episode=result,
        )


def open_engine(config: EvalConfig) -> Engine:
    """The engine behind the policy agent: litellm for ``litellm:MODEL``, else ``config.engine``."""
    model = str(config.model or "")
    if model.startswith(API_PREFIX):
        from termrl.llm.litellm_engine import LiteLLMEngine

        return LiteLLMEngine(
            model[len(API_PREFIX) :],
            api_base=config.api_base,
            context_window=config.context_window or 8192,
        )
    from termrl.llm.engines import policy_engine

    try:
        return policy_engine(
            model or None,
            engine=config.engine,
            max_batch_size=config.max_batch_size,
            context_window=config.context_window,
            weights_dtype=config.weights_dtype,
        )
    except ImportError as exc:
        raise ModelError(f"the transformers engine cannot load {model}: {exc}") from exc


def make_agent(config: EvalConfig, engine: Engine | None = None) -> Agent:
    """The agent ``config.agent`` names (the policy agent needs ``engine``)."""
    if config.agent == "oracle":
        return OracleAgent()
    if config.agent == "nop":
        return NopAgent()
    if engine is None:
        raise ModelError("the policy agent needs an engine")
    return PolicyAgent(engine, config)
