"""The decode step's C kernels (``decode_attention.c``, ``decode_ops.c``, ``decode_matmul.c``),
built on first use.

torch's CPU SDPA for one query token reads a batch's keys and values at about half the
memory's speed (it goes through MKL's small GEMMs), and one call attends every row over
the longest row's columns. The attention kernel reads each row's own columns once, for all
the query heads that share them, split in blocks so that both threads stay busy whatever
the rows' lengths (measured: ``bench/decode_floor.py``, ``bench/mixed_lengths.py``).

Around its four matmuls a layer's step is otherwise ~45 small torch ops (norms, RoPE, the
cache writes, SiLU, the type casts), a few microseconds each. ``decode_ops.c`` does them in
three calls a layer (``DecodeOps``): the residual add with the next RMS norm; RoPE, the
cache writes and the attention; SiLU times up. ``decode_matmul.c`` does the matmuls, on
weights packed for it once (``DecodeOps.pack``): oneDNN's GEMM of 8 rows read the weights at
about two thirds of the memory's speed here, the C matmul at about nine tenths.
``decode_forward.c`` runs them all, every layer and the lm_head, in one call a step
(``DecodeOps.plan`` and ``forward``): the ~240 calls from Python a step cost ~1-2 ms.
The KV cache may be float32 or bfloat16 (rounded as it is written; read by AVX512-BF16's pair
dot products where the CPU has them, the query and softmax weights rounded to bfloat16, else
widened: ``attention_rounds_bf16``).

All four are compiled with the machine's C compiler for this CPU (``-march=native``) into one
library in the termrl cache (``$TERMRL_CACHE/kernels``), keyed by the sources, the flags
and the CPU, so a build is paid once per machine (about a second). The kernels run on
torch's own OpenMP threads: libgomp is already loaded by torch when the library is, and the
library links to it. Where no compiler is found or the build fails, ``load()`` and
``load_ops()`` say why once and return None, and the step keeps torch's ops.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from termrl.llm.models import cache_root

__all__ = [
    "HEADERS",
    "SOURCES",
    "DecodeOps",
    "ForwardPlan",
    "PackedMatrix",
    "compile_kernels",
    "cpu_flags",
    "find_compiler",
    "load",
    "load_ops",
    "sdpa_by_row",
]

log = logging.getLogger(__name__)

_HERE = Path(__file__).parent
SOURCES = (
    _HERE / "decode_attention.c",
    _HERE / "decode_ops.c",
    _HERE / "decode_matmul.c",
    _HERE / "decode_forward.c",
)
"""The kernels' C files, compiled into one library."""
HEADERS = (_HERE / "decode_math.h",)
"""What they include (part of the build's cache key)."""
_FLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC")
_MAX_GROUP, _MAX_DIM = 16, 256  # the kernel's limits (decode_attention.c)


@functools.cache
def _library() -> ctypes.CDLL | None:
    """The built kernels, or None (said once) where they cannot be built or are turned off."""
    if os.environ.get("TERMRL_DECODE_KERNEL", "1") == "0":
        return None
    try:
        return ctypes.CDLL(str(_build()))
    except (OSError, subprocess.SubprocessError) as error:
        detail = getattr(error, "stderr", "") or error
        log.warning("decode kernels unavailable, using torch SDPA and ops: %s", detail)
        return None


@functools.cache
def load() -> Callable[..., Any] | None:
    """``attend(q, keys, values, lengths, scale) -> out``, or None where the kernel cannot be built.

    q [B, H, D] float32; keys, values [B, H_kv, capacity, D] float32 or bfloat16
    (column-contiguous); lengths [B] int64, row b attends columns 0..lengths[b]-1; out [B, H, D].
    """
    library = _library()
    if library is None:
        return None
    kernel = library.decode_attention
    kernel.restype = ctypes.c_int
    kernel.argtypes = [
        ctypes.c_void_p,  # q
        ctypes.c_void_p,  # keys
        ctypes.c_void_p,  # values
        ctypes.c_int,  # the cache is bfloat16
        ctypes.c_int64,  # row stride
        ctypes.c_int64,  # head stride
        ctypes.c_int64,  # capacity (columns)
        ctypes.c_void_p,  # lengths
        ctypes.c_int,  # B
        ctypes.c_int,  # H
        ctypes.c_int,  # H_kv
        ctypes.c_int,  # D
        ctypes.c_float,  # scale
        ctypes.c_void_p,  # out
    ]
    attend = functools.partial(_attend, kernel)
    if not _agrees_with_sdpa(attend):
        log.warning("decode attention kernel disagrees with torch SDPA here; using SDPA")
        return None
    return attend


def attention_rounds_bf16() -> bool:
    """Whether the attention kernel multiplies a bfloat16 cache (64-value heads) with bf16
    units, the query and the softmax weights rounded to bfloat16; else it widens the cache
    and every product is float32."""
    library = _library()
    rounds = getattr(library, "decode_attention_rounds_bf16", None)
    return bool(rounds and rounds())


@functools.cache
def load_ops() -> DecodeOps | None:
    """A layer's small ops in C (``DecodeOps``), or None where the kernels cannot be built."""
    library = _library()
    if library is None or load() is None:
        return None
    ops = DecodeOps(library)
    if ops.has_matmul and not _matmul_agrees(ops):
        log.warning("decode matmul kernel disagrees with torch here; using torch's matmuls")
        ops.has_matmul = ops.has_forward = ops.has_prefill = False
    return ops


class DecodeOps:
    """A decode layer's ops around its matmuls, in C: three calls a layer (``decode_ops.c``).

    Activations are float32 or bfloat16 tensors (the matmuls' type), contiguous; the
    residual stream ``x`` is float32 and updated in place. Each op reproduces the torch
    ops of ``decode_step._decode`` to float rounding (``tests/llm/test_decode_kernels.py``).
    """

    def __init__(self, library: ctypes.CDLL) -> None:
        p, i32, i64, f32 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_float
        # An older commit's library (bench/kernels_ab.py) may predate the bfloat16 KV cache
        # (version 2) or the prefill (version 3): its calls then take no flag for them.
        version = (
            library.decode_kernels_version() if hasattr(library, "decode_kernels_version") else 1
        )
        self.kv_bf16 = version >= 2
        self._takes_slot = version >= 3
        kv = [i32] if self.kv_bf16 else []
        slot = [i32] if self._takes_slot else []  # prefill_slot
        # An older commit's library (bench/kernels_ab.py) may predate the matmul.
        self.has_matmul = hasattr(library, "decode_matmul")
        if self.has_matmul:
            self._matmul = _signature(library.decode_matmul, [p, i32, i32, i32, p, i32, p])
            self._pack = library.pack_matrix
            self._pack.restype, self._pack.argtypes = None, [p, i32, i32, i32, p]
            self._packed_elements = library.packed_elements
            self._packed_elements.restype = i64
            self._packed_elements.argtypes = [i32, i32, i32]
        # The whole step in one call, on weights packed for the matmul (decode_forward.c).
        self.has_forward = self.has_matmul and hasattr(library, "decode_forward")
        self.has_prefill = self.has_forward and self._takes_slot
        if self.has_forward:
            self._forward = _signature(
                library.decode_forward,
                [p, i32, p, p, i32, i32, *kv, p, p, p, i64, i64, i64]
                + [i32] * 6
                + [f32, f32, *slot, p, p],
            )
        self._norm = _signature(library.add_rms_norm, [p, p, i32, p, f32, i32, i32, p, i32])
        self._silu_mul = _signature(library.silu_mul, [p, i32, i32, i32, p, i32])
        self._rope_attend = _signature(
            library.rope_attend,
            [p, i32, p, p, p, p, p, *kv, i64, i64, i64, i32, i32, i32, i32, f32, p, i32],
        )

    def pack(self, weight: Any) -> PackedMatrix:
        """A copy of ``weight`` [out, in] (float32 or bfloat16) in ``matmul``'s layout."""
        import torch

        out_features, in_features = weight.shape
        _check(weight, None, (out_features, in_features))
        bf16 = _is_bf16(weight)
        data = torch.empty(
            self._packed_elements(bf16, out_features, in_features), dtype=weight.dtype
        )
        self._pack(weight.data_ptr(), bf16, out_features, in_features, data.data_ptr())
        return PackedMatrix(data, out_features, in_features)

    def matmul(self, x: Any, weight: PackedMatrix) -> Any:
        """x [B, in] (the weight's type) @ weight.T -> [B, out] float32."""
        import torch

        rows = x.shape[0]
        _check(x, weight.dtype, (rows, weight.in_features))
        out = torch.empty(rows, weight.out_features)
        status = self._matmul(
            x.data_ptr(),
            _is_bf16(x),
            rows,
            weight.in_features,
            weight.data.data_ptr(),
            weight.out_features,
            out.data_ptr(),
        )
        return _checked(status, out, "matmul")

    def add_rms_norm(self, x: Any, delta: Any, weight: Any, eps: float, out_dtype: Any) -> Any:
        """``x += delta`` (none where None), in place; returns ``weight * x / rms(x)``."""
        import torch

        rows, width = x.shape
        _check(x, torch.float32, (rows, width))
        _check(weight, torch.float32, (width,))
        if delta is not None:
            _check(delta, None, (rows, width))
        out = torch.empty(rows, width, dtype=out_dtype)
        status = self._norm(
            x.data_ptr(),
            None if delta is None else delta.data_ptr(),
            _is_bf16(delta),
            weight.data_ptr(),
            eps,
            rows,
            width,
            out.data_ptr(),
            _is_bf16(out),
        )
        return _checked(status, out, "add_rms_norm")

    def silu_mul(self, gate_up: Any, out_dtype: Any) -> Any:
        """gate_up [B, 2I] -> silu(gate) * up [B, I] in ``out_dtype``."""
        import torch

        rows, width = gate_up.shape
        _check(gate_up, None, (rows, width))
        out = torch.empty(rows, width // 2, dtype=out_dtype)
        status = self._silu_mul(
            gate_up.data_ptr(), _is_bf16(gate_up), rows, width // 2, out.data_ptr(), _is_bf16(out)
        )
        return _checked(status, out, "silu_mul")

    def rope_attend(
        self,
        qkv: Any,
        cos: Any,
        sin: Any,
        positions: Any,
        keys: Any,
        values: Any,
        heads: int,
        scale: float,
        out_dtype: Any,
    ) -> Any:
        """RoPE on q and k, k and v into the cache at each row's position, then attention.

        qkv [B, (H + 2 H_kv) D]; cos, sin [T, D] float32; positions [B] int64; keys, values
        [B, H_kv, capacity, D] float32 or bfloat16 (written in place, a bfloat16 rounded to
        nearest even); returns [B, H D] in ``out_dtype``.
        """
        import torch

        rows, kv_heads, capacity, dim = keys.shape
        _check(qkv, None, (rows, (heads + 2 * kv_heads) * dim))
        _check(cos, torch.float32, (cos.shape[0], dim))
        _check(sin, torch.float32, cos.shape)
        _check(positions, torch.int64, (rows,))
        self._check_cache(keys, values, heads)
        columns = min(capacity, cos.shape[0])  # a position needs a cache column and a table row
        out = torch.empty(rows, heads * dim, dtype=out_dtype)
        status = self._rope_attend(
            qkv.data_ptr(),
            _is_bf16(qkv),
            cos.data_ptr(),
            sin.data_ptr(),
            positions.data_ptr(),
            keys.data_ptr(),
            values.data_ptr(),
            *self._kv_flag(_is_bf16(keys)),
            keys.stride(0),
            keys.stride(1),
            columns,
            rows,
            heads,
            kv_heads,
            dim,
            scale,
            out.data_ptr(),
            _is_bf16(out),
        )
        return _checked(status, out, f"rope_attend (positions must be 0 to {columns - 1})")

    def plan(
        self,
        layers: list[tuple[Any, ...]],
        norm: Any,
        lm_head: PackedMatrix,
        keys: list[Any],
        values: list[Any],
        heads: int,
    ) -> ForwardPlan:
        """What ``forward`` steps: a model's layers (each ``(input norm, qkv, o, post-attention
        norm, gate_up, down)``, the matrices packed by ``pack``), its final norm and lm_head,
        and each layer's KV cache (float32 or bfloat16 [rows, H_kv, capacity, D], written by
        the steps).

        Every tensor is checked here once; the plan holds them, so its pointers stay valid.
        """
        import torch

        width, vocab = lm_head.in_features, lm_head.out_features
        kv_heads, dim = keys[0].shape[1], keys[0].shape[3]
        inner = layers[0][4].out_features // 2
        dtype = lm_head.dtype
        table = []
        for (ln_in, qkv, o, ln_post, gate_up, down), k, v in zip(layers, keys, values, strict=True):
            shapes = (
                (qkv, ((heads + 2 * kv_heads) * dim, width)),
                (o, (width, heads * dim)),
                (gate_up, (2 * inner, width)),
                (down, (width, inner)),
            )
            for matrix, shape in shapes:
                if (matrix.out_features, matrix.in_features) != shape or matrix.dtype != dtype:
                    raise ValueError(
                        f"decode kernels: a layer's packed {dtype} matrices do not fit "
                        f"{heads} heads, {kv_heads} KV heads of {dim} and width {width}"
                    )
            _check(ln_in, torch.float32, (width,))
            _check(ln_post, torch.float32, (width,))
            if (k.shape, k.stride(), k.dtype) != (keys[0].shape, keys[0].stride(), keys[0].dtype):
                raise ValueError("decode kernels: the layers' KV caches differ in shape or type")
            self._check_cache(k, v, heads)
            tensors = (ln_in, qkv.data, o.data, ln_post, gate_up.data, down.data, k, v)
            table.append([t.data_ptr() for t in tensors])
        _check(norm, torch.float32, (width,))
        return ForwardPlan(
            table=torch.tensor(table, dtype=torch.int64),
            norm=norm,
            lm_head=lm_head,
            holds=(layers, keys, values),
            rows=keys[0].shape[0],
            width=width,
            heads=heads,
            kv_heads=kv_heads,
            head_dim=dim,
            inner=inner,
            vocab=vocab,
            bf16=_is_bf16(lm_head),
            kv_bf16=_is_bf16(keys[0]),
            row_stride=keys[0].stride(0),
            head_stride=keys[0].stride(1),
            capacity=keys[0].shape[2],
        )

    def forward(
        self, plan: ForwardPlan, x: Any, positions: Any, cos: Any, sin: Any, eps: float
    ) -> Any:
        """One decode step of ``plan``'s model for rows 0..B-1 of its caches: x [B, E] float32
        (the fed tokens' embeddings; it becomes the residual stream), positions [B] int64 (each
        row's key and value go to that column; the row attends columns 0 to it) and RoPE's
        cos, sin [T, D] float32 tables. Returns the logits [B, V] float32.

        The same kernels in the same order as ``decode_step._decode_fused`` with ``matmul``,
        in one call: the same logits, without ~240 calls from Python a step.
        """
        import torch

        rows = x.shape[0]
        if not 0 < rows <= plan.rows:
            raise ValueError(f"decode kernels: {rows} rows, the caches hold 1 to {plan.rows}")
        _check(positions, torch.int64, (rows,))
        return self._run(plan, x, positions, cos, sin, eps, -1)

    def prefill(
        self, plan: ForwardPlan, slot: int, x: Any, start: int, cos: Any, sin: Any, eps: float
    ) -> Any:
        """One sequence's next T tokens into ``slot`` of ``plan``'s caches: x [T, E] float32, the
        tokens' embeddings, at positions start..start+T-1; the slot's columns 0..start-1 must
        hold the sequence so far. Each token attends the columns up to its own (causal).
        Returns the last token's logits [1, V] float32.

        The decode step's kernels with the tokens as its rows (``decode_forward.c``): each
        weight block is read once for all of them.
        """
        import torch

        if not self.has_prefill:
            raise ValueError("decode kernels: this build has no prefill (version 3)")
        if not 0 <= slot < plan.rows:
            raise ValueError(f"decode kernels: slot {slot}, the caches hold 0 to {plan.rows - 1}")
        if x.shape[0] < 1 or start < 0:
            raise ValueError("decode kernels: a prefill takes 1 or more tokens from position 0 on")
        positions = torch.arange(start, start + x.shape[0], dtype=torch.int64)
        return self._run(plan, x, positions, cos, sin, eps, slot)

    def _run(
        self, plan: ForwardPlan, x: Any, positions: Any, cos: Any, sin: Any, eps: float, slot: int
    ) -> Any:
        import torch

        rows = x.shape[0]
        _check(x, torch.float32, (rows, plan.width))
        _check(cos, torch.float32, (cos.shape[0], plan.head_dim))
        _check(sin, torch.float32, cos.shape)
        columns = min(plan.capacity, cos.shape[0])  # a position needs a column and a table row
        logits = torch.empty(1 if slot >= 0 else rows, plan.vocab)
        status = self._forward(
            plan.table.data_ptr(),
            plan.table.shape[0],
            plan.norm.data_ptr(),
            plan.lm_head.data.data_ptr(),
            plan.vocab,
            plan.bf16,
            *self._kv_flag(plan.kv_bf16),
            cos.data_ptr(),
            sin.data_ptr(),
            positions.data_ptr(),
            plan.row_stride,
            plan.head_stride,
            columns,
            rows,
            plan.width,
            plan.heads,
            plan.kv_heads,
            plan.head_dim,
            plan.inner,
            eps,
            plan.head_dim**-0.5,
            *((slot,) if self._takes_slot else ()),
            x.data_ptr(),
            logits.data_ptr(),
        )
        return _checked(status, logits, f"forward (positions must be 0 to {columns - 1})")

    def _check_cache(self, keys: Any, values: Any, heads: int) -> None:
        if not _attention_takes(keys, values, heads) or (_is_bf16(keys) and not self.kv_bf16):
            raise ValueError("decode kernels: unsupported KV cache shapes, types or layout")

    def _kv_flag(self, kv_bf16: int) -> tuple[int, ...]:
        """The cache-type argument, for a library whose calls take one."""
        return (kv_bf16,) if self.kv_bf16 else ()


@dataclasses.dataclass(frozen=True)
class PackedMatrix:
    """A weight matrix [out, in] packed for ``DecodeOps.matmul`` (decode_matmul.c's layout)."""

    data: Any  # a flat tensor of the weight's type
    out_features: int
    in_features: int

    @property
    def dtype(self) -> Any:
        return self.data.dtype

    @property
    def nbytes(self) -> int:
        return self.data.numel() * self.data.element_size()


@dataclasses.dataclass(frozen=True)
class ForwardPlan:
    """A model and its KV caches as ``DecodeOps.forward`` reads them (``DecodeOps.plan``)."""

    table: Any  # int64 [layers, 8]: each layer's weights' and caches' addresses
    norm: Any  # the final norm [E] float32
    lm_head: PackedMatrix
    holds: tuple[Any, ...]  # (layers, keys, values): what the table points into
    rows: int  # the caches' rows
    width: int  # E, the residual stream's
    heads: int
    kv_heads: int
    head_dim: int
    inner: int  # I, the MLP's
    vocab: int
    bf16: int  # the weights' type (and the matmuls' inputs'): 1 bfloat16, 0 float32
    kv_bf16: int  # the caches' type: 1 bfloat16, 0 float32
    row_stride: int  # the caches' strides and columns, in values
    head_stride: int
    capacity: int


def _signature(function: Any, argtypes: list[Any]) -> Any:
    function.restype, function.argtypes = ctypes.c_int, argtypes
    return function


def _is_bf16(tensor: Any) -> int:
    import torch

    return int(tensor is not None and tensor.dtype == torch.bfloat16)


def _check(tensor: Any, dtype: Any, shape: tuple[int, ...]) -> None:
    """Refuse what the C ops would misread: another type, shape or a non-contiguous layout."""
    import torch

    types = (dtype,) if dtype is not None else (torch.float32, torch.bfloat16)
    if tensor.dtype not in types or tuple(tensor.shape) != tuple(shape):
        raise ValueError(
            f"decode kernels: expected {'/'.join(map(str, types))} {tuple(shape)}, "
            f"got {tensor.dtype} {tuple(tensor.shape)}"
        )
    if not tensor.is_contiguous() or tensor.device.type != "cpu":
        raise ValueError("decode kernels: tensors must be contiguous and on the CPU")


def _checked(status: int, out: Any, op: str) -> Any:
    if status:
        raise ValueError(f"decode kernels: {op} refused its input")
    return out


def sdpa_by_row(
    q: Any, keys: Any, values: Any, lengths: list[int], scale: float | None = None
) -> Any:
    """What the kernel computes, by torch's SDPA, one call per row over its own columns.

    q [B, H, D]; keys, values [B, H_kv, capacity, D]; returns [B, H, D] (``scale`` None: 1/√D).
    """
    import torch
    import torch.nn.functional as F

    return torch.cat(
        [
            F.scaled_dot_product_attention(
                q[r : r + 1, :, None],  # [1, H, 1, D]
                keys[r : r + 1, :, :n],  # [1, H_kv, n, D]
                values[r : r + 1, :, :n],
                scale=scale,
                enable_gqa=keys.shape[1] != q.shape[1],
            )[:, :, 0]
            for r, n in enumerate(lengths)
        ]
    )


def _agrees_with_sdpa(attend: Callable[..., Any]) -> bool:
    """A probe at two rows of other lengths, grouped heads and more than one block of columns,
    with a float32 cache and a bfloat16 one."""
    import torch

    generator = torch.Generator().manual_seed(0)
    q = torch.randn(2, 6, 64, generator=generator)
    lengths = [700, 3]
    # A bfloat16 cache may be multiplied by bf16 units, the query and the softmax weights
    # rounded to bfloat16 (~3e-3 here); a wrong lane or column is off by the values' size (~1).
    for dtype, tolerance in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2)):
        keys, values = torch.randn(2, 2, 2, 700, 64, generator=generator).to(dtype)
        got = attend(q, keys, values, torch.tensor(lengths), 0.125)
        want = sdpa_by_row(q, keys.float(), values.float(), lengths, 0.125)
        if not torch.allclose(got, want, rtol=10 * tolerance, atol=tolerance):
            return False
    return True


def _matmul_agrees(ops: DecodeOps) -> bool:
    """A probe in both types: 9 rows (a pass of 8 and one of 1), an output width that leaves
    a part-block, and a float32 input width that is odd."""
    import torch
    import torch.nn.functional as F

    generator = torch.Generator().manual_seed(0)
    for dtype, in_features in ((torch.float32, 101), (torch.bfloat16, 100)):
        x = torch.randn(9, in_features, generator=generator).to(dtype)
        weight = torch.randn(50, in_features, generator=generator).to(dtype)
        got = ops.matmul(x, ops.pack(weight))
        want = F.linear(x.float(), weight.float())
        if not torch.allclose(got, want, rtol=1e-4, atol=1e-4):
            return False
    return True


def _attend(kernel: Any, q: Any, keys: Any, values: Any, lengths: Any, scale: float) -> Any:
    import torch

    rows, heads, dim = q.shape
    kv_heads = keys.shape[1]
    if not (
        q.dtype == torch.float32
        and lengths.dtype == torch.int64
        and q.is_contiguous()
        and lengths.is_contiguous()
        and keys.shape[0] >= rows
        and keys.shape[3] == dim
        and _attention_takes(keys, values, heads)
    ):
        raise ValueError("decode attention kernel: unsupported shapes, types or layout")
    out = torch.empty_like(q)
    status = kernel(
        q.data_ptr(),
        keys.data_ptr(),
        values.data_ptr(),
        _is_bf16(keys),
        keys.stride(0),
        keys.stride(1),
        keys.shape[2],
        lengths.data_ptr(),
        rows,
        heads,
        kv_heads,
        dim,
        scale,
        out.data_ptr(),
    )
    if status:
        raise ValueError(
            f"decode attention kernel refused its input: lengths must be 1 to {keys.shape[2]}"
        )
    return out


def _attention_takes(keys: Any, values: Any, heads: int) -> bool:
    """Whether decode_attention.c reads this KV cache right: float32 or bfloat16
    [B, H_kv, capacity, D] with contiguous columns, keys and values alike, and ``heads`` query
    heads it can group."""
    import torch

    kv_heads, dim = keys.shape[1], keys.shape[3]
    return (
        keys.dtype == values.dtype
        and keys.dtype in (torch.float32, torch.bfloat16)
        and keys.stride() == values.stride()
        and keys.stride(3) == 1
        and keys.stride(2) == dim
        and heads % kv_heads == 0
        and heads // kv_heads <= _MAX_GROUP
        and dim <= _MAX_DIM
    )


def _build() -> Path:
    """The compiled kernels in the cache, compiled first if these sources, flags and CPU lack one."""
    compiler = find_compiler()
    if not compiler:
        raise FileNotFoundError("no C compiler (cc, gcc or $CC) on PATH")
    key = hashlib.sha256()
    for source in (*SOURCES, *HEADERS):
        key.update(source.read_bytes())
    key.update(" ".join((compiler, *_FLAGS)).encode())
    # -march=native code is for this CPU only
    key.update(" ".join((os.uname().machine, *cpu_flags())).encode())
    target = cache_root() / "kernels" / f"decode_kernels-{key.hexdigest()[:16]}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # Build beside the target and rename: processes that build at once each get a whole file.
    fd, partial = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        compile_kernels(compiler, SOURCES, Path(partial))
        os.replace(partial, target)
    finally:
        Path(partial).unlink(missing_ok=True)
    return target


def compile_kernels(
    compiler: str, sources: tuple[Path, ...], target: Path, extra_flags: tuple[str, ...] = ()
) -> None:
    """Compile ``sources`` (the kernels' .c files; their header beside them) into ``target``."""
    subprocess.run(
        [compiler, *_FLAGS, *extra_flags, *map(str, sources), "-lm", "-o", str(target)],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )


def find_compiler() -> str | None:
    """The C compiler the kernel is built with: ``$CC``, else ``cc`` or ``gcc`` on PATH."""
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> list[str]:
    """The CPU's feature flags (``flags`` in ``cpuinfo``); empty where it cannot be read."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return []
    for line in text.splitlines():
        if line.startswith("flags"):
            return line.partition(":")[2].split()
    return []
