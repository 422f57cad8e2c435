"""The kernels' before/after bench (``bench/kernels_ab.py``): a commit's kernels built from its
sources, and one short run of the real model with both versions."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from bench.kernels_ab import REPO, library_at, main
from termrl.llm import decode_kernels
from termrl.llm.decode_kernels import DecodeOps

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


def test_a_commit_from_before_a_kernel_is_built_without_it(tmp_path):
    added = subprocess.run(
        [
            "git",
            "-C",
            str(REPO),
            "log",
            "--diff-filter=A",
            "--format=%H",
            "--",
            "termrl/llm/decode_matmul.c",
        ],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    if not added:
        pytest.skip("no git history here to find the commit before the matmul kernel in")
    before = DecodeOps(library_at(f"{added[-1]}~1", tmp_path))
    assert not before.has_matmul  # its decoder keeps oneDNN's matmuls
    assert decode_kernels.load_ops().has_matmul


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
