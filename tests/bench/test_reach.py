"""The reach bench's tasks (``bench/reach.py``): each imports, and its solution, not nothing, passes.

The tasks are hand-written Harbor folders, so nothing but these tests keeps a task sound:
a solution that no longer passes, or tests that pass on the untouched environment, would
turn the bench's pass rates into noise. Every task is verified as the held-out tasks are
(ground truth passes, the no-op fails, the same in every run); the default run verifies
one task of each area, the slow run all of them.
"""

from __future__ import annotations

import pytest

from bench.reach import TASKS, area, reach_tasks, summary_line
from components.verify.config import VerifyConfig
from components.verify.stage import main as verify
from termrl.artifacts import read_verdicts, save_tasks

AREAS = {"txt", "fs", "dev"}
ONE_PER_AREA = ("txt-count-errors", "fs-largest-upload", "dev-invoice-total")


def test_every_folder_imports_as_an_easy_harbor_task_of_a_known_area():
    tasks = reach_tasks()
    assert len(tasks) >= 30
    assert sorted(t.id for t in tasks) == sorted(p.name for p in TASKS.iterdir() if p.is_dir())
    assert {area(t.id) for t in tasks} == AREAS
    for task in tasks:
        assert task.layout == "harbor"
        assert task.difficulty == "easy"
        assert not task.allow_internet
        assert task.instruction.strip()
    assert set(ONE_PER_AREA) <= {t.id for t in tasks}


def test_summary_line_counts_each_area():
    line = summary_line("final", {"txt-a": True, "txt-b": False, "fs-a": False, "dev-a": True})
    assert line == "         final: 2/4 (50.0 % [15.0, 85.0])   dev 1/1  fs 0/1  txt 1/2"


def _verify(tasks, tmp_path) -> dict[str, str]:
    save_tasks(tmp_path / "tasks.parquet", tasks)
    config = VerifyConfig(
        tasks=str(tmp_path / "tasks.parquet"),
        out=str(tmp_path / "verdicts.parquet"),
        admitted=str(tmp_path / "admitted.parquet"),
        repeats=2,
        require=("flakiness", "ground_truth", "noop"),
        judges=(),
        progress=False,
    )
    verify(config)
    return {r["task_id"]: r["reason"] for r in read_verdicts(config.out).to_pylist()}


@pytest.mark.podman
def test_one_task_per_area_is_admitted(base_images, tmp_path):
    tasks = [t for t in reach_tasks() if t.id in ONE_PER_AREA]
    assert _verify(tasks, tmp_path) == dict.fromkeys(ONE_PER_AREA, "admitted")


@pytest.mark.podman
@pytest.mark.slow
def test_every_task_is_admitted(base_images, tmp_path):
    tasks = reach_tasks()
    assert _verify(tasks, tmp_path) == dict.fromkeys((t.id for t in tasks), "admitted")
