"""The agent end to end in a real podman sandbox."""

from __future__ import annotations

import pytest

from termrl.agent.exec_session import ExecSession
from termrl.agent.loop import AgentConfig, run_episode
from termrl.llm.engine import SamplingParams
from termrl.llm.hf_engine import TransformersEngine
from termrl.llm.toolcalls import ToolCall, render_tool_call
from termrl.sandbox import SandboxManager, SandboxSpec

from .scripted import ScriptedEngine

pytestmark = pytest.mark.podman


def bash(cmd: str) -> str:
    return render_tool_call(ToolCall("bash", {"command": cmd}))


async def test_calls_run_in_a_persistent_podman_shell(tiny_tokenizer) -> None:
    engine = ScriptedEngine(
        tiny_tokenizer,
        [
            bash("mkdir -p /tmp/w && cd /tmp/w && echo hi > a.txt"),
            bash("pwd") + bash("cat a.txt") + bash("ls"),  # cwd persisted; read-only trio
            bash("exit 3"),
            "```bash\nwc -c a.txt\n```",
            render_tool_call(ToolCall("done")),
        ],
    )
    async with (
        SandboxManager() as manager,
        await manager.create(SandboxSpec(image="termrl/base:bookworm")) as session,
    ):
        result = await run_episode(engine, session, "Write hi to a.txt", AgentConfig())
        check = await session.exec("cat /tmp/w/a.txt", 10)
    assert check.output.strip() == "hi"
    assert result.stop_reason == "done" and result.trainable
    obs = [c.observation for c in result.chunks]
    assert "/tmp/w" in obs[1] and "hi" in obs[1] and "a.txt" in obs[1]
    assert result.chunks[2].exit_code == 3
    assert result.chunks[3].call_format == "fenced-bash" and "3 a.txt" in obs[3]


async def test_the_real_engine_drives_a_podman_episode(tiny_model_dir) -> None:
    engine = TransformersEngine(tiny_model_dir)
    config = AgentConfig(max_turns=2, max_new_tokens=16, sampling=SamplingParams(seed=0))
    async with (
        SandboxManager() as manager,
        await manager.create(SandboxSpec(image="termrl/base:bookworm")) as session,
    ):
        assert isinstance(session, ExecSession)  # the real session meets the agent's protocol
        result = await run_episode(engine, session, "List /", config)
    assert result.stop_reason == "max-turns" and result.num_turns == 2 and result.trainable
    assert all(len(c.response_ids) == len(c.response_logprobs) > 0 for c in result.chunks)
