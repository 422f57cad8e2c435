"""The per-task flow on real podman: a task whose environment does not build."""

from __future__ import annotations

import pytest

from components.verify.config import VerifyConfig
from components.verify.runner import verify_tasks
from termrl.artifacts.tasks import Task, TaskFile


@pytest.mark.podman
async def test_an_environment_that_does_not_build_is_rejected_by_ground_truth_not_a_crash(
    base_images,
):
    broken = Task(
        id="broken-env",
        instruction="Anything.",
        environment_files=[
            TaskFile(
                "Dockerfile", b"FROM termrl/base:bookworm\nRUN echo no-such-step >&2 && false\n"
            )
        ],
        solution_files=[TaskFile("solve.sh", b"true\n", 0o755)],
        test_files=[TaskFile("test.sh", b"exit 0\n", 0o755)],
    )
    config = VerifyConfig(tasks="t", out="v", admitted="a", repeats=2, judges=(), progress=False)
    (verdict,) = await verify_tasks([broken], config)
    outcomes = {name: o.outcome for name, o in verdict.outcomes.items()}
    assert not verdict.admitted and verdict.reason == "ground_truth"
    assert outcomes == {
        "ground_truth": "error",
        "noop": "error",
        "flakiness": "skipped",
        "ablation": "blocked",
        "state_replay": "blocked",
        "judges": "skipped",
    }
    assert "does not build" in verdict.why and "no-such-step" in verdict.why


@pytest.mark.podman
async def test_the_probes_run_only_when_required(corpus, base_images):
    """A set only measured on may leave out ablation and the state replay: each is then skipped
    (no sandbox), so a task whose tests miss a step is admitted there and rejected by default."""
    task = next(t for t in corpus if t.id == "bad-unchecked-step")
    measured_only = VerifyConfig(
        tasks="t",
        out="v",
        admitted="a",
        repeats=1,
        judges=(),
        require=("flakiness", "ground_truth", "noop"),
        progress=False,
    )
    (verdict,) = await verify_tasks([task], measured_only)
    outcomes = {name: o.outcome for name, o in verdict.outcomes.items()}
    assert verdict.admitted, verdict.why
    assert outcomes["ablation"] == outcomes["state_replay"] == "skipped"
    assert verdict.outcomes["ablation"].seconds == 0.0

    default = VerifyConfig(tasks="t", out="v", admitted="a", repeats=1, judges=(), progress=False)
    (verdict,) = await verify_tasks([task], default)
    assert not verdict.admitted and verdict.reason == "ablation"
