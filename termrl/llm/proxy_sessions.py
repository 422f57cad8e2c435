"""Per-session token bookkeeping behind the ModelProxy (CLI-native mode).

An agent CLI talks plain OpenAI chat: each request re-sends the whole
conversation as messages. To train on it, the proxy must know the exact
tokens the model saw, so each session keeps the token stream of its
conversation. When a request's messages are the session's previous messages
plus the assistant message the proxy itself returned plus new turns, the
prompt is built by *appending* the new turns' tokens to the stream (see
``termrl.llm.chat``); the previous response keeps its sampled ids even though
the client sent it back as parsed ``tool_calls``. When the client rewrote the
history (compaction, an edited message), the prompt is rendered afresh and
the call is recorded as not extending the stream, which makes the session's
trajectory not trainable.

Messages are normalised for the chat template: an assistant message's
``tool_calls`` become ``<tool_call>`` text, ``tool`` messages become one user
turn of ``<tool_response>`` blocks (not every template knows a tool role).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from termrl.llm.chat import ChatTokens
from termrl.llm.engine import ChatMessages, Generation
from termrl.llm.toolcalls import ToolCall, format_tool_responses, parse_response, render_tool_call

__all__ = ["ProxyCall", "ProxySession", "normalize_messages"]


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    # OpenAI content parts: keep the text ones.
    return "".join(p.get("text", "") for p in content if isinstance(p, dict))


def _call_text(call: dict[str, Any]) -> str:
    fn = call.get("function", {})
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            return f"<tool_call>\n{json.dumps({'name': fn.get('name'), 'arguments': args})}\n</tool_call>"
    return render_tool_call(ToolCall(str(fn.get("name")), args))


def normalize_messages(messages: list[dict[str, Any]]) -> ChatMessages:
    """OpenAI chat messages → plain role/content turns every chat template renders."""
    out: ChatMessages = []
    pending_tool: list[str] = []
    for message in messages:
        role = message.get("role")
        if role == "tool":
            pending_tool.append(_text(message.get("content")))
            continue
        if pending_tool:
            out.append({"role": "user", "content": format_tool_responses(pending_tool)})
            pending_tool = []
        content = _text(message.get("content"))
        if role == "assistant" and message.get("tool_calls"):
            calls = "".join(_call_text(c) for c in message["tool_calls"])
            content = f"{content}{calls}"
        out.append({"role": str(role), "content": content})
    if pending_tool:
        out.append({"role": "user", "content": format_tool_responses(pending_tool)})
    return out


@dataclass
class ProxyCall:
    """One chat completion served for a session."""

    prompt_ids: list[int]
    """The full prompt the model was fed."""
    response_ids: list[int]
    response_logprobs: list[float]
    response_text: str
    finish_reason: str
    extends_previous: bool
    """True when prompt_ids starts with the previous call's prompt + response."""
    new_messages: ChatMessages
    """The turns this request added (the previous call's observation)."""
    gen_ms: float


@dataclass
class ProxySession:
    """The conversation state and the recorded calls of one session key."""

    key: str
    calls: list[ProxyCall] = field(default_factory=list)
    messages: ChatMessages = field(default_factory=list)  # normalised, incl. last reply
    stream: list[int] = field(default_factory=list)  # last prompt + last response

    def build_prompt(
        self, chat: ChatTokens, messages: ChatMessages
    ) -> tuple[list[int], bool, ChatMessages]:
        """Token prompt for ``messages``: (ids, extends the stream, the new turns)."""
        n = len(self.messages)
        if self.calls and len(messages) > n and messages[:n] == self.messages:
            new = messages[n:]
            last = self.calls[-1].response_ids
            return self.stream + chat.continuation_ids(new, last), True, new
        return chat.initial_ids(messages), not self.calls, messages

    def record(
        self,
        messages: ChatMessages,
        prompt_ids: list[int],
        extends: bool,
        new: ChatMessages,
        gen: Generation,
        reply: dict[str, Any],
    ) -> None:
        self.calls.append(
            ProxyCall(
                prompt_ids=list(prompt_ids),
                response_ids=list(gen.token_ids),
                response_logprobs=list(gen.logprobs or []),
                response_text=gen.text,
                finish_reason=gen.finish_reason,
                extends_previous=extends,
                new_messages=new,
                gen_ms=gen.gen_ms,
            )
        )
        self.messages = messages + normalize_messages([reply])
        self.stream = list(prompt_ids) + list(gen.token_ids)

    @property
    def trainable(self) -> bool:
        return all(c.extends_previous for c in self.calls)

    def chunks(self) -> list[dict[str, Any]]:
        """The session as trajectory chunk columns (prompt_ids are deltas)."""
        rows: list[dict[str, Any]] = []
        previous: list[int] = []
        for i, call in enumerate(self.calls):
            delta = (
                call.prompt_ids[len(previous) :] if call.extends_previous and i else call.prompt_ids
            )
            following = self.calls[i + 1].new_messages if i + 1 < len(self.calls) else []
            parsed = parse_response(call.response_text)
            rows.append(
                {
                    "chunk_index": i,
                    "prompt_ids": list(delta),
                    "response_ids": call.response_ids,
                    "response_logprobs": call.response_logprobs,
                    "response_text": call.response_text,
                    "action": json.dumps([c.to_json() for c in parsed.calls]),
                    "call_format": parsed.call_format,
                    "observation": "\n".join(m["content"] for m in following),
                    "exit_code": None,
                    "gen_ms": call.gen_ms,
                    "exec_ms": None,
                }
            )
            previous = call.prompt_ids + call.response_ids
        return rows

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "trainable": self.trainable,
            "calls": [asdict(c) for c in self.calls],
            "chunks": self.chunks(),
        }
