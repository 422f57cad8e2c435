"""Normalising OpenAI messages for a chat template."""

from __future__ import annotations

from termrl.llm.proxy_sessions import normalize_messages


def test_tool_calls_and_tool_results_become_plain_turns() -> None:
    messages = [
        {"role": "system", "content": "S"},
        {
            "role": "user",
            "content": [{"type": "text", "text": "do "}, {"type": "text", "text": "it"}],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "1",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"command": "ls"}'},
                },
                {"id": "2", "type": "function", "function": {"name": "done", "arguments": ""}},
            ],
        },
        {"role": "tool", "tool_call_id": "1", "content": "a.txt"},
        {"role": "tool", "tool_call_id": "2", "content": "ok"},
    ]
    out = normalize_messages(messages)
    assert [m["role"] for m in out] == ["system", "user", "assistant", "user"]
    assert out[1]["content"] == "do it"
    assert out[2]["content"] == (
        '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>'
        '<tool_call>\n{"name": "done", "arguments": {}}\n</tool_call>'
    )
    assert (
        out[3]["content"]
        == "<tool_response>\na.txt\n</tool_response>\n<tool_response>\nok\n</tool_response>"
    )
