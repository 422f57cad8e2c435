"""pass@k against values computed by hand from 1 - C(n-c, k) / C(n, k)."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from components.eval.passk import default_ks, pass_at_k, suite_pass_at_k


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        # k=1 is the plain success rate: 1 - C(3,1)/C(5,1) = 1 - 3/5 = 0.4
        (5, 2, 1, 0.4),
        # 1 - C(3,2)/C(5,2) = 1 - 3/10 = 0.7
        (5, 2, 2, 0.7),
        # 1 - C(3,3)/C(5,3) = 1 - 1/10 = 0.9
        (5, 2, 3, 0.9),
        # n - c = 3 < k = 4: every draw of 4 holds a pass
        (5, 2, 4, 1.0),
        # 1 - C(7,5)/C(10,5) = 1 - 21/252 = 11/12
        (10, 3, 5, 11 / 12),
        # 1 - C(9,3)/C(10,3) = 1 - 84/120 = 0.3
        (10, 1, 3, 0.3),
        # no pass at all: 1 - C(10,5)/C(10,5) = 0
        (10, 0, 5, 0.0),
        # all passed
        (4, 4, 1, 1.0),
        # 1 - C(999,1)/C(1000,1) = 1/1000
        (1000, 1, 1, 0.001),
    ],
)
def test_pass_at_k_hand_computed(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_product_form_is_stable_where_binomials_are_huge() -> None:
    # C(2000, 1000) has ~600 digits (beyond float range); the product form needs no binomial.
    n, c, k = 2000, 7, 1000
    exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
    assert pass_at_k(n, c, k) == pytest.approx(float(exact), rel=1e-9)


def test_suite_mean_skips_tasks_with_too_few_trials() -> None:
    counts = [(5, 2), (5, 0), (3, 3)]
    # k=2: (0.7 + 0.0 + 1.0) / 3
    assert suite_pass_at_k(counts, 2) == pytest.approx(1.7 / 3)
    # k=4: the 3-trial task is left out; (1.0 + 0.0) / 2
    assert suite_pass_at_k(counts, 4) == pytest.approx(0.5)
    assert suite_pass_at_k(counts, 6) is None


@pytest.mark.parametrize(("n", "c", "k"), [(3, 1, 4), (3, 4, 1), (0, 0, 1), (3, -1, 1), (3, 1, 0)])
def test_impossible_arguments_are_refused(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_default_ks() -> None:
    assert default_ks(1) == [1]
    assert default_ks(5) == [1, 2, 3, 5]
    assert default_ks(16) == [1, 2, 3, 5, 10, 16]
    assert default_ks(0) == []
