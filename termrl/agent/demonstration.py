"""Expert turns: a task's golden solution as the agent would have written it, and their replay.

    demonstration_commands(task) -> [command, ...]   one bash turn per top-level solution step
    expert_responses(commands)   -> [text, ...]      each turn in the exact call format the agent
                                                      parses, then a ``done`` call
    ReplayEngine(tokenizer, responses, then=policy)  an ``Engine`` that answers the first turns
                                                      from the script, then hands over to ``then``

Running ``run_episode`` on a ``ReplayEngine`` is how both kinds of expert
trajectory are made, so they go through the same prompt, parser, sandbox and
token bookkeeping as a live episode:

- a demonstration: every turn replayed (``then`` is None); the observations
  are the real outputs of the commands in a fresh sandbox;
- an anchored episode (chunk-initialized resampling, anchor k): turns
  1 … k−1 replayed, the policy samples from turn k on.

Replayed responses are tokenized with ``tokenizer.encode`` of the response
text, exactly as the stream of a live episode would hold the same text, and
get log-probability 0 (no inference policy sampled them; the trainer
recomputes π_old itself and never uses μ of a replayed chunk).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import Any

from termrl.artifacts.tasks import Task
from termrl.llm.engine import Engine, Generation, ParamsArg, Prompt, prompt_token_ids
from termrl.llm.toolcalls import ToolCall, render_tool_call
from termrl.shellsteps import split_steps
from termrl.taskrun import SOLUTION_DIR, solution_steps

__all__ = [
    "NoDemonstration",
    "ReplayEngine",
    "demonstration_commands",
    "expert_responses",
]

# Steps that only matter to a script run as a whole: in the agent's persistent shell
# `set -e` would end the shell at the first failing command, `exit` ends it at once.
_SCRIPT_ONLY = re.compile(r"^\s*(set\s+[-+][a-zA-Z]+(\s+\w+)*|exit(\s+\d+)?)\s*;?\s*$")


class NoDemonstration(ValueError):
    """The task has no solution the agent could replay (the reason is the message)."""


def _script_text(task: Task) -> str:
    """The solution as shell text: the script its command runs, or the command itself."""
    command = task.solution_command or ""
    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise NoDemonstration(f"unparsable solution command: {exc}") from exc
    for word in words:
        path = PurePosixPath(word)
        if path.is_relative_to(SOLUTION_DIR):
            relative = str(path.relative_to(SOLUTION_DIR))
            script = next((f for f in task.solution_files if f.path == relative), None)
            if script is None:
                raise NoDemonstration(
                    f"solution command runs {word}, which the task does not carry"
                )
            try:
                return script.data.decode()
            except UnicodeDecodeError as exc:
                raise NoDemonstration(f"{word} is not text") from exc
    return command


def demonstration_commands(task: Task) -> list[str]:
    """The commands an expert agent would run, one per turn; ``NoDemonstration`` if there are none.

    Each top-level step of the solution script (``termrl.shellsteps``) is one
    command; script-only steps (``set -e``, ``exit``) are left out. A solution
    that reads its own files (``/solution/...``) cannot be replayed: an agent
    never sees them.
    """
    if task.solution_command:
        steps = [s.text for s in split_steps(_script_text(task))]
    else:
        try:
            steps = solution_steps(task)  # a legacy solution.yaml: its list of commands
        except ValueError as exc:
            raise NoDemonstration(str(exc)) from exc
    commands = [s for s in steps if s.strip() and not _SCRIPT_ONLY.match(s)]
    if not commands:
        raise NoDemonstration("the task has no solution")
    if any(SOLUTION_DIR + "/" in c or c.rstrip().endswith(SOLUTION_DIR) for c in commands):
        raise NoDemonstration(
            f"the solution uses files under {SOLUTION_DIR}, which an agent never sees"
        )
    return commands


def expert_responses(commands: Sequence[str]) -> list[str]:
    """One assistant response per command (a bash call), then the response that calls done."""
    calls = [ToolCall("bash", {"command": c}) for c in commands] + [ToolCall("done")]
    return [render_tool_call(call) for call in calls]


class ReplayEngine(Engine):
    """Answers an episode's first turns from a script, then delegates to ``then``.

    One instance serves one episode: its turn counter is the episode's.
    """

    name = "replay"

    def __init__(
        self,
        tokenizer: Any,
        responses: Sequence[str],
        *,
        then: Engine | None = None,
        context_window: int | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.responses = list(responses)
        self.then = then
        self.context_window = context_window or (then.context_window if then else 8192)
        self.model_name = then.model_name if then else "expert"
        self.turn = 0

    @property
    def replayed(self) -> int:
        """How many turns came from the script so far."""
        return min(self.turn, len(self.responses))

    async def generate(self, prompts: Sequence[Prompt], params: ParamsArg) -> list[Generation]:
        if len(prompts) != 1:
            raise ValueError("a ReplayEngine serves one episode: one prompt per call")
        turn, self.turn = self.turn, self.turn + 1
        if turn >= len(self.responses):
            if self.then is None:
                raise ValueError(
                    f"the script has {len(self.responses)} turns; turn {turn + 1} was asked for"
                )
            return await self.then.generate(prompts, params)
        text = self.responses[turn]
        ids = list(self.tokenizer.encode(text, add_special_tokens=False))
        return [
            Generation(
                text=text,
                token_ids=ids,
                logprobs=[0.0] * len(ids),
                finish_reason="stop",
                prompt_ids=prompt_token_ids(self.tokenizer, prompts[0]),
            )
        ]
