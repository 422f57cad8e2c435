"""LLM synthesis: ask any litellm model for a new task in Harbor layout, validate the reply.

The model gets a family (with an example instruction of that family), tags
and a difficulty, and must answer with one JSON object mapping Harbor paths
to file contents:

    {"tags": [...],
     "files": {"instruction.md": ..., "environment/Dockerfile": ..., "environment/<more>": ...,
               "solution/solve.sh": ..., "tests/test.sh": ..., "tests/<more>": ...}}

``parse_reply`` turns a reply into a ``Task`` or raises ``TaskFormatError``
whose ``problem`` is a short, countable reason (not JSON, missing file,
wrong base image, ...). Validation here is structural; whether the task
works is the verify stage's job (golden solution passes, no-op fails).
"""

from __future__ import annotations

import json
import os
import random
import re
import time
from collections.abc import Callable
from pathlib import PurePosixPath
from typing import Any

from tqdm import tqdm

from components.synthesize.config import SynthesizeConfig
from components.synthesize.dedup import NearDuplicateFilter
from components.synthesize.draft import BASE_IMAGE, task_digest
from components.synthesize.generate import make_task, task_seed
from components.synthesize.report import SynthesisReport
from termrl.artifacts import Task, TaskFile
from termrl.errors import TaskFormatError

__all__ = ["build_messages", "complete_with_litellm", "parse_reply", "synthesize_with_llm"]

REQUIRED = ("instruction.md", "environment/Dockerfile", "solution/solve.sh", "tests/test.sh")
MAX_FILE_BYTES = 256 * 1024
REWARD_FILE = "/logs/verifier/reward.txt"

SYSTEM = f"""You write tasks for training AI agents that work in a Linux terminal.
A task is a folder in Harbor layout:
- instruction.md: what the agent must do, naming every absolute path involved.
- environment/Dockerfile: starts with `FROM {BASE_IMAGE}` (Debian bookworm with python3, pip, venv,
  git, curl, procps, sqlite3, jq, tmux, zip, unzip, xz, bzip2, file, cron, netcat-openbsd, iproute2,
  psmisc; WORKDIR /app; root). Other files under environment/ are its build context. There is NO
  network, neither while building nor while running: never apt-get, pip install from an index, or curl
  the internet.
- solution/solve.sh: a bash script that solves the task (run as `bash /solution/solve.sh`).
- tests/test.sh: a bash script run as `bash /tests/test.sh` after the agent finished. It checks the
  result, and where the instruction asks for a process (a service, a hook, a cron job) it exercises the
  process. It must write 1 (all checks passed) or 0 to {REWARD_FILE}. Other files under tests/ are
  uploaded next to it. Tests and solution are never in the image.
Doing nothing must fail the tests; the solution must pass them.
Answer with ONE JSON object and nothing else:
{{"tags": ["..."], "files": {{"instruction.md": "...", "environment/Dockerfile": "...",
"solution/solve.sh": "...", "tests/test.sh": "..."}}}}"""


def build_messages(
    family: str, difficulty: str, tags: list[str], example: str
) -> list[dict[str, str]]:
    """The chat messages asking for one new task of ``family`` at ``difficulty``."""
    user = (
        f"Write one new {difficulty} task of the family `{family}` (tags: {', '.join(tags)}). "
        f"Here is an instruction from an existing {difficulty} task of this family, for the level only; "
        f"write a different task:\n---\n{example.strip()}\n---\n"
        "easy = one shell command solves it; medium = a few steps; hard = several steps and some diagnosis."
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def _extract_json(text: str) -> Any:
    fenced = re.search(r"```(?:json)?\s*\n(.*?)\n```", text, re.DOTALL)
    body = fenced.group(1) if fenced else text
    start, end = body.find("{"), body.rfind("}")
    if start < 0 or end < start:
        raise ValueError("no JSON object")
    return json.loads(body[start : end + 1])


def _problem(source: str, reason: str) -> TaskFormatError:
    return TaskFormatError(source, reason)


def parse_reply(
    text: str, *, family: str, difficulty: str, seed: int, model: str, source: str
) -> Task:
    """The ``Task`` in a model's reply; ``TaskFormatError`` with a countable reason if it is not one."""
    try:
        doc = _extract_json(text)
    except ValueError as e:
        raise _problem(source, "reply is not a JSON object") from e
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, dict):
        raise _problem(source, "no `files` object")
    for path in REQUIRED:
        if not isinstance(files.get(path), str) or not files[path].strip():
            raise _problem(source, f"missing or empty {path}")
    groups: dict[str, list[TaskFile]] = {"environment": [], "solution": [], "tests": []}
    for path, content in sorted(files.items()):
        p = PurePosixPath(path)
        if path == "instruction.md" or path == "task.toml":
            continue
        if p.is_absolute() or ".." in p.parts or len(p.parts) < 2 or p.parts[0] not in groups:
            raise _problem(source, "file outside environment/, solution/, tests/")
        if not isinstance(content, str) or len(content.encode()) > MAX_FILE_BYTES:
            raise _problem(source, "file content is not text or too large")
        mode = 0o755 if path.endswith(".sh") else 0o644
        groups[p.parts[0]].append(
            TaskFile(str(PurePosixPath(*p.parts[1:])), content.encode(), mode)
        )
    dockerfile = files["environment/Dockerfile"]
    first = next(
        (
            ln.strip()
            for ln in dockerfile.splitlines()
            if ln.strip() and not ln.strip().startswith("#")
        ),
        "",
    )
    if first.split()[:2] != ["FROM", BASE_IMAGE]:
        raise _problem(source, f"Dockerfile does not start FROM {BASE_IMAGE}")
    if re.search(
        r"^\s*(COPY|ADD)\s+.*\b(tests|solution)/", dockerfile, re.MULTILINE | re.IGNORECASE
    ):
        raise _problem(source, "Dockerfile copies tests or solution into the image")
    if re.search(r"\b(apt-get|apt)\s+install|pip3?\s+install\s+(?!.*--no-index)", dockerfile):
        raise _problem(source, "Dockerfile installs from the network")
    if REWARD_FILE not in files["tests/test.sh"]:
        raise _problem(source, f"tests/test.sh does not write {REWARD_FILE}")
    instruction = files["instruction.md"].strip()
    if not 20 <= len(instruction) <= 8000:
        raise _problem(source, "instruction shorter than 20 or longer than 8000 characters")
    tags = doc.get("tags") if isinstance(doc.get("tags"), list) else []
    task = Task(
        id="",
        instruction=instruction + "\n",
        source="synthetic",
        family=family,
        difficulty=difficulty,
        tags=sorted({str(t) for t in tags[:12]} | {family, difficulty, "llm"}),
        layout="harbor",
        environment_files=groups["environment"],
        solution_files=groups["solution"],
        test_files=groups["tests"],
        seed=seed,
        metadata={"generator": "llm", "model": model, "perturbations": []},
    )
    task.id = f"{family}-{difficulty}-llm-{task_digest(task)[:12]}"
    return task


Completer = Callable[[list[dict[str, str]]], str]


def complete_with_litellm(config: SynthesizeConfig) -> Completer:
    """A function sending chat messages to ``config.llm_model`` through litellm, returning the text."""
    # litellm fetches a price list from GitHub at import unless told to use its bundled copy.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    def complete(messages: list[dict[str, str]]) -> str:
        kwargs: dict[str, Any] = {}
        if config.llm_api_base:
            kwargs["api_base"] = config.llm_api_base
            kwargs["api_key"] = config.llm_api_key or os.environ.get("OPENAI_API_KEY") or "unused"
        elif config.llm_api_key:
            kwargs["api_key"] = config.llm_api_key
        reply = litellm.completion(
            model=config.llm_model,
            messages=messages,
            temperature=config.llm_temperature,
            max_tokens=config.llm_max_tokens,
            timeout=config.llm_timeout_sec,
            num_retries=0,
            **kwargs,
        )
        return reply.choices[0].message.content or ""

    return complete


def synthesize_with_llm(
    config: SynthesizeConfig, seen: NearDuplicateFilter, complete: Completer | None = None
) -> SynthesisReport:
    """Ask the model for ``config.llm_count`` tasks, spread over the selected family x difficulty."""
    complete = complete or complete_with_litellm(config)
    report = SynthesisReport()
    started = time.perf_counter()
    cells = [(f, d) for f in config.selected_families() for d in config.difficulties]
    random.Random(f"llm:{config.seed}").shuffle(cells)
    bar = tqdm(
        range(config.llm_count),
        desc="llm",
        unit="task",
        disable=not config.progress or config.llm_count < config.progress_min,
    )
    for i in bar:
        family, difficulty = cells[i % len(cells)]
        seed = task_seed(
            config.seed, -1 - i
        )  # negative indexes: never collide with procedural seeds
        example = make_task(family, difficulty, seed)
        messages = build_messages(family, difficulty, list(example.tags), example.instruction)
        report.llm_requested += 1
        source = f"{config.llm_model}#{i}"
        try:
            text = complete(messages)
        except Exception as e:  # any provider failure is one rejected request, not a failed run
            report.llm_rejected[f"request failed: {type(e).__name__}"] += 1
            continue
        try:
            task = parse_reply(
                text,
                family=family,
                difficulty=difficulty,
                seed=seed,
                model=str(config.llm_model),
                source=source,
            )
        except TaskFormatError as e:
            report.llm_rejected[e.problem] += 1
            continue
        if not seen.admit(task.instruction):
            report.llm_rejected["near-duplicate instruction"] += 1
            report.duplicates += 1
            continue
        task.tags = sorted(set(task.tags) | set(config.extra_tags))
        report.tasks.append(task)
        report.llm_accepted += 1
    report.seconds = time.perf_counter() - started
    return report
