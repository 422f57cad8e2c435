"""Why a trial failed: the failure-mode taxonomy, and the agent's tool-call statistics.

Every failed trial gets exactly one failure mode. The rules are checked in
this order and the first that matches wins — the order puts causes outside
the agent's control first, so a sandbox that died is never blamed on the
model:

1. ``environment-error``  the harness, not the agent, failed: the image did
   not build, no sandbox could be had, the sandbox died, the reward could
   not be read, or the engine failed (any ``UnrecoverableError``,
   ``SandboxDied``, ``NetworkError`` or ``ModelError``, see termrl.errors).
2. ``sandbox-broken``     the agent left its sandbox unable to run scoring's
   own set-up (it deleted or moved bash, rm or mkdir, or a library they load:
   ``TestOutcome.unscorable``). The tests never ran; the trial is a failure.
3. ``verifier-tampering`` the agent changed what the tests run: a command
   replaced or shadowed on the PATH, a Python startup hook it planted
   (``termrl.tampering.find_tampering``). Such a trial never counts as passed,
   whatever the tests said: its result may be forged.
4. ``timeout``            the agent phase ran past the task's agent timeout
   (``over_budget``; the episode's own ``lifetime`` stop is the same thing
   seen from inside), or the tests ran past the verifier timeout.
5. ``context-overflow``   the episode stopped because no room was left in
   the context window for another response.
6. ``invalid-loop``       after a clear failure (a command that exited
   non-zero or timed out) the agent issued the very same command again,
   turn after turn: at least ``LOOP_REPEATS`` identical turns in a row after
   the failing one. Re-running a command that just failed without changing
   anything is the repeated-command loop the seed warns about.
7. ``malformed-tool-calls`` at least half of the agent's turns carried no
   usable tool call (an unparseable or invalid call, or none at all).
8. ``wrong-result``       none of the above: the agent stopped (``done``,
   ``max-turns``) and the tests failed.

Tool-call statistics (``call_stats``) describe how the agent acts, failed or
not: calls per turn, how many turns issued more than one call (parallel
calls), and how many calls were read-only (``termrl.llm.toolcalls.is_read_only``:
the calls the agent may run concurrently) versus state-changing.

``transcript`` is what the agent ran, turn by turn, with the tail of what each
turn answered: the first thing to read when a policy fails a task (did it run
the wrong command, the right one on the wrong path, or the same one again?).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from termrl.llm.toolcalls import ToolCall, is_read_only, truncate_middle

__all__ = [
    "ENVIRONMENT_ERRORS",
    "FAILURE_MODES",
    "LOOP_REPEATS",
    "MALFORMED_FRACTION",
    "TRANSCRIPT_CHARS",
    "CallStats",
    "FailureMode",
    "TrialFacts",
    "call_stats",
    "classify",
    "longest_failed_repeat",
    "transcript",
]

FailureMode = Literal[
    "environment-error",
    "sandbox-broken",
    "verifier-tampering",
    "timeout",
    "context-overflow",
    "invalid-loop",
    "malformed-tool-calls",
    "wrong-result",
]
FAILURE_MODES: tuple[str, ...] = (
    "environment-error",
    "sandbox-broken",
    "verifier-tampering",
    "timeout",
    "context-overflow",
    "invalid-loop",
    "malformed-tool-calls",
    "wrong-result",
)

LOOP_REPEATS = 2
"""Identical turns in a row after a failed one that make a loop (3 attempts in all)."""
MALFORMED_FRACTION = 0.5
"""Share of turns without a usable call from which the agent is said to miss the format."""

ENVIRONMENT_ERRORS = frozenset(
    {
        "UnrecoverableError",
        "EnvInitFailed",
        "SandboxUnavailable",
        "ResetFailed",
        "RewardFailed",
        "SandboxDied",
        "NetworkError",
        "ModelError",
        "EngineUnavailable",
    }
)
"""``termrl.errors.failure_type`` names that put the blame on the harness."""


class ChunkLike(Protocol):
    """The fields of ``termrl.agent.loop.Chunk`` read here."""

    action: str
    call_format: str
    exit_code: int | None
    observation: str


@dataclass
class TrialFacts:
    """What is known about one finished trial, agent-independent."""

    passed: bool
    stop_reason: str
    """The episode's stop reason (done, max-turns, context-overflow, lifetime, error)."""
    chunks: Sequence[ChunkLike] = field(default_factory=list)
    """The agent's turns (empty for the oracle and nop agents)."""
    failure_type: str | None = None
    """``termrl.errors.failure_type`` of the error that ended the trial, if any."""
    over_budget: bool = False
    """The agent phase took longer than the task's agent timeout."""
    tests_timed_out: bool = False
    tampered: bool = False
    """Scoring found the agent had changed what the tests run."""
    sandbox_broken: bool = False
    """Scoring's own set-up could not run in the sandbox the agent left (``TestOutcome.unscorable``)."""


def _turn_calls(chunk: ChunkLike) -> list[dict[str, Any]]:
    try:
        calls = json.loads(chunk.action or "[]")
    except json.JSONDecodeError:
        return []
    return calls if isinstance(calls, list) else []


def _turn_key(chunk: ChunkLike) -> str | None:
    """The commands a turn ran, as one comparable string; None when it ran none."""
    commands = [
        c.get("arguments", {}).get("command") for c in _turn_calls(chunk) if c.get("name") == "bash"
    ]
    commands = [" ".join(c.split()) for c in commands if isinstance(c, str)]
    return "\n".join(commands) if commands else None


def _clearly_failed(chunk: ChunkLike) -> bool:
    # A timed-out command has no exit code; the agent marks it in the observation.
    return (chunk.exit_code is not None and chunk.exit_code != 0) or "[command timed out" in (
        chunk.observation or ""
    )


def longest_failed_repeat(chunks: Sequence[ChunkLike]) -> int:
    """The most identical turns that directly followed a failed run of the same commands."""
    best = run = 0
    for previous, chunk in zip(chunks, chunks[1:], strict=False):
        key = _turn_key(chunk)
        if (
            key is not None
            and key == _turn_key(previous)
            and (run > 0 or _clearly_failed(previous))
        ):
            run += 1
        else:
            run = 0
        best = max(best, run)
    return best


def _usable(chunk: ChunkLike) -> bool:
    return chunk.call_format in ("tool-call", "fenced-bash") and bool(_turn_calls(chunk))


def classify(facts: TrialFacts) -> FailureMode | None:
    """The failure mode of a trial (None when it passed); rules in the module docstring."""
    if facts.passed:
        return None
    if facts.failure_type in ENVIRONMENT_ERRORS:
        return "environment-error"
    if facts.sandbox_broken:
        return "sandbox-broken"
    if facts.tampered:
        return "verifier-tampering"
    if facts.over_budget or facts.stop_reason == "lifetime" or facts.tests_timed_out:
        return "timeout"
    if facts.stop_reason == "context-overflow":
        return "context-overflow"
    chunks = list(facts.chunks)
    if longest_failed_repeat(chunks) >= LOOP_REPEATS:
        return "invalid-loop"
    if chunks and sum(not _usable(c) for c in chunks) >= MALFORMED_FRACTION * len(chunks):
        return "malformed-tool-calls"
    return "wrong-result"


@dataclass
class CallStats:
    """How the agent used its tools in one trial."""

    tool_calls: int
    """bash calls issued (``done`` is not counted)."""
    parallel_turns: int
    """Turns that issued more than one bash call."""
    read_only_calls: int
    """Calls that cannot change the sandbox; the rest are state-changing."""
    calls_per_turn: list[int]

    @property
    def state_changing_calls(self) -> int:
        return self.tool_calls - self.read_only_calls


def call_stats(chunks: Sequence[ChunkLike]) -> CallStats:
    """Count calls per turn, parallel turns and read-only calls over an episode."""
    per_turn: list[int] = []
    read_only = 0
    for chunk in chunks:
        bash = [c for c in _turn_calls(chunk) if c.get("name") == "bash"]
        per_turn.append(len(bash))
        read_only += sum(
            is_read_only(ToolCall("bash", dict(c.get("arguments") or {}))) for c in bash
        )
    return CallStats(
        tool_calls=sum(per_turn),
        parallel_turns=sum(n > 1 for n in per_turn),
        read_only_calls=read_only,
        calls_per_turn=per_turn,
    )


TRANSCRIPT_CHARS = 4000
"""A trial's transcript is cut to this many characters (its middle goes first)."""

_COMMAND_CHARS = 600
_ANSWER_LINES, _ANSWER_CHARS = 4, 300
_RESPONSE_TAGS = ("<tool_response>", "</tool_response>")


def _answer_tail(observation: str) -> str:
    """The last lines of what a turn answered, without the tool-response tags around them."""
    lines = [
        line
        for line in observation.splitlines()
        if line.strip() and line.strip() not in _RESPONSE_TAGS
    ]
    tail = "\n".join(lines[-_ANSWER_LINES:])
    return tail if len(tail) <= _ANSWER_CHARS else "…" + tail[-_ANSWER_CHARS:]


def transcript(chunks: Sequence[ChunkLike]) -> str | None:
    """What the agent ran, one ``$ command`` per call and the tail of each turn's answer
    indented under it; None for an agent with no turns (oracle, nop)."""
    if not chunks:
        return None
    parts = []
    for chunk in chunks:
        calls = _turn_calls(chunk)
        if not calls:
            parts.append(f"(no usable tool call: {chunk.call_format})")
        for call in calls:
            if call.get("name") == "bash":
                command = str((call.get("arguments") or {}).get("command", ""))
                if len(command) > _COMMAND_CHARS:
                    command = command[:_COMMAND_CHARS] + "…"
                parts.append("$ " + command)
            else:
                parts.append(f"({call.get('name')})")
        answer = _answer_tail(chunk.observation or "")
        if answer:
            parts.append("  " + answer.replace("\n", "\n  "))
    return truncate_middle("\n".join(parts), TRANSCRIPT_CHARS)
