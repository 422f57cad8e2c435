"""Each failure mode recognised on a crafted trajectory; tool-call statistics.

Trajectories are built from the agent's own ``Chunk`` type, and two of them
come out of a real ``run_episode`` (scripted engine and session), so the
rules read exactly what the agent records.
"""

from __future__ import annotations

import json

import pytest

from components.eval.taxonomy import (
    FAILURE_MODES,
    TRANSCRIPT_CHARS,
    TrialFacts,
    call_stats,
    classify,
    longest_failed_repeat,
    transcript,
)
from termrl.agent.loop import AgentConfig, Chunk, run_episode
from termrl.llm.toolcalls import ToolCall, render_tool_call
from tests.agent.scripted import ScriptedEngine, ScriptedResult, ScriptedSession


def turn(
    *commands: str, exit_code: int | None = 0, call_format: str = "tool-call", observation: str = ""
) -> Chunk:
    action = json.dumps([{"name": "bash", "arguments": {"command": c}} for c in commands])
    return Chunk(
        chunk_index=0,
        prompt_ids=[1],
        response_ids=[2],
        response_logprobs=[-0.1],
        response_text="",
        action=action,
        call_format=call_format,
        observation=observation,
        exit_code=exit_code,
        gen_ms=0.0,
        exec_ms=0.0,
    )


def no_call(call_format: str = "none") -> Chunk:
    chunk = turn(call_format=call_format, exit_code=None)
    chunk.action = "[]"
    return chunk


def failed(chunks: list[Chunk], stop: str = "max-turns", **facts) -> str | None:
    return classify(TrialFacts(passed=False, stop_reason=stop, chunks=chunks, **facts))


def test_a_passed_trial_has_no_failure_mode() -> None:
    assert classify(TrialFacts(passed=True, stop_reason="done", chunks=[turn("make")])) is None


def test_environment_error() -> None:
    assert failed([], stop="error", failure_type="EnvInitFailed") == "environment-error"
    assert failed([turn("ls")], stop="error", failure_type="SandboxDied") == "environment-error"
    assert failed([turn("ls")], stop="done", failure_type="RewardFailed") == "environment-error"
    # It outranks everything the agent may also have done wrong.
    assert (
        failed(
            [turn("x", exit_code=1)] * 4,
            stop="lifetime",
            failure_type="NetworkError",
            over_budget=True,
        )
        == "environment-error"
    )


def test_sandbox_broken() -> None:
    moved = [turn('for f in /bin/bash; do mv -- "$f" "${f%.bash}.txt"; done')]
    assert failed(moved, stop="done", sandbox_broken=True) == "sandbox-broken"
    # The tests never ran: what scoring saw changed cannot have forged anything, and a loop or a
    # timeout that broke the sandbox is still the sandbox broken.
    assert failed([turn("x", exit_code=1)] * 4, sandbox_broken=True, tampered=True) == (
        "sandbox-broken"
    )
    # The harness's own failure still outranks it.
    assert failed([], stop="error", failure_type="SandboxDied", sandbox_broken=True) == (
        "environment-error"
    )


def test_timeout() -> None:
    assert failed([turn("sleep 999", exit_code=None)], stop="lifetime") == "timeout"
    assert failed([turn("ls")], stop="done", over_budget=True) == "timeout"
    assert failed([turn("ls")], stop="done", tests_timed_out=True) == "timeout"


def test_context_overflow() -> None:
    assert failed([turn("cat big.log")] * 3, stop="context-overflow") == "context-overflow"


def test_invalid_loop_needs_a_clear_failure_then_identical_repeats() -> None:
    # make fails, then the very same command twice more: 2 repeats after the failure.
    looping = [
        turn("ls"),
        turn("make", exit_code=2),
        turn("make", exit_code=2),
        turn("make ", exit_code=2),
    ]
    assert longest_failed_repeat(looping) == 2
    assert failed(looping) == "invalid-loop"
    # One retry is not a loop.
    assert (
        failed([turn("make", exit_code=2), turn("make", exit_code=2), turn("ls")]) == "wrong-result"
    )
    # Repeating a command that succeeded (polling a job) is not a loop after a failure.
    assert failed([turn("cat status")] * 4) == "wrong-result"
    # A timed-out command carries no exit code; the observation's marker is the failure.
    hung = turn("curl x", exit_code=None, observation="[command timed out after 60 s]")
    assert failed([hung, hung, hung]) == "invalid-loop"


def test_malformed_tool_calls() -> None:
    chunks = [no_call("malformed"), no_call("none"), turn("ls"), no_call("malformed")]
    assert failed(chunks) == "malformed-tool-calls"
    # Mostly usable calls: the agent handled the format, the result was wrong.
    assert (
        failed([no_call("malformed"), turn("ls"), turn("cat a"), turn("echo b > c")])
        == "wrong-result"
    )


def test_wrong_result() -> None:
    assert failed([turn("echo hi > /app/out.txt")], stop="done") == "wrong-result"
    # nop and oracle agents have no turns at all.
    assert failed([], stop="done") == "wrong-result"


def test_every_mode_is_reachable() -> None:
    seen = {
        failed([], stop="error", failure_type="EnvInitFailed"),
        failed([], stop="done", sandbox_broken=True),
        failed([], stop="done", tampered=True),
        failed([], stop="lifetime"),
        failed([], stop="context-overflow"),
        failed([turn("make", exit_code=1)] * 3),
        failed([no_call()]),
        failed([], stop="done"),
    }
    assert seen == set(FAILURE_MODES)


def test_call_stats() -> None:
    chunks = [
        turn("ls -la", "cat notes.txt", "wc -l notes.txt"),  # 3 read-only calls, parallel
        turn("echo hi > out.txt"),  # state-changing
        turn("grep x a | sort", "rm -rf build"),  # 1 read-only + 1 state-changing, parallel
        no_call(),
    ]
    stats = call_stats(chunks)
    assert stats.calls_per_turn == [3, 1, 2, 0]
    assert stats.tool_calls == 6
    assert stats.parallel_turns == 2
    assert stats.read_only_calls == 4
    assert stats.state_changing_calls == 2


def test_the_transcript_shows_each_command_and_the_tail_of_its_answer() -> None:
    answer = (
        "<tool_response>\n"
        + "".join(f"line {i}\n" for i in range(10))
        + "[exit code: 1]\n</tool_response>"
    )
    chunks = [
        turn("ls /srv", "cat /srv/a.env", observation="<tool_response>\na.env\n</tool_response>"),
        turn("sed -i 's/x/y/' /srv/a.env", exit_code=1, observation=answer),
        no_call(call_format="malformed"),
    ]
    chunks[2].observation = "the arguments of 'bash' are not valid JSON"
    done = turn()
    done.action = json.dumps([{"name": "done", "arguments": {}}])
    text = transcript([*chunks, done])
    assert text.splitlines() == [
        "$ ls /srv",
        "$ cat /srv/a.env",
        "  a.env",
        "$ sed -i 's/x/y/' /srv/a.env",
        "  line 7",  # the last four lines of the answer, the response tags dropped
        "  line 8",
        "  line 9",
        "  [exit code: 1]",
        "(no usable tool call: malformed)",
        "  the arguments of 'bash' are not valid JSON",
        "(done)",
    ]
    assert transcript([]) is None  # the oracle and nop agents have no turns


def test_a_long_transcript_keeps_its_start_and_its_end() -> None:
    chunks = [turn(f"echo {i} " + "x" * 500) for i in range(40)]
    text = transcript(chunks)
    head, rest = text.split("\n[... ", 1)
    marker, tail = rest.split(" ...]\n", 1)
    assert marker.endswith("characters omitted")
    assert len(head) + len(tail) == TRANSCRIPT_CHARS  # truncate_middle: the rest is the marker
    assert text.startswith("$ echo 0 ")
    assert "$ echo 39 " in text and "$ echo 20 " not in text
    long = transcript([turn("y" * 5000)])
    assert len(long) < 700 and long.endswith("…")


def _bash(cmd: str) -> str:
    return render_tool_call(ToolCall("bash", {"command": cmd}))


async def test_loop_recognised_in_a_real_episode(tiny_tokenizer) -> None:
    engine = ScriptedEngine(tiny_tokenizer, [_bash("make build")] * 4)
    session = ScriptedSession({"make build": ScriptedResult("make: *** No rule", exit_code=2)})
    result = await run_episode(engine, session, "Build it", AgentConfig(max_turns=4))
    facts = TrialFacts(passed=False, stop_reason=result.stop_reason, chunks=result.chunks)
    assert result.stop_reason == "max-turns"
    assert classify(facts) == "invalid-loop"


async def test_timed_out_repeats_recognised_in_a_real_episode(tiny_tokenizer) -> None:
    engine = ScriptedEngine(tiny_tokenizer, [_bash("sleep 100")] * 3)
    session = ScriptedSession({"sleep 100": ScriptedResult("", exit_code=None, timed_out=True)})
    result = await run_episode(engine, session, "Wait", AgentConfig(max_turns=3))
    assert (
        classify(TrialFacts(passed=False, stop_reason=result.stop_reason, chunks=result.chunks))
        == "invalid-loop"
    )


@pytest.mark.parametrize("text", ["I would run ls.", "<tool_call>{not json</tool_call>"])
async def test_malformed_recognised_in_a_real_episode(tiny_tokenizer, text: str) -> None:
    engine = ScriptedEngine(tiny_tokenizer, [text] * 3)
    result = await run_episode(engine, ScriptedSession(), "Do it", AgentConfig(max_turns=3))
    assert (
        classify(TrialFacts(passed=False, stop_reason=result.stop_reason, chunks=result.chunks))
        == "malformed-tool-calls"
    )
