"""The health verdict between two curriculum iterations: healthy, mitigate or roll back.

    verdict(history, thresholds, mitigations)
      ├─ detect(...)                    the precursors seen (detectors.py)
      ├─ reward_collapse among them?    rollback(to the last healthy policy, quarantined tasks)
      │                                 plus the precursors' treatments
      ├─ other findings?                mitigate(action, settings)
      └─ none                           healthy

Mitigations are settings, not code paths: each treatment is a change to the
next iteration's stage options, named ``<stage>.<field>`` (``train.eps_high``,
``rollout.quarantine``). Targeted treatment comes first (mask the extreme
failed trajectories, tighten clipping, a behaviour penalty); a finding gets its
global treatment (lower ``negative_weight``, lower learning rate, quarantine)
only when its targeted settings were already in force during the iteration
just judged, i.e. applied after an earlier iteration, and the sign persists.
Settings accumulate: a later verdict starts from the values already applied.

Mitigations are lifted, not kept for the rest of the run: once ``lift_after``
iterations in a row were healthy with them in force, a healthy verdict drops
every training and penalty setting, and the run's own options apply again (a
sign that comes back gets the targeted treatment first, as the first time).
Quarantined tasks stay quarantined: they were culprits, not settings.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from components.health.detectors import Finding, Thresholds, detect, spiking_patterns
from components.health.history import PATTERNS, IterationMetrics

__all__ = [
    "PENALTY_SETTINGS",
    "QUARANTINE",
    "Mitigations",
    "Verdict",
    "culprit_tasks",
    "liftable",
    "rollback_target",
    "stage_options",
    "verdict",
]

QUARANTINE = "rollout.quarantine"
"""Task ids the next rollouts leave out."""
MAX_FAILED_TOKENS = "rollout.max_failed_response_tokens"
"""Rollout masks failed episodes with more response tokens than this (``long_failure``)."""
PENALTY_SETTINGS = {
    "loop": "rollout.loop_penalty",
    "destructive": "rollout.destructive_penalty",
    "test_access": "rollout.test_access_penalty",
    "tampering": "rollout.test_access_penalty",  # tampering starts with touching the tests' paths
}
"""The behaviour-shaping reward weight each monitored pattern turns on. These, ``QUARANTINE`` and
``MAX_FAILED_TOKENS`` are rollout options the rollout stage's config must carry (penalties off by
default there)."""


@dataclass(frozen=True)
class Mitigations:
    """How strong each treatment is."""

    clip_factor: float = 0.5
    """Tighter clipping: eps_low and eps_high are multiplied by this."""
    min_eps: float = 0.02
    """Clipping is never tightened below this (a zero range would stop all learning)."""
    lr_factor: float = 0.5
    """Global treatment: the learning rate is multiplied by this."""
    negative_weight_factor: float = 0.5
    """Global treatment: negative_weight is multiplied by this (full mode only)."""
    penalty: float = 0.1
    """Weight of a behaviour penalty when turned on, against an outcome reward of 1: large
    enough to break ties between otherwise equal episodes, small enough that passing the tests
    stays the signal that matters."""
    lift_after: int = 2
    """Healthy iterations in a row, with the mitigations in force, after which they are lifted
    (0: never lift). Two, so that one lucky iteration does not undo a treatment."""

    def problems(self) -> list[str]:
        problems = [
            f"{name}={getattr(self, name)} must be in (0, 1)"
            for name in ("clip_factor", "lr_factor", "negative_weight_factor")
            if not 0 < getattr(self, name) < 1
        ]
        if self.min_eps <= 0 or self.penalty <= 0:
            problems.append("min_eps and penalty must be above 0")
        if self.lift_after < 0:
            problems.append(f"lift_after={self.lift_after} must be >= 0 (0: never lift)")
        return problems


@dataclass(frozen=True)
class Verdict:
    """What the next iteration should do."""

    kind: str
    """``healthy``, ``mitigate`` or ``rollback``."""
    action: str = ""
    """The treatments chosen, in words (``targeted tighten_clipping for falling_advantage; ...``)."""
    settings: dict[str, Any] = field(default_factory=dict)
    """The option changes for the next iteration, ``<stage>.<field>`` → value."""
    to_checkpoint: str | None = None
    """rollback: the label of the policy the next iteration starts from."""
    to_iteration: int | None = None
    """rollback: the iteration that produced ``to_checkpoint``; −1 is the policy the run started from."""
    quarantine: tuple[str, ...] = ()
    """The tasks this verdict newly quarantines (``settings`` holds the whole list)."""
    findings: tuple[Finding, ...] = ()
    lifted: tuple[str, ...] = ()
    """Settings this verdict lifts: from the next iteration on, the run's own options apply."""

    @property
    def reasons(self) -> list[str]:
        return [f"{f.name}: {f.reason}" for f in self.findings]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready; an infinite statistic (a drop with no variance at all) is written as null."""
        return {
            "kind": self.kind,
            "action": self.action,
            "settings": self.settings,
            "to_checkpoint": self.to_checkpoint,
            "to_iteration": self.to_iteration,
            "quarantine": list(self.quarantine),
            "lifted": list(self.lifted),
            "reasons": self.reasons,
            "findings": [
                {
                    "name": f.name,
                    "severity": f.severity,
                    "reason": f.reason,
                    "mitigation": f.mitigation,
                    "evidence": {k: v if math.isfinite(v) else None for k, v in f.evidence.items()},
                    "tasks": list(f.tasks),
                }
                for f in self.findings
            ],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Verdict:
        findings = tuple(
            Finding(
                f["name"],
                f["severity"],
                f["reason"],
                f["mitigation"],
                dict(f["evidence"]),
                tuple(f["tasks"]),
            )
            for f in data["findings"]
        )
        return cls(
            data["kind"],
            data["action"],
            dict(data["settings"]),
            data["to_checkpoint"],
            data["to_iteration"],
            tuple(data["quarantine"]),
            findings,
            tuple(data.get("lifted", ())),
        )


# --- treatments: (latest iteration, finding, mitigations) -> setting changes -----------------------


def _current(latest: IterationMetrics, key: str) -> Any:
    """A setting's value now: what an earlier verdict applied, else what the stage ran with (train's
    options; a rollout setting as its metrics report it, None when they do not)."""
    if key in latest.applied:
        return latest.applied[key]
    stage, _, name = key.partition(".")
    if stage == "rollout":
        return latest.rollout.get(f"rollout/{name}")
    return getattr(latest.knobs, name)


def tighten_clipping(latest: IterationMetrics, finding: Finding, m: Mitigations) -> dict[str, Any]:
    return {
        key: max(round(_current(latest, key) * m.clip_factor, 4), m.min_eps)
        for key in ("train.eps_low", "train.eps_high")
    }


def mask_extremes(latest: IterationMetrics, finding: Finding, m: Mitigations) -> dict[str, Any]:
    """Mask failed trajectories longer than the tail was before it started to rise (rollout's
    mask & filter decides the long-failure mask; train reads its decision)."""
    current = _current(latest, MAX_FAILED_TOKENS)
    baseline = int(finding.evidence["baseline_tokens"])
    if current is None or baseline < current:
        return {MAX_FAILED_TOKENS: baseline}
    return {MAX_FAILED_TOKENS: max(int(current) // 2, 1)}


def lower_learning_rate(
    latest: IterationMetrics, finding: Finding, m: Mitigations
) -> dict[str, Any]:
    return {"train.learning_rate": _current(latest, "train.learning_rate") * m.lr_factor}


def reweight_negatives(
    latest: IterationMetrics, finding: Finding, m: Mitigations
) -> dict[str, Any]:
    """Lower negative_weight; positive-only mode gives negatives no weight at all, so there the
    only global lever left is the learning rate."""
    if latest.knobs.mode != "full":
        return lower_learning_rate(latest, finding, m)
    return {
        "train.negative_weight": _current(latest, "train.negative_weight")
        * m.negative_weight_factor
    }


def behaviour_penalties(
    latest: IterationMetrics, finding: Finding, m: Mitigations
) -> dict[str, Any]:
    return {PENALTY_SETTINGS[p]: m.penalty for p in spiking_patterns(finding)}


def quarantine_flagged(
    latest: IterationMetrics, finding: Finding, m: Mitigations
) -> dict[str, Any]:
    return {QUARANTINE: sorted(set(latest.applied.get(QUARANTINE, ())) | set(finding.tasks))}


Treatment = Callable[[IterationMetrics, Finding, Mitigations], dict[str, Any]]
TREATMENTS: dict[str, tuple[Treatment, Treatment]] = {
    # finding: (targeted, global)
    "falling_advantage": (tighten_clipping, lower_learning_rate),
    "failed_length_tail": (mask_extremes, reweight_negatives),
    "negative_share_growth": (tighten_clipping, reweight_negatives),
    "behaviour_spike": (behaviour_penalties, quarantine_flagged),
}


def _treat(
    latest: IterationMetrics, findings: Sequence[Finding], m: Mitigations
) -> tuple[dict[str, Any], list[str]]:
    settings: dict[str, Any] = {}
    actions: list[str] = []
    for finding in findings:
        if finding.name not in TREATMENTS:  # reward_collapse: the rollback is its treatment
            continue
        targeted, escalated = TREATMENTS[finding.name]
        changes = targeted(latest, finding, m)
        tier, chosen = "targeted", targeted
        if changes and all(
            key in latest.applied for key in changes
        ):  # tried already; the sign persists
            tier, chosen = "global", escalated
            changes = escalated(latest, finding, m)
        for key, value in changes.items():
            settings[key] = (
                sorted(set(settings.get(key, ())) | set(value)) if key == QUARANTINE else value
            )
        actions.append(f"{tier} {chosen.__name__} for {finding.name}")
    return settings, actions


# --- rollback ------------------------------------------------------------------------------------


def _producer(history: Sequence[IterationMetrics], label: str) -> int:
    """The iteration whose train produced policy ``label``; −1 for the run's starting policy."""
    return next((h.iteration for h in reversed(history) if h.checkpoint == label), -1)


def rollback_target(history: Sequence[IterationMetrics]) -> tuple[str, int]:
    """The policy to restart from after the latest iteration's rollout collapsed, and its producer.

    The newest policy an earlier rollout measured without a collapse: the policy of the newest
    earlier iteration not rolled back; failing that, the policy the run started from. The
    pipeline hands each health step exactly that policy (its ``fallback`` input; a step can
    only pass on artifacts it was given), so the verdict and the artifacts agree. When the
    collapsed rollout ran that very policy (a retry after a rollback collapsed again), the run
    restarts from it once more, with the treatments and quarantine this verdict adds."""
    earlier = [h for h in history[:-1] if h.verdict != "rollback"]
    label = earlier[-1].policy if earlier else history[0].policy
    return label, _producer(history, label)


def culprit_tasks(history: Sequence[IterationMetrics], since: int, t: Thresholds) -> list[str]:
    """Tasks to quarantine: judged on the iterations that trained from the rollback target on
    (``history[since:]``, the data that led to the collapse), against those before it.

    A task is a culprit when its bad-pattern episodes (the most-flagged pattern per iteration)
    make up ``quarantine_flag_share`` of its episodes, when any of its episodes tampered with the
    tests, or when its success rate jumped by ``quarantine_success_jump`` over its earlier rate."""
    suspects, before = history[since:], history[:since]

    def totals(window: Sequence[IterationMetrics], task: str) -> tuple[float, float, float, float]:
        rows = [h.tasks[task] for h in window if h.tasks.get(task, {}).get("episodes")]
        episodes = sum(r["episodes"] for r in rows)
        successes = sum(r["success_rate"] * r["episodes"] for r in rows)
        flagged = sum(max(r.get(f"{p}_episodes", 0.0) for p in PATTERNS) for r in rows)
        tampered = sum(r.get("tampering_episodes", 0.0) for r in rows)
        return episodes, successes, flagged, tampered

    culprits = []
    for task in sorted({task for h in suspects for task in h.tasks}):
        episodes, successes, flagged, tampered = totals(suspects, task)
        if not episodes:
            continue
        earlier_episodes, earlier_successes, _, _ = totals(before, task)
        jumped = bool(earlier_episodes) and (
            successes / episodes - earlier_successes / earlier_episodes >= t.quarantine_success_jump
        )
        if tampered or flagged / episodes >= t.quarantine_flag_share or jumped:
            culprits.append(task)
    return culprits


# --- lifting ---------------------------------------------------------------------------------------


def liftable(
    latest: IterationMetrics, history: Sequence[IterationMetrics], m: Mitigations
) -> tuple[str, ...]:
    """The settings to lift after a healthy ``latest``: every one in force but the quarantine, once
    ``lift_after`` iterations in a row (``latest`` included) were healthy. Settings take effect
    from the iteration after their verdict, so the healthy ones all ran with them."""
    in_force = tuple(sorted(key for key in latest.applied if key != QUARANTINE))
    if not m.lift_after or not in_force:
        return ()
    healthy = 1  # latest: no findings
    for h in reversed(history[:-1]):
        if h.verdict != "healthy" or healthy >= m.lift_after:
            break
        healthy += 1
    return in_force if healthy >= m.lift_after else ()


# --- the verdict ---------------------------------------------------------------------------------


def verdict(
    history: Sequence[IterationMetrics],
    thresholds: Thresholds,
    mitigations: Mitigations | None = None,
) -> Verdict:
    """Judge the run after its latest iteration (``history`` oldest first; every iteration but
    the latest carries the verdict it got, ``applied`` the settings it ran with)."""
    m = mitigations or Mitigations()
    findings = detect(history, thresholds)
    latest = history[-1]
    if not findings:
        lifted = liftable(latest, history, m)
        if not lifted:
            return Verdict("healthy")
        return Verdict(
            "healthy",
            f"lift {', '.join(lifted)} after {m.lift_after} healthy iterations",
            lifted=lifted,
        )
    settings, actions = _treat(latest, findings, m)
    already = set(latest.applied.get(QUARANTINE, ()))
    if any(f.name == "reward_collapse" for f in findings):
        target, producer = rollback_target(history)
        culprits = set(culprit_tasks(history, producer + 1, thresholds)) - already
        if culprits:
            settings[QUARANTINE] = sorted(already | set(settings.get(QUARANTINE, ())) | culprits)
        actions.insert(
            0,
            f"roll back to {target}"
            + (f", quarantine {len(culprits)} task(s)" if culprits else ""),
        )
    else:
        target, producer = None, None
    quarantine = tuple(sorted(set(settings.get(QUARANTINE, ())) - already))
    kind = "rollback" if target is not None else "mitigate"
    return Verdict(
        kind, "; ".join(actions), settings, target, producer, quarantine, tuple(findings)
    )


def stage_options(settings: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{"train.eps_high": 0.1, "rollout.quarantine": [...]}`` → ``{"train": {"eps_high": 0.1},
    "rollout": {"quarantine": [...]}}``: each stage's ``options``."""
    options: dict[str, dict[str, Any]] = {"train": {}, "rollout": {}}
    for key, value in settings.items():
        stage, _, name = key.partition(".")
        options.setdefault(stage, {})[name] = value
    return options
