"""The prefix cache: longest stored prefix, hand-over of a whole match, LRU eviction."""

from __future__ import annotations

import pytest
import torch

from termrl.llm.prefix_cache import PrefixCache, common_prefix


def kv_of(tokens: list[int], layers: int = 2) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """A fake KV whose every position holds its token id, so a slice shows which tokens it covers."""
    t = torch.tensor(tokens, dtype=torch.float32)[None, None, :, None]  # [1, 1, T, 1]
    return [(t.clone(), -t.clone()) for _ in range(layers)]


def test_common_prefix() -> None:
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix([1, 2], [1, 2, 3]) == 2
    assert common_prefix([], [1]) == 0


def test_the_longest_prefix_wins_and_is_cut_to_the_shared_part() -> None:
    cache = PrefixCache(max_tokens=100)
    cache.store([1, 2, 9], kv_of([1, 2, 9]))
    cache.store([1, 2, 3, 4], kv_of([1, 2, 3, 4]))
    n, kv = cache.match([1, 2, 3, 7, 8])
    assert n == 3 and kv is not None
    assert kv[0][0].flatten().tolist() == [1, 2, 3] and kv[1][1].flatten().tolist() == [-1, -2, -3]
    assert cache.hits == 1
    assert len(cache) == 2  # a partial match leaves the entry for others (the shared system prompt)


def test_a_prompt_extending_a_whole_entry_takes_it_over() -> None:
    cache = PrefixCache(max_tokens=100)
    cache.store([1, 2, 3], kv_of([1, 2, 3]))
    n, _ = cache.match([1, 2, 3, 4])
    assert n == 3 and len(cache) == 0 and cache.tokens == 0


def test_the_last_prompt_token_is_always_fed() -> None:
    cache = PrefixCache(max_tokens=100)
    cache.store([1, 2, 3], kv_of([1, 2, 3]))
    n, kv = cache.match([1, 2, 3])
    assert n == 2 and kv is not None and kv[0][0].shape[2] == 2
    assert cache.match([5]) == (0, None)


def test_least_recently_used_entries_go_first_over_the_cap() -> None:
    cache = PrefixCache(max_tokens=6)
    cache.store([1, 1], kv_of([1, 1]))
    cache.store([2, 2], kv_of([2, 2]))
    cache.match([1, 9])  # touches [1, 1]
    cache.store([3, 3, 3], kv_of([3, 3, 3]))  # 7 tokens: [2, 2] is the oldest untouched
    assert cache.tokens == 5
    assert cache.match([2, 2, 5]) == (0, None)
    assert cache.match([1, 1, 5])[0] == 2


def test_a_kv_of_the_wrong_length_is_refused() -> None:
    with pytest.raises(ValueError, match="positions"):
        PrefixCache(max_tokens=10).store([1, 2], kv_of([1, 2, 3]))
