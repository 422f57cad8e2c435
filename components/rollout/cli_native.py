"""CLI-native mode: an agent CLI drives the episode; the ModelProxy records what it was fed.

    rollout process                                           sandbox
    ┌──────────────────────────────────────────────┐         ┌───────────┐
    │ ModelProxy (/v1/chat/completions, batched) ◄─┼── HTTP ─┤           │
    │ exec bridge (/exec/<episode>) ─► session.exec┼─────────► bash -c … │
    └──────────────────────▲───────────────────────┘         └───────────┘
                           │ HTTP (loopback)
               agent CLI process (python -m termrl.agent.reference_cli)
               its `bash -c CMD` resolves to a shim that posts CMD to the bridge

The agent CLI is a separate process that only speaks the OpenAI API and
runs its tool calls as ``bash -c CMD`` where it stands. It runs beside the
sandbox (the sandbox has no network), with a ``bash`` shim first on its
PATH: ``bash -c CMD`` is forwarded to the exec bridge, which runs
``bash -c CMD`` inside the episode's sandbox through the session (every
backend works, and the command is logged for the drop flag and monitoring
exactly as in roll-managed mode). Any other ``bash`` invocation goes to the
real bash. The proxy's recorded session (keyed by the API key, here the
episode id) becomes the trajectory's chunks; reset and reward are the same
as in roll-managed mode, and so is mask & filter. The CLI takes one
instruction and keeps its conversation to itself, so a multi-step task
(``termrl.multistep``), whose steps continue one conversation, cannot run in
this mode: the stage refuses such tasks before it starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from components.rollout.config import RolloutConfig
from components.rollout.episode import AgentStep, EpisodeIds, RecordingSession
from termrl.artifacts.tasks import Task
from termrl.errors import ConfigError, NetworkError, TermrlError
from termrl.llm.engine import Engine
from termrl.llm.proxy import ModelProxy
from termrl.sandbox.reaping import ended_on_error

__all__ = ["REFERENCE_CLI", "CliEpisodeResult", "cli_native_step"]

REFERENCE_CLI = (
    "{python}",
    "-m",
    "termrl.agent.reference_cli",
    "--base-url",
    "{base_url}",
    "--api-key",
    "{api_key}",
    "--model",
    "{model}",
    "--workdir",
    "{workdir}",
    "--max-turns",
    "{max_turns}",
    "--max-tokens",
    "{max_tokens}",
    "--temperature",
    "{temperature}",
    "{instruction}",
)
"""argv template of the agent CLI; ``RolloutConfig.cli_agent_command`` may replace it."""

_SHIM = """#!{python} -S
# termrl exec shim: `bash -c CMD` runs CMD in the episode's sandbox (see cli_native.py).
import json, os, sys, urllib.request
args = sys.argv[1:]
if len(args) < 2 or args[0] != "-c":
    os.execv({bash!r}, ["bash", *args])
request = urllib.request.Request(
    os.environ["TERMRL_EXEC_BRIDGE"], data=json.dumps({{"command": args[1]}}).encode(),
    headers={{"Content-Type": "application/json"}})
try:
    reply = json.load(urllib.request.urlopen(request, timeout=3600))
except Exception as exc:
    sys.stderr.write(f"termrl exec bridge failed: {{exc}}\\n")
    sys.exit(125)
sys.stdout.write(reply["output"])
sys.exit(124 if reply["exit_code"] is None else reply["exit_code"])
"""


@dataclass
class CliEpisodeResult:
    """What ``run_episode`` returns, built from the proxy's recorded session."""

    chunks: list[dict[str, Any]]
    stop_reason: str
    trainable: bool
    episode_tokens: int
    failure_type: str | None = None
    error: str | None = None


class _ExecBridge:
    """Loopback HTTP endpoint running the CLI's commands in the registered sessions."""

    def __init__(self, timeout_sec: float) -> None:
        self.timeout_sec = timeout_sec
        self.sessions: dict[str, RecordingSession] = {}
        self.errors: dict[str, TermrlError] = {}
        self.app = web.Application()
        self.app.router.add_post("/exec/{key}", self._exec)
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/exec"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _exec(self, request: web.Request) -> web.Response:
        key = request.match_info["key"]
        session = self.sessions.get(key)
        if session is None:
            return web.json_response({"error": f"no episode {key!r}"}, status=404)
        command = (await request.json())["command"]
        try:
            result = await session.exec(f"bash -c {shlex.quote(command)}", self.timeout_sec)
        except TermrlError as exc:
            self.errors.setdefault(key, exc)
            return web.json_response(
                {"output": f"[sandbox error: {type(exc).__name__}]\n", "exit_code": 125}
            )
        output = result.output + (
            f"\n[command timed out after {self.timeout_sec:g} s]" if result.timed_out else ""
        )
        return web.json_response({"output": output, "exit_code": result.exit_code})


def _fill_exit_codes(chunks: list[dict[str, Any]], log: list[Any]) -> None:
    """Give each chunk its last command's exit status and its commands' time, from the log."""
    position = 0
    for chunk in chunks:
        calls = [c for c in json.loads(chunk.get("action") or "[]") if c.get("name") == "bash"]
        mine = log[position : position + len(calls)]
        position += len(calls)
        if mine:
            chunk["exit_code"] = mine[-1].exit_code
            chunk["exec_ms"] = sum(e.duration_sec for e in mine) * 1000.0


@contextlib.asynccontextmanager
async def cli_native_step(config: RolloutConfig, engine: Engine) -> AsyncIterator[AgentStep]:
    """Start the proxy, the exec bridge and the shim; yield the per-episode agent step."""
    template = config.cli_agent_command or REFERENCE_CLI
    bridge = _ExecBridge(config.exec_timeout_sec)
    with tempfile.TemporaryDirectory(prefix="termrl-cli-") as scratch:
        shim_dir = Path(scratch) / "bin"
        shim_dir.mkdir()
        shim = shim_dir / "bash"
        shim.write_text(
            _SHIM.format(python=sys.executable, bash=shutil.which("bash") or "/bin/bash")
        )
        shim.chmod(0o755)
        async with ModelProxy(engine, default_max_tokens=config.max_new_tokens) as proxy:
            await bridge.start()
            try:

                async def step(
                    session: Any,
                    recorder: RecordingSession,
                    task: Task,
                    ids: EpisodeIds,
                    *,
                    after: Any = None,
                    budget_sec: float | None = None,
                ) -> CliEpisodeResult:
                    if after is not None or budget_sec is not None:  # stage refuses them up front
                        raise ConfigError(
                            f"task {task.id}: cli-native mode runs no multi-step task"
                        )
                    return await _run_cli(
                        config, template, proxy, bridge, shim_dir, recorder, task, ids, scratch
                    )

                yield step
            finally:
                await bridge.stop()


async def _run_cli(
    config: RolloutConfig,
    template: tuple[str, ...],
    proxy: ModelProxy,
    bridge: _ExecBridge,
    shim_dir: Path,
    recorder: RecordingSession,
    task: Task,
    ids: EpisodeIds,
    scratch: str,
) -> CliEpisodeResult:
    key = ids.episode_id
    values = {
        "python": sys.executable,
        "base_url": proxy.base_url,
        "api_key": key,
        "model": proxy.engine.model_name,
        "workdir": scratch,
        "max_turns": config.max_turns,
        "max_tokens": config.max_new_tokens,
        "temperature": config.temperature,
        "instruction": task.instruction,
    }
    argv = [part.format(**values) for part in template]
    env = {
        **os.environ,
        "PATH": f"{shim_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "TERMRL_EXEC_BRIDGE": f"{bridge.url}/{key}",
    }
    bridge.sessions[key] = recorder
    process = await asyncio.create_subprocess_exec(
        *argv,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stop_reason, failure = "max-turns", None
    try:
        async with ended_on_error(process):
            try:
                out, err = await asyncio.wait_for(
                    process.communicate(), config.episode_lifetime_sec
                )
            except TimeoutError:
                process.kill()
                out, err = await process.communicate()
                stop_reason = "lifetime"
    finally:
        bridge.sessions.pop(key, None)
    recorded = proxy.sessions.pop(key, None)
    failure = bridge.errors.pop(key, None)
    if stop_reason != "lifetime" and process.returncode == 0:
        lines = out.decode(errors="replace").strip().splitlines()
        stop_reason = (
            json.loads(lines[-1]).get("stop_reason", "max-turns") if lines else "max-turns"
        )
    elif stop_reason != "lifetime" and failure is None:
        tail = err.decode(errors="replace")[-2000:]
        # The proxy answers 400 to the reference CLI only when the prompt outgrew the window.
        if "400 Bad Request" in tail:
            stop_reason = "context-overflow"
        else:
            failure = NetworkError(
                f"the agent CLI exited with status {process.returncode}", log_tail=tail
            )
    chunks = recorded.chunks() if recorded is not None else []
    _fill_exit_codes(chunks, recorder.log)
    last = recorded.calls[-1] if recorded is not None and recorded.calls else None
    trainable = bool(recorded and recorded.trainable) and all(
        len(c["response_logprobs"]) == len(c["response_ids"]) for c in chunks
    )
    return CliEpisodeResult(
        chunks=chunks,
        stop_reason="error" if failure is not None else stop_reason,
        trainable=trainable,
        episode_tokens=len(last.prompt_ids) + len(last.response_ids) if last else 0,
        failure_type=type(failure).__name__ if failure is not None else None,
        error=str(failure) if failure is not None else None,
    )
