"""Recovery demonstrations: the expert's way out of a mistake the policy made.

A policy trained on demonstrations alone has only seen commands that work: it runs one
command and calls ``done`` whatever the command printed, so a ``tar: Error is not
recoverable`` ends its episode as surely as a success. Recovering is the habit the
seed asks for, and the demonstrations cannot show it: the expert never errs. The
policy's own failed episodes can (the expert labelling the states the learner
visits, as in DAgger, Ross et al. 2011):

    plan_recoveries(episodes, demonstrations)   failed episodes whose first sampled command
                                                exited non-zero (one per distinct command,
                                                at most ``per_task`` per task)
    run_recoveries(...)                         each replayed in a fresh sandbox: the turns
                                                up to that command as the episode took them
                                                (its anchor's expert prefix, then the
                                                policy's command), then the expert's solution
                                                from the step the policy got wrong, then done;
                                                scored, and kept only if it passes
    recovery_rows(recovery, result, reward)     a demonstration (``source: expert``) whose
                                                turns up to the mistake are folded into the
                                                prompt: train imitates only the expert's turns

So the policy learns, in the context of its own error message, what to run next
instead of ``done``, and never imitates the mistake itself (its tokens are prompt).
A replay that does not pass (the mistake changed the state so the expert's steps no
longer solve the task, or the sandbox broke) is dropped and counted, never trained on.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from components.rollout.episode import RolloutEpisode
from termrl.agent.demonstration import ReplayEngine
from termrl.agent.loop import AgentConfig, run_episode
from termrl.artifacts.tasks import Task
from termrl.artifacts.trajectories import demonstration_rows
from termrl.errors import TermrlError
from termrl.llm.toolcalls import ToolCall, render_tool_call
from termrl.taskrun import TaskSandboxes, run_tests

__all__ = ["Recovery", "RecoveryBatch", "plan_recoveries", "recovery_rows", "run_recoveries"]


@dataclass(frozen=True)
class Recovery:
    """One recovery to replay: a policy episode's turns up to its mistake, then the expert's."""

    episode_id: str
    """The policy episode whose mistake this starts from."""
    task_id: str
    responses: tuple[str, ...]
    """Every turn's response text in order: the anchor's expert prefix, the policy's failed
    command, the expert's remaining commands, then ``done``."""
    context_turns: int
    """How many of ``responses`` end up in the prompt: the prefix and the mistake."""


@dataclass
class RecoveryBatch:
    """What ``run_recoveries`` made: the rows of the kept ones, and why each other one was not."""

    rows: list[dict[str, Any]]
    kept: int
    dropped: Counter[str]

    def line(self) -> str:
        reasons = ", ".join(f"{n} {reason}" for reason, n in sorted(self.dropped.items()))
        tried = self.kept + sum(self.dropped.values())
        return f"recoveries: {self.kept} of {tried} kept" + (
            f" (dropped: {reasons})" if reasons else ""
        )


def _ran_bash_and_failed(chunk: Mapping[str, Any]) -> bool:
    """Whether a chunk called bash and its (last) command exited non-zero."""
    if chunk.get("exit_code") in (None, 0):
        return False
    try:
        calls = json.loads(chunk.get("action") or "[]")
    except ValueError:
        return False
    return any(isinstance(c, dict) and c.get("name") == "bash" for c in calls)


def plan_recoveries(
    episodes: Sequence[RolloutEpisode],
    demonstrations: Mapping[str, Sequence[str]],
    *,
    per_task: int,
) -> list[Recovery]:
    """The recoveries worth replaying, in episode-id order (deterministic over a resume).

    An episode qualifies when its tests ran and failed (no tampering, no broken sandbox), its
    task has a demonstration, and the first turn the policy sampled ran bash and exited
    non-zero: the error is in the observation, so the next turn can act on it. Later sampled
    turns are not used: after a command that succeeded, the expert's next step from its own
    solution may no longer fit the state. Per task, at most ``per_task`` recoveries, each from
    a different failed command.
    """
    chosen: dict[str, list[Recovery]] = {}
    done = render_tool_call(ToolCall("done"))
    for record in sorted(episodes, key=lambda r: r.ids.episode_id):
        expert = list(demonstrations.get(record.task_id, ()))
        replayed = record.ids.anchor - 1
        if (
            not expert
            or not record.rewarded
            or record.success
            or record.tampering
            or record.sandbox_broken
            or record.failure_type is not None
            or replayed >= len(expert)
            or len(record.chunks) <= replayed
        ):
            continue
        mistake = record.chunks[replayed]
        if mistake.get("replayed") or not _ran_bash_and_failed(mistake):
            continue
        taken = chosen.setdefault(record.task_id, [])
        text = mistake["response_text"]
        if len(taken) >= per_task or any(r.responses[replayed] == text for r in taken):
            continue
        responses = (*expert[:replayed], text, *expert[replayed:], done)
        taken.append(Recovery(record.ids.episode_id, record.task_id, responses, replayed + 1))
    return [r for recoveries in chosen.values() for r in recoveries]


def recovery_rows(
    recovery: Recovery, result: Any, reward: float, *, policy_version: int
) -> list[dict[str, Any]]:
    """The trajectories rows of a replayed recovery: the expert's turns, every one replayed, with
    the turns up to the mistake (their prompts and responses, exactly as the model saw them)
    leading the first one's prompt, so the token stream is the whole episode's."""
    chunks = [c.to_row() for c in result.chunks]
    context, taught = chunks[: recovery.context_turns], chunks[recovery.context_turns :]
    lead = [t for c in context for t in (*c["prompt_ids"], *c["response_ids"])]
    taught[0] = {**taught[0], "prompt_ids": lead + list(taught[0]["prompt_ids"])}
    return demonstration_rows(
        taught,
        episode_id=f"recovery-{recovery.episode_id}",
        group_id=f"recovery:{recovery.episode_id}",
        task_id=recovery.task_id,
        mode="recovery",
        reward=reward,
        result=result,
        policy_version=policy_version,
    )


async def run_recoveries(
    recoveries: Sequence[Recovery],
    tasks: Mapping[str, Task],
    sandboxes: TaskSandboxes,
    tokenizer: Any,
    agent: AgentConfig,
    *,
    policy_version: int,
    verifier_timeout_sec: float | None = None,
) -> RecoveryBatch:
    """Replay every recovery in a fresh sandbox of ``sandboxes`` (its manager bounds how many at
    once) and score it; the ones that pass become rows."""

    async def one(recovery: Recovery) -> tuple[list[dict[str, Any]], str | None]:
        task = tasks[recovery.task_id]
        engine = ReplayEngine(tokenizer, recovery.responses, context_window=agent.context_window)
        config = replace(agent, max_turns=len(recovery.responses))
        try:
            async with sandboxes.open(task) as session:
                result = await run_episode(engine, session, task.instruction, config)
                if result.failure_type is not None or result.stop_reason != "done":
                    return [], f"replay stopped ({result.failure_type or result.stop_reason})"
                outcome = await run_tests(session, task, timeout=verifier_timeout_sec)
        except TermrlError as exc:
            return [], f"environment error ({type(exc).__name__})"
        except Exception as exc:  # an extra: it must never sink the rollout's finished episodes
            return [], f"unexpected error ({type(exc).__name__})"
        if outcome.unscorable or outcome.tampering:
            return [], "the mistake broke scoring"
        if not outcome.passed:
            return [], "the expert's steps did not recover"
        return recovery_rows(recovery, result, outcome.reward, policy_version=policy_version), None

    done = await asyncio.gather(*(one(r) for r in recoveries))
    rows = [row for kept, _ in done for row in kept]
    dropped = Counter(reason for _, reason in done if reason is not None)
    return RecoveryBatch(rows, sum(reason is None for _, reason in done), dropped)
