"""Deliberate perturbations of a task's environment (the seed's "environment augmentation").

The seed perturbs or partly breaks the initial environment — a preinstalled
dependency removed, the package mirror switched to one that does not
answer — so the agent learns to check, diagnose and recover instead of
assuming an ideal machine. Each perturbation here is one RUN line (or an
ENV/WORKDIR change) applied after the task's set-up:

    tool-removed:<tool>   a preinstalled tool the golden solution and checks do not need is deleted
    pip-index-missing     pip's index points at an address where nothing listens
    apt-mirror-missing    apt's sources point at a mirror that does not resolve
    workdir-moved         the shell starts in /root instead of /app

Families add their own (a broken git config, decoy files from ``planted_files``, ...)
through ``Draft.perturbations``.
The golden solution is written to pass under every perturbation its draft
allows; the podman test runs it under them.
"""

from __future__ import annotations

import base64
import gzip
import random
import shlex

from components.synthesize.draft import Draft, Perturbation

__all__ = ["REMOVABLE_TOOLS", "applicable", "choose", "planted_files", "planted_paths"]

# Tools of termrl/base:bookworm that a task may lose, with the binaries to delete.
REMOVABLE_TOOLS: dict[str, tuple[str, ...]] = {
    "jq": ("jq",),
    "sqlite3": ("sqlite3",),
    "zip": ("zip",),
    "unzip": ("unzip",),
    "tmux": ("tmux",),
    "file": ("file",),
    "nc": ("nc", "netcat", "nc.openbsd"),
    "curl": ("curl",),
    "xz": ("xz", "unxz", "xzcat"),
    "bzip2": ("bzip2", "bunzip2", "bzcat"),
}


# The longest RUN line planted_files writes: /bin/sh -c gets it as one argument (Linux: 128 KiB).
PLANTED_RUN_MAX = 64 * 1024


def _tool_removed(tool: str) -> Perturbation:
    bins = " ".join(REMOVABLE_TOOLS[tool])
    return Perturbation(
        name=f"tool-removed:{tool}",
        description=f"the preinstalled tool {tool} was deleted from the image",
        run=f"for b in {bins}; do rm -f /usr/bin/$b /bin/$b /usr/local/bin/$b; done",
    )


PIP_INDEX_MISSING = Perturbation(
    name="pip-index-missing",
    description="pip is configured to use an index at 127.0.0.1:9 where nothing listens",
    run=(
        "printf '[global]\\nindex-url = http://127.0.0.1:9/simple\\ntimeout = 3\\nretries = 0\\n'"
        " > /etc/pip.conf"
    ),
)

APT_MIRROR_MISSING = Perturbation(
    name="apt-mirror-missing",
    description="apt's sources point at a mirror host that does not resolve",
    run=(
        "rm -f /etc/apt/sources.list.d/* && echo 'deb http://deb.mirror.invalid/debian bookworm main'"
        " > /etc/apt/sources.list"
    ),
)

WORKDIR_MOVED = Perturbation(
    name="workdir-moved",
    description="the working directory is /root, not /app",
    workdir="/root",
)


def applicable(draft: Draft) -> list[Perturbation]:
    """Every perturbation ``draft``'s golden solution and checks survive, in a fixed order."""
    options = [_tool_removed(t) for t in sorted(REMOVABLE_TOOLS) if t not in draft.uses]
    options += [PIP_INDEX_MISSING, APT_MIRROR_MISSING]
    if draft.workdir == "/app":
        options.append(WORKDIR_MOVED)
    options += list(draft.perturbations)
    return options


def choose(draft: Draft, rng: random.Random, rate: float, max_count: int) -> list[Perturbation]:
    """With probability ``rate``, 1..``max_count`` distinct perturbations; else none.

    A family's own perturbations are weighted up (drawn first half the time):
    they break something the task is about, which teaches more than a missing
    tool the task never needed.
    """
    if max_count <= 0 or rng.random() >= rate:
        return []
    options = applicable(draft)
    count = rng.randint(1, min(max_count, len(options)))
    chosen: list[Perturbation] = []
    if draft.perturbations and rng.random() < 0.5:
        chosen.append(rng.choice(list(draft.perturbations)))
    rest = [p for p in options if p not in chosen]
    chosen += rng.sample(rest, max(0, count - len(chosen)))
    return sorted(chosen, key=lambda p: p.name)


def planted_files(kind: str, description: str, files: dict[str, str]) -> Perturbation:
    """A family perturbation that plants ``files`` (absolute path → text) after set-up.

    Decoys, stale copies and look-alike files: the environment a real machine
    has around the thing the task is about. The recorded description ends with
    ``(planted: /a, /b)`` so a test can see that the files are there. Contents
    travel gzip-compressed in the RUN line (one shell argument holds at most
    128 KiB), and a line that would still be too long is refused here.
    """
    steps = []
    for path, text in sorted(files.items()):
        encoded = base64.b64encode(gzip.compress(text.encode(), mtime=0)).decode()
        parent = path.rsplit("/", 1)[0] or "/"
        steps.append(
            f"mkdir -p {shlex.quote(parent)} && echo {encoded} | base64 -d | gunzip > {shlex.quote(path)}"
        )
    run = " && ".join(steps)
    if len(run) > PLANTED_RUN_MAX:
        raise ValueError(
            f"planted files of {kind} take {len(run)} bytes of RUN line (max {PLANTED_RUN_MAX})"
        )
    return Perturbation(
        name=f"decoy-files:{kind}",
        description=f"{description} (planted: {', '.join(sorted(files))})",
        run=run,
    )


def planted_paths(perturbation_description: str) -> list[str]:
    """The paths a ``planted_files`` perturbation recorded in its description."""
    if "(planted: " not in perturbation_description:
        return []
    listed = perturbation_description.rsplit("(planted: ", 1)[1].rstrip(")")
    return [p.strip() for p in listed.split(",") if p.strip()]
