"""ModelProxy: an OpenAI-compatible server in front of an engine (CLI-native mode).

Any agent CLI that speaks the OpenAI chat API — run inside the sandbox or
beside it — can be pointed at the proxy and is then trained "natively": the
proxy serves its requests with the policy and records, per session, the exact
prompt token ids, response token ids and logprobs (``proxy_sessions``).

    agent CLI ──HTTP──► /v1/chat/completions ─► session bookkeeping ─► BatchingEngine ─► engine
                        /v1/models
                        /termrl/sessions/{key}   (the recorded calls and chunks, as JSON)

A session is keyed by the ``X-Session-Id`` header or, failing that, the API
key (``Authorization: Bearer <key>``), so a CLI that only lets you set an API
key still gets its own session. Concurrent requests of all sessions are
batched into shared generate calls.

Extensions borrowed from vLLM's server: ``return_token_ids`` adds
``prompt_token_ids`` and the choice's ``token_ids``; with
``return_tokens_as_token_ids`` logprob tokens read ``token_id:<id>``.
Streaming is not supported (the request is answered with 400).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

from aiohttp import web

from termrl.llm.batching import BatchingEngine
from termrl.llm.chat import ChatTokens
from termrl.llm.engine import TOOL_CALL_END, Engine, SamplingParams
from termrl.llm.proxy_sessions import ProxySession, normalize_messages
from termrl.llm.toolcalls import parse_response

__all__ = ["ModelProxy"]


def _error(status: int, message: str) -> web.Response:
    return web.json_response(
        {"error": {"message": message, "type": "invalid_request_error"}}, status=status
    )


class ModelProxy:
    """Serve an engine over HTTP and record every session's tokens.

    Use as ``async with ModelProxy(engine) as proxy:`` then point clients at
    ``proxy.base_url`` (``http://host:port/v1``).
    """

    def __init__(
        self,
        engine: Engine,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        max_batch_size: int = 32,
        max_wait_sec: float = 0.01,
        default_max_tokens: int = 512,
    ) -> None:
        if not engine.accepts_token_ids or engine.tokenizer is None:
            raise ValueError("the ModelProxy needs an engine that takes token ids")
        self.engine = (
            engine
            if engine.merges_requests
            else BatchingEngine(engine, max_batch_size=max_batch_size, max_wait_sec=max_wait_sec)
        )
        self.chat = ChatTokens(engine.tokenizer)
        self.host, self.port = host, port
        self.default_max_tokens = default_max_tokens
        self.sessions: dict[str, ProxySession] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._runner: web.AppRunner | None = None
        self.app = web.Application(client_max_size=64 * 1024 * 1024)
        self.app.router.add_post("/v1/chat/completions", self._chat)
        self.app.router.add_get("/v1/models", self._models)
        self.app.router.add_get("/termrl/sessions/{key}", self._session)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    async def start(self) -> str:
        """Start serving; returns the base URL (a free port is picked when port is 0)."""
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        if self.port == 0:
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self.base_url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.engine.aclose()

    async def __aenter__(self) -> ModelProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def session(self, key: str) -> ProxySession:
        """The recorded session for ``key`` (created empty when unseen)."""
        return self.sessions.setdefault(key, ProxySession(key))

    @staticmethod
    def session_key(request: web.Request) -> str:
        key = request.headers.get("X-Session-Id")
        if key:
            return key
        auth = request.headers.get("Authorization", "")
        if auth.lower().startswith("bearer ") and auth[7:].strip():
            return auth[7:].strip()
        return "default"

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "object": "list",
                "data": [{"id": self.engine.model_name, "object": "model", "owned_by": "termrl"}],
            }
        )

    async def _session(self, request: web.Request) -> web.Response:
        key = request.match_info["key"]
        if key not in self.sessions:
            return _error(404, f"no session {key!r}")
        return web.json_response(self.sessions[key].to_json())

    def _params(self, body: dict[str, Any], prompt_len: int) -> SamplingParams:
        max_tokens = (
            body.get("max_completion_tokens") or body.get("max_tokens") or self.default_max_tokens
        )
        stop = body.get("stop") or []
        stop = [stop] if isinstance(stop, str) else list(stop)
        return SamplingParams(
            max_new_tokens=max(1, min(int(max_tokens), self.engine.context_window - prompt_len)),
            temperature=float(1.0 if body.get("temperature") is None else body["temperature"]),
            top_p=float(body.get("top_p") or 1.0),
            seed=body.get("seed"),
            stop=tuple(dict.fromkeys([TOOL_CALL_END, *stop])),
        )

    async def _chat(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "the body is not JSON")
        if body.get("stream"):
            return _error(400, "streaming is not supported by the termrl ModelProxy")
        if int(body.get("n") or 1) != 1:
            return _error(400, "only n=1 is supported")
        raw = body.get("messages")
        if not isinstance(raw, list) or not raw:
            return _error(400, "'messages' must be a non-empty list")
        key = self.session_key(request)
        messages = normalize_messages(raw)
        async with self._locks.setdefault(key, asyncio.Lock()):
            session = self.session(key)
            prompt_ids, extends, new = session.build_prompt(self.chat, messages)
            if len(prompt_ids) >= self.engine.context_window:
                return _error(
                    400,
                    f"the prompt has {len(prompt_ids)} tokens; the context window is "
                    f"{self.engine.context_window}",
                )
            params = self._params(body, len(prompt_ids))
            gen = (await self.engine.generate([prompt_ids], params))[0]
            reply, finish = self._reply(
                gen.text, gen.finish_reason, params, bool(body.get("tools"))
            )
            session.record(messages, prompt_ids, extends, new, gen, reply)
        return web.json_response(self._response(body, reply, finish, prompt_ids, gen))

    @staticmethod
    def _reply(
        text: str, finish: str, params: SamplingParams, tools: bool
    ) -> tuple[dict[str, Any], str]:
        # A client's own stop strings are cut from the text (OpenAI semantics);
        # the proxy's </tool_call> stop is part of the model's output.
        for s in params.stop[1:]:
            if s in text:
                text = text[: text.index(s)]
        finish_reason = "length" if finish == "length" else "stop"
        parsed = parse_response(text) if tools else None
        if parsed is not None and parsed.call_format == "tool-call" and parsed.calls:
            before = text[: text.index("<tool_call>")]
            calls = [
                {
                    "id": f"call_{uuid.uuid4().hex[:12]}",
                    "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                }
                for c in parsed.calls
            ]
            return {
                "role": "assistant",
                "content": before or None,
                "tool_calls": calls,
            }, "tool_calls"
        return {"role": "assistant", "content": text}, finish_reason

    def _response(
        self,
        body: dict[str, Any],
        reply: dict[str, Any],
        finish: str,
        prompt_ids: list[int],
        gen: Any,
    ) -> dict[str, Any]:
        tok = self.engine.tokenizer
        choice: dict[str, Any] = {"index": 0, "message": reply, "finish_reason": finish}
        if body.get("logprobs"):
            as_ids = bool(body.get("return_tokens_as_token_ids"))
            choice["logprobs"] = {
                "content": [
                    {
                        "token": f"token_id:{t}" if as_ids else tok.decode([t]),
                        "logprob": lp,
                        "bytes": None,
                        "top_logprobs": [],
                    }
                    for t, lp in zip(gen.token_ids, gen.logprobs or [], strict=False)
                ]
            }
        if body.get("return_token_ids"):
            choice["token_ids"] = gen.token_ids
        out: dict[str, Any] = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.engine.model_name,
            "choices": [choice],
            "usage": {
                "prompt_tokens": len(prompt_ids),
                "completion_tokens": len(gen.token_ids),
                "total_tokens": len(prompt_ids) + len(gen.token_ids),
            },
        }
        if body.get("return_token_ids"):
            out["prompt_token_ids"] = prompt_ids
        return out
