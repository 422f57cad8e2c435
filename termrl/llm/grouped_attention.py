"""SDPA that keeps grouped-query attention grouped in padded batches (the CPU engine's attention).

transformers' ``sdpa`` attention expands K and V to every query head
(``repeat_kv``) whenever an attention mask is passed, which is every
left-padded batch: at each decode step the whole KV cache is copied three
times over for SmolLM2 (9 query heads, 3 KV heads). torch's SDPA takes the
grouped K/V with a mask as well (``enable_gqa``). Same logits; measured here
for SmolLM2-135M, batch 8, 600-token prompts with padding: 191 -> 127 ms per
decode step.

    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation=register())
"""

from __future__ import annotations

from typing import Any

__all__ = ["NAME", "register", "sdpa_grouped_forward"]

NAME = "termrl_sdpa_grouped"


def sdpa_grouped_forward(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[Any, None]:
    """The ``sdpa`` attention function of transformers, with K/V heads left grouped."""
    import torch

    if attention_mask is not None and attention_mask.ndim == 4:
        attention_mask = attention_mask[:, :, :, : key.shape[-2]]  # [B, 1, Q, K]
    if is_causal is None:
        is_causal = (
            query.shape[2] > 1 and attention_mask is None and getattr(module, "is_causal", True)
        )
    out = torch.nn.functional.scaled_dot_product_attention(
        query,  # [B, H, Q, D]
        key,  # [B, H_kv, K, D]
        value,
        attn_mask=attention_mask,
        dropout_p=dropout,
        scale=scaling,
        is_causal=is_causal,
        enable_gqa=key.shape[1] != query.shape[1],
    )
    return out.transpose(1, 2).contiguous(), None  # [B, Q, H, D]


def register() -> str:
    """Make ``NAME`` a valid ``attn_implementation`` (masks built as for ``sdpa``); returns it."""
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    AttentionInterface.register(NAME, sdpa_grouped_forward)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    return NAME
