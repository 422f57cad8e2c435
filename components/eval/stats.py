"""95 % intervals: a pass rate, and the difference between two policies on the same tasks.

    pass_rate(passed, n)                        Rate: the share passed with its Wilson interval
    wilson_interval(passed, n)                  (low, high) of one proportion
    paired_difference(base_rates, other_rates)  PairedDifference: other − base over shared tasks

Eval suites are small (a dozen held-out tasks), so the intervals are the
ones that behave at small n and at 0 % or 100 %: Wilson's score interval for
a proportion, and for a difference of two policies on the *same* tasks a
paired interval, which is much narrower than comparing two independent
intervals when the policies agree on most tasks.

A Wilson interval over trials treats the trials as independent; with several
trials per task they are not (a task is hard for every trial), so the interval
is then too narrow. The paired difference works per task and has no such
problem.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Z95", "PairedDifference", "Rate", "paired_difference", "pass_rate", "wilson_interval"]

Z95 = 1.959963984540054
"""The 97.5 % quantile of the standard normal: a two-sided 95 % interval."""


def wilson_interval(passed: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson's score interval of the proportion ``passed / n``.

    With p = passed / n:

        centre = (p + z² / 2n) / (1 + z² / n)
        half   = z / (1 + z² / n) · sqrt(p (1 − p) / n + z² / 4n²)
        interval = [centre − half, centre + half]

    Unlike p ± z·sqrt(p(1 − p)/n) it never leaves [0, 1] and is not empty at
    0 or n passes (0 of 10 gives [0, 0.278]). No trials: [0, 1], nothing known.
    """
    if n < 0 or not 0 <= passed <= max(n, 0):
        raise ValueError(f"need 0 <= passed <= n, got passed={passed}, n={n}")
    if n == 0:
        return 0.0, 1.0
    p = passed / n
    z2 = z * z
    denominator = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denominator
    half = z / denominator * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    # At p = 0 or 1 one end is exact in theory and a rounding error away in floats.
    low = 0.0 if passed == 0 else max(0.0, centre - half)
    high = 1.0 if passed == n else min(1.0, centre + half)
    return low, high


@dataclass(frozen=True)
class Rate:
    """A pass rate with its 95 % Wilson interval."""

    passed: int
    n: int
    rate: float
    low: float
    high: float


def pass_rate(passed: int, n: int) -> Rate:
    """``passed`` of ``n`` with its interval (rate 0 when there is nothing to count)."""
    low, high = wilson_interval(passed, n)
    return Rate(passed, n, passed / n if n else 0.0, low, high)


@dataclass(frozen=True)
class PairedDifference:
    """Other − base pass rate over the tasks both runs evaluated, with a 95 % interval."""

    diff: float
    """Mean over shared tasks of (other's pass rate − base's pass rate) on that task."""
    low: float
    high: float
    tasks: int
    """Tasks in both runs (the pairs); a task only one run has is left out."""
    gained: int
    """Tasks where other's pass rate is higher than base's (with one trial: base failed, other passed)."""
    lost: int
    """Tasks where other's pass rate is lower."""
    method: str
    """``newcombe`` (every task passed or failed outright in both runs) or ``normal``."""


def _newcombe(both: int, lost: int, gained: int, neither: int, z: float) -> tuple[float, float]:
    """Newcombe's hybrid score interval for paired proportions (1998, method 10)."""
    n = both + lost + gained + neither
    p_other, p_base = (both + gained) / n, (both + lost) / n
    low_other, high_other = wilson_interval(both + gained, n, z)
    low_base, high_base = wilson_interval(both + lost, n, z)
    marginals = (both + lost) * (gained + neither) * (both + gained) * (lost + neither)
    concordance = both * neither - lost * gained
    if concordance > 0:
        # Newcombe's correction: without it a few tasks that both runs agree on give φ = 1
        # and an interval of width 0 (two tasks, one passed by both: [0, 0]).
        concordance = max(concordance - n / 2, 0.0)
    phi = concordance / math.sqrt(marginals) if marginals else 0.0
    theta = p_other - p_base
    # With φ near 1 a radicand is near a perfect square: rounding must not take it below 0.
    below = math.sqrt(
        max(
            0.0,
            (p_other - low_other) ** 2
            + (high_base - p_base) ** 2
            - 2 * phi * (p_other - low_other) * (high_base - p_base),
        )
    )
    above = math.sqrt(
        max(
            0.0,
            (high_other - p_other) ** 2
            + (p_base - low_base) ** 2
            - 2 * phi * (high_other - p_other) * (p_base - low_base),
        )
    )
    return max(-1.0, theta - below), min(1.0, theta + above)


def _normal(diffs: list[float], z: float) -> tuple[float, float]:
    """Mean ± z · s / sqrt(n) of the per-task differences; [-1, 1] from one task."""
    n = len(diffs)
    if n < 2:
        return -1.0, 1.0
    mean = sum(diffs) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    half = z * sd / math.sqrt(n)
    return max(-1.0, mean - half), min(1.0, mean + half)


def paired_difference(
    base: Mapping[str, float], other: Mapping[str, float], z: float = Z95
) -> PairedDifference | None:
    """How much ``other`` beats ``base`` on the tasks both ran (per-task pass rates); None if none.

    The estimate is the mean of the per-task differences d_i = r_i(other) − r_i(base)
    over the n shared tasks. Its interval:

    - every r_i is 0 or 1 (one trial per task, the greedy default, or unanimous trials):
      Newcombe's hybrid score interval for paired proportions (Newcombe 1998,
      Stat Med 17:2635, method 10). With a = tasks both pass, b = only base passes
      (lost), c = only other passes (gained), d = neither, p₁ = (a + c)/n with
      Wilson interval [l₁, u₁], p₂ = (a + b)/n with [l₂, u₂], θ = p₁ − p₂ and

          φ = A / sqrt((a + b)(c + d)(a + c)(b + d))    (0 if a marginal is 0)
          A = max(ad − bc − n/2, 0) if ad > bc, else ad − bc
          δ = sqrt((p₁ − l₁)² − 2φ (p₁ − l₁)(u₂ − p₂) + (u₂ − p₂)²)
          ε = sqrt((u₁ − p₁)² − 2φ (u₁ − p₁)(p₂ − l₂) + (p₂ − l₂)²)
          interval = [θ − δ, θ + ε]

      (φ with Newcombe's correction for ad > bc, as in Fagerland, Lydersen & Laake 2014,
      Stat Med 33:2850, who recommend this interval.) It stays inside [−1, 1] and is not
      empty when the policies agree on every task, where a normal interval collapses to [0, 0].
    - otherwise (fractional per-task rates, several trials): the normal approximation
      d̄ ± z · s / sqrt(n), s the sample standard deviation of the d_i (n − 1 in its
      denominator), clipped to [−1, 1]; one task gives [−1, 1]. When every task moved by
      the same amount (s = 0) it has width 0: few tasks, read it with the per-task table.
    """
    shared = sorted(set(base) & set(other))
    if not shared:
        return None
    diffs = [other[t] - base[t] for t in shared]
    gained = sum(d > 0 for d in diffs)
    lost = sum(d < 0 for d in diffs)
    mean = sum(diffs) / len(diffs)
    if all(base[t] in (0.0, 1.0) and other[t] in (0.0, 1.0) for t in shared):
        both = sum(base[t] == 1.0 and other[t] == 1.0 for t in shared)
        low, high = _newcombe(both, lost, gained, len(shared) - both - lost - gained, z)
        return PairedDifference(mean, low, high, len(shared), gained, lost, "newcombe")
    low, high = _normal(diffs, z)
    return PairedDifference(mean, low, high, len(shared), gained, lost, "normal")
