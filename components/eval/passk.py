"""Unbiased pass@k (Chen et al. 2021, "Evaluating Large Language Models Trained on Code").

With n trials of a task of which c passed, the probability that at least one
of k trials drawn without replacement passes is

    pass@k = 1 - C(n - c, k) / C(n, k)

Binomials overflow long before n gets large, so the ratio is computed as the
product the paper gives:

    C(n - c, k) / C(n, k) = prod_{i = n - c + 1}^{n} (1 - k / i)

(when n - c < k some draw of k must contain a pass, and pass@k is exactly 1).
A suite's pass@k is the mean over its tasks; a task with fewer than k trials
has no pass@k and is left out of that mean.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

__all__ = ["default_ks", "pass_at_k", "suite_pass_at_k"]


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of one task with ``n`` trials, ``c`` of them passed."""
    if n < 1 or k < 1 or k > n:
        raise ValueError(f"pass@k needs 1 <= k <= n, got n={n}, k={k}")
    if not 0 <= c <= n:
        raise ValueError(f"passed trials c={c} must lie in [0, n={n}]")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def suite_pass_at_k(counts: Iterable[tuple[int, int]], k: int) -> float | None:
    """Mean pass@k over tasks given as (trials, passed); None if no task has k trials."""
    values = [pass_at_k(n, c, k) for n, c in counts if n >= k]
    return sum(values) / len(values) if values else None


def default_ks(trials: int, wanted: Sequence[int] = (1, 2, 3, 5, 10, 20, 50, 100)) -> list[int]:
    """The k values worth reporting for ``trials`` trials per task: 1, some steps, and n."""
    if trials < 1:
        return []
    return sorted({k for k in wanted if k <= trials} | {1, trials})
