"""From a family's draft to a complete ``Task``: the one place that knows the task layout.

A family generator returns a ``Draft``: what the task is about (instruction,
set-up files and script, golden solution, checks). ``assemble`` turns a draft
plus the chosen perturbations into a ``termrl.artifacts.Task`` with a
Dockerfile on the local base image:

    FROM termrl/base:bookworm
    COPY setup/ /tmp/termrl-setup/
    RUN cd /tmp/termrl-setup && bash ./setup.sh && cd / && rm -rf /tmp/termrl-setup
    RUN <perturbation>                 # one line per applied perturbation
    ENV ...                            # the draft's environment variables
    WORKDIR /app                       # or where a perturbation moved it

The set-up folder is removed in the same RUN that uses it, so nothing the
generator wrote is visible in the sandbox. Tests live only in ``test_files``
(uploaded to /tests at scoring time): ``test.sh`` runs ``check.sh`` and/or
``check.py`` and writes 1 or 0 to /logs/verifier/reward.txt.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from termrl.artifacts import Task, TaskFile

__all__ = [
    "BASE_IMAGE",
    "CHECK_PY_PRELUDE",
    "Draft",
    "FileSpec",
    "Perturbation",
    "assemble",
    "py_literal",
    "task_digest",
]

BASE_IMAGE = "termrl/base:bookworm"
SETUP_DIR = "/tmp/termrl-setup"

# A file's content, optionally with its mode bits.
FileSpec = str | bytes | tuple[str | bytes, int]

TEST_SH = """#!/bin/bash
# Verifier: runs this task's checks and writes the reward (1 only if every check passes).
TESTS="${TEST_DIR:-/tests}"
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
status=0
if [ -f "$TESTS/check.sh" ]; then bash "$TESTS/check.sh" || status=1; fi
if [ "$status" -eq 0 ] && [ -f "$TESTS/check.py" ]; then python3 "$TESTS/check.py" || status=1; fi
if [ "$status" -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; echo "all checks passed"; fi
exit "$status"
"""

# Shared by every check.py: a failed check exits 1 with its reason on stdout,
# which is what a reviewer of the verifier's output wants to read.
CHECK_PY_PRELUDE = """import json, os, subprocess, sys


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def read(path, mode="r"):
    try:
        with open(path, mode) as f:
            return f.read()
    except OSError as e:
        fail(f"cannot read {path}: {e}")


def sh(cmd, **kw):
    return subprocess.run(cmd, shell=True, capture_output=True, text=True, **kw)

"""


@dataclass(frozen=True)
class Perturbation:
    """A deliberate change to the environment, applied after set-up as one RUN line.

    ``name`` is what is recorded on the task (``tool-removed:jq``); ``run`` is
    the shell for the RUN line; ``env``/``workdir`` override the draft's.
    """

    name: str
    description: str
    run: str = ""
    env: tuple[tuple[str, str], ...] = ()
    workdir: str | None = None


@dataclass
class Draft:
    """Everything a family decides about one task, before assembly."""

    instruction: str
    """What the agent is asked to do; names every absolute path it needs."""
    solution: str
    """Body of solution/solve.sh (bash); must pass the checks under every perturbation."""
    tags: list[str] = field(default_factory=list)
    setup_files: dict[str, FileSpec] = field(default_factory=dict)
    """Build-context files, copied to /tmp/termrl-setup (removed after setup.sh)."""
    setup_script: str = ""
    """Bash run at build time from /tmp/termrl-setup; places files, creates state."""
    check_py: str = ""
    """Python checks (appended to CHECK_PY_PRELUDE); exit 0 = pass."""
    check_sh: str = ""
    """Bash checks, run before check_py; exit 0 = pass."""
    test_files: dict[str, FileSpec] = field(default_factory=dict)
    """Extra data the checks need, uploaded to /tests beside them."""
    uses: tuple[str, ...] = ()
    """Tools the solution or the checks run; a perturbation never removes these."""
    env: dict[str, str] = field(default_factory=dict)
    workdir: str = "/app"
    perturbations: tuple[Perturbation, ...] = ()
    """Family-specific perturbations the solution is written to survive."""
    metadata: dict[str, Any] = field(default_factory=dict)
    agent_timeout_sec: float = 600.0
    verifier_timeout_sec: float = 120.0


def _task_file(path: str, spec: FileSpec, default_mode: int = 0o644) -> TaskFile:
    data, mode = spec if isinstance(spec, tuple) else (spec, default_mode)
    return TaskFile(path=path, data=data.encode() if isinstance(data, str) else data, mode=mode)


def py_literal(value: Any) -> str:
    """A Python expression for JSON-able ``value`` (embeds expectations in check.py)."""
    return f"json.loads({json.dumps(json.dumps(value, sort_keys=True))})"


def _dockerfile(draft: Draft, perturbations: list[Perturbation]) -> str:
    lines = [
        f"FROM {BASE_IMAGE}",
        f"COPY setup/ {SETUP_DIR}/",
        f"RUN cd {SETUP_DIR} && bash ./setup.sh && cd / && rm -rf {SETUP_DIR}",
    ]
    env = dict(draft.env)
    workdir = draft.workdir
    for p in perturbations:
        if p.run:
            lines.append(f"RUN {p.run}")
        env.update(p.env)
        workdir = p.workdir or workdir
    lines += [f"ENV {k}={json.dumps(v)}" for k, v in sorted(env.items())]
    lines.append(f"WORKDIR {workdir}")
    return "\n".join(lines) + "\n"


def task_digest(task: Task) -> str:
    """A content hash of everything that defines a task (not its id)."""
    h = hashlib.sha256()
    for part in (task.family, task.difficulty, task.instruction):
        h.update(part.encode() + b"\0")
    for group in (task.environment_files, task.solution_files, task.test_files):
        for f in group:
            h.update(f.path.encode() + b"\0" + f.data + b"\0" + str(f.mode).encode())
    return h.hexdigest()


def assemble(
    draft: Draft,
    *,
    family: str,
    difficulty: str,
    seed: int,
    perturbations: list[Perturbation],
    source: str = "synthetic",
    extra_metadata: dict[str, Any] | None = None,
) -> Task:
    """Build the ``Task`` for ``draft`` with ``perturbations`` applied; the id hashes its content."""
    setup_sh = "#!/bin/bash\nset -euo pipefail\n" + draft.setup_script.strip() + "\n"
    environment = [TaskFile("Dockerfile", _dockerfile(draft, perturbations).encode())]
    environment.append(_task_file("setup/setup.sh", setup_sh, 0o755))
    environment += [_task_file(f"setup/{p}", s) for p, s in sorted(draft.setup_files.items())]
    solution = "#!/bin/bash\nset -euo pipefail\n" + draft.solution.strip() + "\n"
    tests = [_task_file("test.sh", TEST_SH, 0o755)]
    if draft.check_sh:
        tests.append(
            _task_file(
                "check.sh", "#!/bin/bash\nset -uo pipefail\n" + draft.check_sh.strip() + "\n"
            )
        )
    if draft.check_py:
        tests.append(_task_file("check.py", CHECK_PY_PRELUDE + draft.check_py.strip() + "\n"))
    tests += [_task_file(p, s) for p, s in sorted(draft.test_files.items())]
    metadata = dict(draft.metadata)
    metadata["perturbations"] = [
        {"name": p.name, "description": p.description} for p in perturbations
    ]
    metadata["generator"] = "procedural"
    metadata.update(extra_metadata or {})
    task = Task(
        id="",
        instruction=draft.instruction.strip() + "\n",
        source=source,
        family=family,
        difficulty=difficulty,
        tags=sorted(set(draft.tags) | {family, difficulty}),
        environment_files=environment,
        solution_files=[_task_file("solve.sh", solution, 0o755)],
        test_files=tests,
        agent_timeout_sec=draft.agent_timeout_sec,
        verifier_timeout_sec=draft.verifier_timeout_sec,
        seed=seed,
        perturbations=[p.name for p in perturbations],
        metadata=metadata,
    )
    task.id = f"{family}-{difficulty}-{task_digest(task)[:12]}"
    return task
