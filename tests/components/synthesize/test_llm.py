"""LLM synthesis over a real HTTP round trip: litellm → a loopback OpenAI-compatible server.

The server (aiohttp, in a thread) is the test's peer: it answers each chat
completion with the next canned reply — a well-formed task, malformed ones,
a near-duplicate — and records the requests it received.
"""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
from aiohttp import web

from components.synthesize.config import SynthesizeConfig
from components.synthesize.llm import parse_reply
from components.synthesize.stage import main
from termrl.artifacts import load_tasks
from termrl.errors import TaskFormatError

GOOD = {
    "tags": ["files", "find"],
    "files": {
        "instruction.md": "Find every file under /srv/media larger than 1 MB and list their paths in /root/big.txt.",
        "environment/Dockerfile": "FROM termrl/base:bookworm\nCOPY make.sh /tmp/make.sh\n"
        "RUN bash /tmp/make.sh && rm /tmp/make.sh\n",
        "environment/make.sh": "mkdir -p /srv/media && head -c 2000000 /dev/zero > /srv/media/a.bin\n",
        "solution/solve.sh": "find /srv/media -type f -size +1M > /root/big.txt\n",
        "tests/test.sh": "#!/bin/bash\nmkdir -p /logs/verifier\n"
        "if grep -q /srv/media/a.bin /root/big.txt; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n",
    },
}
OTHER = json.loads(json.dumps(GOOD))
OTHER["files"]["instruction.md"] = (
    "Create a user account named deploy whose login shell is /bin/sh, then lock its password."
)
WRONG_BASE = json.loads(json.dumps(GOOD))
WRONG_BASE["files"]["environment/Dockerfile"] = "FROM ubuntu:24.04\n"
NO_REWARD = json.loads(json.dumps(GOOD))
NO_REWARD["files"]["tests/test.sh"] = "#!/bin/bash\ntest -s /root/big.txt\n"

REPLIES = [
    "Here is the task:\n```json\n" + json.dumps(GOOD) + "\n```",
    "Sorry, I cannot produce JSON today.",
    json.dumps(WRONG_BASE),
    json.dumps(NO_REWARD),
    json.dumps(GOOD),  # the same instruction again: a near-duplicate
    json.dumps(OTHER),
]


class LoopbackOpenAI:
    """A minimal OpenAI-compatible chat server on 127.0.0.1, replying from a script."""

    def __init__(self, replies: list[str]):
        self.replies = list(replies)
        self.requests: list[dict] = []
        self.url = ""
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)

    async def _chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        content = self.replies[(len(self.requests) - 1) % len(self.replies)]
        return web.json_response(
            {
                "id": f"chatcmpl-{len(self.requests)}",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model", "x"),
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

    async def _serve(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/v1"
        self._stop = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()

    def __enter__(self) -> LoopbackOpenAI:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


@pytest.mark.slow
@pytest.mark.ci
def test_llm_tasks_over_http(tmp_path, capsys):
    """Slow only because importing litellm takes ~10 s here; CI runs it."""
    out = tmp_path / "tasks.parquet"
    with LoopbackOpenAI(REPLIES) as server:
        config = SynthesizeConfig(
            out=str(out),
            count=3,
            seed=1,
            llm_model="openai/termrl-test",
            llm_api_base=server.url,
            llm_count=len(REPLIES),
            progress=False,
        )
        report = main(config)
    assert len(server.requests) == len(REPLIES)
    first = server.requests[0]
    assert first["model"] == "termrl-test"
    assert "FROM termrl/base:bookworm" in first["messages"][0]["content"]
    assert "family" in first["messages"][1]["content"]
    assert report.llm_requested == 6 and report.llm_accepted == 2
    assert report.llm_rejected == {
        "reply is not a JSON object": 1,
        "Dockerfile does not start FROM termrl/base:bookworm": 1,
        "tests/test.sh does not write /logs/verifier/reward.txt": 1,
        "near-duplicate instruction": 1,
    }
    tasks = load_tasks(out)
    llm_tasks = [t for t in tasks if t.metadata.get("generator") == "llm"]
    assert len(tasks) == 5 and len(llm_tasks) == 2
    task = next(t for t in llm_tasks if "/srv/media" in t.instruction)
    assert (
        task.layout == "harbor"
        and "llm" in task.tags
        and task.metadata["model"] == "openai/termrl-test"
    )
    assert {f.path for f in task.environment_files} == {"Dockerfile", "make.sh"}
    assert [f.path for f in task.solution_files] == ["solve.sh"] and [
        f.path for f in task.test_files
    ] == ["test.sh"]
    printed = capsys.readouterr().out
    assert "LLM: 6 requested, 2 accepted, 4 rejected" in printed
    assert "reply is not a JSON object" in printed


def test_unreachable_server_counts_as_rejections(tmp_path, capsys):
    config = SynthesizeConfig(
        out=str(tmp_path / "t.parquet"),
        count=1,
        llm_model="openai/x",
        llm_api_base="http://127.0.0.1:9/v1",
        llm_count=2,
        llm_timeout_sec=5,
        progress=False,
    )
    report = main(config)
    assert report.llm_accepted == 0 and sum(report.llm_rejected.values()) == 2
    assert all(reason.startswith("request failed") for reason in report.llm_rejected)


def _reason(doc: object) -> str:
    text = doc if isinstance(doc, str) else json.dumps(doc)
    with pytest.raises(TaskFormatError) as err:
        parse_reply(text, family="git", difficulty="easy", seed=1, model="m", source="m#0")
    return err.value.problem


def _with(path: str, content: str | None) -> dict:
    doc = json.loads(json.dumps(GOOD))
    if content is None:
        del doc["files"][path]
    else:
        doc["files"][path] = content
    return doc


def test_parse_reply_reasons():
    assert _reason("no json here") == "reply is not a JSON object"
    assert _reason({"tags": []}) == "no `files` object"
    assert _reason(_with("solution/solve.sh", None)) == "missing or empty solution/solve.sh"
    assert _reason(_with("../etc/passwd", "x")) == "file outside environment/, solution/, tests/"
    assert _reason(
        _with("environment/Dockerfile", "FROM termrl/base:bookworm\nCOPY tests/ /tests/\n")
    ) == ("Dockerfile copies tests or solution into the image")
    assert _reason(
        _with("environment/Dockerfile", "FROM termrl/base:bookworm\nRUN pip install requests\n")
    ) == ("Dockerfile installs from the network")
    assert _reason(_with("instruction.md", "do it")).startswith("instruction shorter than 20")
    task = parse_reply(
        json.dumps(GOOD), family="git", difficulty="easy", seed=1, model="m", source="m#0"
    )
    assert task.id.startswith("git-easy-llm-") and task.solution_files[0].mode == 0o755
