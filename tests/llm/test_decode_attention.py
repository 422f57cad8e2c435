"""The decode step's C attention kernel against torch's SDPA, and how it is built and refused."""

from __future__ import annotations

import logging

import pytest
import torch

from termrl.llm import decode_attention
from termrl.llm.decode_attention import sdpa_by_row

needs_compiler = pytest.mark.skipif(
    decode_attention.find_compiler() is None, reason="no C compiler"
)


@pytest.fixture
def attend():
    kernel = decode_attention.load()
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


@pytest.fixture
def fresh_load(tmp_path, monkeypatch):
    """load() with an empty kernel cache and no remembered result; restored afterwards."""
    monkeypatch.setenv("TERMRL_CACHE", str(tmp_path))
    decode_attention.load.cache_clear()
    yield decode_attention.load
    decode_attention.load.cache_clear()


@needs_compiler
def test_a_build_is_cached_per_machine(fresh_load, tmp_path):
    assert fresh_load() is not None
    (built,) = (tmp_path / "kernels").glob("decode_attention-*.so")
    stamp = built.stat().st_mtime_ns
    fresh_load.cache_clear()
    assert fresh_load() is not None
    assert built.stat().st_mtime_ns == stamp  # loaded, not rebuilt
    assert [p.name for p in (tmp_path / "kernels").iterdir()] == [built.name]  # no leftovers


def test_without_a_compiler_the_step_keeps_sdpa_and_says_why(fresh_load, monkeypatch, caplog):
    monkeypatch.setenv("CC", "/nonexistent/cc")
    with caplog.at_level(logging.WARNING, logger="termrl.llm.decode_attention"):
        assert fresh_load() is None
    assert "using torch SDPA" in caplog.text


def test_a_failing_build_keeps_sdpa_and_shows_the_compiler_error(fresh_load, monkeypatch, caplog):
    monkeypatch.setenv("CC", "false")
    with caplog.at_level(logging.WARNING, logger="termrl.llm.decode_attention"):
        assert fresh_load() is None
    assert "using torch SDPA" in caplog.text


def test_the_kernel_can_be_turned_off(fresh_load, monkeypatch):
    monkeypatch.setenv("TERMRL_DECODE_KERNEL", "0")
    assert fresh_load() is None
