"""The KV caches of recently finished sequences, reused by prompts that extend them.

An episode's next turn is its last prompt + response + the tool's answer
(``termrl.agent.loop`` grows one token stream), and every episode starts
with the same system prompt. So a new prompt usually shares a long prefix
with a sequence the engine has just finished: its keys and values need not
be computed again, only the new tokens' do.

    cache.store(tokens, kv)              kv[layer] = (keys, values), each [1, H, len(tokens), D]
    n, kv = cache.match(prompt)          the longest stored prefix of prompt, its KV cut to n

Matching is on token ids, so it needs no episode ids and also finds the
shared system prompt across episodes. Entries are evicted least recently used
first once the stored tokens exceed ``max_tokens``; an entry that a prompt
extends whole is handed over (removed), since that request will store the
longer sequence when it finishes.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

__all__ = ["KV", "PrefixCache", "common_prefix"]

KV = list[tuple[Any, Any]]
"""Per layer (keys, values), each a tensor [1, kv heads, tokens, head dim]."""


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class PrefixCache:
    """Token sequences and their KV; longest-prefix lookup, LRU eviction under a token cap."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self.tokens = 0
        self._entries: OrderedDict[int, tuple[list[int], KV]] = OrderedDict()
        self._next_key = 0
        #: Prompts that found a stored prefix (benchmarks and tests).
        self.hits = 0

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()
        self.tokens = 0

    def match(self, prompt: Sequence[int]) -> tuple[int, KV | None]:
        """(n, KV of prompt[:n]) for the longest stored prefix; (0, None) when none.

        n stays below len(prompt): the last prompt token is always fed, since
        its logits choose the first response token.
        """
        best_key, best = None, 0
        for key, (tokens, _) in self._entries.items():
            n = common_prefix(tokens, prompt)
            if n > best:
                best_key, best = key, n
        n = min(best, len(prompt) - 1)
        if best_key is None or n <= 0:
            return 0, None
        tokens, kv = self._entries[best_key]
        self.hits += 1
        if n == len(tokens):
            del self._entries[best_key]
            self.tokens -= len(tokens)
        else:
            self._entries.move_to_end(best_key)
        return n, [(k[:, :, :n], v[:, :, :n]) for k, v in kv]

    def store(self, tokens: list[int], kv: KV) -> None:
        """Keep ``kv`` (its length must be len(tokens)) for later prompts; evict the oldest over the cap."""
        if kv[0][0].shape[2] != len(tokens):
            raise ValueError(f"KV of {kv[0][0].shape[2]} positions for {len(tokens)} tokens")
        if not tokens or len(tokens) > self.max_tokens:
            return
        self._entries[self._next_key] = (tokens, kv)
        self._next_key += 1
        self.tokens += len(tokens)
        while self.tokens > self.max_tokens:
            _, (old, _) = self._entries.popitem(last=False)
            self.tokens -= len(old)
