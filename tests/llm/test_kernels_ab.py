"""The kernels' before/after bench (``bench/kernels_ab.py``): a commit's kernels built from its
sources, and one short run of the real model with both versions."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM

from bench.kernels_ab import REPO, library_at, main
from termrl.llm import decode_kernels
from termrl.llm.decode_kernels import DecodeOps
from termrl.llm.decode_step import SlotDecoder

pytestmark = pytest.mark.skipif(
    decode_kernels.find_compiler() is None, reason="no C compiler to build the kernels with"
)


def test_a_commits_kernels_are_built_from_its_sources(tmp_path):
    before = DecodeOps(library_at("HEAD", tmp_path))
    gate_up = 8 * torch.randn(2, 2 * 64, generator=torch.Generator().manual_seed(0))
    gate, up = gate_up.chunk(2, dim=-1)
    torch.testing.assert_close(
        before.silu_mul(gate_up, torch.float32), torch.nn.functional.silu(gate) * up
    )


def _commits(*selection: str) -> list[str]:
    """The commits ``git log`` selects (``selection``: its options, then the one path), newest
    first; none where there is no git history."""
    *options, path = selection
    return subprocess.run(
        ["git", "-C", str(REPO), "log", *options, "--format=%H", "--", path],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()


def test_a_commit_from_before_a_kernel_is_built_without_it(tmp_path):
    added = _commits("--diff-filter=A", "termrl/llm/decode_matmul.c")
    if not added:
        pytest.skip("no git history here to find the commit before the matmul kernel in")
    before = DecodeOps(library_at(f"{added[-1]}~1", tmp_path))
    assert not before.has_matmul  # its decoder keeps oneDNN's matmuls
    assert decode_kernels.load_ops().has_matmul


def test_a_commit_from_before_the_bfloat16_cache_keeps_a_float32_one_and_no_prefill(
    tmp_path, tiny_model_dir
):
    added = _commits("-S", "decode_kernels_version", "termrl/llm/decode_attention.c")
    if not added:
        pytest.skip("no git history here to find the commit before the bfloat16 KV cache in")
    before = DecodeOps(library_at(f"{added[-1]}~1", tmp_path))
    assert not before.kv_bf16 and decode_kernels.load_ops().kv_bf16
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    decoder = SlotDecoder(model, max_rows=1, max_length=8, weights_dtype="bfloat16", kernels=before)
    assert decoder.kv_dtype == torch.float32  # its calls take no cache type: float32 it is
    assert decoder.one_call and not decoder.can_prefill  # an engine prefills through the model
    keys = values = torch.zeros(1, 1, 16, 8, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="KV cache"):
        before.rope_attend(
            torch.randn(1, 24),
            torch.ones(16, 8),
            torch.ones(16, 8),
            torch.tensor([0]),
            keys,
            values,
            1,
            1.0,
            torch.float32,
        )


def test_a_commit_without_the_kernels_is_refused_with_its_name(tmp_path):
    with pytest.raises(SystemExit, match="no-such-commit has no termrl/llm/decode_attention.c"):
        library_at("no-such-commit", tmp_path)


def test_a_short_run_prints_both_versions_rates(monkeypatch, capsys):
    argv = ["kernels_ab.py", "--before", "HEAD", "--batches", "2", "--context", "24"]
    monkeypatch.setattr(sys, "argv", [*argv, "--steps", "1", "--rounds", "2"])
    main()
    row = capsys.readouterr().out.splitlines()[-1].split()
    assert row[0] == "2"  # the batch, then each version's tok/s: numbers above 0
    assert float(row[1]) > 0 and float(row[3]) > 0
