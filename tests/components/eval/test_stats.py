"""Wilson and paired intervals against hand-computed values (z = 2 keeps the arithmetic short)."""

from __future__ import annotations

import math

import pytest

from components.eval.stats import Z95, paired_difference, pass_rate, wilson_interval


def test_wilson_by_hand() -> None:
    # 1 of 4, z = 2: p = 0.25, z²/n = 1, denominator 2
    #   centre = (0.25 + 4/8) / 2 = 0.375
    #   half   = 2/2 · sqrt(0.25·0.75/4 + 4/64) = sqrt(0.046875 + 0.0625) = sqrt(0.109375) = 0.330719
    low, high = wilson_interval(1, 4, z=2)
    assert low == pytest.approx(0.375 - math.sqrt(0.109375))
    assert high == pytest.approx(0.375 + math.sqrt(0.109375))
    # 0 of 4: the interval starts at 0 and ends at z²/(n + z²) = 4/8
    assert wilson_interval(0, 4, z=2) == (0.0, pytest.approx(0.5))
    # 4 of 4 mirrors it
    assert wilson_interval(4, 4, z=2) == (pytest.approx(0.5), 1.0)


def test_wilson_95_matches_the_textbook() -> None:
    # Standard tables: 0/10 -> [0, 0.2775]; 5/10 -> [0.2366, 0.7634]
    assert wilson_interval(0, 10) == (0.0, pytest.approx(0.2775, abs=1e-4))
    assert wilson_interval(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert abs(Z95 - 1.96) < 1e-3


def test_wilson_edges() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)  # nothing counted, nothing known
    for bad in ((-1, 4), (5, 4), (0, -1)):
        with pytest.raises(ValueError):
            wilson_interval(*bad)
    rate = pass_rate(1, 4)
    assert (rate.passed, rate.n, rate.rate) == (1, 4, 0.25) and rate.low < 0.25 < rate.high
    assert pass_rate(0, 0).rate == 0.0


def test_paired_difference_newcombe_by_hand() -> None:
    # 4 tasks, one trial each. base passes t1 and t2; other passes t1, t3 and t4.
    # a (both) = 1, b (lost) = 1, c (gained) = 2, d (neither) = 0; θ = 3/4 − 2/4 = 0.25
    # other: 3/4, Wilson z=2 -> centre (0.75 + 0.5)/2 = 0.625, half sqrt(0.75·0.25/4 + 1/16) = 0.330719
    #        -> [0.294281, 0.955719]; base: 2/4 -> centre 0.5, half sqrt(1/16 + 1/16) = 0.353553
    # ad − bc = 0 − 2 = −2 (not > 0: no correction); marginals (a+b)(c+d)(a+c)(b+d) = 2·2·3·1 = 12
    # φ = −2 / sqrt(12) = −0.577350
    # δ = sqrt((0.75 − 0.294281)² + 0.353553² − 2φ·0.455719·0.353553)
    #   = sqrt(0.207680 + 0.125 + 0.186046) = sqrt(0.518726) = 0.720226   -> low  = 0.25 − 0.720226
    # ε = sqrt((0.955719 − 0.75)² + 0.353553² − 2φ·0.205719·0.353553)
    #   = sqrt(0.042320 + 0.125 + 0.083985) = sqrt(0.251305) = 0.501303   -> high = 0.25 + 0.501303
    base = {"t1": 1.0, "t2": 1.0, "t3": 0.0, "t4": 0.0}
    other = {"t1": 1.0, "t2": 0.0, "t3": 1.0, "t4": 1.0}
    d = paired_difference(base, other, z=2)
    assert d is not None and d.method == "newcombe"
    assert (d.diff, d.tasks, d.gained, d.lost) == (0.25, 4, 2, 1)
    assert d.low == pytest.approx(0.25 - 0.720226, abs=1e-5)  # six-digit hand arithmetic
    assert d.high == pytest.approx(0.25 + 0.501303, abs=1e-5)


def test_paired_difference_newcombe_corrects_positive_correlation() -> None:
    # base passes t1; other passes t1 and t2: a = 1, b = 0, c = 1, d = 2, θ = 0.25.
    # ad − bc = 2 is not above n/2 = 2, so φ = max(2 − 2, 0)/sqrt(12) = 0 (uncorrected: 0.577)
    # other 2/4: [0.146447, 0.853553]; base 1/4: [0.375 − 0.330719, 0.375 + 0.330719]
    # δ = sqrt(0.353553² + (0.705719 − 0.25)²) = sqrt(0.125 + 0.207680) = 0.576784
    # ε = sqrt(0.353553² + (0.25 − 0.044281)²) = sqrt(0.125 + 0.042320) = 0.409048
    base = {"t1": 1.0, "t2": 0.0, "t3": 0.0, "t4": 0.0}
    other = {"t1": 1.0, "t2": 1.0, "t3": 0.0, "t4": 0.0}
    d = paired_difference(base, other, z=2)
    assert d is not None and (d.diff, d.gained, d.lost) == (0.25, 1, 0)
    assert (d.low, d.high) == (
        pytest.approx(0.25 - 0.576784, abs=1e-5),
        pytest.approx(0.25 + 0.409048, abs=1e-5),
    )


def test_paired_difference_when_both_fail_everything_is_not_certain() -> None:
    # a = b = c = 0, d = 4: a marginal is 0 so φ = 0; both rates 0 with Wilson [0, 0.5] (z = 2)
    # δ = sqrt(0 + 0.5²) = 0.5, ε = sqrt(0.5² + 0) = 0.5 -> [−0.5, 0.5], not a point at 0
    fails = {f"t{i}": 0.0 for i in range(4)}
    d = paired_difference(fails, fails, z=2)
    assert d is not None and (d.diff, d.low, d.high) == (
        0.0,
        pytest.approx(-0.5),
        pytest.approx(0.5),
    )
    assert (d.gained, d.lost) == (0, 0)


def test_paired_difference_of_identical_runs() -> None:
    # a = 1, d = 3 (n = 4): ad − bc − n/2 = 3 − 2 = 1, φ = 1 / sqrt(1·3·1·3) = 1/3.
    # p = 1/4 for both with Wilson (z = 2) [0.375 − h, 0.375 + h], h = sqrt(0.109375):
    # p − l = h − 0.125 = 0.205719, u − p = h + 0.125 = 0.455719, their product h² − 0.125² = 0.09375
    # δ = ε = sqrt(0.205719² + 0.455719² − (2/3)·0.09375) = sqrt(0.25 − 0.0625) = sqrt(0.1875)
    same = {"t1": 1.0, "t2": 0.0, "t3": 0.0, "t4": 0.0}
    d = paired_difference(same, same, z=2)
    assert d is not None and (d.diff, d.gained, d.lost) == (0.0, 0, 0)
    assert (d.low, d.high) == (pytest.approx(-math.sqrt(0.1875)), pytest.approx(math.sqrt(0.1875)))
    # Two tasks, one passed by both: uncorrected, φ = 1 would give [0, 0]. Corrected: ad − bc = 1 is
    # not above n/2 = 1, φ = 0. Wilson (z = 2) of 1 of 2: z²/n = 2, centre (0.5 + 1)/3 = 0.5,
    # half = 2/3 · sqrt(0.25/2 + 4/16) = 2/3 · sqrt(0.375) = 1/sqrt(6)
    # δ = ε = sqrt(1/6 + 1/6) = 1/sqrt(3)
    half = {"t1": 1.0, "t2": 0.0}
    d = paired_difference(half, half, z=2)
    assert d is not None and (d.low, d.high) == (
        pytest.approx(-1 / math.sqrt(3)),
        pytest.approx(1 / math.sqrt(3)),
    )


def test_paired_difference_normal_for_fractional_rates() -> None:
    # two trials per task: per-task differences 0.5, 0.5, 0 -> mean 1/3
    # s² = ((1/6)² + (1/6)² + (1/3)²) / 2 = (1/36 + 1/36 + 4/36) / 2 = 1/12; se = sqrt(1/12 / 3) = 1/6
    # z = 2: 1/3 ± 1/3 -> [0, 2/3]
    base = {"a": 0.5, "b": 0.0, "c": 1.0}
    other = {"a": 1.0, "b": 0.5, "c": 1.0, "only-here": 1.0}  # an unpaired task is left out
    d = paired_difference(base, other, z=2)
    assert d is not None and d.method == "normal"
    assert (d.tasks, d.gained, d.lost) == (3, 2, 0)
    assert d.diff == pytest.approx(1 / 3)
    assert (d.low, d.high) == (pytest.approx(0.0, abs=1e-12), pytest.approx(2 / 3))
    # one shared task: no spread to estimate, the whole range
    one = paired_difference({"a": 0.5}, {"a": 1.0})
    assert one is not None and (one.low, one.high) == (-1.0, 1.0)


def test_paired_difference_needs_shared_tasks() -> None:
    assert paired_difference({"a": 1.0}, {"b": 1.0}) is None


def test_all_failed_or_all_passed_intervals_touch_the_end_exactly():
    for n in range(1, 200):
        assert wilson_interval(0, n)[0] == 0.0 and wilson_interval(n, n)[1] == 1.0
