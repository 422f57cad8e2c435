"""Parsing the agent's tool calls: good, malformed, several, fenced, none."""

from __future__ import annotations

import json

import pytest

from termrl.llm.toolcalls import (
    ToolCall,
    call_is_settled,
    format_tool_responses,
    is_read_only,
    parse_response,
    render_tool_call,
    system_prompt,
    truncate_middle,
)


def test_one_good_call() -> None:
    text = 'Let me look.\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls -la", "timeout": 5}}\n</tool_call>'
    parsed = parse_response(text)
    assert parsed.call_format == "tool-call"
    assert parsed.calls == [ToolCall("bash", {"command": "ls -la", "timeout": 5})]
    assert parsed.errors == []


def test_several_calls_in_one_turn_keep_their_order() -> None:
    text = "".join(
        render_tool_call(ToolCall("bash", {"command": c})) for c in ["pwd", "ls", "cat a"]
    ) + render_tool_call(ToolCall("done"))
    parsed = parse_response(text)
    assert [c.arguments.get("command") for c in parsed.calls] == ["pwd", "ls", "cat a", None]
    assert parsed.calls[-1].name == "done"


def test_arguments_as_a_json_string_are_accepted() -> None:
    args = json.dumps({"command": "echo hi"})
    parsed = parse_response(
        f'<tool_call>{{"name": "bash", "arguments": {json.dumps(args)}}}</tool_call>'
    )
    assert parsed.calls == [ToolCall("bash", {"command": "echo hi"})]


def test_malformed_calls_are_explained_and_good_ones_kept() -> None:
    text = (
        "<tool_call>{not json}</tool_call>"
        '<tool_call>{"name": "rm_everything", "arguments": {}}</tool_call>'
        '<tool_call>{"name": "bash", "arguments": {"cmd": "ls"}}</tool_call>'
        '<tool_call>{"name": "bash", "arguments": {"command": "ls", "timeout": -1}}</tool_call>'
        '<tool_call>{"name": "bash", "arguments": {"command": "pwd"}}</tool_call>'
        '<tool_call>{"name": "bash", "arguments": {"command": "unfinished'
    )
    parsed = parse_response(text)
    assert parsed.call_format == "malformed"
    assert parsed.calls == [ToolCall("bash", {"command": "pwd"})]
    assert len(parsed.errors) == 5
    assert "not valid JSON" in parsed.errors[0]
    assert "unknown tool 'rm_everything'" in parsed.errors[1]
    assert "'command'" in parsed.errors[2]
    assert "timeout" in parsed.errors[3]
    assert parsed.errors[4].startswith("tool call 6: not valid JSON")


def test_fenced_bash_fallback_is_marked() -> None:
    parsed = parse_response("Run this:\n```bash\nls /app\ncat /app/x\n```\nthen\n```sh\npwd\n```")
    assert parsed.call_format == "fenced-bash"
    assert parsed.calls == [
        ToolCall("bash", {"command": "ls /app\ncat /app/x"}),
        ToolCall("bash", {"command": "pwd"}),
    ]


def test_prose_alone_is_no_call() -> None:
    parsed = parse_response("I think the answer is 42.")
    assert (parsed.calls, parsed.call_format, parsed.errors) == ([], "none", [])


def test_read_only_detection_is_conservative() -> None:
    def ro(cmd: str) -> bool:
        return is_read_only(ToolCall("bash", {"command": cmd}))

    assert ro("ls -la /app") and ro("cat a.txt | grep -i foo | wc -l") and ro("find . -name '*.py'")
    assert not ro("echo x > file")
    assert not ro("ls; rm -rf /")
    assert not ro("cd /tmp")
    assert not ro("cat $(which python)")
    assert not ro("find . -delete")
    assert not ro("sleep 10 &")
    assert not ro("pip install foo")
    assert not is_read_only(ToolCall("done"))


def test_truncate_middle_keeps_head_and_tail_with_a_marker() -> None:
    text = "".join(f"line {i}\n" for i in range(1000))
    cut = truncate_middle(text, 200)
    assert cut.startswith("line 0\n") and cut.endswith("line 999\n")
    assert f"[... {len(text) - 200} characters omitted ...]" in cut
    assert truncate_middle("short", 200) == "short"


def test_system_prompt_lists_both_tools_and_the_format() -> None:
    prompt = system_prompt()
    assert '"name": "bash"' in prompt and '"name": "done"' in prompt
    assert "<tool_call>" in prompt and "</tool_call>" in prompt
    assert format_tool_responses(["a", "b"]).count("<tool_response>") == 2


WELL_FORMED = [
    '<tool_call>\n{"name": "bash", "arguments": {"command": "ls -la /app", "timeout": 30}}\n</tool_call>',
    'Let me look.\n<tool_call>\n{"name": "done", "arguments": {}}\n</tool_call>',
    '<tool_call>{"name": "bash", "arguments": {"command": "echo \\"}\\" > /app/x"}}</tool_call>',
]


@pytest.mark.parametrize("text", WELL_FORMED)
def test_a_well_formed_call_is_never_settled_before_its_closing_tag(text) -> None:
    # Decoding may stop only where nothing later could make the call usable: no prefix of a
    # well-formed turn qualifies, so such a turn decodes exactly as before, up to the stop string.
    assert parse_response(text).call_format == "tool-call"
    assert not any(call_is_settled(text[:n]) for n in range(len(text) + 1))


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>\n{"name": "done", "arguments": {}}\nI have completed the task. The',
        '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}}',  # an extra brace
        '<tool_call>\n{"name": bash, "arguments": {"command": "ls"}}',  # a bare word
        "<tool_call>\nls -la /app\nthen I will check the output",
    ],
)
def test_a_settled_call_reads_the_same_whatever_follows(text) -> None:
    assert call_is_settled(text)
    settled = parse_response(text)
    assert settled.call_format == "malformed"
    for tail in ("", " and more words", "\n</tool_call>", '"}}\n</tool_call>'):
        assert parse_response(text + tail) == settled, tail


@pytest.mark.parametrize(
    "text",
    [
        "I will list the files.",  # no call opened
        '<tool_call>\n{"name": "bash", "arguments": {"command": "ls',  # inside a string
        '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}',  # one brace to go
        '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_c',
        '<tool_call>\n{"a": tru',  # a literal cut in its token
        '<tool_call>\n{"a": 1e',  # a number cut before its exponent
    ],
)
def test_a_call_that_may_still_become_well_formed_is_not_settled(text) -> None:
    assert not call_is_settled(text)
