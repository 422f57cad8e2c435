"""Inference throughput: single vs batched transformers generation, ModelProxy overhead.

Prints ratios measured side by side in one run (no absolute targets):

    batched/single tok/s   throughput gain of one batch of B prompts over B sequential calls
    proxy/direct time      a request through the ModelProxy (HTTP + bookkeeping + batching
                           front) against the same generate called directly
    grouped/sdpa time      a left-padded batch (rollout's usual case) with the engine's
                           grouped-K/V attention against transformers' own sdpa

    python bench/inference.py                      # default policy (SmolLM2-135M), prepared once
    python bench/inference.py --model tiny         # the 3 M tiny model (fast smoke run)
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import httpx
from transformers import AutoModelForCausalLM

from termrl.llm.engine import SamplingParams
from termrl.llm.hf_engine import TransformersEngine
from termrl.llm.models import build_tiny_model, prepare_default_model
from termrl.llm.proxy import ModelProxy


def _prompts(n: int) -> list[list[dict[str, str]]]:
    return [
        [{"role": "user", "content": f"Task {i}: list the files in /app and count them."}]
        for i in range(n)
    ]


def bench_batching(
    engine: TransformersEngine, batch: int, tokens: int, repeats: int
) -> tuple[float, float]:
    """Median tok/s of B sequential single calls and of one batch of B, interleaved.

    Interleaving keeps both sides under the same machine load (the CPUs here
    are shared), so the ratio holds even when absolute speeds drift.
    """
    params = SamplingParams(max_new_tokens=tokens, temperature=1.0, stop=(), seed=0)
    engine.generate_sync(_prompts(1), SamplingParams(max_new_tokens=4, stop=()))  # warm-up
    single, batched = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        n = sum(len(engine.generate_sync([p], params)[0].token_ids) for p in _prompts(batch))
        single.append(n / (time.perf_counter() - started))
        started = time.perf_counter()
        n = sum(len(g.token_ids) for g in engine.generate_sync(_prompts(batch), params))
        batched.append(n / (time.perf_counter() - started))
    return _median(single), _median(batched)


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


async def bench_proxy(engine: TransformersEngine, tokens: int, repeats: int) -> tuple[float, float]:
    """Median seconds of one request: direct engine call vs through the proxy, interleaved."""
    params = SamplingParams(max_new_tokens=tokens, stop=(), seed=0)
    messages = _prompts(1)[0]
    body = {"messages": messages, "max_tokens": tokens, "seed": 0}
    direct, via = [], []
    async with (
        ModelProxy(engine) as proxy,
        httpx.AsyncClient(base_url=proxy.base_url, timeout=600) as client,
    ):
        for i in range(repeats):
            started = time.perf_counter()
            await engine.generate([messages], params)
            direct.append(time.perf_counter() - started)
            started = time.perf_counter()
            # a fresh session each time, so every request renders the same prompt
            r = await client.post("/chat/completions", json=body, headers={"X-Session-Id": f"b{i}"})
            r.raise_for_status()
            via.append(time.perf_counter() - started)
    return _median(direct), _median(via)


def bench_attention(path: Path, batch: int, tokens: int, repeats: int) -> tuple[float, float]:
    """Median seconds of one padded batch: transformers' sdpa vs the grouped attention, interleaved."""
    import torch

    grouped = TransformersEngine(path)
    plain = TransformersEngine(path)
    plain.model = AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.float32, attn_implementation="sdpa"
    ).eval()
    # Prompts of different lengths, as a rollout batch mixes turns: left padding, a mask.
    prompts = [[1] + [100 + (i * 7 + r) % 3000 for i in range(80 + 60 * r)] for r in range(batch)]
    params = SamplingParams(max_new_tokens=tokens, temperature=1.0, stop=(), seed=0)
    sdpa, mine = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        plain.generate_sync(prompts, params)
        sdpa.append(time.perf_counter() - started)
        started = time.perf_counter()
        grouped.generate_sync(prompts, params)
        mine.append(time.perf_counter() - started)
    return _median(sdpa), _median(mine)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="default", help="'default', 'tiny' or a model folder")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.model == "default":
        path = prepare_default_model()
    elif args.model == "tiny":
        path = build_tiny_model(Path(tempfile.mkdtemp()) / "tiny")
    else:
        path = Path(args.model)
    engine = TransformersEngine(path)
    single, batched = bench_batching(engine, args.batch, args.tokens, args.repeats)
    direct, via = asyncio.run(bench_proxy(engine, args.tokens, args.repeats))
    print(f"model {engine.model_name}, batch {args.batch}, {args.tokens} new tokens per prompt")
    print(f"single  {single:8.1f} tok/s (median of {args.repeats})")
    print(f"batched {batched:8.1f} tok/s")
    print(f"ratio batched/single tok/s: {batched / single:.2f}")
    print(
        f"direct generate {direct * 1000:8.1f} ms   via proxy {via * 1000:8.1f} ms (median of {args.repeats})"
    )
    print(f"ratio proxy/direct time: {via / direct:.3f}")
    sdpa, grouped = bench_attention(path, args.batch, args.tokens, args.repeats)
    print(
        f"padded batch: transformers sdpa {sdpa:6.2f} s   grouped K/V {grouped:6.2f} s (median of {args.repeats})"
    )
    print(f"ratio grouped/sdpa time: {grouped / sdpa:.3f}")


if __name__ == "__main__":
    main()
