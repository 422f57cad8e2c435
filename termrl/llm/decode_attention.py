"""The decode step's attention as a small C kernel (``decode_attention.c``), built on first use.

torch's CPU SDPA for one query token reads a batch's keys and values at about half the
memory's speed (it goes through MKL's small GEMMs), and one call attends every row over
the longest row's columns. The kernel reads each row's own columns once, for all the
query heads that share them, split in blocks so that both threads stay busy whatever the
rows' lengths (measured: ``bench/decode_floor.py``, ``bench/mixed_lengths.py``).

It is compiled with the machine's C compiler for this CPU (``-march=native``) into the
termrl cache (``$TERMRL_CACHE/kernels``), keyed by the source, the flags and the CPU, so
a build is paid once per machine (under a second). It runs on torch's own OpenMP threads:
libgomp is already loaded by torch when the kernel is, and the kernel links to it. Where
no compiler is found or the build fails, ``load()`` says why once and returns None, and
the step keeps torch's SDPA.
"""

from __future__ import annotations

import ctypes
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

__all__ = ["cpu_flags", "find_compiler", "load", "sdpa_by_row"]

log = logging.getLogger(__name__)

_SOURCE = Path(__file__).with_name("decode_attention.c")
_FLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC")
_MAX_GROUP, _MAX_DIM = 16, 256  # the kernel's limits (decode_attention.c)


@functools.cache
def load() -> Callable[..., Any] | None:
    """``attend(q, keys, values, lengths, scale) -> out``, or None where the kernel cannot be built.

    q [B, H, D] float32; keys, values [B, H_kv, capacity, D] float32 (column-contiguous);
    lengths [B] int64, row b attends columns 0..lengths[b]-1; out [B, H, D].
    """
    if os.environ.get("TERMRL_DECODE_KERNEL", "1") == "0":
        return None
    try:
        library = ctypes.CDLL(str(_build()))
    except (OSError, subprocess.SubprocessError) as error:
        detail = getattr(error, "stderr", "") or error
        log.warning("decode attention kernel unavailable, using torch SDPA: %s", detail)
        return None
    kernel = library.decode_attention
    kernel.restype = ctypes.c_int
    kernel.argtypes = [
        ctypes.c_void_p,  # q
        ctypes.c_void_p,  # keys
        ctypes.c_void_p,  # values
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
    """A probe at two rows of other lengths, grouped heads and more than one block of columns."""
    import torch

    generator = torch.Generator().manual_seed(0)
    q = torch.randn(2, 6, 64, generator=generator)
    keys, values = torch.randn(2, 2, 2, 700, 64, generator=generator)
    lengths = [700, 3]
    got = attend(q, keys, values, torch.tensor(lengths), 0.125)
    want = sdpa_by_row(q, keys, values, lengths, 0.125)
    return bool(torch.allclose(got, want, rtol=1e-4, atol=1e-5))


def _attend(kernel: Any, q: Any, keys: Any, values: Any, lengths: Any, scale: float) -> Any:
    import torch

    rows, heads, dim = q.shape
    kv_heads = keys.shape[1]
    if not (
        q.dtype == keys.dtype == values.dtype == torch.float32
        and lengths.dtype == torch.int64
        and q.is_contiguous()
        and lengths.is_contiguous()
        and keys.stride() == values.stride()
        and keys.stride(3) == 1
        and keys.stride(2) == dim
        and keys.shape[0] >= rows
        and heads % kv_heads == 0
        and heads // kv_heads <= _MAX_GROUP
        and dim <= _MAX_DIM
    ):
        raise ValueError("decode attention kernel: unsupported shapes, types or layout")
    out = torch.empty_like(q)
    status = kernel(
        q.data_ptr(),
        keys.data_ptr(),
        values.data_ptr(),
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


def _build() -> Path:
    """The compiled kernel in the cache, compiled first if this source, flags and CPU lack one."""
    compiler = find_compiler()
    if not compiler:
        raise FileNotFoundError("no C compiler (cc, gcc or $CC) on PATH")
    key = hashlib.sha256()
    key.update(_SOURCE.read_bytes())
    key.update(" ".join((compiler, *_FLAGS)).encode())
    # -march=native code is for this CPU only
    key.update(" ".join((os.uname().machine, *cpu_flags())).encode())
    target = cache_root() / "kernels" / f"decode_attention-{key.hexdigest()[:16]}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # Build beside the target and rename: processes that build at once each get a whole file.
    fd, partial = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        subprocess.run(
            [compiler, *_FLAGS, str(_SOURCE), "-o", partial],
            check=True,
            capture_output=True,
            text=True,
            timeout=120,
        )
        os.replace(partial, target)
    finally:
        Path(partial).unlink(missing_ok=True)
    return target


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
