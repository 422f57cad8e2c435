"""A pass-through wrapper that remembers every token prompt a real engine was fed."""

from __future__ import annotations

from collections.abc import Sequence

from termrl.llm.engine import Engine, Generation, ParamsArg, Prompt

__all__ = ["Recording"]


class Recording(Engine):
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.name = engine.name
        self.tokenizer = engine.tokenizer
        self.context_window = engine.context_window
        self.model_name = engine.model_name
        self.accepts_token_ids = engine.accepts_token_ids
        self.fed: list[list[int]] = []
        self.calls = 0

    async def generate(self, prompts: Sequence[Prompt], params: ParamsArg) -> list[Generation]:
        self.calls += 1
        self.fed.extend(list(p) for p in prompts)
        return await self.engine.generate(prompts, params)
