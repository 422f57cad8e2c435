"""The continuous engine's prefill: the transformers model against the decode kernels, side by side.

A turn of an agent episode starts with a prefill: the tool's output and the chat markup
since the last turn (tens to hundreds of tokens) on top of the cached KV of everything
before. While it runs, no row of the batch decodes. The engine used to prefill through the
transformers model (``ContinuousEngine._model_prefill``); it now feeds the new tokens as the
rows of one call of the decode step's kernels (``SlotDecoder.prefill``, ``decode_forward.c``),
each weight block read once for all of them and each token attending the columns up to its
own.

For each (cached, new) size and weight type, alternating the two ways in rounds on the same
tokens, printed: each way's median time and tok/s, their ratio (model / kernels, the median
of the per-round ratios: the host's drift cancels within a round), and how far the kernels'
last-token log-probabilities are from the float32 model's full forward (max |Δ log p| over
the vocabulary).

    python bench/prefill.py                        # SmolLM2-135M, 5 rounds
    python bench/prefill.py --sizes 240:80,1000:80,0:600 --rounds 9
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import AutoModelForCausalLM, DynamicCache

from termrl.llm import grouped_attention
from termrl.llm.decode_step import SlotDecoder
from termrl.llm.models import prepare_default_model


def model_prefill(model, past, new: torch.Tensor, start: int) -> tuple[float, torch.Tensor]:  # noqa: ANN001
    """Seconds and last logits [V] of the transformers model's prefill over ``past``."""
    cache = DynamicCache(ddp_cache_data=past) if past else DynamicCache()
    started = time.perf_counter()
    out = model(
        input_ids=new[None],
        attention_mask=torch.ones((1, start + len(new)), dtype=torch.long),
        position_ids=torch.arange(start, start + len(new))[None],
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=1,
    )
    return time.perf_counter() - started, out.logits[0, -1]


def kernel_prefill(
    decoder: SlotDecoder, past, new: torch.Tensor, start: int
) -> tuple[float, torch.Tensor]:  # noqa: ANN001
    """Seconds and last logits [V] of ``decoder.prefill`` into slot 0 after loading ``past``."""
    if past:
        decoder.load_row(0, past)
    started = time.perf_counter()
    logits = decoder.prefill(0, new, start)
    return time.perf_counter() - started, logits[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="240:80,1000:80,1000:300,0:600", help="cached:new,...")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    sizes = [tuple(int(n) for n in pair.split(":")) for pair in args.sizes.split(",")]

    path = prepare_default_model()
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.float32, attn_implementation=grouped_attention.register()
    ).eval()
    longest = max(cached + new for cached, new in sizes)
    decoders = {
        dtype: SlotDecoder(model, max_rows=1, max_length=longest + 1, weights_dtype=dtype)
        for dtype in ("float32", "bfloat16")
    }
    print(
        f"threads {torch.get_num_threads()}; kernels' KV cache: "
        + ", ".join(f"{d} weights -> {dec.kv_dtype}" for d, dec in decoders.items())
    )
    generator = torch.Generator().manual_seed(0)
    print(
        "cached  new  weights   model ms (tok/s)   kernels ms (tok/s)   model/kernels   "
        "max |d log p| vs fp32 model"
    )
    with torch.inference_mode():
        for cached, new in sizes:
            tokens = torch.randint(100, 40000, (cached + new,), generator=generator)
            past = None
            if cached:
                cache = DynamicCache()
                model(input_ids=tokens[None, :cached], past_key_values=cache, use_cache=True)
                past = [(layer.keys, layer.values) for layer in cache.layers]
            want = torch.log_softmax(model(input_ids=tokens[None]).logits[0, -1], -1)
            fed = tokens[cached:]
            for dtype, decoder in decoders.items():
                times: dict[str, list[float]] = {"model": [], "kernels": []}
                ratios, drift = [], 0.0
                for _ in range(args.rounds):
                    took_model, _ = model_prefill(model, past, fed, cached)
                    took_kernels, logits = kernel_prefill(decoder, past, fed, cached)
                    times["model"].append(took_model)
                    times["kernels"].append(took_kernels)
                    ratios.append(took_model / took_kernels)
                    got = torch.log_softmax(logits, -1)
                    drift = max(drift, float((got - want).abs().max()))
                m, k = (statistics.median(times[w]) for w in ("model", "kernels"))
                print(
                    f"{cached:6d} {new:4d}  {dtype:8s}  {1000 * m:7.1f} ({new / m:5.0f})"
                    f"      {1000 * k:7.1f} ({new / k:5.0f})      "
                    f"{statistics.median(ratios):5.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"
                    f"   {drift:.1e}"
                )
    print(
        "The model's prefill is float32 in both rows (the engine's model is float32); "
        "the kernels' weights and KV cache are the row's type."
    )


if __name__ == "__main__":
    main()
