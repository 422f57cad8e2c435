"""Token-exact conversations: grow a prompt by appending tokens, never re-tokenizing.

Re-rendering a whole conversation through the chat template and tokenizing
it again does not always give back the tokens the model produced (BPE merges
across the old/new boundary, whitespace normalisation, a stop string the
template does not know). Training on such a re-tokenized stream is training
on tokens nobody sampled. So a conversation is kept as a token stream:

    stream = initial_ids(system, user)                     # chunk 0 prompt
           + response_ids                                  # exactly as sampled
           + continuation_ids([observation], response_ids) # chunk 1 prompt
           + response_ids ...

``continuation_ids`` renders only the new turns. It renders them behind a
sentinel assistant message with the model's own chat template and keeps the
text after the sentinel: the end of the assistant turn, the new turns and the
next assistant header. When the model already emitted its end-of-turn token,
that token is not added twice.
"""

from __future__ import annotations

from typing import Any

from termrl.llm.engine import ChatMessages

__all__ = ["ChatTokens"]

_SENTINEL = "\u2063TERMRL-SENTINEL\u2063"


class ChatTokens:
    """Token-level conversation building on top of a tokenizer's chat template."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.eos_id: int | None = tokenizer.eos_token_id
        self.eos_text: str = tokenizer.eos_token or ""

    def initial_ids(self, messages: ChatMessages) -> list[int]:
        """The full prompt for the first turn, ending with the assistant header."""
        return list(
            self.tokenizer.apply_chat_template(
                messages, tokenize=True, add_generation_prompt=True, return_dict=False
            )
        )  # transformers 5 (vLLM's) returns a dict by default

    def continuation_text(self, new_messages: ChatMessages, ended_with_eos: bool) -> str:
        """The text that follows an assistant response: its end, new turns, next header."""
        rendered = self.tokenizer.apply_chat_template(
            [
                {"role": "user", "content": "."},
                {"role": "assistant", "content": _SENTINEL},
                *new_messages,
            ],
            tokenize=False,
            add_generation_prompt=True,
        )
        at = rendered.rfind(_SENTINEL)
        if at < 0:
            raise ValueError("the chat template dropped the assistant message")
        text = rendered[at + len(_SENTINEL) :]
        if ended_with_eos and self.eos_text and text.startswith(self.eos_text):
            text = text[len(self.eos_text) :]
        return text

    def continuation_ids(self, new_messages: ChatMessages, response_ids: list[int]) -> list[int]:
        """Tokens to append after ``response_ids`` so the model sees ``new_messages`` next."""
        ended = bool(response_ids) and response_ids[-1] == self.eos_id
        text = self.continuation_text(new_messages, ended)
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids)
