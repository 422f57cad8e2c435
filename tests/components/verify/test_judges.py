"""The judge panel: verdict parsing, aggregation, and real HTTP round trips.

The scripted server below is an OpenAI-compatible peer on loopback (what a
hosted judge looks like from here), not a stand-in for any termrl code: the
panel, litellm and the HTTP client all run for real.
"""

from __future__ import annotations

import json
import time

import pytest
from aiohttp import web

from components.verify.config import JudgeEndpoint
from components.verify.judges import (
    JudgePanel,
    JudgeVerdict,
    aggregate,
    judge_messages,
    parse_verdict,
)
from termrl.artifacts.tasks import Task, TaskFile

TASK = Task(
    id="t1",
    instruction="Write 42 to /app/answer.txt.",
    test_files=[TaskFile("test.sh", b"#!/bin/bash\ngrep -q 42 /app/answer.txt\n", 0o755)],
    solution_files=[TaskFile("solve.sh", b"echo 42 > /app/answer.txt\n", 0o755)],
)

OK = {"verdict": "ok", "flags": [], "rationale": "The test reads the file the instruction names."}
FLAG = {"verdict": "flag", "flags": ["shortcut"], "rationale": "grep -q 42 also accepts 1425."}


def test_parse_verdict_accepts_bare_fenced_and_wrapped_json():
    assert parse_verdict(json.dumps(OK)) == ("ok", [], OK["rationale"])
    fenced = "Here is my review.\n```json\n" + json.dumps(FLAG) + "\n```\nThanks."
    assert parse_verdict(fenced) == ("flag", ["shortcut"], FLAG["rationale"])
    wrapped = 'I think {not json} but then {"verdict": "FLAG", "flags": ["ambiguous-instruction"]}'
    assert parse_verdict(wrapped) == ("flag", ["ambiguous-instruction"], "")


@pytest.mark.parametrize(
    "reply",
    [
        "looks fine to me",
        '{"verdict": "maybe", "flags": [], "rationale": ""}',
        '{"verdict": "ok", "flags": "none", "rationale": ""}',
        '{"verdict": "ok", "flags": [], "rationale": 3}',
        '{"flags": []}',
    ],
)
def test_parse_verdict_rejects_what_is_not_a_verdict(reply):
    with pytest.raises(ValueError):
        parse_verdict(reply)


def verdicts(*kinds: str) -> list[JudgeVerdict]:
    return [
        JudgeVerdict(
            f"m{i}", k, ["shortcut"] if k == "flag" else [], k, "boom" if k == "error" else ""
        )
        for i, k in enumerate(kinds)
    ]


def test_aggregation_rules_and_errors_that_do_not_vote():
    # any-flag: one flag of two answers flags the task.
    assert aggregate(verdicts("ok", "flag", "error"), "any-flag").outcome == "fail"
    # majority: 1 flag of 2 answering judges is not more than half.
    assert aggregate(verdicts("ok", "flag", "error"), "majority").outcome == "pass"
    # majority: 2 of 3 is.
    assert aggregate(verdicts("ok", "flag", "flag"), "majority").outcome == "fail"
    # the error does not count as a vote either way: 1 of 1 answering flagged.
    assert aggregate(verdicts("flag", "error", "error"), "majority").outcome == "fail"
    assert aggregate(verdicts("ok", "ok"), "any-flag").outcome == "pass"
    nobody = aggregate(verdicts("error", "error"), "any-flag")
    assert nobody.outcome == "error" and "boom" in nobody.reason
    assert aggregate([], "any-flag").outcome == "skipped"


def test_the_judges_see_the_rubric_instruction_tests_and_solution():
    system, user = judge_messages(TASK, max_test_chars=1000)
    assert '"verdict"' in system["content"] and "shortcut" in system["content"]
    for text in (TASK.instruction, "grep -q 42 /app/answer.txt", "echo 42 > /app/answer.txt"):
        assert text in user["content"]
    long = Task(id="t2", instruction="x", test_files=[TaskFile("test.sh", b"y" * 5000)])
    assert "cut: 4900 more bytes" in judge_messages(long, max_test_chars=100)[1]["content"]


@pytest.fixture
async def judge_server():
    """A loopback OpenAI-compatible server; the requested model picks the scripted reply."""
    seen: list[dict] = []

    async def completions(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(body)
        model = body["model"]
        if model == "down":
            return web.json_response({"error": {"message": "overloaded"}}, status=500)
        content = {
            "ok": json.dumps(OK),
            "flag": "```json\n" + json.dumps(FLAG) + "\n```",
            "garbage": "The tests look fine, I guess.",
        }[model]
        return web.json_response(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
            }
        )

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}/v1", seen
    await runner.cleanup()


def panel(base: str, models: list[str], rule: str = "any-flag") -> JudgePanel:
    endpoints = [JudgeEndpoint(f"openai/{m}@{base}", f"openai/{m}", base) for m in models]
    return JudgePanel(
        endpoints, rule=rule, timeout_sec=30, max_tokens=64, max_test_chars=4000, concurrency=2
    )


async def test_panel_over_http_records_each_verdict_and_every_error(judge_server):
    base, seen = judge_server
    outcome = await panel(base, ["ok", "flag", "garbage", "down"]).review(TASK)
    judges = {j["model"].split("@")[0]: j for j in outcome.detail["judges"]}
    assert (
        judges["openai/ok"]["verdict"] == "ok"
        and judges["openai/ok"]["rationale"] == OK["rationale"]
    )
    assert judges["openai/flag"]["verdict"] == "flag" and judges["openai/flag"]["flags"] == [
        "shortcut"
    ]
    assert judges["openai/garbage"]["verdict"] == "error"
    assert "malformed verdict" in judges["openai/garbage"]["error"]
    assert judges["openai/down"]["verdict"] == "error" and judges["openai/down"]["error"]
    assert outcome.outcome == "fail" and "1 of 2 answering judges flagged" in outcome.reason
    # every judge really got the rubric and the task, deterministically sampled
    assert {b["model"] for b in seen} >= {"ok", "flag", "garbage", "down"}
    assert all(
        b["temperature"] == 0 and TASK.instruction in b["messages"][1]["content"] for b in seen
    )


async def test_majority_panel_over_http(judge_server):
    base, _ = judge_server
    assert (await panel(base, ["ok", "flag", "ok"], "majority").review(TASK)).outcome == "pass"
    assert (await panel(base, ["flag", "flag", "ok"], "majority").review(TASK)).outcome == "fail"
    assert (await panel(base, ["garbage", "down"], "majority").review(TASK)).outcome == "error"


async def test_unreachable_judge_is_an_error_not_a_crash():
    outcome = await panel("http://127.0.0.1:9/v1", ["ok"]).review(TASK)
    assert outcome.outcome == "error" and outcome.detail["judges"][0]["verdict"] == "error"


async def test_local_judge_through_the_model_proxy_with_the_tiny_model(tiny_model_dir):
    """The embedded judge path: ModelProxy + a real (tiny, untrained) model. Its reply is
    noise, so the verdict must be recorded as a judge error — and the call must have
    really reached the model (the proxy recorded it)."""
    from termrl.llm.hf_engine import TransformersEngine
    from termrl.llm.proxy import ModelProxy

    async with ModelProxy(TransformersEngine(tiny_model_dir)) as proxy:
        endpoint = JudgeEndpoint("local", "openai/policy", proxy.base_url)
        judges = JudgePanel(
            [endpoint],
            rule="any-flag",
            timeout_sec=120,
            max_tokens=24,
            max_test_chars=2000,
            concurrency=1,
        )
        outcome = await judges.review(TASK)
        recorded = [call for session in proxy.sessions.values() for call in session.calls]
    assert len(recorded) == 1 and recorded[0].response_ids
    verdict = outcome.detail["judges"][0]
    assert verdict["verdict"] == "error" and "malformed verdict" in verdict["error"]
    assert outcome.outcome == "error"
