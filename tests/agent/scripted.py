"""Scripted stand-ins for unit tests of episode logic (end-to-end tests use real parts).

``ScriptedEngine`` answers with given texts, tokenized by the real SmolLM2
tokenizer, and remembers every prompt it was fed. ``ScriptedSession`` answers
commands from a table and records them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from termrl.llm.engine import Engine, Generation, ParamsArg, Prompt, per_prompt_params

__all__ = ["ScriptedEngine", "ScriptedResult", "ScriptedSession"]


class ScriptedEngine(Engine):
    name = "scripted"
    accepts_token_ids = True

    def __init__(self, tokenizer: Any, responses: list[str], *, end_with_eos: bool = False):
        self.tokenizer = tokenizer
        self.responses = list(responses)
        self.end_with_eos = end_with_eos
        self.fed: list[list[int]] = []
        self.params: list = []
        self.context_window = 8192

    async def generate(self, prompts: Sequence[Prompt], params: ParamsArg) -> list[Generation]:
        out = []
        for prompt, one in zip(prompts, per_prompt_params(params, len(prompts)), strict=True):
            self.fed.append(list(prompt))
            self.params.append(one)
            text = self.responses.pop(0) if self.responses else "I am stuck."
            ids = self.tokenizer.encode(text, add_special_tokens=False)[: one.max_new_tokens]
            text = self.tokenizer.decode(ids)
            if self.end_with_eos:
                ids.append(self.tokenizer.eos_token_id)
            out.append(
                Generation(
                    text=text,
                    token_ids=ids,
                    logprobs=[-0.5] * len(ids),
                    finish_reason="eos" if self.end_with_eos else "stop",
                    prompt_ids=list(prompt),
                )
            )
        return out


@dataclass
class ScriptedResult:
    output: str
    exit_code: int | None = 0
    duration: float = 0.0
    timed_out: bool = False
    truncated: bool = False


class ScriptedSession:
    """Answers each command from ``table`` (default: echo the command back)."""

    def __init__(self, table: dict[str, ScriptedResult] | None = None, delay_sec: float = 0.0):
        self.table = table or {}
        self.delay_sec = delay_sec
        self.commands: list[tuple[str, float | None]] = []
        self.running = 0
        self.max_running = 0

    async def exec(self, cmd: str, timeout: float | None = None) -> ScriptedResult:
        self.commands.append((cmd, timeout))
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        started = time.perf_counter()
        try:
            await asyncio.sleep(self.delay_sec)
        finally:
            self.running -= 1
        result = self.table.get(cmd, ScriptedResult(output=f"ran: {cmd}"))
        result.duration = time.perf_counter() - started
        return result
