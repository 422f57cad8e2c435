"""The decode step with this tree's C kernels against another commit's, side by side in one run.

    python bench/kernels_ab.py --before c6d101b                  # float32, batches 8 and 32
    python bench/kernels_ab.py --before HEAD~1 --dtype bfloat16 --batches 8

Both libraries are compiled from their sources (``git show REV:termrl/llm/...`` for the
before side; a kernel file the commit does not have yet is left out) with the flags
``termrl.llm.decode_kernels`` builds with. Each version runs its own ``SlotDecoder``, with
the weights packed for its matmuls (the C kernel's where the version has one, else
oneDNN's). Each decoder's KV cache holds ``--context`` columns of the same random keys and
values, and every step feeds each row one token at that position, so each version repeats
the same work. The versions take turns in blocks of ``--steps`` steps, the first one
alternating from round to round, so that what the machine does meanwhile falls on both
alike.

Printed, per batch: each version's decode rate (median and range over the rounds), the
after/before ratio of each round's pair, and how far each version's logits for the same
step are from those of the torch ops the kernels replace (the largest difference): the
two should be alike. On random keys and values, bf16's roundings add up to differences of
a logit or more, between the torch ops and either version alike.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from termrl.llm import decode_kernels
from termrl.llm.decode_kernels import HEADERS, SOURCES, DecodeOps
from termrl.llm.decode_step import SlotDecoder
from termrl.llm.models import prepare_default_model

REPO = Path(__file__).resolve().parent.parent


def library_at(rev: str, folder: Path) -> ctypes.CDLL:
    """The kernels as commit ``rev`` has them, compiled into ``folder``."""
    sources = []
    for path in (*SOURCES, *HEADERS):
        name = path.relative_to(REPO).as_posix()
        shown = subprocess.run(
            ["git", "-C", str(REPO), "show", f"{rev}:{name}"], capture_output=True, check=False
        )
        if shown.returncode != 0:
            if path == SOURCES[0]:  # the attention kernel, the first of them all
                raise SystemExit(f"{rev} has no {name}: {shown.stderr.decode().strip()}")
            continue  # a kernel added after rev
        (folder / path.name).write_bytes(shown.stdout)
        if path in SOURCES:
            sources.append(folder / path.name)
    compiler = decode_kernels.find_compiler()
    if compiler is None:
        raise SystemExit("no C compiler (cc, gcc or $CC) on PATH")
    target = folder / "before.so"
    decode_kernels.compile_kernels(compiler, tuple(sources), target)
    return ctypes.CDLL(str(target))


def timed_steps(
    decoder: SlotDecoder, tokens: torch.Tensor, positions: torch.Tensor, steps: int
) -> float:
    """tok/s over ``steps`` steps of every row."""
    started = time.perf_counter()
    for _ in range(steps):
        decoder.step(tokens, positions)
    return steps * tokens.shape[0] / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", required=True, help="the commit whose kernels are 'before'")
    parser.add_argument("--batches", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--context", type=int, default=1000, help="KV columns per row")
    parser.add_argument("--steps", type=int, default=16, help="steps per timed block")
    parser.add_argument("--rounds", type=int, default=6, help="blocks per version and batch")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    args = parser.parse_args()

    after = decode_kernels.load_ops()
    if after is None:
        raise SystemExit("this tree's kernels cannot be built here (see the warning above)")
    with tempfile.TemporaryDirectory() as folder:
        versions = {"before": DecodeOps(library_at(args.before, Path(folder))), "after": after}
        model = AutoModelForCausalLM.from_pretrained(prepare_default_model(), dtype=torch.float32)
        options = {"max_rows": max(args.batches), "max_length": args.context + 1}
        decoders = {
            # the reference: the torch ops the kernels replace, SDPA, oneDNN's matmuls
            "torch ops": SlotDecoder(
                model, weights_dtype=args.dtype, attention_kernel=False, **options
            ),
            **{
                name: SlotDecoder(model, weights_dtype=args.dtype, kernels=ops, **options)
                for name, ops in versions.items()
            },
        }
        print(
            f"before: {args.before}; after: this tree; {args.dtype} weights; "
            f"context {args.context}; {args.steps} steps a block, {args.rounds} rounds"
        )
        print(
            "batch  before tok/s (range)   after tok/s (range)    after/before by round (median)"
            "  max |logit - torch ops'|: before, after"
        )
        for rows in args.batches:
            for decoder in decoders.values():
                decoder.reserve(rows, args.context + 1)
                generator = torch.Generator().manual_seed(rows)  # the same KV in each
                for cache in decoder.keys + decoder.values:
                    cache[:rows].normal_(generator=generator)
            tokens = torch.randint(0, model.config.vocab_size, (rows,), generator=generator)
            positions = torch.full((rows,), args.context, dtype=torch.int64)
            # also the warm-up
            logits = {name: decoder.step(tokens, positions) for name, decoder in decoders.items()}
            diffs = [(logits[n] - logits["torch ops"]).abs().max().item() for n in versions]
            rates: dict[str, list[float]] = {"before": [], "after": []}
            for round_ in range(args.rounds):
                for name in ("before", "after") if round_ % 2 == 0 else ("after", "before"):
                    rates[name].append(timed_steps(decoders[name], tokens, positions, args.steps))
            ratios = [a / b for a, b in zip(rates["after"], rates["before"], strict=True)]
            cells = [
                f"{statistics.median(rates[n]):6.1f} ({min(rates[n]):.0f}-{max(rates[n]):.0f})"
                for n in ("before", "after")
            ]
            print(
                f"{rows:5d}  {cells[0]:22s} {cells[1]:22s} "
                f"{min(ratios):.2f}-{max(ratios):.2f} ({statistics.median(ratios):.2f})"
                f"{'':17s}{diffs[0]:.1e}, {diffs[1]:.1e}"
            )


if __name__ == "__main__":
    main()
