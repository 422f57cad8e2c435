"""The agent's tools and the text format its calls travel in.

Tool calls use the Hermes/Qwen convention that instruct models are trained on:

    <tool_call>
    {"name": "bash", "arguments": {"command": "ls -la", "timeout": 30}}
    </tool_call>

Several calls may follow each other in one turn. Small models often answer
with a fenced shell block instead; that is accepted as a ``bash`` call and
marked ``fenced-bash`` in the trajectory so training and monitoring can tell
the two apart. Anything that looks like a call but cannot be used is
reported back to the model as an observation (``malformed``), never raised.

Tools results go back in ``<tool_response>`` blocks inside a user turn, which
every chat template renders (not all templates know a ``tool`` role).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "PROMPTS",
    "READ_ONLY_PROGRAMS",
    "TOOLS",
    "CallFormat",
    "ParsedTurn",
    "ToolCall",
    "call_is_settled",
    "format_tool_responses",
    "is_read_only",
    "parse_response",
    "render_tool_call",
    "system_prompt",
    "truncate_middle",
]

CallFormat = Literal["tool-call", "fenced-bash", "malformed", "none"]

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": (
                "Run a command in a persistent bash shell (the working directory, environment "
                "variables and background jobs persist between calls). Returns its output and "
                "exit code."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The bash command to run."},
                    "timeout": {
                        "type": "number",
                        "description": "Seconds before the command is interrupted (optional).",
                    },
                },
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "done",
            "description": "Declare the task complete. Call it only when the task is finished.",
            "parameters": {"type": "object", "properties": {}, "required": []},
        },
    },
]
_TOOL_NAMES = {"bash", "done"}

_SYSTEM = """You are an expert Linux user working in a terminal to complete a task.
Work step by step: inspect the environment, run commands, check their results.

# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{tools}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{{"name": <function-name>, "arguments": <args-json-object>}}
</tool_call>

When the task is complete, call the done function."""


# The same two tools and call format in ~80 tokens instead of ~310: a small policy
# follows a worked example better than JSON signatures, and every training step and
# every prefill of every turn pays for the system prompt's length.
_COMPACT = """You are an expert Linux user working in a bash terminal to complete a task.
To run a command, answer with one tool call:
<tool_call>
{"name": "bash", "arguments": {"command": "ls -la /app"}}
</tool_call>
You then see its output. When the task is complete, answer:
<tool_call>
{"name": "done", "arguments": {}}
</tool_call>"""

PROMPTS = ("compact", "hermes")
"""System prompt styles: ``compact`` (a worked example, for small models) or ``hermes``
(the tool signatures in Hermes format, as tool-trained instruct models expect)."""


def system_prompt(style: str = "hermes", tools: list[dict[str, Any]] | None = None) -> str:
    """The agent's system prompt in ``style`` (one of ``PROMPTS``)."""
    if style == "compact":
        return _COMPACT
    if style != "hermes":
        raise ValueError(f"unknown prompt style {style!r}; choose one of {', '.join(PROMPTS)}")
    listed = "\n".join(json.dumps(t["function"]) for t in (tools or TOOLS))
    return _SYSTEM.format(tools=listed)


@dataclass(frozen=True)
class ToolCall:
    """One parsed call."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments}


@dataclass
class ParsedTurn:
    """What one assistant response asked for."""

    calls: list[ToolCall]
    call_format: CallFormat
    errors: list[str]
    """One explanation per unusable call, shown to the model."""


_CALL_RE = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_FENCE_RE = re.compile(r"```(?:bash|sh|shell|console)?[ \t]*\n(.*?)```", re.DOTALL)


def _check_call(obj: Any) -> tuple[ToolCall | None, str | None]:
    if not isinstance(obj, dict):
        return None, "a tool call must be a JSON object with 'name' and 'arguments'"
    name = obj.get("name")
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # OpenAI-style clients send arguments as a JSON string
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as exc:
            return None, f"the arguments of {name!r} are not valid JSON: {exc.msg}"
    if name not in _TOOL_NAMES:
        return None, f"unknown tool {name!r}; the tools are: {', '.join(sorted(_TOOL_NAMES))}"
    if not isinstance(args, dict):
        return None, f"the arguments of {name!r} must be a JSON object"
    if name == "bash":
        command = args.get("command")
        if not isinstance(command, str) or not command.strip():
            return None, "bash needs a non-empty string argument 'command'"
        timeout = args.get("timeout")
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
        ):
            return None, "bash 'timeout' must be a positive number of seconds"
        kept = {"command": command} | ({"timeout": timeout} if timeout is not None else {})
        return ToolCall("bash", kept), None
    return ToolCall(name, {}), None


def parse_response(text: str) -> ParsedTurn:
    """Find the tool calls in an assistant response; never raises."""
    blocks = _CALL_RE.findall(text)
    if blocks:
        calls: list[ToolCall] = []
        errors: list[str] = []
        for i, block in enumerate(blocks, start=1):
            try:
                obj = json.loads(block.strip())
            except json.JSONDecodeError as exc:
                errors.append(f"tool call {i}: not valid JSON ({exc.msg} at char {exc.pos})")
                continue
            call, error = _check_call(obj)
            if call is not None:
                calls.append(call)
            else:
                errors.append(f"tool call {i}: {error}")
        return ParsedTurn(calls, "malformed" if errors else "tool-call", errors)
    fenced = [b.strip() for b in _FENCE_RE.findall(text) if b.strip()]
    if fenced:
        return ParsedTurn([ToolCall("bash", {"command": b}) for b in fenced], "fenced-bash", [])
    return ParsedTurn([], "none", [])


_OPEN, _CLOSE = "<tool_call>", "</tool_call>"
# A JSON error this far before the end of the text cannot be undone by what follows: a value
# cut inside its last token (``tru``, ``1e``, an escape ``\u00``) is at most this long.
_SETTLED_CHARS = 8


def call_is_settled(text: str) -> bool:
    """True when ``text`` opens a tool call whose reading nothing after it can change.

    Decoding may stop there (the engines' ``end_settled_calls``): ``parse_response`` reads
    the first ``<tool_call>`` block up to ``</tool_call>`` or the end of the text, so once

    - the block holds a whole JSON object followed by text that is not the closing tag
      (``{"name": "done", "arguments": {}}`` and then filler, or an extra ``}``), or
    - the block's text can no longer become JSON (an error well before its end),

    the call is malformed whatever the model adds, and the rest would be decoded for
    nothing. A well-formed call (the object, whitespace, ``</tool_call>``) never settles
    early: it ends at its stop string, token for token as before.
    """
    start = text.find(_OPEN)
    if start < 0:
        return False
    block = text[start + len(_OPEN) :]
    if _CLOSE in block:  # the stop string ends the turn; nothing to settle
        return False
    body = block.lstrip()
    try:
        _, end = json.JSONDecoder().raw_decode(body)
    except json.JSONDecodeError as exc:
        if exc.msg.startswith("Unterminated string"):  # reported at the string's start
            return False
        return len(body) - exc.pos >= _SETTLED_CHARS
    rest = body[end:].lstrip()
    return bool(rest) and not _CLOSE.startswith(rest[: len(_CLOSE)])


def render_tool_call(call: ToolCall) -> str:
    """The text form of a call, as the model is taught to write it."""
    return f"<tool_call>\n{json.dumps(call.to_json())}\n</tool_call>"


def format_tool_responses(parts: list[str]) -> str:
    """One user-turn body carrying each call's result."""
    return "\n".join(f"<tool_response>\n{p}\n</tool_response>" for p in parts)


def truncate_middle(text: str, max_chars: int) -> str:
    """Keep the head and the tail of a long output, with a marker where the middle was."""
    if len(text) <= max_chars:
        return text
    head = max_chars * 2 // 5  # errors and summaries tend to be at the end: keep more tail
    tail = max_chars - head
    omitted = len(text) - head - tail
    return f"{text[:head]}\n[... {omitted} characters omitted ...]\n{text[len(text) - tail :]}"


READ_ONLY_PROGRAMS = frozenset(
    [
        "ls",
        "cat",
        "head",
        "tail",
        "grep",
        "egrep",
        "fgrep",
        "rg",
        "find",
        "pwd",
        "wc",
        "stat",
        "file",
        "which",
        "whereis",
        "du",
        "df",
        "tree",
        "echo",
        "printenv",
        "whoami",
        "id",
        "uname",
        "date",
        "ps",
        "type",
        "diff",
        "cmp",
        "md5sum",
        "sha256sum",
        "sort",
        "uniq",
        "cut",
        "nl",
        "od",
        "xxd",
        "hexdump",
        "realpath",
        "readlink",
        "basename",
        "dirname",
        "test",
        "true",
    ]
)
# Anything that may write, spawn or change the shell's state disqualifies a command.
_UNSAFE = re.compile(r"[>;`]|\$\(|&|-delete\b|-exec|--in-place\b|-o\b|--output\b")


def is_read_only(call: ToolCall) -> bool:
    """True for bash calls that cannot change the sandbox, so they may run concurrently.

    Conservative: every pipeline stage must start with a known read-only
    program, and no redirection, command chaining or substitution may occur.
    """
    if call.name != "bash":
        return False
    command = call.arguments.get("command", "")
    if _UNSAFE.search(command):
        return False
    for stage in command.split("|"):
        try:
            words = shlex.split(stage)
        except ValueError:
            return False
        if not words or words[0] not in READ_ONLY_PROGRAMS:
            return False
    return True
