"""The shared prompt prefix: run it once per step without gradients; every micro-batch attends to it.

Every episode starts with the same system prompt, so a step's token streams
share their first L tokens (often a few hundred). Instead of running those L
tokens forward and backward in every micro-batch:

    step episodes ──longest common prefix (≥ 16 tokens, before any trained logit)──► ids [L]
    ids [L] ──forward under no_grad──► SharedPrefix: keys, values per layer [1, H_kv, L, D]
    micro-batch [B, T] ──input_ids[:, L:] attending to SharedPrefix.cache(B)──► logits at L … T−1

The log-probabilities are the ones the full forward gives (the keys and values
are the same numbers). What the update loses is the gradient through the
prefix's keys and values. That is acceptable: no loss falls on a prefix token,
so that path only changes how the parameters encode the one prompt every
episode shares, while the response tokens, and their attention to the prefix,
keep their full gradient. Paying for it meant a forward and backward of L more
tokens in every micro-batch (SmolLM2-135M, 309 shared tokens: ~40 s a step with
it, ~5 s without, same first-step loss; ``bench/train.py`` prints the ratio).

Two transformers details shape the cache:

- a forward appends its keys and values to the cache it gets; ``_PrefixCache``
  returns prefix + new without storing them, so nothing is mutated between
  micro-batches, and a layer that gradient checkpointing recomputes in backward
  sees the prefix again rather than a cache that already grew;
- gradient checkpointing layers drop ``past_key_values`` in training
  (``GradientCheckpointingLayer``); while ``attending`` is open — around the
  forwards and the backwards, since backward recomputes layers — a hook hands
  the prefix cache back to them.

Every rank holds the same step episodes, so under FSDP2 and DeepSpeed the ranks
run the extra forward (and its collectives) together.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from transformers import DynamicCache

__all__ = [
    "MIN_SHARED_PREFIX",
    "SharedPrefix",
    "attending",
    "encode_shared_prefix",
    "shared_prefix_length",
]

MIN_SHARED_PREFIX = 16
"""Fewer shared tokens than this save less than the extra forward call costs."""


def shared_prefix_length(episodes: list) -> int:
    """Length of the token prefix all ``episodes`` share, ending before any trained logit.

    The logit at position p predicts token p + 1, so a trained token at c needs the
    logit at c − 1 from the forward with gradients: the prefix stops before c − 1.
    Prompts come before responses, so the prefix holds prompt tokens only.
    """
    first = episodes[0].input_ids
    limit = first.numel()
    for episode in episodes:
        trained = (episode.token_chunk >= 0).nonzero()
        first_trained = int(trained[0]) if trained.numel() else episode.input_ids.numel()
        limit = min(limit, first_trained - 1, episode.input_ids.numel() - 1)
        if limit <= 0:
            return 0
        differs = (episode.input_ids[:limit] != first[:limit]).nonzero()
        if differs.numel():
            limit = int(differs[0])
    return max(limit, 0)


class _PrefixCache(DynamicCache):
    """A cache holding the prefix that a forward reads but never grows."""

    @classmethod
    def holding(cls, layers: tuple[tuple[Tensor, Tensor], ...]) -> _PrefixCache:
        cache = cls()
        for index, (keys, values) in enumerate(layers):
            DynamicCache.update(cache, keys, values, index)  # the storing update, once
        return cache

    def update(self, key_states: Tensor, value_states: Tensor, layer_idx: int, cache_kwargs=None):
        keys, values = self[layer_idx]  # [B, H_kv, L, D]
        return torch.cat([keys, key_states], dim=-2), torch.cat([values, value_states], dim=-2)


@dataclass
class SharedPrefix:
    """The keys and values of a step's shared prompt prefix, computed without gradients."""

    ids: Tensor  # [L]
    layers: tuple[tuple[Tensor, Tensor], ...]  # per layer: keys, values [1, H_kv, L, D]
    attached: bool = False
    """Whether ``attending`` is open, so checkpointed layers get the cache too."""

    @property
    def length(self) -> int:
        return self.ids.numel()

    def cache(self, batch: int) -> DynamicCache:
        """A cache over ``batch`` rows (built fresh; a forward only reads it)."""
        return _PrefixCache.holding(
            tuple(
                (k.expand(batch, -1, -1, -1), v.expand(batch, -1, -1, -1)) for k, v in self.layers
            )
        )

    def cache_for(self, model: nn.Module, batch: int) -> DynamicCache:
        """The ``past_key_values`` of one forward; refuses when checkpointed layers would miss it."""
        if _checkpointed_layers(model) and not self.attached:
            raise RuntimeError(
                "gradient checkpointing is on: run the forward and backward inside attending()"
            )
        return self.cache(batch)


def _checkpointed_layers(model: nn.Module) -> list[nn.Module]:
    """Layers that drop ``past_key_values`` in this forward (transformers' gradient checkpointing)."""
    try:
        from transformers.modeling_layers import GradientCheckpointingLayer
    except ImportError:  # older transformers pass the cache through checkpointing as it is
        return []
    return [
        m
        for m in model.modules()
        if isinstance(m, GradientCheckpointingLayer) and m.gradient_checkpointing and m.training
    ]


@contextlib.contextmanager
def _checkpointing_paused(model: nn.Module) -> Iterator[None]:
    """Without gradients nothing is recomputed; checkpointing would only drop the cache."""
    layers = _checkpointed_layers(model)
    for layer in layers:
        layer.gradient_checkpointing = False
    try:
        yield
    finally:
        for layer in layers:
            layer.gradient_checkpointing = True


@contextlib.contextmanager
def attending(model: nn.Module, prefix: SharedPrefix | None) -> Iterator[None]:
    """Open around a step's forwards *and backwards*: checkpointed layers get the prefix cache.

    transformers' checkpointing layers drop ``past_key_values`` (and log that they did);
    a forward pre-hook hands it back, in the forward and again when backward recomputes
    the layer. A no-op without a prefix or without checkpointing.
    """
    if prefix is None:
        yield
        return

    def hand_back(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        hidden = args[0] if args else kwargs["hidden_states"]  # [B, T − L, H]
        return args, {**kwargs, "past_key_values": prefix.cache(hidden.shape[0])}

    handles = [
        m.register_forward_pre_hook(hand_back, with_kwargs=True)
        for m in _checkpointed_layers(model)
    ]
    prefix.attached = True
    try:
        yield
    finally:
        prefix.attached = False
        for handle in handles:
            handle.remove()


def _full_attention_only(model: nn.Module) -> bool:
    """Whether the model can attend to a plain prefix cache (no sliding windows, no own cache)."""
    base = getattr(model, "module", model)  # DeepSpeed's engine holds the model as .module
    base = base.get_base_model() if hasattr(base, "get_base_model") else base  # peft
    supports = getattr(type(base), "_supports_default_dynamic_cache", None)
    if supports is None or not supports() or not hasattr(base, "config"):
        return False
    config = base.config.get_text_config()
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None:
        return all(kind == "full_attention" for kind in layer_types)
    windowed = getattr(config, "sliding_window", None) or getattr(
        config, "attention_chunk_size", None
    )
    return windowed is None


@torch.no_grad()
def encode_shared_prefix(
    model: nn.Module, episodes: list, device: torch.device, *, bf16: bool
) -> SharedPrefix | None:
    """Run the prefix all ``episodes`` share once; ``None`` when too short or unsupported."""
    length = shared_prefix_length(episodes) if episodes else 0
    if length < MIN_SHARED_PREFIX or not _full_attention_only(model):
        return None
    ids = episodes[0].input_ids[:length]
    cache = DynamicCache()
    autocast = (
        torch.autocast(device_type=device.type, dtype=torch.bfloat16)
        if bf16
        else contextlib.nullcontext()
    )
    with autocast, _checkpointing_paused(model):
        model(
            input_ids=ids.unsqueeze(0).to(device),
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
    layers = tuple((k.detach(), v.detach()) for k, v in cache.to_legacy_cache())
    return SharedPrefix(ids=ids.clone(), layers=layers)
