"""The reference agent CLI as a separate process, talking HTTP to a real ModelProxy."""

from __future__ import annotations

import asyncio
import json
import sys

from termrl.llm.hf_engine import TransformersEngine
from termrl.llm.proxy import ModelProxy
from termrl.llm.toolcalls import ToolCall, render_tool_call

from .scripted import ScriptedEngine


async def run_cli(base_url: str, api_key: str, workdir, *extra: str) -> dict:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "termrl.agent.reference_cli",
        "--base-url",
        base_url,
        "--api-key",
        api_key,
        "--workdir",
        str(workdir),
        *extra,
        "Create hello.txt containing hi",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=300)
    assert process.returncode == 0, err.decode()
    return json.loads(out.decode().strip().splitlines()[-1])


async def test_reference_cli_against_the_tiny_model_records_an_exact_session(
    tiny_model_dir, tmp_path
) -> None:
    async with ModelProxy(TransformersEngine(tiny_model_dir)) as proxy:
        summary = await run_cli(
            proxy.base_url,
            "cli-1",
            tmp_path,
            "--max-turns",
            "3",
            "--max-tokens",
            "8",
            "--seed",
            "1",
        )
    assert summary["turns"] == 3 and summary["stop_reason"] == "max-turns"
    session = proxy.sessions["cli-1"]
    assert len(session.calls) == 3 and session.trainable
    stream: list[int] = []
    for chunk, call in zip(session.chunks(), session.calls, strict=True):
        stream += chunk["prompt_ids"]
        assert stream == call.prompt_ids
        stream += chunk["response_ids"]
        assert len(chunk["response_logprobs"]) == len(chunk["response_ids"]) > 0


async def test_reference_cli_runs_the_tool_calls_the_model_makes(tiny_tokenizer, tmp_path) -> None:
    write = render_tool_call(
        ToolCall("bash", {"command": "printf hi > hello.txt && cat hello.txt"})
    )
    engine = ScriptedEngine(
        tiny_tokenizer, ["Writing it.\n" + write, render_tool_call(ToolCall("done"))]
    )
    async with ModelProxy(engine) as proxy:
        summary = await run_cli(proxy.base_url, "cli-2", tmp_path)
    assert summary["stop_reason"] == "done" and summary["turns"] == 2
    assert (tmp_path / "hello.txt").read_text() == "hi"
    session = proxy.sessions["cli-2"]
    assert session.trainable
    chunks = session.chunks()
    assert chunks[0]["call_format"] == "tool-call"
    assert "hi\n[exit code: 0]" in chunks[0]["observation"]
