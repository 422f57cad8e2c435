"""The decode-floor bench's breakdown of a step (``bench/decode_floor.py``), on the tiny model."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from bench.decode_floor import report_breakdown, step_breakdown, weight_bytes
from termrl.llm import decode_kernels

pytestmark = pytest.mark.skipif(
    decode_kernels.find_compiler() is None, reason="no C compiler to build the kernels with"
)


def test_the_breakdown_times_each_part_and_counts_what_it_reads(tiny_model_dir, capsys):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    decoder, ms, read = step_breakdown(model, rows=3, context=300, rounds=2)
    assert set(ms) == set(read) == {"step", "matmuls", "attention", "the rest"}
    assert ms["step"] > 0 and ms["matmuls"] > 0 and ms["attention"] > 0
    assert ms["the rest"] == pytest.approx(ms["step"] - ms["matmuls"] - ms["attention"])
    config = model.config
    head_dim = config.hidden_size // config.num_attention_heads
    kv = 2 * config.num_hidden_layers * 3 * config.num_key_value_heads * 301 * head_dim
    assert read["attention"] == kv * decoder.keys[0].element_size()
    assert read["step"] == weight_bytes(decoder) + read["attention"]
    # What the matmuls read is every weight but the norms'.
    norms = sum(layer[0].nbytes + layer[3].nbytes for layer in decoder.layers)
    assert read["the rest"] == norms + decoder.norm.nbytes

    report_breakdown(decoder, 3, 300, ms, read, bandwidth=20e9)
    lines = capsys.readouterr().out.splitlines()
    parts = [line.split()[0] for line in lines[-4:]]
    assert parts == ["step", "matmuls", "attention", "the"]
    assert f"{read['step'] / 20e9 * 1e3:.2f}" in lines[-4]  # the floor at the given bandwidth
