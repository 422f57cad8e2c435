"""Perturbations: applicable ones spare what the solution needs; they are recorded and applied."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

from components.synthesize import perturb
from components.synthesize.draft import Draft
from components.synthesize.generate import make_task


def test_applicable_spares_the_tools_a_task_uses():
    draft = Draft(instruction="x", solution="jq . /a", uses=("jq", "curl"))
    names = [p.name for p in perturb.applicable(draft)]
    assert "tool-removed:jq" not in names and "tool-removed:curl" not in names
    assert {
        "tool-removed:sqlite3",
        "pip-index-missing",
        "apt-mirror-missing",
        "workdir-moved",
    } <= set(names)


def test_rate_zero_never_perturbs_and_rate_one_always_does():
    draft = Draft(instruction="x", solution="true")
    assert all(perturb.choose(draft, random.Random(i), 0.0, 2) == [] for i in range(50))
    drawn = [perturb.choose(draft, random.Random(i), 1.0, 2) for i in range(50)]
    assert all(1 <= len(d) <= 2 for d in drawn)
    assert len({p.name for d in drawn for p in d}) >= 6  # the draws spread over the options


def test_perturbations_are_recorded_and_in_the_dockerfile():
    for seed in range(40):
        task = make_task("git", "hard", seed, perturbation_rate=1.0)
        assert task.perturbations and task.perturbations == sorted(task.perturbations)
        assert [p["name"] for p in task.metadata["perturbations"]] == task.perturbations
        if "git-hooks-path-broken" in task.perturbations:
            assert "core.hooksPath" in task.dockerfile
        if "workdir-moved" in task.perturbations:
            assert task.dockerfile.rstrip().endswith("WORKDIR /root")
        for name in task.perturbations:
            if name.startswith("tool-removed:"):
                assert name.split(":")[1] not in ("git", "tar")


def test_perturbation_does_not_change_the_task_itself():
    plain = make_task("sql-sqlite", "medium", 99, perturbation_rate=0.0)
    perturbed = make_task("sql-sqlite", "medium", 99, perturbation_rate=1.0)
    assert plain.instruction == perturbed.instruction
    assert (
        plain.solution_files == perturbed.solution_files
        and plain.test_files == perturbed.test_files
    )
    assert plain.dockerfile != perturbed.dockerfile and plain.id != perturbed.id


def test_planted_files_write_what_they_record(tmp_path):
    files = {
        str(tmp_path / "a dir" / "old.conf"): "port = 1\n",
        str(tmp_path / "huge.log"): "x" * 400_000,  # gzip keeps the RUN line short
    }
    p = perturb.planted_files("demo", "two decoys", files)
    assert p.name == "decoy-files:demo" and len(p.run) < 4096
    assert perturb.planted_paths(p.description) == sorted(files)
    subprocess.run(["sh", "-c", p.run], check=True)
    for path, text in files.items():
        assert Path(path).read_text() == text


def test_planted_files_refuse_a_run_line_too_long_for_a_build():
    """buildah silently drops a RUN line longer than one argument may be (measured: the image
    came out as its base, the file absent), so an oversized plant must fail here instead."""
    noise = random.Random(0).randbytes(200_000).hex()
    with pytest.raises(ValueError, match="RUN line"):
        perturb.planted_files("demo", "too big", {"/tmp/noise": noise})
