"""Every family x difficulty generates a structurally valid task; family helpers do what they claim."""

from __future__ import annotations

import io
import random
import subprocess
import sys
import zipfile

import pytest

from components.synthesize.draft import BASE_IMAGE
from components.synthesize.families import DIFFICULTIES, FAMILIES, cron
from components.synthesize.families.envrepair import make_wheel
from components.synthesize.generate import make_task
from pipelines.presets import CPU_CURRICULUM
from termrl.agent.demonstration import demonstration_commands, expert_responses

CELLS = [(f, d) for f in FAMILIES for d in DIFFICULTIES]


def test_at_least_ten_families_with_three_levels():
    assert len(FAMILIES) >= 10
    assert DIFFICULTIES == ("easy", "medium", "hard")


@pytest.mark.parametrize(("family", "difficulty"), CELLS)
def test_every_cell_makes_a_valid_task(family: str, difficulty: str):
    for seed in range(8):
        task = make_task(family, difficulty, seed, perturbation_rate=0.5)
        assert task.id.startswith(f"{family}-{difficulty}-")
        assert (task.family, task.difficulty, task.source, task.seed) == (
            family,
            difficulty,
            "synthetic",
            seed,
        )
        assert {family, difficulty} <= set(task.tags) and set(FAMILIES[family].tags) <= set(
            task.tags
        )
        assert "/" in task.instruction and len(task.instruction) > 30
        docker = task.dockerfile.splitlines()
        assert docker[0] == f"FROM {BASE_IMAGE}"
        # The set-up folder dies in the RUN that uses it; nothing of the tests goes in the image.
        assert any("bash ./setup.sh" in ln and "rm -rf /tmp/termrl-setup" in ln for ln in docker)
        env_paths = [f.path for f in task.environment_files]
        assert "setup/setup.sh" in env_paths
        assert all(p == "Dockerfile" or p.startswith("setup/") for p in env_paths)
        assert not any("/tests" in ln for ln in docker if ln.startswith(("COPY", "ADD")))
        assert [f.path for f in task.solution_files] == ["solve.sh"]
        assert task.solution_command == "bash /solution/solve.sh"
        assert task.test_command == "bash /tests/test.sh" and task.scoring == "reward-file"
        tests = {f.path: f.data for f in task.test_files}
        assert b"/logs/verifier/reward.txt" in tests["test.sh"]
        assert "check.py" in tests or "check.sh" in tests
        for path, data in tests.items():
            if path.endswith(".py"):
                compile(data, f"{task.id}/tests/{path}", "exec")
        for f in task.solution_files + task.environment_files:
            if f.path.endswith(".sh"):
                r = subprocess.run(["bash", "-n"], input=f.data, capture_output=True)
                assert r.returncode == 0, (task.id, f.path, r.stderr)
        assert [p["name"] for p in task.metadata["perturbations"]] == task.perturbations


def test_easy_solutions_are_one_command_after_at_most_one_look():
    """The 135M default policy can only be expected to emit one command at the easy level. Where
    that command depends on what only the sandbox shows (which bug, the wheel's version), the
    solution first looks with one read-only command, so a demonstration carries what it saw."""
    looked = set()
    for family, _ in CELLS:
        for seed in range(10):
            task = make_task(family, "easy", seed)
            body = task.solution_files[0].data.decode().split("set -euo pipefail\n", 1)[1].strip()
            *look, act = body.split("\n")
            assert len(look) <= 1 and "\n" not in act, (task.id, body)
            if look:
                assert look[0].split()[0] in ("ls", "cat") and ">" not in look[0], (task.id, body)
                looked.add(family)
    assert looked == {"python-bugfix", "environment-repair"}


def test_hard_tasks_take_several_steps():
    for family in FAMILIES:
        task = make_task(family, "hard", 3)
        body = task.solution_files[0].data.decode().split("set -euo pipefail\n", 1)[1]
        steps = len([ln for ln in body.splitlines() if ln.strip()]) + body.count("|")
        assert steps >= 3, task.id


def test_tasks_are_randomised_by_seed():
    for family, difficulty in CELLS:
        instructions = {make_task(family, difficulty, s).instruction for s in range(6)}
        assert len(instructions) >= 3, (family, difficulty)


@pytest.mark.parametrize("seed", range(6))
def test_cron_check_accepts_equivalent_schedules(seed: int):
    """The cron checks compare schedules as sets: `*/15` and `0,15,30,45` are the same job."""
    ns: dict = {"subprocess": subprocess}
    exec(cron.CRON_PY, ns)
    words, canonical, equivalent = cron._spec(random.Random(seed))
    crontab = f"SHELL=/bin/sh\n# a comment\n{equivalent} /bin/true\n"
    [(sets, user, command)] = ns["entries"](crontab)
    assert sets == ns["schedule"](canonical.split()) and command == "/bin/true" and user is None
    [(_, user, _)] = ns["entries"](f"{canonical} root /bin/true\n", system=True)
    assert user == "root"
    sched = lambda text: ns["schedule"](text.split())  # noqa: E731
    assert ns["entries"]("@weekly /bin/true\n")[0][0] == sched("0 0 * * 7") == sched("0 0 * * sun")
    assert ns["entries"]("@daily /bin/true\n")[0][0] == sched("0 0 * * *")
    assert sched("0 18 * * 1-5") != sched("0 18 * * *")


def test_make_wheel_installs_with_real_pip(tmp_path):
    name, data = make_wheel(
        "zzprobe", "1.2.3", {"zzprobe/__init__.py": "VALUE = 42\n"}, ("zzdep>=1",)
    )
    assert name == "zzprobe-1.2.3-py3-none-any.whl"
    assert (
        data
        == make_wheel("zzprobe", "1.2.3", {"zzprobe/__init__.py": "VALUE = 42\n"}, ("zzdep>=1",))[1]
    )
    assert "zzprobe-1.2.3.dist-info/RECORD" in zipfile.ZipFile(io.BytesIO(data)).namelist()
    (tmp_path / name).write_bytes(data)
    target = tmp_path / "site"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--no-deps",
            "--target",
            str(target),
            str(tmp_path / name),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    out = subprocess.run(
        [sys.executable, "-c", "import zzprobe; print(zzprobe.VALUE)"],
        env={"PYTHONPATH": str(target)},
        capture_output=True,
        text=True,
    )
    assert out.stdout.strip() == "42"


@pytest.mark.parametrize("difficulty", ["easy", "medium"])
def test_every_demonstration_turn_fits_the_curriculums_turn_budget(tiny_tokenizer, difficulty: str):
    """A turn the policy may not write out (``max_new_tokens``) can be imitated only cut short: a
    task whose solution needs one is one no policy of the default run can pass. The curriculum
    trains and measures easy and medium tasks, perturbed or not."""
    budget = CPU_CURRICULUM.values["max_new_tokens"].value
    for family in FAMILIES:
        for seed in range(30):
            task = make_task(family, difficulty, seed, perturbation_rate=0.5)
            for response in expert_responses(demonstration_commands(task)):
                tokens = len(tiny_tokenizer.encode(response, add_special_tokens=False))
                assert tokens <= budget, f"{task.id}: a {tokens}-token turn:\n{response}"
