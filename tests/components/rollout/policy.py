"""A scripted policy and a small task mix for the rollout tests.

``ScriptedPolicy`` is an engine (real SmolLM2 tokenizer, exact token ids) whose
answers depend on the task's instruction, so fault injection can target tasks:

    "[hang]"  runs ``sleep 300`` with a 2 s timeout (the shell interrupts it)
    "[die]"   touches /tmp/agent-started, then sleeps while the test kills the container
    "[peek]"  lists /tests and /solution (they must be absent), then writes the word
    "[break]" writes the word, then moves /bin/bash away (scoring cannot start in the sandbox)
    else      writes the word the instruction asks for into /app/out.txt, then calls done

Tasks are real: a Dockerfile on the local base image and a ``tests/test.sh``
writing ``/logs/verifier/reward.txt``.

``StepsPolicy`` plays a multi-step task: its replies are keyed by a piece of
each step's instruction, and it answers the step whose instruction came last
in the conversation (then calls done); it keeps every prompt it was fed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from termrl.artifacts import Task, TaskFile
from termrl.llm.engine import Engine, Generation, Prompt, SamplingParams

__all__ = [
    "DONE",
    "ScriptedPolicy",
    "StepsPolicy",
    "bash_call",
    "broken_build_task",
    "garbage_reward_task",
    "word_task",
]

DOCKERFILE = "FROM termrl/base:bookworm\nWORKDIR /app\n"
TEST_SH = """#!/bin/bash
mkdir -p /logs/verifier
if [ "$(cat /app/out.txt 2>/dev/null)" = "{word}" ]; then echo 1 > /logs/verifier/reward.txt
else echo 0 > /logs/verifier/reward.txt; fi
"""


def _call(command: str, timeout: float | None = None) -> str:
    arguments: dict[str, Any] = {"command": command}
    if timeout is not None:
        arguments["timeout"] = timeout
    return f"<tool_call>\n{json.dumps({'name': 'bash', 'arguments': arguments})}\n</tool_call>"


DONE = '<tool_call>\n{"name": "done", "arguments": {}}\n</tool_call>'
bash_call = _call


def word_task(task_id: str, word: str, *, marker: str = "", dockerfile: str = DOCKERFILE) -> Task:
    return Task(
        id=task_id,
        instruction=f"{marker} Write the word {word} into /app/out.txt.".strip(),
        environment_files=[TaskFile("Dockerfile", dockerfile.encode())],
        test_files=[TaskFile("test.sh", TEST_SH.format(word=word).encode(), 0o755)],
        verifier_timeout_sec=60.0,
    )


def broken_build_task(task_id: str) -> Task:
    """Sandbox creation fails: the image build exits non-zero."""
    return word_task(
        task_id, "never", dockerfile=DOCKERFILE + "RUN echo 'broken on purpose' && exit 3\n"
    )


def garbage_reward_task(task_id: str) -> Task:
    """The reward script crashes after writing garbage to the reward file."""
    task = word_task(task_id, "fine")
    garbage = "#!/bin/bash\nmkdir -p /logs/verifier\necho 'Traceback: boom' > /logs/verifier/reward.txt\nexit 1\n"
    task.test_files = [TaskFile("test.sh", garbage.encode(), 0o755)]
    return task


class ScriptedPolicy(Engine):
    """Answers by the instruction and the turn number; fast, deterministic, token-exact."""

    name = "scripted-policy"
    accepts_token_ids = True
    context_window = 8192
    model_name = "scripted-policy"

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.batch_sizes: list[int] = []

    def respond(self, text: str) -> str:
        instruction = re.search(r"(\[\w+\] )?Write the word (\w+) into", text)
        marker, word = (
            (instruction.group(1) or "").strip(),
            instruction.group(2) if instruction else "x",
        )
        turn = text.count("<tool_response>")
        if turn >= 2 or (turn == 1 and marker != "[peek]"):
            return DONE
        if marker == "[hang]":
            return _call("sleep 300", timeout=2)
        if marker == "[die]":
            return _call("touch /tmp/agent-started && sleep 60", timeout=90)
        if marker == "[break]":
            return _call(f"echo {word} > /app/out.txt; mv /bin/bash /bin/bash.txt")
        if marker == "[peek]" and turn == 0:
            return _call("ls /tests /solution /logs/verifier")
        return _call(f"echo {word} > /app/out.txt")

    async def generate(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[Generation]:
        self.batch_sizes.append(len(prompts))
        out = []
        for prompt in prompts:
            text = (
                self.tokenizer.decode(prompt)
                if prompt and isinstance(prompt[0], int)
                else str(prompt)
            )
            reply = self.respond(text)
            ids = self.tokenizer.encode(reply, add_special_tokens=False)
            out.append(
                Generation(
                    text=self.tokenizer.decode(ids),
                    token_ids=ids,
                    logprobs=[-0.1] * len(ids),
                    finish_reason="stop",
                    prompt_ids=list(prompt),
                )
            )
        return out


class StepsPolicy(ScriptedPolicy):
    """Replies ``replies[key][turn]`` for the step whose instruction (holding ``key``) came last;
    ``turn`` counts its assistant turns since that instruction. Past the list: done."""

    name = "steps-policy"
    model_name = "steps-policy"

    def __init__(self, tokenizer: Any, replies: dict[str, list[str]]) -> None:
        super().__init__(tokenizer)
        self.replies = replies
        self.fed: list[list[int]] = []

    def respond(self, text: str) -> str:
        at, key = max((text.rfind(k), k) for k in self.replies)
        if at < 0:
            return DONE
        turn = text[at:].count("<|im_start|>assistant") - 1  # the last header is the one to answer
        return self.replies[key][turn] if turn < len(self.replies[key]) else DONE

    async def generate(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[Generation]:
        self.fed.extend(list(p) for p in prompts)
        return await super().generate(prompts, params)
