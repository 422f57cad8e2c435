"""Episode logic with a scripted engine and session; token bookkeeping exactness.

The exactness tests check the trajectories contract: concatenating
``prompt_ids + response_ids`` over the chunks gives exactly the token stream
the engine was fed on its next call.
"""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

from termrl.agent.loop import AgentConfig, run_episode
from termrl.errors import ConfigError, SandboxDied
from termrl.llm.engine import SamplingParams
from termrl.llm.hf_engine import TransformersEngine
from termrl.llm.toolcalls import ToolCall, render_tool_call

from .scripted import ScriptedEngine, ScriptedResult, ScriptedSession


def bash(cmd: str, **extra: object) -> str:
    return render_tool_call(ToolCall("bash", {"command": cmd, **extra}))


DONE = render_tool_call(ToolCall("done"))


def assert_chunks_are_what_was_fed(result, fed: list[list[int]]) -> None:
    stream: list[int] = []
    for chunk, prompt in zip(result.chunks, fed, strict=True):
        stream += chunk.prompt_ids
        assert stream == prompt  # the engine saw exactly the recorded tokens
        stream += chunk.response_ids
    assert result.episode_tokens == len(stream)


@pytest.mark.parametrize("end_with_eos", [False, True])
async def test_chunks_concatenate_to_exactly_what_the_model_was_fed(
    tiny_tokenizer, end_with_eos
) -> None:
    engine = ScriptedEngine(
        tiny_tokenizer,
        [
            "First look around.\n" + bash("ls -la"),
            bash("cat notes.txt") + bash("wc -l notes.txt"),
            "```bash\necho fenced\n```",
            "oops <tool_call>{bad json</tool_call>",
            "Finished. " + DONE,
        ],
        end_with_eos=end_with_eos,
    )
    session = ScriptedSession({"ls -la": ScriptedResult("notes.txt\n")})
    result = await run_episode(engine, session, "Count the lines of notes.txt", AgentConfig())
    assert result.stop_reason == "done" and result.trainable
    assert [c.call_format for c in result.chunks] == [
        "tool-call",
        "tool-call",
        "fenced-bash",
        "malformed",
        "tool-call",
    ]
    assert_chunks_are_what_was_fed(result, engine.fed)
    # The token stream is a well-formed conversation: it decodes to the chat
    # template's own rendering of the same messages.
    stream = [t for c in result.chunks for t in c.prompt_ids + c.response_ids]
    rendered = tiny_tokenizer.apply_chat_template(result.messages, tokenize=False)
    last = tiny_tokenizer.decode(result.chunks[-1].response_ids)
    assert tiny_tokenizer.decode(stream) == rendered + "<|im_start|>assistant\n" + last
    # Each observation reached the model verbatim.
    for prev, chunk in zip(result.chunks, result.chunks[1:], strict=False):
        assert prev.observation in tiny_tokenizer.decode(chunk.prompt_ids)
    assert "notes.txt\n\n[exit code: 0]" in result.chunks[0].observation
    assert "not valid JSON" in result.chunks[3].observation
    assert json.loads(result.chunks[1].action) == [
        {"name": "bash", "arguments": {"command": "cat notes.txt"}},
        {"name": "bash", "arguments": {"command": "wc -l notes.txt"}},
    ]
    assert [c for c, _ in session.commands] == [
        "ls -la",
        "cat notes.txt",
        "wc -l notes.txt",
        "echo fenced",
    ]


async def test_no_call_gets_a_nudge_and_max_turns_stops(tiny_tokenizer) -> None:
    engine = ScriptedEngine(tiny_tokenizer, ["hmm"] * 3)
    result = await run_episode(engine, ScriptedSession(), "do it", AgentConfig(max_turns=3))
    assert result.stop_reason == "max-turns" and result.num_turns == 3
    assert all(
        c.call_format == "none" and "No tool call found" in c.observation for c in result.chunks
    )
    assert all(c.exit_code is None for c in result.chunks)


async def test_read_only_calls_run_concurrently_and_writes_do_not(tiny_tokenizer) -> None:
    turn = bash("ls") + bash("cat a") + bash("grep x a") + bash("touch b") + bash("ls")
    session = ScriptedSession(delay_sec=0.05)
    engine = ScriptedEngine(tiny_tokenizer, [turn, DONE])
    await run_episode(engine, session, "t", AgentConfig())
    assert [c for c, _ in session.commands] == ["ls", "cat a", "grep x a", "touch b", "ls"]
    assert session.max_running == 3

    session = ScriptedSession(delay_sec=0.01)
    engine = ScriptedEngine(tiny_tokenizer, [turn, DONE])
    await run_episode(engine, session, "t", AgentConfig(parallel_read_only=False))
    assert session.max_running == 1


async def test_timeouts_are_defaulted_and_capped(tiny_tokenizer) -> None:
    session = ScriptedSession({"sleep 99": ScriptedResult("", exit_code=None, timed_out=True)})
    engine = ScriptedEngine(tiny_tokenizer, [bash("sleep 99", timeout=5000) + bash("pwd"), DONE])
    result = await run_episode(
        engine, session, "t", AgentConfig(default_timeout_sec=7, max_timeout_sec=100)
    )
    assert session.commands == [("sleep 99", 100.0), ("pwd", 7.0)]
    assert "[command timed out after 100 s]" in result.chunks[0].observation
    assert result.chunks[0].exit_code == 0  # the last command's status


async def test_long_observations_are_cut(tiny_tokenizer) -> None:
    big = "".join(f"row {i}\n" for i in range(5000))
    session = ScriptedSession({"cat big": ScriptedResult(big)})
    engine = ScriptedEngine(tiny_tokenizer, [bash("cat big"), DONE])
    result = await run_episode(engine, session, "t", AgentConfig(max_observation_chars=500))
    obs = result.chunks[0].observation
    assert "characters omitted" in obs and "row 0\n" in obs and "row 4999\n" in obs
    assert len(obs) < 700


async def test_context_overflow_is_a_stop_reason(tiny_tokenizer) -> None:
    big = "x " * 3000
    session = ScriptedSession({"cat big": ScriptedResult(big)})
    engine = ScriptedEngine(tiny_tokenizer, [bash("cat big")] * 5)
    config = AgentConfig(context_window=1200, max_new_tokens=64, max_observation_chars=2000)
    result = await run_episode(engine, session, "t", config)
    assert result.stop_reason == "context-overflow"
    assert all(
        len(f) + p.max_new_tokens <= 1200 for f, p in zip(engine.fed, engine.params, strict=True)
    )
    assert_chunks_are_what_was_fed(result, engine.fed)


async def test_sandbox_failure_stops_with_error_and_its_type(tiny_tokenizer) -> None:
    class DyingSession(ScriptedSession):
        async def exec(self, cmd, timeout=None):
            raise SandboxDied("container vanished")

    engine = ScriptedEngine(tiny_tokenizer, [bash("ls"), DONE])
    result = await run_episode(engine, DyingSession(), "t", AgentConfig())
    assert result.stop_reason == "error" and result.failure_type == "SandboxDied"
    assert result.num_turns == 1


async def test_lifetime_is_a_stop_reason(tiny_tokenizer) -> None:
    engine = ScriptedEngine(tiny_tokenizer, [bash("sleep")] * 10)
    result = await run_episode(
        engine, ScriptedSession(delay_sec=0.05), "t", AgentConfig(lifetime_sec=0.12)
    )
    assert result.stop_reason == "lifetime" and 1 <= result.num_turns < 10


async def test_bad_config_lists_every_problem(tiny_tokenizer) -> None:
    with pytest.raises(ConfigError) as info:
        await run_episode(
            ScriptedEngine(tiny_tokenizer, []),
            ScriptedSession(),
            "t",
            AgentConfig(max_turns=0, max_new_tokens=0),
        )
    assert len(info.value.problems) == 2


async def test_real_engine_episode_is_token_exact(tiny_model_dir) -> None:
    """The transformers engine with the tiny model: real sampling, real logprobs."""
    engine = TransformersEngine(tiny_model_dir)
    fed: list[list[int]] = []
    original = engine.generate

    async def recording(prompts, params):
        fed.extend(list(p) for p in prompts)
        return await original(prompts, params)

    engine.generate = recording  # type: ignore[method-assign]
    config = AgentConfig(max_turns=3, max_new_tokens=24, sampling=SamplingParams(seed=7))
    result = await run_episode(engine, ScriptedSession(), "List the files.", config)
    assert result.num_turns == 3 and result.trainable
    assert_chunks_are_what_was_fed(result, fed)
    for chunk in result.chunks:
        assert len(chunk.response_logprobs) == len(chunk.response_ids) > 0
        assert all(lp <= 0 for lp in chunk.response_logprobs)


async def test_concurrent_episodes_share_one_engine(tiny_tokenizer) -> None:
    engines = [ScriptedEngine(tiny_tokenizer, [bash(f"echo {i}"), DONE]) for i in range(4)]
    results = await asyncio.gather(
        *(run_episode(e, ScriptedSession(), f"t{i}", AgentConfig()) for i, e in enumerate(engines))
    )
    assert [r.stop_reason for r in results] == ["done"] * 4


@pytest.mark.parametrize("end_with_eos", [False, True])
async def test_a_continued_episode_is_one_stream_with_the_next_instruction_as_a_user_turn(
    tiny_tokenizer, end_with_eos
) -> None:
    """A multi-step task's steps: the second instruction continues the first's token stream."""
    engine = ScriptedEngine(
        tiny_tokenizer,
        [
            bash("ls"),
            bash("echo one > a.txt") + DONE,  # its output comes with the next instruction
            "```bash\ncat a.txt\n```",
            "still thinking",
            DONE,
        ],
        end_with_eos=end_with_eos,
    )
    session = ScriptedSession({"echo one > a.txt": ScriptedResult("wrote a.txt")})
    first = await run_episode(engine, session, "Step one: write a.txt", AgentConfig())
    assert first.stop_reason == "done" and first.num_turns == 2
    second = await run_episode(
        engine, session, "Step two: read a.txt", AgentConfig(max_turns=2), after=first
    )
    assert second.stop_reason == "max-turns" and second.trainable
    third = await run_episode(engine, session, "Step three: stop", AgentConfig(), after=second)
    assert third.stop_reason == "done"
    chunks = first.chunks + second.chunks + third.chunks
    assert [c.chunk_index for c in chunks] == [0, 1, 2, 3, 4]

    # One stream: every prompt the engine was fed is the concatenation of what came before.
    whole = SimpleNamespace(chunks=chunks, episode_tokens=third.episode_tokens)
    assert_chunks_are_what_was_fed(whole, engine.fed)
    # Step two's first prompt holds the done turn's unseen output, then its instruction, as user
    # turns; the instruction is prompt (fed), never response (trained) tokens.
    opening = tiny_tokenizer.decode(second.chunks[0].prompt_ids)
    assert opening.index("wrote a.txt") < opening.index("Step two: read a.txt")
    assert opening.count("<|im_start|>user") == 2 and opening.endswith("<|im_start|>assistant\n")
    # After max-turns the last observation was already in the stream: only the instruction comes.
    closing = tiny_tokenizer.decode(third.chunks[0].prompt_ids)
    assert closing.count("<|im_start|>user") == 2 and "No tool call found" in closing
    assert "Step three: stop" in closing
    for chunk in chunks:
        assert "Step" not in tiny_tokenizer.decode(chunk.response_ids)
    # And the stream is the chat template's own rendering of the whole conversation.
    stream = [t for c in chunks for t in c.prompt_ids + c.response_ids]
    rendered = tiny_tokenizer.apply_chat_template(third.messages, tokenize=False)
    last = tiny_tokenizer.decode(chunks[-1].response_ids)
    assert tiny_tokenizer.decode(stream) == rendered + "<|im_start|>assistant\n" + last
    # three instructions, four outputs (ls, the done turn's echo, cat, the no-call nudge)
    assert [m["role"] for m in third.messages].count("user") == 7
    assert [c for c, _ in session.commands] == ["ls", "echo one > a.txt", "cat a.txt"]


async def test_an_episode_that_failed_does_not_continue(tiny_tokenizer) -> None:
    class DyingSession(ScriptedSession):
        async def exec(self, cmd, timeout=None):
            raise SandboxDied("container vanished")

    engine = ScriptedEngine(tiny_tokenizer, [bash("ls"), DONE])
    failed = await run_episode(engine, DyingSession(), "t", AgentConfig())
    with pytest.raises(ValueError, match="did not stop with error"):
        await run_episode(engine, DyingSession(), "next", AgentConfig(), after=failed)


def test_within_caps_lifetime_and_timeouts_at_the_budget_and_keeps_the_rest() -> None:
    config = AgentConfig(max_turns=5, default_timeout_sec=60.0, max_timeout_sec=600.0)

    capped = config.within(30.0)
    assert (capped.lifetime_sec, capped.default_timeout_sec, capped.max_timeout_sec) == (
        30.0,
        30.0,
        30.0,
    )
    assert capped.max_turns == 5

    roomy = AgentConfig(lifetime_sec=100.0).within(1000.0)
    assert (roomy.lifetime_sec, roomy.default_timeout_sec, roomy.max_timeout_sec) == (
        100.0,
        60.0,
        600.0,
    )
