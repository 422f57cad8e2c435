"""The families of issue 35 (commands and situations the first twelve lack), in real bwrap sandboxes.

Unit level: the registry has >= 24 families with distinct names and tag sets;
every new family is deterministic per seed and records (and writes into its Dockerfile)
the perturbations it draws; every family speaks in three phrasings and records all three
(the demonstrate stage replays each).

Sandbox level (bwrap over the podman-built task image): for each new family
the golden solution passes and doing nothing fails, and in the no-op sandbox
every recorded perturbation is visibly applied (the shell starts in /root,
the tool is gone, the decoy files are there). Easy cells run by default;
medium and hard are slow, with a few medium cells in CI.
"""

from __future__ import annotations

import os
import re
import shutil
from collections import Counter
from dataclasses import replace

import pytest

from components.synthesize.families import DIFFICULTIES, FAMILIES
from components.synthesize.families.phrasing import STYLES
from components.synthesize.generate import make_task, task_seed
from components.synthesize.perturb import REMOVABLE_TOOLS, planted_paths
from termrl.artifacts import Task, TaskFile
from termrl.sandbox import SandboxManager, SandboxSpec
from termrl.taskrun import run_solution, run_tests

NEW_FAMILIES = [
    "checksums",
    "find-xargs",
    "config-edit",
    "diff-patch",
    "date-time",
    "users-groups",
    "compression",
    "regex-rename",
    "disk-usage",
    "shell-env",
    "process-control",
    "set-operations",
    "text-utils",
]
SAMPLE_SEED = 35
CI_MEDIUM = ["checksums", "process-control", "config-edit"]


def test_registry_has_at_least_24_distinct_families():
    assert len(FAMILIES) >= 24
    assert set(NEW_FAMILIES) <= set(FAMILIES)
    assert len({f.name for f in FAMILIES.values()}) == len(FAMILIES)
    assert all(name == fam.name for name, fam in FAMILIES.items())
    tag_sets = Counter(frozenset(f.tags) for f in FAMILIES.values())
    assert max(tag_sets.values()) == 1, "two families carry the same tags"


@pytest.mark.parametrize("family", NEW_FAMILIES)
def test_new_family_is_deterministic_per_seed(family: str):
    for difficulty in DIFFICULTIES:
        for seed in (0, 7, 123456789):
            a = make_task(family, difficulty, seed, perturbation_rate=0.7)
            b = make_task(family, difficulty, seed, perturbation_rate=0.7)
            assert a.id == b.id and a.instruction == b.instruction
            assert a.environment_files == b.environment_files and a.test_files == b.test_files
        others = {make_task(family, difficulty, s).id for s in range(5)}
        assert len(others) == 5, (family, difficulty)


def _paths(text: str) -> set[str]:
    return set(re.findall(r"(?<![\w.])/[\w./-]*\w", text))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_family_speaks_in_every_phrasing_and_records_all_three(family: str):
    for difficulty in DIFFICULTIES:
        styles = Counter()
        for seed in range(30):
            task = make_task(family, difficulty, seed)
            styles[task.metadata["phrasing"]] += 1
            voices = task.metadata["phrasings"]
            assert set(voices) == set(STYLES) and len(set(voices.values())) == 3, (family, seed)
            assert voices[task.metadata["phrasing"]] + "\n" == task.instruction
            # Every voice points at the same places: a path one voice names has its folder
            # named in the others (a voice may name a file relative to a folder it names).
            named = {style: _paths(text) for style, text in voices.items()}
            for style, paths in named.items():
                for other in named.values():
                    for folder in {p.rsplit("/", 1)[0] for p in other if p.count("/") >= 2}:
                        assert any(p == folder or p.startswith(folder + "/") for p in paths), (
                            family,
                            difficulty,
                            seed,
                            style,
                            folder,
                            voices[style],
                        )
        assert set(styles) == set(STYLES), (family, difficulty, styles)


@pytest.mark.parametrize("family", NEW_FAMILIES)
def test_new_family_records_and_writes_its_perturbations(family: str):
    own = set()
    for difficulty in DIFFICULTIES:
        for seed in range(30):
            task = make_task(family, difficulty, seed, perturbation_rate=1.0)
            assert (
                task.perturbations
                and [p["name"] for p in task.metadata["perturbations"]] == task.perturbations
            )
            if "workdir-moved" in task.perturbations:
                assert task.dockerfile.rstrip().endswith("WORKDIR /root")
            for p in task.metadata["perturbations"]:
                if p["name"].startswith("decoy-files:"):
                    own.add(p["name"])
                    paths = planted_paths(p["description"])
                    assert paths and all(path.startswith("/") for path in paths)
                    assert any(
                        ln.startswith("RUN ") and "base64 -d" in ln
                        for ln in task.dockerfile.splitlines()
                    )
            # The plain task is the same task: perturbing never changes what is asked or checked.
            plain = make_task(family, difficulty, seed)
            assert plain.instruction == task.instruction and plain.test_files == task.test_files
    assert own, f"{family} never draws a perturbation of its own"


def test_easy_solutions_stay_one_command():
    for family in NEW_FAMILIES:
        for seed in range(10):
            body = make_task(family, "easy", seed).solution_files[0].data.decode()
            assert len(body.split("set -euo pipefail\n", 1)[1].strip().splitlines()) == 1, family


def test_medium_solutions_look_act_and_check():
    """A medium demonstration shows the habit: a first step that only looks, the work, a last step that checks."""
    for family in NEW_FAMILIES:
        task = make_task(family, "medium", 1)
        body = task.solution_files[0].data.decode().split("set -euo pipefail\n", 1)[1]
        steps = [ln for ln in body.strip().splitlines() if ln.strip()]
        assert len(steps) >= 3, family
        assert ">" not in steps[0].replace("2>/dev/null", "").replace(">&2", ""), (family, steps[0])


def _sample(family: str, difficulty: str, *, own_perturbation: bool = False) -> Task:
    """A perturbed sample; with ``own_perturbation``, the first seed that draws the family's own."""
    for i in range(200):
        task = make_task(
            family, difficulty, task_seed(SAMPLE_SEED, i * 97 + len(family)), perturbation_rate=1.0
        )
        if not own_perturbation or any(p.startswith("decoy-files:") for p in task.perturbations):
            return task
    raise AssertionError(f"{family} {difficulty} never draws its own perturbation")


async def _assert_applied(session, task: Task) -> None:
    for p in task.metadata["perturbations"]:
        name = p["name"]
        if name == "workdir-moved":
            probe = '[ "$(pwd)" = /root ]'
        elif name.startswith("tool-removed:"):
            bins = REMOVABLE_TOOLS[name.split(":", 1)[1]]
            probe = " && ".join(f"! command -v {b}" for b in bins)
        elif name == "pip-index-missing":
            probe = "grep -q 127.0.0.1:9 /etc/pip.conf"
        elif name == "apt-mirror-missing":
            probe = "grep -q mirror.invalid /etc/apt/sources.list"
        elif name.startswith("decoy-files:"):
            probe = " && ".join(f"test -e '{path}'" for path in planted_paths(p["description"]))
        else:
            raise AssertionError(f"no probe for the perturbation {name}")
        result = await session.exec(probe, timeout=30)
        assert result.exit_code == 0, f"{task.id}: {name} is not applied ({probe})"


async def _golden_passes_noop_fails(manager: SandboxManager, task: Task) -> None:
    async with await manager.create(SandboxSpec.from_task(task)) as session:
        await _assert_applied(session, task)
        noop = await run_tests(session, task)
    async with await manager.create(SandboxSpec.from_task(task)) as session:
        solved = await run_solution(session, task)
        golden = await run_tests(session, task)
    assert golden.passed and golden.reward == 1.0, (
        f"{task.id} golden failed under {task.perturbations}:\n{solved.output[-1500:]}\n"
        f"--- tests ---\n{golden.output[-1500:]}"
    )
    assert not noop.passed and noop.reward == 0.0, f"{task.id}: doing nothing passes"
    assert "FAIL" in noop.output  # the check said why


@pytest.fixture
async def bwrap(base_images: str):
    if os.geteuid() != 0 or shutil.which("bwrap") is None:
        pytest.skip("the bwrap backend needs root and bubblewrap")
    async with SandboxManager(backend="bwrap", output_limit=8192) as manager:
        yield manager


@pytest.mark.podman
@pytest.mark.parametrize("family", NEW_FAMILIES)
async def test_easy_oracle_passes_and_noop_fails(bwrap: SandboxManager, family: str):
    await _golden_passes_noop_fails(bwrap, _sample(family, "easy"))


@pytest.mark.slow
@pytest.mark.ci
@pytest.mark.podman
@pytest.mark.parametrize("family", CI_MEDIUM)
async def test_medium_in_ci(bwrap: SandboxManager, family: str):
    await _golden_passes_noop_fails(bwrap, _sample(family, "medium", own_perturbation=True))


@pytest.mark.slow
@pytest.mark.podman
@pytest.mark.parametrize(
    ("family", "difficulty"),
    [
        (f, d)
        for f in NEW_FAMILIES
        for d in ("medium", "hard")
        if (f, d) not in [(c, "medium") for c in CI_MEDIUM]
    ],
)
async def test_medium_and_hard(bwrap: SandboxManager, family: str, difficulty: str):
    own = difficulty == "medium"  # every medium template has a decoy perturbation of its own
    await _golden_passes_noop_fails(bwrap, _sample(family, difficulty, own_perturbation=own))


# The text-utils easy operations in Python, given the task's metadata as ``m``.
TEXT_UTILS_PY = """import collections, re
text = open(m["src"]).read()
rows = text.splitlines()
counts = collections.Counter(rows)
sizes = {"lines": len(rows), "words": len(text.split()), "characters": len(text)}
res = {
    "reverse": lambda: rows[::-1],
    "number": lambda: [f"{i}. {r}" for i, r in enumerate(rows, 1)],
    "head": lambda: rows[: m["n"]],
    "tail": lambda: rows[-m["n"] :],
    "range": lambda: rows[m["first"] - 1 : m["last"]],
    "count": lambda: [str(sizes[m["kind"]])],
    "case": lambda: [r.upper() if m["case"] == "upper" else r.lower() for r in rows],
    "column": lambda: [r.split(m["delimiter"])[m["field"] - 1] for r in rows],
    "frequency": lambda: [f"{c}\\t{v}" for v, c in counts.most_common()],
    "sort-numeric": lambda: sorted(rows, key=int, reverse=m["descending"]),
    "join": lambda: [m["delimiter"].join(rows)],
    "drop-blank": lambda: [r for r in rows if r.strip()],
    "squeeze": lambda: [re.sub(" +", " ", r) for r in rows],
    "longest": lambda: [max(rows, key=len)],
    "unique": lambda: [r for r in counts if counts[r] == 1],
    "reverse-chars": lambda: [r[::-1] for r in rows],
}[m["op"]]()
open(m["out"], "w").write("\\n".join(res))
"""

# Another correct approach than the golden one, per family: the checks judge the outcome, not the tool.
ALTERNATIVES = {
    # git's diff instead of diff -u: other headers (diff --git, index), same hunks.
    ("diff-patch", "easy"): lambda m: (
        f"git diff --no-index {m['old']} {m['new']} > {m['out']} || true"
    ),
    # Python instead of gzip/xz, and the corrupt files listed relative to the folder.
    ("compression", "hard"): lambda m: (
        f"""python3 - <<'PY'
import gzip, lzma, os
root = {m["root"]!r}
bad = []
for d, _, files in os.walk(root):
    for f in sorted(files):
        if f.endswith(".gz"):
            p = os.path.join(d, f)
            try:
                data = gzip.open(p).read()
            except Exception:
                bad.append(os.path.relpath(p, root))
                continue
            with lzma.open(p[:-3] + ".xz", "w") as out:
                out.write(data)
            os.remove(p)
open({m["report"]!r}, "w").write("".join(b + "\\n" for b in bad))
PY"""
    ),
    # Python instead of the coreutils filter, whichever operation the seed drew; no trailing
    # newline, `1. line` numbering and tab-separated counts: the checks normalise all three.
    ("text-utils", "easy"): lambda m: f"python3 - <<'PY'\nm = {m!r}\n" + TEXT_UTILS_PY + "PY",
    # The file rewritten with `export` and quotes, as many people write .env files.
    ("config-edit", "easy"): lambda m: (
        f"grep -v '^{m['key']}=' {m['path']} > /tmp/env && "
        f"echo 'export {m['key']}=\"{m['value']}\"' >> /tmp/env && cp /tmp/env {m['path']}"
    ),
}


@pytest.mark.slow
@pytest.mark.ci
@pytest.mark.podman
@pytest.mark.parametrize(("family", "difficulty"), sorted(ALTERNATIVES))
async def test_another_correct_approach_passes(bwrap: SandboxManager, family: str, difficulty: str):
    for seed in range(2):
        task = make_task(family, difficulty, seed)
        body = ALTERNATIVES[family, difficulty](task.metadata)
        script = "#!/bin/bash\nset -euo pipefail\n" + body + "\n"
        other = replace(task, solution_files=[TaskFile("solve.sh", script.encode(), 0o755)])
        async with await bwrap.create(SandboxSpec.from_task(other)) as session:
            solved = await run_solution(session, other)
            outcome = await run_tests(session, other)
        assert outcome.passed, f"{task.id}:\n{solved.output[-1000:]}\n{outcome.output[-1500:]}"
