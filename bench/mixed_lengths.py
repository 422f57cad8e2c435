"""The decode step over rows of different lengths: three ways of attending.

A rollout's running batch mixes episodes at very different context lengths. One
SDPA call over the batch attends every row over the longest row's columns (the
masked ones are computed too). The ways, timed on the same rows, alternating:

    one call     one SDPA call over the batch, with a mask
    SDPA rule    SDPA row by row where ``decode_step._row_lengths`` says that reads
                 fewer columns, else one call (the step's way without the kernel)
    kernel       termrl's C kernel (``decode_kernels``): each row over its own
                 columns, the work split in blocks (the step's default)

Printed: tok/s per way, the kernel's ratio over each SDPA way per round, and
which SDPA way the rule picked:

    python bench/mixed_lengths.py                 # SmolLM2-135M, its defaults (bf16 where the CPU has it)
    python bench/mixed_lengths.py --weights-dtype float32 --repeats 5

The step's time does not depend on the KV values, so the rows' KV is random: no
prefill is needed to reach long contexts.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import AutoModelForCausalLM

from termrl.llm.decode_step import SlotDecoder, _row_lengths
from termrl.llm.models import prepare_default_model

MIXES = {
    "equal (8 x 1000)": [1000] * 8,
    "close (8, 900-1100)": [900, 950, 1000, 1050, 1100, 1000, 950, 900],
    "one long (2000 + 7 x 200)": [2000] + [200] * 7,
    "spread (8, 200-3000)": [3000, 2200, 1600, 1200, 800, 500, 300, 200],
    "rollout-like (16, 300-2500)": [2500, 2100, 1800, 1500, 1300, 1100, 900, 800]
    + [700, 600, 550, 500, 450, 400, 350, 300],
}


def load_random_rows(decoder: SlotDecoder, lengths: list[int], layers: int) -> None:
    kv_heads, head_dim = decoder.kv_heads, decoder.head_dim
    for slot, n in enumerate(lengths):
        kv = [
            (torch.randn(1, kv_heads, n, head_dim), torch.randn(1, kv_heads, n, head_dim))
            for _ in range(layers)
        ]
        decoder.load_row(slot, kv)


def step_rate(decoder: SlotDecoder, lengths: list[int], steps: int) -> float:
    """tok/s of ``steps`` decode steps from ``lengths`` (each row one token a step)."""
    rows = len(lengths)
    tokens = torch.randint(0, 1000, (rows,))
    positions = torch.tensor(lengths)
    with torch.inference_mode():
        decoder.step(tokens, positions)  # warm: the columns just written are overwritten below
        started = time.perf_counter()
        for i in range(steps):
            decoder.step(tokens, positions + i)
    return rows * steps / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=16, help="decode steps per measured rate")
    parser.add_argument("--repeats", type=int, default=3, help="rounds, alternating the ways")
    parser.add_argument("--weights-dtype", default="auto")
    args = parser.parse_args()

    path = prepare_default_model()
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    layers = model.config.num_hidden_layers
    longest = max(max(lengths) for lengths in MIXES.values()) + args.steps + 1
    ways = {
        "one call": {"attention_kernel": False, "row_attention": False},
        "SDPA rule": {"attention_kernel": False},
        "kernel": {"fused_ops": False},  # the attention alone: the rest in torch ops, as SDPA's
    }
    decoders = {
        way: SlotDecoder(
            model,
            max_rows=max(len(v) for v in MIXES.values()),
            max_length=longest,
            weights_dtype=args.weights_dtype,
            **options,
        )
        for way, options in ways.items()
    }
    if decoders["kernel"].attend is None:
        raise SystemExit("the attention kernel did not build here (see the warning above)")
    print(f"weights {decoders['one call'].weights_dtype}; {torch.get_num_threads()} threads")
    print(
        f"{'mix':30s} {'one call':>9s} {'SDPA rule':>10s} {'kernel':>8s}   "
        f"{'kernel/one call':>15s} {'kernel/rule':>12s}  rule picks"
    )
    for name, lengths in MIXES.items():
        rates: dict[str, list[float]] = {way: [] for way in decoders}
        for decoder in decoders.values():
            decoder.release()
            load_random_rows(decoder, lengths, layers)
        for _ in range(args.repeats):
            for way, decoder in decoders.items():
                rates[way].append(step_rate(decoder, lengths, args.steps))
        over = {
            way: [k / r for k, r in zip(rates["kernel"], rates[way], strict=True)]
            for way in ("one call", "SDPA rule")
        }
        picked = "row by row" if _row_lengths([n + 1 for n in lengths]) else "one call"
        print(
            f"{name:30s} {statistics.mean(rates['one call']):9.1f} "
            f"{statistics.mean(rates['SDPA rule']):10.1f} {statistics.mean(rates['kernel']):8.1f}   "
            f"{min(over['one call']):7.2f}-{max(over['one call']):<7.2f} "
            f"{min(over['SDPA rule']):5.2f}-{max(over['SDPA rule']):<5.2f}  {picked}"
        )
    print("tok/s: mean over rounds; ratios: the kernel over that way, per round (same rows).")


if __name__ == "__main__":
    main()
