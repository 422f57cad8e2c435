"""Expert turns: solution steps as agent calls, and their replay through the agent loop."""

from __future__ import annotations

import pytest

from termrl.agent.demonstration import (
    NoDemonstration,
    ReplayEngine,
    demonstration_commands,
    expert_responses,
)
from termrl.agent.loop import AgentConfig, run_episode
from termrl.artifacts.tasks import Task, TaskFile
from termrl.llm.toolcalls import parse_response
from tests.agent.scripted import ScriptedEngine, ScriptedSession

SOLVE = b"""#!/bin/bash
# fix the config, then restart
set -euo pipefail
cd /app
sed -i 's/debug=1/debug=0/' app.conf
cat > /app/run.sh <<'EOF'
echo "it's running"
EOF
exit 0
"""


def _task(script: bytes | None, command: str | None = "bash /solution/solve.sh") -> Task:
    files = [TaskFile("solve.sh", script)] if script is not None else []
    return Task(
        id="t1", instruction="Turn debug off.", solution_files=files, solution_command=command
    )


def test_each_solution_step_is_one_command_without_script_only_steps():
    assert demonstration_commands(_task(SOLVE)) == [
        "cd /app",
        "sed -i 's/debug=1/debug=0/' app.conf",
        "cat > /app/run.sh <<'EOF'\necho \"it's running\"\nEOF",
    ]


def test_a_plain_solution_command_is_its_own_step():
    assert demonstration_commands(_task(None, command="chmod +x /app/x.sh")) == [
        "chmod +x /app/x.sh"
    ]


@pytest.mark.parametrize(
    ("task", "reason"),
    [
        (_task(None, command=None), "no solution"),
        (_task(b"set -e\n"), "no solution"),
        (_task(b"cp /solution/fixed.py /app/fixed.py\n"), "uses files under /solution"),
        (_task(None, command="bash /solution/missing.sh"), "does not carry"),
    ],
)
def test_tasks_without_a_replayable_solution_say_why(task: Task, reason: str):
    with pytest.raises(NoDemonstration, match=reason):
        demonstration_commands(task)


def test_expert_responses_parse_back_to_the_same_calls():
    commands = demonstration_commands(_task(SOLVE))
    responses = expert_responses(commands)
    assert len(responses) == len(commands) + 1
    for command, response in zip(commands, responses, strict=False):
        parsed = parse_response(response)
        assert parsed.call_format == "tool-call"
        assert [c.arguments["command"] for c in parsed.calls] == [command]
    assert [c.name for c in parse_response(responses[-1]).calls] == ["done"]


async def test_a_replayed_episode_is_the_token_stream_of_the_chat_it_shows(tiny_tokenizer):
    """prompt_ids + response_ids over the chunks are the chat template's rendering of the
    conversation: exactly what the model would be fed, token for token."""
    commands = ["cd /app", "sed -i 's/a/b/' f.txt"]
    engine = ReplayEngine(tiny_tokenizer, expert_responses(commands), context_window=4096)
    result = await run_episode(engine, ScriptedSession(), "Do it.", AgentConfig())
    assert result.stop_reason == "done" and result.trainable and engine.replayed == 3
    stream = [t for c in result.chunks for t in c.prompt_ids + c.response_ids]
    conversation = result.messages + [
        {"role": "assistant", "content": result.chunks[-1].response_text}
    ]
    rendered = tiny_tokenizer.apply_chat_template(conversation, tokenize=False)
    assert tiny_tokenizer.decode(stream) == rendered.removesuffix("<|im_end|>\n")
    assert "sed -i 's/a/b/' f.txt" in tiny_tokenizer.decode(stream)
    assert all(lp == 0.0 for c in result.chunks for lp in c.response_logprobs)


async def test_an_anchored_episode_hands_over_to_the_policy_after_the_prefix(tiny_tokenizer):
    policy = ScriptedEngine(
        tiny_tokenizer, ['<tool_call>\n{"name": "done", "arguments": {}}\n</tool_call>']
    )
    engine = ReplayEngine(tiny_tokenizer, expert_responses(["cd /app", "ls"])[:1], then=policy)
    session = ScriptedSession()
    result = await run_episode(engine, session, "Do it.", AgentConfig())
    assert [c for c, _ in session.commands] == ["cd /app"]
    assert result.stop_reason == "done" and engine.replayed == 1 and len(result.chunks) == 2
    assert result.chunks[1].response_logprobs == [-0.5] * len(result.chunks[1].response_ids)
    stream = [t for c in result.chunks for t in c.prompt_ids + c.response_ids]
    assert policy.fed[0] == stream[: len(policy.fed[0])]  # it saw the replayed turn and its output
