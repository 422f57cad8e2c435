"""One episode of the terminal agent: the single harness rollout and eval share.

    run_episode(engine, session, instruction, config) -> AgentEpisode
    run_episode(engine, session, next_instruction, config, after=episode)
                                    the same conversation, one user turn more
                                    (a multi-step task's next step)

    prompt ─► engine.generate ─► parse calls ─► session.exec ─► observation ─┐
      ▲                                                                      │
      └──────────── append the observation turn's tokens ◄───────────────────┘

Each assistant turn becomes a ``Chunk`` whose fields are the chunk columns of
the trajectories artifact. With an engine that takes token ids (transformers,
vLLM) the conversation is a token stream grown by appending (see
``termrl.llm.chat``), so ``prompt_ids + response_ids`` over the chunks is
exactly what the model was fed. With a message-only engine (an API through
litellm) the chunks record what the endpoint reports; the episode is
``trainable`` only if those ids are exact and each prompt extends the last.

The episode ends with a stop reason: ``done`` (the model called done),
``max-turns``, ``context-overflow`` (no room left for a response),
``lifetime`` (wall clock) or ``error`` (a sandbox or engine failure, whose
type is kept in ``failure_type`` for mask & filter).

An episode that stopped for any other reason than ``error`` can be continued
(``after=``): the new instruction is appended to its token stream as a user
turn (behind the output of the calls its ``done`` turn ran, which the model
has not seen yet), and the agent works on from there with ``config``'s turns
and lifetime. The one stream then runs through both parts, so their chunks,
in order, still concatenate to exactly what the model was fed.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from termrl.agent.exec_session import ExecOutcome, ExecSession
from termrl.errors import ConfigError, TermrlError, failure_type
from termrl.llm.chat import ChatTokens
from termrl.llm.engine import ChatMessages, Engine, Generation, SamplingParams
from termrl.llm.toolcalls import (
    PROMPTS,
    CallFormat,
    ToolCall,
    format_tool_responses,
    is_read_only,
    parse_response,
    system_prompt,
    truncate_middle,
)

__all__ = ["AgentConfig", "Chunk", "AgentEpisode", "StopReason", "run_episode"]

StopReason = Literal["done", "max-turns", "context-overflow", "lifetime", "error"]

_NO_CALL = (
    'No tool call found. Call a tool as <tool_call>{"name": "bash", "arguments": '
    '{"command": "..."}}</tool_call>, or call done when the task is complete.'
)


@dataclass(frozen=True)
class AgentConfig:
    """Every knob of the agent, with its default and why."""

    max_turns: int = 30
    """Assistant turns before the episode stops with ``max-turns``."""
    max_new_tokens: int = SamplingParams.max_new_tokens
    """Response budget per turn (by default the engine's per-call budget); lowered automatically
    near the end of the context."""
    context_window: int | None = None
    """Tokens of prompt + response the episode may use; None takes the engine's."""
    min_response_tokens: int = 16
    """Stop with ``context-overflow`` when less room than this is left for a response."""
    sampling: SamplingParams = field(default_factory=SamplingParams)
    """Temperature, top-p/k, stop strings and seed (max_new_tokens is set per turn)."""
    max_observation_chars: int = 4000
    """Longer command outputs are cut to head + tail with a marker."""
    default_timeout_sec: float = 60.0
    """Timeout of a bash call that does not give one."""
    max_timeout_sec: float = 600.0
    """Cap on the timeout a bash call may ask for."""
    lifetime_sec: float | None = None
    """Wall-clock limit of the whole episode (``lifetime``); None means no limit."""
    prompt_style: str = "compact"
    """System prompt with the bash and done tools: ``compact`` (a worked example; what the
    embedded 135M policy follows) or ``hermes`` (JSON tool signatures). Rollout, eval and
    demonstrations must use the same one: a policy is trained on the prompt it sees."""
    system_prompt: str | None = None
    """A custom system prompt replacing ``prompt_style``'s."""
    allow_fenced_bash: bool = True
    """Accept a fenced bash block as a call (small models); marked ``fenced-bash``."""
    parallel_read_only: bool = True
    """Run consecutive read-only calls of one turn concurrently."""

    def validate(self) -> None:
        problems = []
        if self.max_turns < 1:
            problems.append("max_turns must be at least 1")
        if self.max_new_tokens < 1:
            problems.append("max_new_tokens must be at least 1")
        if self.min_response_tokens < 1:
            problems.append("min_response_tokens must be at least 1")
        if self.max_observation_chars < 64:
            problems.append("max_observation_chars must be at least 64")
        if self.prompt_style not in PROMPTS:
            problems.append(
                f"prompt_style must be one of {', '.join(PROMPTS)}, not {self.prompt_style!r}"
            )
        if self.default_timeout_sec <= 0 or self.max_timeout_sec <= 0:
            problems.append("timeouts must be positive")
        if problems:
            raise ConfigError(problems)

    def within(self, budget_sec: float) -> AgentConfig:
        """These settings with the episode's lifetime and command timeouts capped at
        ``budget_sec``: an agent never outlives the task's (or step's) time budget."""
        return replace(
            self,
            lifetime_sec=min(self.lifetime_sec or budget_sec, budget_sec),
            default_timeout_sec=min(self.default_timeout_sec, budget_sec),
            max_timeout_sec=min(self.max_timeout_sec, budget_sec),
        )


@dataclass
class Chunk:
    """One assistant turn, as the trajectories artifact stores it."""

    chunk_index: int
    prompt_ids: list[int]
    response_ids: list[int]
    response_logprobs: list[float]
    response_text: str
    action: str
    call_format: CallFormat
    observation: str
    exit_code: int | None
    gen_ms: float
    exec_ms: float
    replayed: bool = False
    """Replayed from a demonstration (``termrl.agent.demonstration``), not sampled."""

    def to_row(self) -> dict[str, Any]:
        """The chunk columns of a trajectories row."""
        return asdict(self)


@dataclass
class AgentEpisode:
    """What the agent loop produced in one episode; rollout (``RolloutEpisode``) and eval (``TrialRun``) build on it."""

    chunks: list[Chunk]
    stop_reason: StopReason
    num_turns: int
    episode_tokens: int
    """Length of the token stream the model saw (prompts and responses)."""
    trainable: bool
    """True when every token id is exactly what the model was fed and sampled."""
    failure_type: str | None = None
    error: str | None = None
    messages: ChatMessages = field(default_factory=list)
    """The conversation as text (logs, reports); training reads the chunks."""
    wall_sec: float = 0.0
    stream: _Stream | None = field(default=None, repr=False, compare=False)
    """The token stream, for a continuation (``run_episode(..., after=this)``) to extend."""


def _describe(outcome: ExecOutcome, max_chars: int, timeout: float) -> str:
    text = truncate_middle(outcome.output, max_chars)
    if outcome.truncated:
        text += "\n[output truncated by the sandbox]"
    if outcome.timed_out:
        return f"{text}\n[command timed out after {timeout:g} s]"
    return f"{text}\n[exit code: {outcome.exit_code}]"


async def _execute(
    session: ExecSession, calls: list[ToolCall], config: AgentConfig
) -> tuple[list[str], int | None, bool]:
    """Run a turn's calls in order; returns (observation parts, last exit code, done)."""
    parts: list[str] = []
    last_exit: int | None = None
    i = 0
    while i < len(calls):
        call = calls[i]
        if call.name == "done":
            return parts, last_exit, True
        group = [call]
        if config.parallel_read_only and is_read_only(call):
            while i + len(group) < len(calls) and is_read_only(calls[i + len(group)]):
                group.append(calls[i + len(group)])
        timeouts = [
            min(
                float(c.arguments.get("timeout") or config.default_timeout_sec),
                config.max_timeout_sec,
            )
            for c in group
        ]
        outcomes = await asyncio.gather(
            *(session.exec(c.arguments["command"], t) for c, t in zip(group, timeouts, strict=True))
        )
        for outcome, timeout in zip(outcomes, timeouts, strict=True):
            parts.append(_describe(outcome, config.max_observation_chars, timeout))
            last_exit = outcome.exit_code
        i += len(group)
    return parts, last_exit, False


class _Stream:
    """The token bookkeeping of one conversation (token mode or message mode): an episode, or
    the steps of a multi-step task's episode one after the other (``run_episode(after=...)``)."""

    def __init__(self, engine: Engine, messages: ChatMessages) -> None:
        self.engine = engine
        self.token_mode = engine.accepts_token_ids and engine.tokenizer is not None
        self.chat = ChatTokens(engine.tokenizer) if self.token_mode else None
        self.messages = messages
        self.ids: list[int] = []  # everything fed and sampled so far
        self.pending: list[int] = self.chat.initial_ids(messages) if self.chat else []
        self.exact = True
        self.last: Generation | None = None  # the latest response
        self.since_last: ChatMessages = []  # the turns added after it, which pending holds
        self.responses = 0

    def prompt_tokens(self) -> int:
        return len(self.ids) + len(self.pending)

    async def generate(self, params: SamplingParams) -> tuple[Generation, list[int]]:
        """Generate the next response; returns it with this chunk's prompt delta."""
        if self.chat is not None:
            full = self.ids + self.pending
            gen = (await self.engine.generate([full], params))[0]
            delta, self.ids = self.pending, full + gen.token_ids
            self._answered(gen)
            return gen, delta
        gen = (await self.engine.generate([list(self.messages)], params))[0]
        fed = gen.prompt_ids
        if (
            not gen.exact_tokens
            or fed is None
            or not gen.token_ids
            or fed[: len(self.ids)] != self.ids
        ):
            # Without exact ids that extend the previous stream, the chunk cannot be trained on.
            self.exact = False
            delta = list(fed or [])
            self.ids = list(fed or []) + list(gen.token_ids)
        else:
            delta = fed[len(self.ids) :]
            self.ids = fed + gen.token_ids
        self._answered(gen)
        return gen, delta

    def _answered(self, gen: Generation) -> None:
        self.last, self.since_last = gen, []
        self.responses += 1

    def add_turns(self, new_messages: ChatMessages) -> None:
        """Append turns after the latest response (or the opening ones): the model's next input."""
        if self.last is not None and not self.since_last:
            self.messages.append({"role": "assistant", "content": self.last.text})
        self.messages.extend(new_messages)
        self.since_last.extend(new_messages)
        if self.chat is None:
            return
        if self.last is None:
            self.pending = self.chat.initial_ids(self.messages)
        else:
            self.pending = self.chat.continuation_ids(self.since_last, self.last.token_ids)


def _open_stream(
    engine: Engine, config: AgentConfig, instruction: str, after: AgentEpisode | None
) -> _Stream:
    """A new conversation on ``instruction``, or ``after``'s with ``instruction`` appended."""
    if after is None:
        return _Stream(
            engine,
            [
                {
                    "role": "system",
                    "content": config.system_prompt or system_prompt(config.prompt_style),
                },
                {"role": "user", "content": instruction},
            ],
        )
    stream = after.stream
    if stream is None or after.stop_reason == "error":
        raise ValueError("only an episode of run_episode that did not stop with error continues")
    # Every stop but done (and error) comes after the last turn's output was added to the stream.
    unseen = after.chunks[-1].observation if after.stop_reason == "done" and after.chunks else ""
    stream.engine = engine
    stream.add_turns([{"role": "user", "content": text} for text in (unseen, instruction) if text])
    return stream


async def run_episode(
    engine: Engine,
    session: ExecSession,
    instruction: str,
    config: AgentConfig,
    *,
    after: AgentEpisode | None = None,
) -> AgentEpisode:
    """Let the agent work on ``instruction`` in ``session`` until it stops.

    ``after``: continue that episode's conversation (same tokenizer) with ``instruction`` as a
    new user turn. The result then holds this part's chunks only, numbered on from ``after``'s;
    ``episode_tokens`` and ``messages`` cover the whole conversation.
    """
    config.validate()
    started = time.monotonic()
    window = config.context_window or engine.context_window
    stream = _open_stream(engine, config, instruction, after)
    first = stream.responses  # chunks before this part: a continuation numbers on
    chunks: list[Chunk] = []
    stop: StopReason = "max-turns"
    error: BaseException | None = None
    for turn in range(config.max_turns):
        if config.lifetime_sec is not None and time.monotonic() - started > config.lifetime_sec:
            stop = "lifetime"
            break
        room = window - stream.prompt_tokens()
        if room < config.min_response_tokens:
            stop = "context-overflow"
            break
        params = replace(config.sampling, max_new_tokens=min(config.max_new_tokens, room))
        try:
            gen, delta = await stream.generate(params)
        except TermrlError as exc:
            stop, error = "error", exc
            break
        chunk, done, error = await _act_on(session, config, gen, delta, first + turn)
        chunks.append(chunk)
        if error is not None:
            stop = "error"
            break
        if done:
            stop = "done"
            break
        stream.add_turns([{"role": "user", "content": chunk.observation}])
    return _finished_episode(chunks, stop, error, stream, started)


async def _act_on(
    session: ExecSession, config: AgentConfig, gen: Generation, delta: list[int], index: int
) -> tuple[Chunk, bool, TermrlError | None]:
    """Run the calls of one response and record the turn: (its chunk, whether the agent
    called done, the sandbox error that ends the episode, if one did)."""
    parsed = parse_response(gen.text)
    if parsed.call_format == "fenced-bash" and not config.allow_fenced_bash:
        parsed = replace(parsed, calls=[], call_format="none")
    exec_started = time.perf_counter()
    error: TermrlError | None = None
    try:
        parts, exit_code, done = await _execute(session, parsed.calls, config)
    except TermrlError as exc:
        parts, exit_code, done = [f"[sandbox error: {type(exc).__name__}]"], None, False
        error = exc
    exec_ms = (time.perf_counter() - exec_started) * 1000.0
    parts = [f"Error: {e}" for e in parsed.errors] + parts
    if parsed.call_format == "none":
        parts.append(_NO_CALL)
    elif gen.finish_reason == "length" and parsed.errors:
        parts.append("[your response was cut off at the token limit]")
    chunk = Chunk(
        chunk_index=index,
        prompt_ids=list(delta),
        response_ids=list(gen.token_ids),
        response_logprobs=list(gen.logprobs or []),
        response_text=gen.text,
        action=json.dumps([c.to_json() for c in parsed.calls]),
        call_format=parsed.call_format,
        observation=format_tool_responses(parts) if parts else "",
        exit_code=exit_code,
        gen_ms=gen.gen_ms,
        exec_ms=exec_ms,
    )
    return chunk, done, error


def _finished_episode(
    chunks: list[Chunk],
    stop: StopReason,
    error: BaseException | None,
    stream: _Stream,
    started: float,
) -> AgentEpisode:
    """The episode as it stopped; trainable when every token and logprob is the policy's own."""
    trainable = stream.exact and all(
        len(c.response_logprobs) == len(c.response_ids) for c in chunks
    )
    return AgentEpisode(
        chunks=chunks,
        stop_reason=stop,
        num_turns=len(chunks),
        episode_tokens=len(stream.ids),
        trainable=trainable,
        failure_type=failure_type(error) if error is not None else None,
        error=str(error) if error is not None else None,
        messages=stream.messages,
        wall_sec=time.monotonic() - started,
        stream=stream,
    )
