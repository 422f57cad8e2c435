"""Procedural generation: a reproducible plan over family x difficulty, one seed per task.

Attempt ``i`` of a run with master seed ``S`` gets the task seed
``sha256(f"{S}:{i}")`` (first 12 hex digits), and ``make_task(family,
difficulty, task_seed, ...)`` depends on nothing else, so any task can be
regenerated from the ``family``, ``difficulty`` and ``seed`` recorded on it.
The plan walks family x difficulty in rounds (each round shuffled by the
master seed), so every cell gets its share even in small runs. The extra
families (``SynthesizeConfig.extra_families``) have a plan and a seed stream of
their own (``sha256(f"{S}:extra:{i}")``), so adding them changes none of the
other tasks.

A task whose id or instruction the ``avoid`` artifact holds (or a near-duplicate
of one of its instructions) is dropped like any near-duplicate.
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


EXTRA_STREAM = "extra"
"""The seed stream of the extra families' tasks."""


def task_seed(seed: int, index: int, stream: str = "") -> int:
    """The seed of attempt ``index`` in a run with master ``seed`` (48 bits, stable across Pythons);
    ``stream`` names a plan of its own (the extra families')."""
    key = f"{seed}:{stream}:{index}" if stream else f"{seed}:{index}"
    return int(hashlib.sha256(key.encode()).hexdigest()[:12], 16)


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


def plan(
    config: SynthesizeConfig, families: list[str] | None = None, stream: str = ""
) -> Iterator[tuple[int, str, str]]:
    """Endless ``(attempt index, family, difficulty)``: rounds over every cell, shuffled per round.
    ``families``: the selected ones unless given; ``stream``: the seed stream (``task_seed``)."""
    chosen = config.selected_families() if families is None else families
    cells = [(f, d) for f in chosen for d in config.difficulties]
    index = 0
    prefix = f"plan:{config.seed}:{stream}:" if stream else f"plan:{config.seed}:"
    for round_no in range(1 << 30):
        order = list(cells)
        random.Random(f"{prefix}{round_no}").shuffle(order)
        for family, difficulty in order:
            yield index, family, difficulty
            index += 1


def generate_tasks(
    config: SynthesizeConfig, seen: NearDuplicateFilter, avoid_ids: frozenset[str] = frozenset()
) -> SynthesisReport:
    """``config.count`` procedural tasks, then ``config.extra_count`` from the extra families, whose
    instructions ``seen`` admits and whose ids are not in ``avoid_ids`` (fewer if attempts run out)."""
    report = SynthesisReport()
    start = time.perf_counter()
    passes = [(config.count, None, "")]
    if config.selected_extra_families():
        passes.append((config.extra_count, config.selected_extra_families(), EXTRA_STREAM))
    total = sum(count for count, _, _ in passes)
    bar = tqdm(
        total=total,
        desc="synthesize",
        unit="task",
        disable=not config.progress or total < config.progress_min,
    )
    with bar:
        for count, families, stream in passes:
            _one_pass(config, seen, avoid_ids, report, bar, count, families, stream)
    report.seconds = time.perf_counter() - start
    return report


def _one_pass(
    config: SynthesizeConfig,
    seen: NearDuplicateFilter,
    avoid_ids: frozenset[str],
    report: SynthesisReport,
    bar: tqdm,
    count: int,
    families: list[str] | None,
    stream: str,
) -> None:
    """Up to ``count`` admitted tasks from one plan (``families``, seed ``stream``), into ``report``."""
    kept, limit = 0, count * config.max_attempts_factor
    for index, family, difficulty in plan(config, families, stream):
        if kept >= count or index >= limit:
            break
        task = make_task(
            family,
            difficulty,
            task_seed(config.seed, index, stream),
            perturbation_rate=config.perturbation_rate,
            max_perturbations=config.max_perturbations,
            extra_tags=config.extra_tags,
        )
        report.attempts += 1
        if task.id not in avoid_ids and seen.admit(task.instruction):
            report.tasks.append(task)
            kept += 1
            bar.update(1)
        else:
            report.duplicates += 1
