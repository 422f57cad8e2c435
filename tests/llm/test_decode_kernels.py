"""The decode step's C kernels against the torch ops they replace, and how they are built and refused."""

from __future__ import annotations

import ctypes
import logging
import os
import threading
import time

import pytest
import torch

from termrl.llm import decode_kernels
from termrl.llm.decode_kernels import sdpa_by_row

needs_compiler = pytest.mark.skipif(decode_kernels.find_compiler() is None, reason="no C compiler")


@pytest.fixture
def attend():
    kernel = decode_kernels.load()
    assert kernel is not None, "a machine with a C compiler builds the kernel"
    return kernel


@needs_compiler
@pytest.mark.parametrize(
    ("heads", "kv_heads", "dim"),
    [(9, 3, 64), (4, 4, 64), (10, 2, 64), (8, 2, 128), (6, 3, 32)],
)
@pytest.mark.parametrize(
    "lengths",
    [[1], [256], [257, 3], [5, 700, 1, 2049], [300] * 6],
)
def test_the_kernel_gives_sdpa_over_each_rows_own_columns(attend, heads, kv_heads, dim, lengths):
    generator = torch.Generator().manual_seed(len(lengths) * heads + dim)
    rows, capacity = len(lengths), 2304
    # A cache with more rows than the batch (the step passes a slice of it), and garbage past
    # each row's length: the kernel must read neither.
    keys = torch.full((rows + 2, kv_heads, capacity, dim), float("nan"))
    values = torch.full((rows + 2, kv_heads, capacity, dim), float("nan"))
    for r, n in enumerate(lengths):
        keys[r, :, :n] = torch.randn(kv_heads, n, dim, generator=generator)
        values[r, :, :n] = torch.randn(kv_heads, n, dim, generator=generator)
    q = torch.randn(rows, heads, dim, generator=generator)
    scale = dim**-0.5
    got = attend(q, keys[:rows], values[:rows], torch.tensor(lengths), scale)
    want = sdpa_by_row(q, keys, values, lengths, scale)
    assert got.shape == (rows, heads, dim)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


@needs_compiler
@pytest.mark.parametrize(("heads", "kv_heads", "dim"), [(9, 3, 64), (10, 2, 64), (6, 3, 32)])
def test_a_bfloat16_cache_is_read_as_the_float32_values_it_holds(attend, heads, kv_heads, dim):
    generator = torch.Generator().manual_seed(heads + dim)
    lengths = [5, 700, 1, 257]
    rows, capacity = len(lengths), 768
    # NaN past each row's length and in the row beyond the batch: never read.
    keys = torch.full((rows + 1, kv_heads, capacity, dim), float("nan"), dtype=torch.bfloat16)
    values = keys.clone()
    for r, n in enumerate(lengths):
        keys[r, :, :n] = torch.randn(kv_heads, n, dim, generator=generator).bfloat16()
        values[r, :, :n] = torch.randn(kv_heads, n, dim, generator=generator).bfloat16()
    q = torch.randn(rows, heads, dim, generator=generator)
    got = attend(q, keys[:rows], values[:rows], torch.tensor(lengths), dim**-0.5)
    if dim == 64 and decode_kernels.attention_rounds_bf16():
        # bf16 units: the query and the softmax weights are rounded to bfloat16 as well. The
        # weights' rounding (2^-9 of each) leaves ~3e-3 here; a lane or column out of place
        # would be off by about the values' size (1).
        want = sdpa_by_row(q.bfloat16().float(), keys.float(), values.float(), lengths, 0.125)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-2)
        exact = sdpa_by_row(q, keys.float(), values.float(), lengths, 0.125)
        assert (got - exact).abs().max() < 1e-2
    else:
        want = sdpa_by_row(q, keys.float(), values.float(), lengths, dim**-0.5)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


@needs_compiler
def test_the_kernel_rounds_a_bfloat16_cache_where_the_cpu_has_bf16_units():
    flags = decode_kernels.cpu_flags()
    if decode_kernels.attention_rounds_bf16():
        assert "avx512_bf16" in flags
    if "avx512_bf16" in flags:  # every compiler here since gcc 10 targets them
        assert decode_kernels.attention_rounds_bf16()


@needs_compiler
def test_sharp_softmax_stays_finite_and_exact(attend):
    """Scores hundreds apart (a softmax all on one column) and far below exp's range."""
    generator = torch.Generator().manual_seed(3)
    lengths = [900, 40]
    keys = torch.randn(2, 3, 1024, 64, generator=generator)
    values = torch.randn(2, 3, 1024, 64, generator=generator)
    q = 30 * torch.randn(2, 9, 64, generator=generator)
    got = attend(q, keys, values, torch.tensor(lengths), 1.0)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(
        got, sdpa_by_row(q, keys, values, lengths, 1.0), rtol=1e-4, atol=1e-5
    )


@needs_compiler
def test_bad_input_is_refused_with_a_reason(attend):
    keys = values = torch.zeros(2, 3, 64, 64)
    q = torch.zeros(2, 9, 64)
    with pytest.raises(ValueError, match="lengths must be 1 to 64"):
        attend(q, keys, values, torch.tensor([4, 0]), 0.125)
    with pytest.raises(ValueError, match="lengths must be 1 to 64"):  # past the cache's columns
        attend(q, keys, values, torch.tensor([4, 65]), 0.125)
    with pytest.raises(ValueError, match="unsupported"):
        attend(q.double(), keys.double(), values.double(), torch.tensor([4, 4]), 0.125)
    with pytest.raises(ValueError, match="unsupported"):  # 9 query heads over 2 KV heads
        attend(q, keys[:, :2], values[:, :2], torch.tensor([4, 4]), 0.125)
    with pytest.raises(ValueError, match="unsupported"):  # a column that is not contiguous
        attend(q, keys.transpose(2, 3), values.transpose(2, 3), torch.tensor([4, 4]), 0.125)


def _forget() -> None:
    for loader in (decode_kernels._library, decode_kernels.load, decode_kernels.load_ops):
        loader.cache_clear()


@pytest.fixture
def fresh_load(tmp_path, monkeypatch):
    """load() as a process that has not loaded the kernels calls it, over an empty kernel cache."""
    monkeypatch.setenv("TERMRL_CACHE", str(tmp_path))

    def load():
        _forget()
        return decode_kernels.load()

    yield load
    _forget()


@needs_compiler
def test_a_build_is_cached_per_machine(fresh_load, tmp_path):
    assert fresh_load() is not None
    (built,) = (tmp_path / "kernels").glob("decode_kernels-*.so")
    stamp = built.stat().st_mtime_ns
    assert fresh_load() is not None
    assert built.stat().st_mtime_ns == stamp  # loaded, not rebuilt
    assert [p.name for p in (tmp_path / "kernels").iterdir()] == [built.name]  # no leftovers


def test_without_a_compiler_the_step_keeps_sdpa_and_says_why(fresh_load, monkeypatch, caplog):
    monkeypatch.setenv("CC", "/nonexistent/cc")
    with caplog.at_level(logging.WARNING, logger="termrl.llm.decode_kernels"):
        assert fresh_load() is None
        assert decode_kernels.load_ops() is None
    assert "using torch SDPA" in caplog.text


def test_a_failing_build_keeps_sdpa_and_shows_the_compiler_error(fresh_load, monkeypatch, caplog):
    monkeypatch.setenv("CC", "false")
    with caplog.at_level(logging.WARNING, logger="termrl.llm.decode_kernels"):
        assert fresh_load() is None
    assert "using torch SDPA" in caplog.text


def test_the_kernel_can_be_turned_off(fresh_load, monkeypatch):
    monkeypatch.setenv("TERMRL_DECODE_KERNEL", "0")
    assert fresh_load() is None
    assert decode_kernels.load_ops() is None


# --- a layer's small ops (decode_ops.c) against the torch ops of decode_step._decode ---------


@pytest.fixture
def ops():
    loaded = decode_kernels.load_ops()
    assert loaded is not None, "a machine with a C compiler builds the kernels"
    return loaded


def _rms_norm(x, weight, eps):
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


@needs_compiler
@pytest.mark.parametrize("delta_dtype", [None, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16])
def test_add_rms_norm_adds_in_place_and_normalizes(ops, delta_dtype, out_dtype):
    generator = torch.Generator().manual_seed(1)
    x = 3 * torch.randn(5, 576, generator=generator)
    weight = torch.randn(576, generator=generator)
    delta = None if delta_dtype is None else torch.randn(5, 576, generator=generator)
    delta = None if delta is None else delta.to(delta_dtype)
    want_x = x if delta is None else x + delta.float()
    want = _rms_norm(want_x, weight, 1e-5)
    got = ops.add_rms_norm(x, delta, weight, 1e-5, out_dtype)
    torch.testing.assert_close(x, want_x, rtol=0, atol=0)  # the residual stream, in place
    assert got.dtype == out_dtype
    # float32: summation order apart; bfloat16: at most one rounding step apart
    tolerance = {"rtol": 1e-5, "atol": 1e-5} if out_dtype == torch.float32 else {}
    torch.testing.assert_close(got, want.to(out_dtype), **tolerance)


@needs_compiler
def test_bfloat16_results_round_to_nearest_even_as_torch_does(ops):
    # Rows of ±1 have an RMS of exactly 1 (eps 0), so the norm's output is the weight itself,
    # and its bfloat16 rounding can be compared bit for bit, halfway cases included.
    halfway = [1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 2**-130, 3.0e38, float("inf")]
    weight = torch.cat([torch.tensor(halfway), torch.randn(250)])
    x = torch.ones(2, weight.shape[0])
    x[1, ::2] = -1
    got = ops.add_rms_norm(x, None, weight, 0.0, torch.bfloat16)
    want = (x * weight).to(torch.bfloat16)
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))


@needs_compiler
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_silu_mul_is_silu_of_the_gate_times_up(ops, dtype):
    generator = torch.Generator().manual_seed(2)
    gate_up = (8 * torch.randn(3, 2 * 1536, generator=generator)).to(dtype)
    gate_up[0, :4] = torch.tensor([-200.0, 200.0, 0.0, -0.0])  # exp's range and its edges
    gate, up = gate_up.float().chunk(2, dim=-1)
    want = (torch.nn.functional.silu(gate) * up).to(dtype)
    got = ops.silu_mul(gate_up, dtype)
    tolerance = {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {}
    torch.testing.assert_close(got, want, **tolerance)


def _rotate(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


@needs_compiler
@pytest.mark.parametrize("kv_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rope_attend_rotates_writes_the_cache_and_attends(ops, dtype, kv_dtype):
    generator = torch.Generator().manual_seed(4)
    rows, heads, kv_heads, dim, capacity = 3, 9, 3, 64, 768
    positions = torch.tensor([0, 300, 700])
    keys = torch.randn(rows + 1, kv_heads, capacity, dim, generator=generator).to(kv_dtype)
    values = torch.randn(rows + 1, kv_heads, capacity, dim, generator=generator).to(kv_dtype)
    qkv = torch.randn(rows, (heads + 2 * kv_heads) * dim, generator=generator).to(dtype)
    angles = torch.arange(1024)[:, None] * torch.rand(dim // 2, generator=generator)[None]
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)  # [T, D]

    q, k, v = qkv.float().split([heads * dim, kv_heads * dim, kv_heads * dim], dim=-1)
    q = _rotate(q.view(rows, heads, dim), cos[positions, None], sin[positions, None])
    k = _rotate(k.view(rows, kv_heads, dim), cos[positions, None], sin[positions, None])
    want_keys, want_values = keys.clone(), values.clone()
    want_keys[torch.arange(rows), :, positions] = k.to(kv_dtype)
    want_values[torch.arange(rows), :, positions] = v.view(rows, kv_heads, dim).to(kv_dtype)
    want = sdpa_by_row(q, want_keys.float(), want_values.float(), (positions + 1).tolist(), 0.125)

    got = ops.rope_attend(qkv, cos, sin, positions, keys[:rows], values[:rows], heads, 0.125, dtype)
    assert got.dtype == dtype and got.shape == (rows, heads * dim)
    assert keys.dtype == values.dtype == kv_dtype
    # Only the new columns change. A key is rotated in float32 (to float rounding of torch's),
    # then rounded as torch rounds to bfloat16 where the cache is bfloat16; a value is copied.
    key_tolerance = {"rtol": 1e-6, "atol": 1e-6} if kv_dtype == torch.float32 else {}
    torch.testing.assert_close(keys, want_keys, **key_tolerance)
    torch.testing.assert_close(values, want_values, rtol=0, atol=0)
    tolerance = {"rtol": 1e-4, "atol": 1e-5} if dtype == torch.float32 else {}
    if kv_dtype == torch.bfloat16 and decode_kernels.attention_rounds_bf16():
        tolerance = {"rtol": 0, "atol": 1e-2}  # the query and weights rounded as well
    torch.testing.assert_close(got, want.reshape(rows, heads * dim).to(dtype), **tolerance)


@needs_compiler
def test_the_ops_refuse_what_they_would_misread(ops):
    x, weight = torch.randn(2, 64), torch.randn(64)
    with pytest.raises(ValueError, match="float32"):
        ops.add_rms_norm(x.double(), None, weight, 1e-5, torch.float32)
    with pytest.raises(ValueError, match=r"\(2, 64\)"):
        ops.add_rms_norm(x, torch.randn(2, 32), weight, 1e-5, torch.float32)
    with pytest.raises(ValueError, match="contiguous"):
        ops.silu_mul(torch.randn(64, 4).T, torch.float32)
    keys = values = torch.zeros(2, 1, 16, 8)
    cos = sin = torch.ones(32, 8)
    qkv = torch.randn(2, 3 * 8)
    with pytest.raises(ValueError, match="positions must be 0 to 15"):
        ops.rope_attend(qkv, cos, sin, torch.tensor([3, 16]), keys, values, 1, 1.0, torch.float32)
    assert torch.equal(keys, torch.zeros_like(keys))  # nothing written on a refusal


# --- the matmul (decode_matmul.c) against torch's ------------------------------------------


@needs_compiler
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 3, 8, 9, 17, 32])
@pytest.mark.parametrize(("out_features", "in_features"), [(576, 576), (50, 100), (97, 64)])
def test_the_matmul_gives_torch_s_in_float32(ops, dtype, rows, out_features, in_features):
    # Widths that leave a part-block of outputs; batches of 8 rows, more and fewer.
    generator = torch.Generator().manual_seed(rows * out_features + in_features)
    x = torch.randn(rows, in_features, generator=generator).to(dtype)
    weight = torch.randn(out_features, in_features, generator=generator).to(dtype)
    packed = ops.pack(weight)
    got = ops.matmul(x, packed)
    assert got.dtype == torch.float32 and got.shape == (rows, out_features)
    # bfloat16 in, float32 sums out: the products of bf16 values are exact in float32.
    torch.testing.assert_close(got, x.float() @ weight.float().T, rtol=1e-5, atol=1e-4)
    assert packed.nbytes >= weight.numel() * weight.element_size()


@needs_compiler
def test_a_row_s_product_does_not_depend_on_the_batch(ops):
    # The engine's rows come and go: a row's logits must not change with its neighbours.
    generator = torch.Generator().manual_seed(5)
    weight = ops.pack(torch.randn(200, 576, generator=generator))
    x = torch.randn(13, 576, generator=generator)
    alone = torch.cat([ops.matmul(x[i : i + 1], weight) for i in range(13)])
    assert torch.equal(ops.matmul(x, weight), alone)


@needs_compiler
def test_the_matmul_refuses_what_it_would_misread(ops):
    weight = ops.pack(torch.randn(48, 64))
    with pytest.raises(ValueError, match=r"\(2, 64\)"):
        ops.matmul(torch.randn(2, 32), weight)
    with pytest.raises(ValueError, match="float32"):
        ops.matmul(torch.randn(2, 64).bfloat16(), weight)
    with pytest.raises(ValueError, match="contiguous"):
        ops.matmul(torch.randn(64, 2).T, weight)
    if "avx512_bf16" in decode_kernels.cpu_flags():  # its bf16 pairs need an even width
        odd = ops.pack(torch.randn(48, 63).bfloat16())
        with pytest.raises(ValueError, match="matmul refused"):
            ops.matmul(torch.randn(2, 63).bfloat16(), odd)


@needs_compiler
def test_bfloat16_without_the_cpu_s_bf16_dot_product(tmp_path):
    """The widening loop, where the compiler may not use AVX512-BF16 (other CPUs)."""
    if "avx512_bf16" not in decode_kernels.cpu_flags():
        pytest.skip("the default build here is already the widening loop")
    target = tmp_path / "kernels.so"
    compiler = decode_kernels.find_compiler()
    decode_kernels.compile_kernels(
        compiler, decode_kernels.SOURCES, target, extra_flags=("-mno-avx512bf16",)
    )
    ops = decode_kernels.DecodeOps(ctypes.CDLL(str(target)))
    generator = torch.Generator().manual_seed(7)
    x = torch.randn(9, 63, generator=generator).bfloat16()  # an odd width is fine here
    weight = torch.randn(100, 63, generator=generator).bfloat16()
    torch.testing.assert_close(
        ops.matmul(x, ops.pack(weight)), x.float() @ weight.float().T, rtol=1e-5, atol=1e-4
    )


# --- the whole step in one call (decode_forward.c) against the per-op step -----------------


def _random_model(ops, dtype, generator, layers=3, width=128, heads=4, kv_heads=2, inner=200):
    """A small Llama-shaped model's decode weights, packed, and its RoPE tables."""
    dim = width // heads

    def matrix(out_features, in_features):
        weight = torch.randn(out_features, in_features, generator=generator) / in_features**0.5
        return ops.pack(weight.to(dtype))

    def norm():
        return 1.0 + 0.1 * torch.randn(width, generator=generator)

    stack = [
        (
            norm(),
            matrix((heads + 2 * kv_heads) * dim, width),
            matrix(width, heads * dim),
            norm(),
            matrix(2 * inner, width),
            matrix(width, inner),
        )
        for _ in range(layers)
    ]
    angles = torch.arange(512)[:, None] * torch.rand(dim // 2, generator=generator)[None]
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)  # [T, D]
    return stack, norm(), matrix(300, width), cos, sin


def _caches(layers, rows, kv_heads, capacity, dim, generator, dtype=torch.float32):
    shape = (rows, kv_heads, capacity, dim)
    keys = [torch.randn(shape, generator=generator).to(dtype) for _ in range(layers)]
    values = [torch.randn(shape, generator=generator).to(dtype) for _ in range(layers)]
    return keys, values


@needs_compiler
@pytest.mark.parametrize("kv_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_one_call_steps_exactly_as_the_calls_op_by_op(ops, dtype, kv_dtype):
    from termrl.llm.decode_step import _decode_fused

    generator = torch.Generator().manual_seed(11)
    stack, norm, lm_head, cos, sin = _random_model(ops, dtype, generator)
    keys, values = _caches(3, 5, 2, 400, 32, generator, kv_dtype)
    plan = ops.plan(stack, norm, lm_head, keys, values, heads=4)
    ref_keys, ref_values = [k.clone() for k in keys], [v.clone() for v in values]
    embed = torch.randn(300, 128, generator=generator)
    tokens, positions = torch.tensor([3, 17, 250, 9]), torch.tensor([0, 399, 120, 64])
    for _ in range(3):  # what a step writes to the caches, the next one reads
        got = ops.forward(plan, embed[tokens], positions, cos, sin, 1e-5)
        rows = tokens.shape[0]
        want = _decode_fused(
            tokens,
            positions,
            embed,
            stack,
            norm,
            lm_head,
            cos,
            sin,
            [k[:rows] for k in ref_keys],
            [v[:rows] for v in ref_values],
            4,
            1e-5,
            ops,
            ops.matmul,
        )
        assert got.shape == (rows, 300) and got.dtype == torch.float32
        assert torch.equal(got, want)
        for cache, ref in zip(keys + values, ref_keys + ref_values, strict=True):
            assert torch.equal(cache, ref)  # row 4, never stepped, is untouched too
        tokens, positions = (tokens * 7 + 1) % 300, (positions + 1).clamp(max=399)


@needs_compiler
def test_one_call_refuses_what_it_would_misread(ops):
    generator = torch.Generator().manual_seed(12)
    stack, norm, lm_head, cos, sin = _random_model(ops, torch.float32, generator)
    keys, values = _caches(3, 2, 2, 64, 32, generator)
    plan = ops.plan(stack, norm, lm_head, keys, values, heads=4)
    before = [k.clone() for k in keys]
    x = torch.randn(2, 128)
    with pytest.raises(ValueError, match="positions must be 0 to 63"):
        ops.forward(plan, x.clone(), torch.tensor([5, 64]), cos, sin, 1e-5)
    assert all(torch.equal(k, b) for k, b in zip(keys, before, strict=True))  # nothing written
    with pytest.raises(ValueError, match="1 to 2"):
        ops.forward(plan, torch.randn(3, 128), torch.tensor([1, 2, 3]), cos, sin, 1e-5)
    with pytest.raises(ValueError, match=r"\(2, 128\)"):
        ops.forward(plan, torch.randn(2, 64), torch.tensor([1, 2]), cos, sin, 1e-5)
    with pytest.raises(ValueError, match="int64"):
        ops.forward(plan, x, torch.tensor([1, 2], dtype=torch.int32), cos, sin, 1e-5)
    # A plan is checked whole: the heads must fit the matrices, the caches each other.
    with pytest.raises(ValueError, match="do not fit"):
        ops.plan(stack, norm, lm_head, keys, values, heads=2)
    with pytest.raises(ValueError, match="differ in shape"):
        ops.plan(stack, norm, lm_head, keys[:2] + [keys[2][:1]], values, heads=4)
    with pytest.raises(ValueError, match="differ in shape or type"):
        ops.plan(stack, norm, lm_head, keys[:2] + [keys[2].bfloat16()], values, heads=4)
    with pytest.raises(ValueError, match="KV cache"):  # keys and values of one type
        ops.plan(stack, norm, lm_head, [k.bfloat16() for k in keys], values, heads=4)
    with pytest.raises(ValueError, match="KV cache"):
        ops.plan(stack, norm, lm_head, keys, [v.double() for v in values], heads=4)
    bf16_head = ops.pack(torch.randn(300, 128).bfloat16())
    with pytest.raises(ValueError, match="do not fit"):
        ops.plan(stack, norm, bf16_head, keys, values, heads=4)


# --- the prefill: the step's kernels with one sequence's tokens as the rows ------------------


@needs_compiler
@pytest.mark.parametrize("kv_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_prefill_is_the_same_as_stepping_its_tokens_one_by_one(ops, dtype, kv_dtype):
    generator = torch.Generator().manual_seed(13)
    stack, norm, lm_head, cos, sin = _random_model(ops, dtype, generator)
    keys, values = _caches(3, 3, 2, 400, 32, generator, kv_dtype)
    stepped_keys, stepped_values = [k.clone() for k in keys], [v.clone() for v in values]
    embed = torch.randn(300, 128, generator=generator)
    # Slot 1's columns 0..259 hold a sequence so far (random); 40 tokens more, past a
    # 256-column block of the attention.
    tokens, start, slot = torch.randint(0, 300, (40,), generator=generator), 260, 1
    plan = ops.plan(stack, norm, lm_head, keys, values, heads=4)
    got = ops.prefill(plan, slot, embed[tokens], start, cos, sin, 1e-5)

    # The same tokens as decode steps of one row, that row being slot 1 (a one-row view).
    one_row = ops.plan(
        stack, norm, lm_head, [k[slot : slot + 1] for k in stepped_keys],
        [v[slot : slot + 1] for v in stepped_values], heads=4,
    )  # fmt: skip
    for i, token in enumerate(tokens.tolist()):
        want = ops.forward(one_row, embed[[token]], torch.tensor([start + i]), cos, sin, 1e-5)
    assert got.shape == (1, 300) and got.dtype == torch.float32
    assert torch.equal(got, want)  # each row of a kernel is computed as it is alone
    for cache, stepped in zip(keys + values, stepped_keys + stepped_values, strict=True):
        assert torch.equal(cache, stepped)  # the other slots untouched, slot 1 the same


@needs_compiler
def test_a_prefill_refuses_what_it_would_misread(ops):
    generator = torch.Generator().manual_seed(14)
    stack, norm, lm_head, cos, sin = _random_model(ops, torch.float32, generator)
    keys, values = _caches(3, 2, 2, 64, 32, generator)
    plan = ops.plan(stack, norm, lm_head, keys, values, heads=4)
    before = [k.clone() for k in keys]
    x = torch.randn(10, 128)
    with pytest.raises(ValueError, match="slot 2"):
        ops.prefill(plan, 2, x, 0, cos, sin, 1e-5)
    with pytest.raises(ValueError, match="positions must be 0 to 63"):
        ops.prefill(plan, 1, x, 60, cos, sin, 1e-5)  # 60..69 runs past the cache
    with pytest.raises(ValueError, match="1 or more tokens"):
        ops.prefill(plan, 1, torch.randn(0, 128), 3, cos, sin, 1e-5)
    with pytest.raises(ValueError, match=r"\(10, 128\)"):
        ops.prefill(plan, 1, x[:, :64].contiguous(), 0, cos, sin, 1e-5)
    assert all(torch.equal(k, b) for k, b in zip(keys, before, strict=True))  # nothing written


def _threaded_work(ops, attend, seed: int):
    """A matmul and an attention call big enough to be split between threads."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(8, 576, generator=generator)
    weight = ops.pack(torch.randn(1536, 576, generator=generator))
    keys, values = torch.randn(2, 4, 3, 1000, 64, generator=generator)
    q = torch.randn(4, 9, 64, generator=generator)
    lengths = torch.tensor([1000, 3, 700, 257])
    return lambda: (ops.matmul(x, weight), attend(q, keys, values, lengths, 0.125))


@needs_compiler
def test_threads_calling_the_kernels_at_once_each_get_their_own_answers(ops, attend):
    """The engine's scheduler thread calls the kernels beside whatever else the process runs."""
    works = [_threaded_work(ops, attend, seed) for seed in range(4)]
    want = [work() for work in works]
    wrong: list[int] = []

    def call(i: int) -> None:
        for _ in range(20):
            got = works[i]()
            if not all(torch.equal(g, w) for g, w in zip(got, want[i], strict=True)):
                wrong.append(i)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads), "a caller hung"
    assert not wrong
    # On one thread (torch.set_num_threads(1)): the same numbers.
    threads_before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        got = works[0]()
    finally:
        torch.set_num_threads(threads_before)
    torch.testing.assert_close(got, want[0], rtol=1e-5, atol=1e-5)


def _on_a_thread(work):
    """work() on a thread other than the main one, as the engine calls the kernels."""
    got = []
    thread = threading.Thread(target=lambda: got.append(work()))
    thread.start()
    thread.join(timeout=120)
    assert got, "the call hung or failed"
    return got[0]


@needs_compiler
def test_a_forked_child_runs_the_kernels_its_parent_ran(ops, attend):
    work = _threaded_work(ops, attend, 0)
    want = _on_a_thread(work)  # the parent's OpenMP threads are started
    pid = os.fork()
    if pid == 0:  # the child: its parent's threads did not come along
        try:
            same = all(torch.equal(g, w) for g, w in zip(_on_a_thread(work), want, strict=True))
        finally:
            os._exit(0 if same else 1)
    for _ in range(600):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung in the kernels")
    assert os.waitstatus_to_exitcode(status) == 0
