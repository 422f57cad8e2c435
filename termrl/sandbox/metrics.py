"""Prometheus metrics of the sandbox manager, labelled by backend.

They live in their own ``CollectorRegistry`` (``REGISTRY``) so importing
termrl twice in one process (tests) never collides with the global registry;
a stage that serves ``/metrics`` adds it to its exporter. ``snapshot()`` is the
plain-dict view that ``SandboxManager.stats()`` and ``termrl sandbox stats`` print.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = [
    "ACTIVE",
    "BUILDS",
    "BUILD_SECONDS",
    "CLOSED",
    "CREATED",
    "CREATE_SECONDS",
    "EXEC_SECONDS",
    "EXEC_TIMEOUTS",
    "FAILURES",
    "REGISTRY",
    "snapshot",
]

REGISTRY = CollectorRegistry(auto_describe=True)

ACTIVE = Gauge("sandbox_active_sessions", "Sessions open now", ["backend"], registry=REGISTRY)
CREATED = Counter("sandbox_created", "Sessions created", ["backend"], registry=REGISTRY)
CLOSED = Counter("sandbox_closed", "Sessions closed", ["backend"], registry=REGISTRY)
FAILURES = Counter(
    "sandbox_failures", "Failures by error type", ["backend", "type"], registry=REGISTRY
)
EXEC_TIMEOUTS = Counter(
    "sandbox_exec_timeouts", "Commands interrupted at their timeout", ["backend"], registry=REGISTRY
)
BUILDS = Counter(
    "sandbox_image_builds",
    "Image builds by outcome (built, cached, failed)",
    ["backend", "outcome"],
    registry=REGISTRY,
)
_LATENCY = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 1, 2, 5, 10, 30, 60, 300)
EXEC_SECONDS = Histogram(
    "sandbox_exec_seconds", "Exec round trip", ["backend"], buckets=_LATENCY, registry=REGISTRY
)
CREATE_SECONDS = Histogram(
    "sandbox_create_seconds",
    "Create to first prompt (image ready)",
    ["backend"],
    buckets=_LATENCY,
    registry=REGISTRY,
)
BUILD_SECONDS = Histogram(
    "sandbox_build_seconds",
    "Image builds that ran",
    ["backend"],
    buckets=(1, 5, 10, 30, 60, 120, 300, 600, 1800),
    registry=REGISTRY,
)


def snapshot(backend: str | None = None) -> dict[str, float]:
    """Every sample as ``{"name{label=value,...}": value}``, optionally for one backend."""
    out: dict[str, float] = {}
    for family in REGISTRY.collect():
        for sample in family.samples:
            if sample.name.endswith("_created"):  # prometheus_client's timestamps, not counts
                continue
            if backend is not None and sample.labels.get("backend") != backend:
                continue
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            out[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return out
