"""One decode step of a Llama-style model over a static KV cache: the CPU engine's inner loop.

A decode step on CPU is bound by memory: every step reads all the weights and
every row's keys and values. Through the transformers model a step also paid
for Python across ~30 layers of modules, a ``DynamicCache`` that grows by
``torch.cat`` (a full copy of the cache, every layer, every step) and a mask
rebuilt each step. Here the step is a plain function over preallocated
tensors:

    slots: per layer K, V [rows capacity, kv heads, length capacity, head dim]
           row r holds its tokens' keys/values at columns 0..len_r-1 (no padding)
    step(tokens [B], positions [B]) -> logits [B, V]
           writes each row's new key/value at its own column, in place
           attends over columns 0..max(positions) with a per-row mask

q/k/v and gate/up are fused into one matmul each. Rows are slots 0..B-1 of
the running batch; a row that leaves is replaced by the last one (one row's
KV copied), so the batch stays dense.

Weights may be kept in bfloat16 (``weights_dtype``), halving the bytes a
step reads; activations, norms and softmax stay fp32. Only
worth it where the CPU has bf16 units (``avx512_bf16``/AMX): elsewhere bf16
matmuls are many times slower than fp32, so ``auto`` (the default) picks
bfloat16 there and float32 elsewhere (``resolve_weights_dtype``). The KV cache
follows the weights by default (``kv_dtype``): at 8 rows of 1,000 tokens it is
more than half of what a bf16 step reads, and the C attention widens its
bfloat16 columns to fp32 as it loads them (keys and values rounded to nearest
even as they are written; every product and sum fp32). The drift
from the trainer's fp32 log π is ~0.01 nats a chunk against the trainer's
0.5 mask (``tests/llm/test_trainer_mismatch.py``, ``bench/decode_floor.py``).

Each weight matrix is kept prepacked (``pack_weights``): for the C matmul below, else
in oneDNN's blocked layout where torch has oneDNN on the CPU. torch's plain
``F.linear`` goes to MKL for float32, whose few-row GEMMs read a matrix at a
fraction of the memory's speed (~8 GB/s on an AMD EPYC for the 8-row lm_head,
against ~45 GB/s packed for oneDNN); a row's result does not depend on the other
rows either way (measured on an AMD EPYC: ``bench/decode_floor.py``,
``docs/experiments.md``).

Attention runs in a small C kernel (``attention_kernel``, ``decode_kernels``),
built on first use with the machine's compiler: each row reads only its own
columns, once for the query heads that share them, at 1.4 to 1.9 times torch's
SDPA (``bench/mixed_lengths.py``). Since it reads nothing past a row's length,
its KV cache is allocated whole at the first ``reserve`` and never grows: the OS
backs the pages as columns are written. The ops around the matmuls (norms, RoPE,
the cache writes, SiLU, the casts: ~45 torch ops a layer) run in C as well, three
calls a layer (``fused_ops``, ``_decode_fused``), and so do the matmuls
(``matmul_kernel``, ``decode_matmul.c``: each weight read once for all the rows,
1.4 to 1.5 times oneDNN's GEMM at 8 rows, its sums float32 in either weight type).
Then the whole step is one call into C (``one_call``, ``decode_forward.c``): the same kernels
in the same order as ``_decode_fused``, so the same logits, without its ~240 calls from
Python a step.
The same call prefills (``prefill``): a row's new tokens are the rows of one call, all in the
row's slot, each attending the columns up to its own, so every weight block is read once for
all of them (two to four times the transformers model's prefill rate here).
``_decode`` is the same step in torch ops. Without a compiler the step uses
``_decode`` with SDPA, where rows of very different lengths attend one by one,
each over its own columns (``row_attention``, ``_row_lengths``): one SDPA call
over the batch computes every row over the longest row's columns.

``compile=True`` runs the step through ``torch.compile`` (dynamic shapes:
batch and length change every step; inductor caches the code on disk).
"""

from __future__ import annotations

import time
from typing import Any

from termrl.llm import decode_kernels

__all__ = [
    "KV_DTYPES",
    "SUPPORTED_DTYPES",
    "WEIGHTS_DTYPES",
    "SlotDecoder",
    "cpu_has_bf16_units",
    "resolve_weights_dtype",
    "supports",
]

SUPPORTED_DTYPES = ("float32", "bfloat16")
WEIGHTS_DTYPES = ("auto", *SUPPORTED_DTYPES)
"""What a user may ask for: ``auto`` is bfloat16 where the CPU has bf16 units, else float32."""
KV_DTYPES = ("auto", *SUPPORTED_DTYPES)
"""The KV cache's type: ``auto`` is the weights' where the C attention reads the cache, else
float32 (torch's SDPA would need the whole cache widened every step)."""
_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
_LENGTH_STEP = 256  # the KV length capacity grows in these steps


def cpu_has_bf16_units(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """True where the CPU multiplies bf16 natively (AVX512-BF16 or AMX); False where unknown."""
    flags = decode_kernels.cpu_flags(cpuinfo)
    return any(flag in flags for flag in _BF16_FLAGS)


def resolve_weights_dtype(choice: str, *, cpuinfo: str = "/proc/cpuinfo") -> str:
    """The decode step's weight type for a ``WEIGHTS_DTYPES`` choice (``auto`` asks the CPU)."""
    if choice not in WEIGHTS_DTYPES:
        raise ValueError(f"weights_dtype must be one of {WEIGHTS_DTYPES}, not {choice!r}")
    if choice != "auto":
        return choice
    return "bfloat16" if cpu_has_bf16_units(cpuinfo) else "float32"


def supports(model: Any) -> bool:
    """True for the models this step reproduces exactly: Llama, no biases, default RoPE."""
    config = model.config
    rope = getattr(config, "rope_scaling", None) or {}
    return (
        getattr(config, "model_type", "") == "llama"
        and not getattr(config, "attention_bias", False)
        and not getattr(config, "mlp_bias", False)
        and getattr(config, "hidden_act", "silu") == "silu"
        and rope.get("rope_type", rope.get("type", "default")) == "default"
    )


class SlotDecoder:
    """Fused weights and a static, slot-per-row KV cache for one model."""

    def __init__(
        self,
        model: Any,
        *,
        max_rows: int,
        max_length: int,
        weights_dtype: str = "auto",
        kv_dtype: str = "auto",
        compile: bool = False,
        pack_weights: bool = True,
        row_attention: bool = True,
        attention_kernel: bool = True,
        fused_ops: bool = True,
        matmul_kernel: bool = True,
        one_call: bool = True,
        kernels: decode_kernels.DecodeOps | None = None,  # another build's (bench/kernels_ab.py)
    ) -> None:
        import torch

        weights_dtype = resolve_weights_dtype(weights_dtype)
        if not supports(model):
            raise ValueError("the static decode step supports Llama models without biases only")
        config = model.config
        wdt = getattr(torch, weights_dtype)
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.eps = config.rms_norm_eps
        self.max_rows, self.max_length = max_rows, max_length
        inner = model.model
        self.embed = inner.embed_tokens.weight.detach().float()  # [V, E] lookups stay fp32
        self.layers = [
            (
                layer.input_layernorm.weight.detach().float(),
                _fused(
                    [layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj], wdt
                ),
                layer.self_attn.o_proj.weight.detach().to(wdt).contiguous(),  # [E, H D]
                layer.post_attention_layernorm.weight.detach().float(),
                _fused([layer.mlp.gate_proj, layer.mlp.up_proj], wdt),  # [2 I, E]
                layer.mlp.down_proj.weight.detach().to(wdt).contiguous(),  # [E, I]
            )
            for layer in inner.layers
        ]
        self.norm = inner.norm.weight.detach().float()
        self.lm_head = model.lm_head.weight.detach().to(wdt).contiguous()  # [V, E]
        on_cpu = self.embed.device.type == "cpu"
        use_kernel = attention_kernel and on_cpu and not compile
        self.attend = decode_kernels.load() if use_kernel else None
        self.ops = (kernels or decode_kernels.load_ops()) if use_kernel and fused_ops else None
        # The matmuls: the C kernel's (packed for it), else oneDNN's (packed for it), else torch's.
        self.matmul_kernel = (
            pack_weights and matmul_kernel and self.ops is not None and self.ops.has_matmul
        )
        self.matmul = self.ops.matmul if self.matmul_kernel else _linear
        # With the C matmul, the whole step is one call into C (decode_forward.c).
        self.one_call = one_call and self.matmul_kernel and self.ops.has_forward
        self._plan: decode_kernels.ForwardPlan | None = None  # the caches it points into
        if self.matmul_kernel:
            pack = self.ops.pack
        elif pack_weights and not compile and _packing_works(self.lm_head):
            pack = _packer(max_rows)
        else:
            pack = None
        # Packed matrices are copies: the fp32 model's prefill keeps its own weights.
        self.packed = pack is not None
        if pack is not None:
            self.layers = [
                (ln_in, pack(qkv), pack(o), ln_post, pack(gate_up), pack(down))
                for ln_in, qkv, o, ln_post, gate_up, down in self.layers
            ]
            self.lm_head = pack(self.lm_head)
        self.weights_dtype = wdt
        # bfloat16 KV needs the C attention, and ops whose calls take its type (bench/kernels_ab.py
        # may pass an older build's).
        c_attention = self.attend is not None and (self.ops is None or self.ops.kv_bf16)
        self.kv_dtype = _kv_dtype(kv_dtype, wdt, c_attention)
        # RoPE tables for every position, from the model's own rotary module (same values).
        positions = torch.arange(max_length, device=self.embed.device)[None]  # [1, T]
        cos, sin = inner.rotary_emb(self.embed[:1][None], positions)
        self.cos, self.sin = cos[0].float().contiguous(), sin[0].float().contiguous()  # [T, D]
        self.keys: list[Any] = []
        self.values: list[Any] = []
        self.rows_capacity = 0
        self.length_capacity = 0
        self.compile_sec = 0.0
        self._step = torch.compile(_decode, dynamic=True) if compile else _decode
        self._compiled = compile
        # SDPA's choice between one call and a call per row (_row_lengths); the kernel needs none.
        self.row_attention = row_attention and not compile and self.attend is None

    # --- the KV slots ------------------------------------------------------------------------

    def reserve(self, rows: int, length: int) -> None:
        """Make room for ``rows`` rows of ``length`` columns; existing rows keep their KV."""
        import torch

        if rows <= self.rows_capacity and length <= self.length_capacity:
            return
        if self.attend is not None:
            # The kernel reads a row's own columns only, so the cache can start whole and
            # unwritten: the OS backs its pages as columns are first written, and growing it
            # (a copy of every row, ~0.1 s at 8 rows of 1,000 tokens) never happens.
            new_rows, new_length, allocate = self.max_rows, self.max_length, torch.empty
        else:  # SDPA reads masked columns too: they must hold numbers (0 * NaN is NaN)
            new_rows = min(self.max_rows, max(rows, 2 * self.rows_capacity, 1))
            new_length = max(length, self.length_capacity)
            new_length = min(self.max_length, -(-new_length // _LENGTH_STEP) * _LENGTH_STEP)
            allocate = torch.zeros
        shape = (new_rows, self.kv_heads, new_length, self.head_dim)
        old_k, old_v = self.keys, self.values
        kind = {"device": self.embed.device, "dtype": self.kv_dtype}
        self.keys = [allocate(shape, **kind) for _ in self.layers]
        self.values = [allocate(shape, **kind) for _ in self.layers]
        r, n = self.rows_capacity, self.length_capacity
        for new, old in zip(self.keys + self.values, old_k + old_v, strict=False):
            new[:r, :, :n] = old  # nothing to keep on the first reserve
        self.rows_capacity, self.length_capacity = new_rows, new_length
        self._plan = None

    def load_row(self, slot: int, kv: list[tuple[Any, Any]]) -> None:
        """Put one row's KV (per layer (keys, values) [1, H_kv, L, D]) in ``slot``, columns 0..L-1
        (cast to the cache's type)."""
        length = kv[0][0].shape[2]
        self.reserve(slot + 1, length + 1)
        for layer, (k, v) in enumerate(kv):
            self.keys[layer][slot, :, :length] = k[0]
            self.values[layer][slot, :, :length] = v[0]

    def row_kv(self, slot: int, length: int) -> list[tuple[Any, Any]]:
        """A float32 copy of ``slot``'s first ``length`` columns, per layer (keys, values)
        [1, H_kv, L, D]: what the model's prefill takes as its past."""
        import torch

        def column_copy(t: Any) -> Any:
            return t[slot : slot + 1, :, :length].to(torch.float32, copy=True)

        return [
            (column_copy(k), column_copy(v)) for k, v in zip(self.keys, self.values, strict=True)
        ]

    def move_row(self, src: int, dst: int, length: int) -> None:
        """Copy ``src``'s first ``length`` columns into ``dst`` (a leaving row's slot is refilled)."""
        for t in self.keys + self.values:
            t[dst, :, :length] = t[src, :, :length]

    def release(self) -> None:
        """Free the KV memory (the batch is empty)."""
        self.keys, self.values = [], []
        self.rows_capacity = self.length_capacity = 0
        self._plan = None

    # --- the prefill -------------------------------------------------------------------------

    @property
    def can_prefill(self) -> bool:
        """Whether ``prefill`` runs here: it is the one-call step's kernels, prefill-capable."""
        return self.one_call and self.ops.has_prefill

    def prefill(self, slot: int, tokens: Any, start: int) -> Any:
        """Feed a row's next tokens [T] at positions start..start+T-1 into ``slot``, whose columns
        0..start-1 already hold the row's KV (``load_row``); returns the last token's logits
        [1, V] (fp32). The step's kernels with the tokens as rows, each attending the columns up
        to its own: every weight is read once for all T tokens, at two to four times the rate
        of the transformers model's prefill here (``bench/prefill.py``)."""
        if not self.can_prefill:
            raise ValueError("prefill needs the one-call step (the C kernels, version 3)")
        self.reserve(slot + 1, start + len(tokens))
        x = self.embed[tokens]  # [T, E], a copy: it becomes the residual stream
        return self.ops.prefill(self._forward_plan(), slot, x, start, self.cos, self.sin, self.eps)

    def _forward_plan(self) -> decode_kernels.ForwardPlan:
        """The one-call step's plan of the current caches, made again after they change."""
        if self._plan is None:
            self._plan = self.ops.plan(
                self.layers, self.norm, self.lm_head, self.keys, self.values, self.heads
            )
        return self._plan

    # --- the step ----------------------------------------------------------------------------

    def step(self, tokens: Any, positions: Any) -> Any:
        """Feed one token per row (rows 0..B-1) at its position; returns logits [B, V] (fp32)."""
        import torch

        rows = tokens.shape[0]
        own_lengths = [p + 1 for p in positions.tolist()]
        length = max(own_lengths)
        self.reserve(rows, length)
        if self.one_call:
            positions = positions.to(torch.int64).contiguous()
            return self.ops.forward(
                self._forward_plan(), self.embed[tokens], positions, self.cos, self.sin, self.eps
            )
        # The model, the tables and this batch's rows of the KV slots: what both steps read.
        state = (
            tokens,
            positions,
            self.embed,
            self.layers,
            self.norm,
            self.lm_head,
            self.cos,
            self.sin,
            [k[:rows] for k in self.keys],
            [v[:rows] for v in self.values],
        )
        if self.ops is not None:
            return _decode_fused(*state, self.heads, self.eps, self.ops, self.matmul)
        started = time.perf_counter() if self._compiled and not self.compile_sec else 0.0
        logits = self._step(
            *state,
            torch.arange(length, device=tokens.device),
            self.heads,
            self.eps,
            _row_lengths(own_lengths) if self.row_attention else None,
            self.attend,
        )
        if started:
            self.compile_sec = time.perf_counter() - started
        return logits


def _kv_dtype(choice: str, weights_dtype: Any, c_attention: bool) -> Any:
    """The KV cache's torch type for a ``KV_DTYPES`` choice."""
    import torch

    if choice not in KV_DTYPES:
        raise ValueError(f"kv_dtype must be one of {KV_DTYPES}, not {choice!r}")
    if choice == "auto":
        return weights_dtype if c_attention else torch.float32
    if choice == "bfloat16" and not c_attention:
        raise ValueError("kv_dtype=bfloat16 needs the C attention kernel (a C compiler, on a CPU)")
    return getattr(torch, choice)


_ROW_CALL_COLUMNS = 160
"""What one more attention call costs, in key columns (~10 µs a call here)."""
_ROW_COLUMN_COST = 1.25
"""A column read row by row costs this many read in one call (one call splits its rows' heads
among the threads more evenly). Both measured on SmolLM2-135M: bench/mixed_lengths.py."""


def _row_lengths(own_lengths: list[int]) -> list[int] | None:
    """``own_lengths`` when attending row by row costs less than one call, else None.

    One SDPA call over the batch attends every row over the longest row's columns: the masked
    ones are computed too (one row at 2,000 tokens and seven at 200 cost as much as eight at
    2,000). Row by row, each reads only its own, at the price of a call per row.
    """
    rows, longest = len(own_lengths), max(own_lengths)
    row_by_row = _ROW_COLUMN_COST * sum(own_lengths) + _ROW_CALL_COLUMNS * rows
    return own_lengths if rows > 1 and row_by_row < longest * rows else None


def _fused(linears: list[Any], dtype: Any) -> Any:
    """The linears' weights stacked in one [sum of outputs, in] matrix of ``dtype``.

    In the model's own type the linears then use row blocks of it (views), so the model
    (which still runs the prefill) and the step share one copy of the weights.
    """
    import torch

    fused = torch.cat([linear.weight.detach() for linear in linears]).to(dtype).contiguous()
    if fused.dtype == linears[0].weight.dtype:
        start = 0
        for linear in linears:
            rows = linear.weight.shape[0]
            linear.weight.data = fused[start : start + rows]
            start += rows
    return fused


def _packer(rows: int) -> Any:
    """Puts a [out, in] weight in oneDNN's layout for GEMMs of about ``rows`` rows (any count works)."""
    import torch

    return lambda weight: torch.ops.mkldnn._reorder_linear_weight(weight, rows)


def _packing_works(weight: Any) -> bool:
    """Whether oneDNN can pack ``weight``'s type on this device, and its GEMM gives F.linear's result."""
    import torch
    import torch.nn.functional as F

    if weight.device.type != "cpu" or not torch.backends.mkldnn.is_available():
        return False
    probe_weight = weight[:64].contiguous()
    probe = torch.randn(3, weight.shape[1], generator=torch.Generator().manual_seed(0))
    probe = probe.to(weight.dtype)
    try:
        got = _linear(probe, _packer(3)(probe_weight)).float()
    except RuntimeError:  # a torch without oneDNN kernels for this type or CPU
        return False
    want = F.linear(probe, probe_weight).float()
    return bool(torch.allclose(got, want, rtol=1e-2, atol=1e-2))


def _linear(x: Any, weight: Any) -> Any:
    """x @ weight.T, through oneDNN where the weight is packed for it."""
    import torch
    import torch.nn.functional as F

    if weight.is_mkldnn:
        return torch.ops.mkldnn._linear_pointwise(x, weight, None, "none", [], "")
    return F.linear(x, weight)


def _rms_norm(x: Any, weight: Any, eps: float) -> Any:
    import torch

    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def _rotate(x: Any, cos: Any, sin: Any) -> Any:
    import torch

    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def _decode(
    tokens: Any,  # [B]
    positions: Any,  # [B]
    embed: Any,
    layers: list[tuple[Any, ...]],
    norm: Any,
    lm_head: Any,
    cos_table: Any,
    sin_table: Any,
    keys: list[Any],  # per layer [B, H_kv, Lcap, D], written in place
    values: list[Any],
    columns: Any,  # [L] = arange(max position + 1)
    heads: int,
    eps: float,
    row_lengths: list[int] | None = None,  # attend row by row over these columns (else one call)
    attend: Any = None,  # the C kernel (decode_kernels.load()): each row over its own columns
) -> Any:
    import torch
    import torch.nn.functional as F

    rows, length = tokens.shape[0], columns.shape[0]
    kv_heads, head_dim = keys[0].shape[1], keys[0].shape[3]
    wdt = lm_head.dtype
    batch = torch.arange(rows, device=tokens.device)
    if attend is not None:
        lengths = positions.to(torch.int64) + 1
        scale = head_dim**-0.5
    elif row_lengths is None:
        mask = (columns[None, :] <= positions[:, None])[:, None, None, :]  # [B, 1, 1, L]
    cos = cos_table[positions][:, None, :]  # [B, 1, D]
    sin = sin_table[positions][:, None, :]
    x = embed[tokens]  # [B, E]
    q_width, kv_width = heads * head_dim, kv_heads * head_dim
    for (ln_in, w_qkv, w_o, ln_post, w_gate_up, w_down), k_cache, v_cache in zip(
        layers, keys, values, strict=True
    ):
        h = _rms_norm(x, ln_in, eps)
        qkv = _linear(h.to(wdt), w_qkv).float()  # [B, (H + 2 H_kv) D]
        q = qkv[:, :q_width].view(rows, heads, head_dim)  # [B, H, D]
        k = qkv[:, q_width : q_width + kv_width].view(rows, kv_heads, head_dim)
        v = qkv[:, q_width + kv_width :].view(rows, kv_heads, head_dim)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        k_cache[batch, :, positions] = k.to(k_cache.dtype)  # in place: each row at its column
        v_cache[batch, :, positions] = v.to(v_cache.dtype)
        if attend is not None:
            attn = attend(q.contiguous(), k_cache, v_cache, lengths, scale)  # [B, H, D]
        elif row_lengths is None:
            attn = F.scaled_dot_product_attention(
                q[:, :, None, :],  # [B, H, 1, D]
                k_cache[:, :, :length],  # [B, H_kv, L, D]
                v_cache[:, :, :length],
                attn_mask=mask,
                enable_gqa=kv_heads != heads,
            )  # [B, H, 1, D]
        else:  # each row over its own columns, no mask
            attn = decode_kernels.sdpa_by_row(q, k_cache, v_cache, row_lengths)  # [B, H, D]
        x = x + _linear(attn.reshape(rows, q_width).to(wdt), w_o).float()
        h = _rms_norm(x, ln_post, eps)
        gate, up = _linear(h.to(wdt), w_gate_up).float().chunk(2, dim=-1)  # [B, I] each
        x = x + _linear((F.silu(gate) * up).to(wdt), w_down).float()
    x = _rms_norm(x, norm, eps)
    return _linear(x.to(wdt), lm_head).float()  # [B, V]


def _decode_fused(
    tokens: Any,  # [B]
    positions: Any,  # [B]
    embed: Any,
    layers: list[tuple[Any, ...]],
    norm: Any,
    lm_head: Any,
    cos_table: Any,  # [T, D]
    sin_table: Any,
    keys: list[Any],  # per layer [B, H_kv, Lcap, D], written in place
    values: list[Any],
    heads: int,
    eps: float,
    ops: decode_kernels.DecodeOps,
    matmul: Any,  # (x, weight) -> x @ weight.T: DecodeOps.matmul (float32 out) or _linear
) -> Any:
    """``_decode``'s step with the ops between the matmuls in C: 4 matmuls and 3 calls a layer."""
    import torch

    wdt = lm_head.dtype
    scale = keys[0].shape[3] ** -0.5
    positions = positions.to(torch.int64).contiguous()
    x = embed[tokens]  # [B, E] float32: the residual stream, updated in place by add_rms_norm
    # Each norm is fused with the residual add before it; the next layer's input norm (or the
    # final one) closes a layer.
    norms_in = [layer[0] for layer in layers[1:]] + [norm]
    h = ops.add_rms_norm(x, None, layers[0][0], eps, wdt)
    for (_, w_qkv, w_o, ln_post, w_gate_up, w_down), k_cache, v_cache, next_norm in zip(
        layers, keys, values, norms_in, strict=True
    ):
        qkv = matmul(h, w_qkv)  # [B, (H + 2 H_kv) D]
        attn = ops.rope_attend(
            qkv, cos_table, sin_table, positions, k_cache, v_cache, heads, scale, wdt
        )
        h = ops.add_rms_norm(x, matmul(attn, w_o), ln_post, eps, wdt)
        act = ops.silu_mul(matmul(h, w_gate_up), wdt)  # [B, I]
        h = ops.add_rms_norm(x, matmul(act, w_down), next_norm, eps, wdt)
    return matmul(h, lm_head).float()  # [B, V]
