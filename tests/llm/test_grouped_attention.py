"""The CPU engine's grouped-K/V attention gives transformers' own sdpa results."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM

from termrl.llm import grouped_attention


def test_padded_batch_logits_equal_transformers_sdpa(tiny_model_dir):
    grouped = AutoModelForCausalLM.from_pretrained(
        tiny_model_dir, attn_implementation=grouped_attention.register()
    )
    reference = AutoModelForCausalLM.from_pretrained(tiny_model_dir, attn_implementation="sdpa")
    assert (
        grouped.config.num_key_value_heads < grouped.config.num_attention_heads
    )  # K/V really are grouped
    ids = torch.randint(3, 200, (3, 12))  # [B, T]
    mask = torch.ones_like(ids)
    mask[0, :5] = 0  # left padding, as the engine batches prompts
    mask[2, :2] = 0
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.inference_mode():
        outs = [
            m(input_ids=ids, attention_mask=mask, position_ids=positions).logits
            for m in (grouped, reference)
        ]
        # One cached decode step as well: the case where the mask made transformers copy K/V.
        steps = []
        for m in (grouped, reference):
            prefill = m(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
            step = m(
                input_ids=ids[:, -1:],
                attention_mask=torch.cat([mask, torch.ones_like(mask[:, :1])], -1),
                position_ids=positions[:, -1:] + 1,
                past_key_values=prefill.past_key_values,
            )
            steps.append(step.logits)
    keep = mask.bool()
    assert torch.allclose(outs[0][keep], outs[1][keep], atol=1e-5)
    assert torch.allclose(steps[0], steps[1], atol=1e-5)
