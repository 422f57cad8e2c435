"""The prefill bench (``bench/prefill.py``): one short run on the real model, both ways."""

from __future__ import annotations

import re
import sys

import pytest

from bench.prefill import main
from termrl.llm import decode_kernels

pytestmark = pytest.mark.skipif(
    decode_kernels.find_compiler() is None, reason="no C compiler to build the kernels with"
)


def test_a_short_run_prints_both_ways_and_the_kernels_match_the_model(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["prefill.py", "--sizes", "30:12", "--rounds", "1"])
    main()
    out = capsys.readouterr().out.splitlines()
    rows = {line.split()[2]: line for line in out if line[:6].strip() == "30"}
    assert list(rows) == ["float32", "bfloat16"]
    for dtype, line in rows.items():
        # cached, new, the model's ms and tok/s, the kernels', the ratio and its range, the drift
        numbers = [
            float(n) for n in re.findall(r"\d+\.?\d*(?:e[-+]?\d+)?", line.replace(dtype, ""))
        ]
        assert len(numbers) == 10, line
        assert numbers[:2] == [30, 12] and numbers[2] > 0 and numbers[4] > 0 and numbers[6] > 0
        # The same model: float rounding apart; bfloat16: 8 bits of mantissa in every weight.
        assert numbers[-1] < (1e-3 if dtype == "float32" else 1.0)
