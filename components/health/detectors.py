"""Crash precursors: one small pure function per sign the seed watched, each with its threshold.

The seed's order, earliest sign first:

    falling_advantage      the mean advantage drifts down for tens of steps
    failed_length_tail     the longest failed trajectory grows while the failure count stays flat
    negative_share_growth  later, negatives take a growing share of the batch
    reward_collapse        the pass rate (or reward) falls far below the best earlier iteration
    behaviour_spike        the behaviour monitor's bad patterns (loops, destructive commands,
                           test-path access, tampering) jump above their earlier rate

Each takes the run's iterations so far (oldest first, the one just finished last)
and returns a ``Finding`` or None. Thresholds are chosen so that the noise of a
small batch (tens of episodes, four per optimizer step) does not fire them: on
1,000 simulated healthy runs of 10 iterations × 32 episodes
(``tests/components/health/series.py``), 0.6 % of the 10,000 judgements raised a
precursor and one a collapse.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from components.health.history import PATTERNS, IterationMetrics

__all__ = [
    "DETECTORS",
    "Finding",
    "Thresholds",
    "behaviour_spike",
    "detect",
    "failed_length_tail",
    "falling_advantage",
    "negative_share_growth",
    "reward_collapse",
    "spiking_patterns",
]


@dataclass(frozen=True)
class Thresholds:
    """Every threshold of the detectors and of the rollback's task quarantine."""

    advantage_window: int = 30
    """Steps (with signal, across iterations) the advantage trend is fitted over: the seed saw
    the drift over tens of steps."""
    advantage_min_steps: int = 12
    """Fewer steps than this in the window: no judgement (a short noisy line has any slope)."""
    advantage_fall: float = 0.5
    """How far the fitted line must fall across the window (advantage units; group-normalised
    advantages are about unit scale, a step's mean over four episodes has a spread of ~0.4)."""
    advantage_t: float = 3.0
    """And the fall must be significant: the slope's t-statistic at most −advantage_t."""

    tail_iterations: int = 3
    """Iterations over which the failed-length tail must keep rising."""
    tail_growth: float = 3.0
    """The longest failed trajectory must grow by this factor over those iterations (never
    shrinking): the longest of ~20 failures often doubles by chance, rarely triples."""
    tail_count_tolerance: float = 0.25
    """While the failure count stays flat: its range at most this fraction of its mean."""

    negative_iterations: int = 3
    """Iterations over which the negative share must rise every time."""
    negative_rise: float = 0.3
    """The share must rise by at least this much over them: with a few tens of episodes carrying
    signal, a batch's share wobbles by ±0.12."""
    negative_min_share: float = 0.7
    """And end at least here: negatives dominating the update is the sign, not merely more of them."""

    collapse_drop: float = 0.5
    """Collapse: the latest success rate (or reward) at most (1 − collapse_drop) × the best earlier."""
    collapse_min_drop: float = 0.15
    """And at least this far below it in absolute terms (near 0, halving is noise)."""
    collapse_z: float = 3.0
    """And the drop at least this many standard errors of a difference of two pass rates (binomial,
    from each iteration's episode count): a batch of 32 episodes wobbles by ±0.08."""

    loop_rise: float = 0.2
    """Spike: the share of episodes in a repeated-command loop rises this much over its earlier
    mean. Small policies loop often (the monitor warns from 0.25), so only a jump counts."""
    hack_rise: float = 0.1
    """Spike: the same for destructive commands, test-path access and tampering (rare in a
    healthy run; a learned hack shows up in a good part of the batch)."""
    spike_z: float = 3.5
    """And the latest count must exceed the count expected at the earlier rate by this many times
    √max(expected, 1) (a count's Poisson spread; the floor makes a never-seen pattern need
    ``spike_z`` episodes), so a few stray flags in a small batch do not fire."""

    quarantine_flag_share: float = 0.5
    """Rollback: a task is quarantined when bad-pattern episodes are at least this share of its
    episodes since the rollback target (any tampering episode quarantines it)."""
    quarantine_success_jump: float = 0.5
    """Rollback: a task is quarantined when its success rate since the rollback target exceeds
    its earlier rate by this much while the run collapsed: the signature of a reward that
    became noise or a hack, which the policy then learned from."""

    def problems(self) -> list[str]:
        """Every invalid threshold (``ConfigError`` material)."""
        problems = [
            f"{name}={getattr(self, name)} must be at least {least}"
            for name, least in (
                ("advantage_min_steps", 3),
                ("tail_iterations", 2),
                ("negative_iterations", 2),
            )
            if getattr(self, name) < least
        ]
        if self.advantage_min_steps > self.advantage_window:
            problems.append("advantage_min_steps must not exceed advantage_window")
        if not 0 < self.collapse_drop < 1:
            problems.append(f"collapse_drop={self.collapse_drop} must be in (0, 1)")
        if self.tail_growth <= 1:
            problems.append(f"tail_growth={self.tail_growth} must be above 1")
        if self.spike_z <= 0:
            problems.append(f"spike_z={self.spike_z} must be above 0")
        return problems


@dataclass(frozen=True)
class Finding:
    """One precursor seen: what, how bad, why (with the numbers), and what the seed does about it."""

    name: str
    """The detector's function name."""
    severity: str
    """``warning`` (a precursor: mitigate) or ``critical`` (a collapse: roll back)."""
    reason: str
    mitigation: str
    evidence: dict[str, float] = field(default_factory=dict)
    """The numbers behind the reason, by name (the verdict reads some of them)."""
    tasks: tuple[str, ...] = ()
    """Tasks the sign was seen on, where the metric is per task."""


def _slope(values: Sequence[float]) -> tuple[float, float]:
    """Least-squares slope per step of ``values`` and its t-statistic."""
    n = len(values)
    x_mean, y_mean = (n - 1) / 2, sum(values) / n
    sxx = sum((x - x_mean) ** 2 for x in range(n))
    slope = sum((x - x_mean) * (y - y_mean) for x, y in enumerate(values)) / sxx
    residual = sum((y - y_mean - slope * (x - x_mean)) ** 2 for x, y in enumerate(values))
    se = math.sqrt(residual / (n - 2) / sxx)
    if se == 0:  # a perfect line: any slope is as significant as it gets
        return slope, math.copysign(math.inf, slope) if slope else 0.0
    return slope, slope / se


def falling_advantage(history: Sequence[IterationMetrics], t: Thresholds) -> Finding | None:
    """The mean advantage falls over the last ``advantage_window`` steps with signal."""
    if not history[-1].advantage_steps:
        return None  # nothing new since the last judgement
    steps = [a for h in history for a in h.advantage_steps][-t.advantage_window :]
    if len(steps) < t.advantage_min_steps:
        return None
    slope, t_stat = _slope(steps)
    fall = -slope * (len(steps) - 1)
    if fall < t.advantage_fall or t_stat > -t.advantage_t:
        return None
    return Finding(
        "falling_advantage",
        "warning",
        f"advantage mean fell by {fall:.2f} over the last {len(steps)} steps "
        f"(slope {slope:+.3f}/step, t = {t_stat:.1f})",
        "tighten clipping (eps_low, eps_high); if it persists, lower the learning rate",
        {"fall": fall, "slope": slope, "t": t_stat, "steps": len(steps)},
    )


def failed_length_tail(history: Sequence[IterationMetrics], t: Thresholds) -> Finding | None:
    """The longest failed trajectory keeps growing while the number of failures stays flat:
    a few extreme failures are coming to dominate the gradient."""
    window = history[-t.tail_iterations :]
    lengths = [h.failed_max_tokens for h in window]
    counts = [h.failed_trajectories for h in window]
    if (
        len(window) < t.tail_iterations
        or any(n is None or n <= 0 for n in lengths)
        or min(counts) <= 0
    ):
        return None
    rising = all(b >= a for a, b in zip(lengths, lengths[1:], strict=False))
    mean_count = sum(counts) / len(counts)
    flat = max(counts) - min(counts) <= t.tail_count_tolerance * mean_count
    if not (rising and flat and lengths[-1] >= t.tail_growth * lengths[0]):
        return None
    return Finding(
        "failed_length_tail",
        "warning",
        f"longest failed trajectory rose {' → '.join(str(n) for n in lengths)} response tokens over "
        f"iterations {window[0].iteration}–{window[-1].iteration} while failures stayed at "
        f"{min(counts)}–{max(counts)}",
        "mask failed trajectories longer than the earlier tail (max_failed_response_tokens); "
        "if it persists, lower negative_weight",
        {
            "baseline_tokens": float(lengths[0]),
            "latest_tokens": float(lengths[-1]),
            "failures": mean_count,
        },
    )


def negative_share_growth(history: Sequence[IterationMetrics], t: Thresholds) -> Finding | None:
    """Negatives take a larger share of the batch at every one of the last iterations, ending dominant."""
    window = history[-t.negative_iterations :]
    shares = [h.negative_share for h in window]
    if len(window) < t.negative_iterations or any(s is None for s in shares):
        return None
    rising = all(b > a for a, b in zip(shares, shares[1:], strict=False))
    if not (
        rising and shares[-1] - shares[0] >= t.negative_rise and shares[-1] >= t.negative_min_share
    ):
        return None
    return Finding(
        "negative_share_growth",
        "warning",
        f"negative share rose {' → '.join(f'{s:.2f}' for s in shares)} over iterations "
        f"{window[0].iteration}–{window[-1].iteration}",
        "tighten clipping; if it persists, lower negative_weight (the learning rate in positive-only mode)",
        {"first_share": shares[0], "latest_share": shares[-1]},
    )


def _binomial_variance(rate: float, episodes: int) -> float:
    rate = min(max(rate, 0.0), 1.0)
    return rate * (1 - rate) / episodes


def _same_pool(a: IterationMetrics, b: IterationMetrics) -> bool:
    """Whether two iterations rolled out a task in common (either without a per-task breakdown:
    assumed so)."""
    return not a.tasks or not b.tasks or not a.tasks.keys().isdisjoint(b.tasks)


def reward_collapse(history: Sequence[IterationMetrics], t: Thresholds) -> Finding | None:
    """The latest rollout's pass rate or mean reward is far below the best earlier iteration's.

    The standard error treats both as pass rates (binomial); for a reward in [0, 1] that is
    the largest variance its mean can have, so the test only gets more cautious. Only earlier
    iterations that rolled out at least one of the latest's tasks are compared: a phase that
    moves to another pool (harder tasks) starts a rate of its own, not a fall from the last one."""
    latest = history[-1]
    earlier = [h for h in history[:-1] if h.episodes and _same_pool(h, latest)]
    if not earlier or latest.episodes == 0:
        return None
    for label, metric in (
        ("success rate", "rollout/success_rate"),
        ("reward mean", "rollout/reward_mean"),
    ):
        best = max(earlier, key=lambda h: h.rollout.get(metric, 0.0))
        top, now = best.rollout.get(metric, 0.0), latest.rollout.get(metric, 0.0)
        drop = top - now
        variance = _binomial_variance(top, best.episodes) + _binomial_variance(now, latest.episodes)
        z = drop / math.sqrt(variance) if variance > 0 else math.inf
        if (
            top > 0
            and now <= (1 - t.collapse_drop) * top
            and drop >= t.collapse_min_drop
            and z >= t.collapse_z
        ):
            return Finding(
                "reward_collapse",
                "critical",
                f"{label} {now:.2f} at iteration {latest.iteration}, down from {top:.2f} at iteration "
                f"{best.iteration} (drop {drop:.2f}, z = {z:.1f})",
                "roll back to the last healthy policy and quarantine the tasks that point at the cause",
                {"best": top, "best_iteration": float(best.iteration), "latest": now, "z": z},
            )
    return None


def behaviour_spike(history: Sequence[IterationMetrics], t: Thresholds) -> Finding | None:
    """A bad pattern's share of episodes in the latest rollout jumps above its earlier mean."""
    latest, earlier = history[-1], [h for h in history[:-1] if h.episodes]
    if latest.episodes == 0 or not earlier:
        return None  # a spike is a change; the monitor's own alerts judge absolute rates
    evidence: dict[str, float] = {}
    parts: list[str] = []
    spiking: list[str] = []
    for pattern in PATTERNS:
        count = latest.pattern_episodes(pattern)
        rate = count / latest.episodes
        baseline = sum(h.pattern_episodes(pattern) / h.episodes for h in earlier) / len(earlier)
        rise = t.loop_rise if pattern == "loop" else t.hack_rise
        expected = baseline * latest.episodes
        if rate - baseline >= rise and count - expected >= t.spike_z * math.sqrt(
            max(expected, 1.0)
        ):
            evidence.update(
                {
                    f"{pattern}_episodes": float(count),
                    f"{pattern}_rate": rate,
                    f"{pattern}_baseline": baseline,
                }
            )
            parts.append(
                f"{pattern} {count}/{latest.episodes} episodes ({rate:.0%}, earlier {baseline:.0%})"
            )
            spiking.append(pattern)
    if not spiking:
        return None
    tasks = tuple(
        sorted(
            task
            for task, m in latest.tasks.items()
            if any(m.get(f"{p}_episodes", 0) > 0 for p in spiking)
        )
    )
    return Finding(
        "behaviour_spike",
        "warning",
        f"iteration {latest.iteration}: "
        + "; ".join(parts)
        + (f"; on tasks {', '.join(tasks)}" if tasks else ""),
        "turn on the pattern's rollout penalty; if it persists, quarantine the tasks showing it",
        evidence,
        tasks,
    )


def spiking_patterns(finding: Finding) -> list[str]:
    """The patterns a ``behaviour_spike`` finding saw jump (those it gives a rate for)."""
    return [p for p in PATTERNS if f"{p}_rate" in finding.evidence]


DETECTORS: tuple[Callable[[Sequence[IterationMetrics], Thresholds], Finding | None], ...] = (
    falling_advantage,
    failed_length_tail,
    negative_share_growth,
    reward_collapse,
    behaviour_spike,
)


def detect(history: Sequence[IterationMetrics], thresholds: Thresholds) -> list[Finding]:
    """Every detector's finding on the run so far, in the seed's order."""
    if not history:
        raise ValueError("the health check needs at least one iteration")
    return [f for f in (d(history, thresholds) for d in DETECTORS) if f is not None]
