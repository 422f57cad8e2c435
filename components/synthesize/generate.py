"""Procedural generation: a reproducible plan over family x difficulty, one seed per task.

Attempt ``i`` of a run with master seed ``S`` gets the task seed
``sha256(f"{S}:{i}")`` (first 12 hex digits), and ``make_task(family,
difficulty, task_seed, ...)`` depends on nothing else, so any task can be
regenerated from the ``family``, ``difficulty`` and ``seed`` recorded on it.
The plan walks family x difficulty in rounds (each round shuffled by the
master seed), so every cell gets its share even in small runs.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Iterator

from tqdm import tqdm

from components.synthesize import perturb
from components.synthesize.config import SynthesizeConfig
from components.synthesize.dedup import NearDuplicateFilter
from components.synthesize.draft import assemble
from components.synthesize.families import FAMILIES
from components.synthesize.report import SynthesisReport
from termrl.artifacts import Task

__all__ = ["generate_tasks", "make_task", "plan", "task_seed"]


def task_seed(seed: int, index: int) -> int:
    """The seed of attempt ``index`` in a run with master ``seed`` (48 bits, stable across Pythons)."""
    return int(hashlib.sha256(f"{seed}:{index}".encode()).hexdigest()[:12], 16)


def make_task(
    family: str,
    difficulty: str,
    seed: int,
    *,
    perturbation_rate: float = 0.0,
    max_perturbations: int = 2,
    extra_tags: list[str] | None = None,
) -> Task:
    """The task ``family`` generates at ``difficulty`` from ``seed``, perturbed as drawn from the seed."""
    fam = FAMILIES[family]
    draft = fam.generate(random.Random(seed), difficulty)
    draft.tags = [*fam.tags, *draft.tags, *(extra_tags or [])]
    # A separate stream: changing the perturbation rate must not change the task itself.
    chosen = perturb.choose(
        draft, random.Random(f"perturb:{seed}"), perturbation_rate, max_perturbations
    )
    return assemble(draft, family=family, difficulty=difficulty, seed=seed, perturbations=chosen)


def plan(config: SynthesizeConfig) -> Iterator[tuple[int, str, str]]:
    """Endless ``(attempt index, family, difficulty)``: rounds over every cell, shuffled per round."""
    cells = [(f, d) for f in config.selected_families() for d in config.difficulties]
    index = 0
    for round_no in range(1 << 30):
        order = list(cells)
        random.Random(f"plan:{config.seed}:{round_no}").shuffle(order)
        for family, difficulty in order:
            yield index, family, difficulty
            index += 1


def generate_tasks(config: SynthesizeConfig, seen: NearDuplicateFilter) -> SynthesisReport:
    """``config.count`` procedural tasks whose instructions ``seen`` admits (fewer if attempts run out)."""
    report = SynthesisReport()
    start = time.perf_counter()
    limit = config.count * config.max_attempts_factor
    bar = tqdm(
        total=config.count,
        desc="synthesize",
        unit="task",
        disable=not config.progress or config.count < config.progress_min,
    )
    with bar:
        for index, family, difficulty in plan(config):
            if len(report.tasks) >= config.count or index >= limit:
                break
            task = make_task(
                family,
                difficulty,
                task_seed(config.seed, index),
                perturbation_rate=config.perturbation_rate,
                max_perturbations=config.max_perturbations,
                extra_tags=config.extra_tags,
            )
            report.attempts += 1
            if seen.admit(task.instruction):
                report.tasks.append(task)
                bar.update(1)
            else:
                report.duplicates += 1
    report.seconds = time.perf_counter() - start
    return report
