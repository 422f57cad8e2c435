"""Every family x difficulty in real podman sandboxes: the golden solution passes, doing nothing fails.

Each cell's sample is perturbed (rate 1.0), with seeds chosen so the 36
samples together exercise every perturbation kind — the golden solution must
pass under each. The no-op sandbox starts from the same cached image. The
easy level of three families also runs in CI.
"""

from __future__ import annotations

import time

import pytest

from components.synthesize.families import DIFFICULTIES, FAMILIES
from components.synthesize.generate import make_task, task_seed
from termrl.artifacts import Task
from termrl.sandbox import SandboxManager, SandboxSpec
from termrl.taskrun import TestOutcome, run_solution, run_tests

SAMPLE_SEED = (
    4  # the first base seed whose 36 samples cover every perturbation kind (checked below)
)
CELLS = [(f, d) for f in FAMILIES for d in DIFFICULTIES]
CI_CELLS = [("text-processing", "easy"), ("git", "easy"), ("sql-sqlite", "easy")]
PERTURBATION_KINDS = {
    "tool-removed",
    "pip-index-missing",
    "apt-mirror-missing",
    "workdir-moved",
    "git-identity-missing",
    "git-hooks-path-broken",
}


def sample(family: str, difficulty: str) -> Task:
    return make_task(
        family,
        difficulty,
        task_seed(SAMPLE_SEED, CELLS.index((family, difficulty))),
        perturbation_rate=1.0,
    )


def test_sample_covers_every_perturbation_kind():
    kinds = {p.split(":")[0] for f, d in CELLS for p in sample(f, d).perturbations}
    assert kinds >= PERTURBATION_KINDS


async def _outcome(manager: SandboxManager, task: Task, *, golden: bool) -> tuple[TestOutcome, str]:
    async with await manager.create(SandboxSpec.from_task(task)) as session:
        solved = await run_solution(session, task) if golden else None
        outcome = await run_tests(session, task)
    return outcome, solved.output[-1500:] if solved else ""


async def _golden_passes_noop_fails(manager: SandboxManager, family: str, difficulty: str) -> None:
    task = sample(family, difficulty)
    started = time.monotonic()
    golden, solution_log = await _outcome(manager, task, golden=True)
    noop, _ = await _outcome(manager, task, golden=False)
    print(
        f"\n{task.id} {task.perturbations}: {time.monotonic() - started:.1f} s (build, golden, no-op)"
    )
    assert golden.passed and golden.reward == 1.0, (
        f"{task.id} golden failed under {task.perturbations}:\n{solution_log}\n--- tests ---\n{golden.output[-2000:]}"
    )
    assert not noop.passed and noop.reward == 0.0, (
        f"{task.id}: doing nothing passes:\n{noop.output[-1000:]}"
    )
    assert "FAIL" in noop.output  # the check said why


@pytest.mark.slow
@pytest.mark.podman
@pytest.mark.parametrize(("family", "difficulty"), [c for c in CELLS if c not in CI_CELLS])
async def test_every_family_and_level_in_podman(
    podman: SandboxManager, family: str, difficulty: str
):
    await _golden_passes_noop_fails(podman, family, difficulty)


@pytest.mark.slow
@pytest.mark.ci
@pytest.mark.podman
@pytest.mark.parametrize(("family", "difficulty"), CI_CELLS)
async def test_easy_levels_in_podman(podman: SandboxManager, family: str, difficulty: str):
    await _golden_passes_noop_fails(podman, family, difficulty)
