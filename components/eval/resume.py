"""Crash-safe eval: each finished trial is on disk at once, and a rerun resumes.

    <out>.parts/
      run.json                           what this eval is: its fingerprint
      <task>-<hash>-t<trial>.parquet     one finished trial's row (an eval-results artifact)
    <out>                                the eval-results artifact, written atomically by ``merge``

The same approach as rollout's ``components.rollout.writer``: each part is
written atomically (temp file, fsync, rename) the moment its trial ends, so a
crash, a kill or a pre-empted node loses only the trials in flight. A rerun
with the same ``out`` and the same fingerprint reads the parts back and runs
only the (task, trial) pairs that are missing; the merged artifact holds
every row.

The fingerprint is everything that changes what a trial's row says: the
tasks (their content, not only their ids), the agent, the model, the
decoding, the prompt, the limits, the backend, the run's name. When it differs, the old
parts are from another evaluation: they are removed, with a line saying so,
and the eval starts over (rows of two configurations never mix). The trial
count is not part of it, since trial t is the same trial whatever the count:
raising ``trials`` keeps the finished ones.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from components.eval.config import EvalConfig
from components.eval.trials import run_trials
from termrl.artifacts.eval_results import read_eval_results, write_eval_results
from termrl.artifacts.tasks import Task
from termrl.errors import ArtifactError
from termrl.llm.engine import Engine

__all__ = ["TrialParts", "fingerprint", "resume_trials"]

_RUN_FILE = "run.json"
_OUTCOME_KEYS = (
    "agent",
    "model",
    "api_base",
    "max_turns",
    "max_new_tokens",
    "context_window",
    "temperature",
    "seed",
    "prompt_style",
)


def _task_digest(tasks: list[Task]) -> str:
    """A digest of the tasks' full content (a re-synthesised task keeps its id, not its tests)."""
    digest = hashlib.sha256()
    for task in tasks:
        digest.update(repr(sorted(task.to_row().items())).encode())
    return digest.hexdigest()[:16]


def fingerprint(config: EvalConfig, tasks: list[Task]) -> dict[str, Any]:
    """What must match for a rerun to resume the same evaluation (``trials`` need not)."""
    return {
        "tasks": _task_digest(tasks),
        "run_id": config.label(),
        **{key: getattr(config, key) for key in _OUTCOME_KEYS},
        "backend": config.sandbox.backend,  # the options (a pod's namespace) change no outcome
    }


class TrialParts:
    """The sidecar folder of one eval: write finished trials, read them back, merge."""

    def __init__(self, parts_dir: str | os.PathLike, fingerprint: dict[str, Any]) -> None:
        self.dir = Path(parts_dir)
        self.fingerprint = fingerprint
        run_file = self.dir / _RUN_FILE
        if self.dir.is_dir():
            found = json.loads(run_file.read_text()) if run_file.is_file() else {}
            if found == fingerprint:
                return
            differs = sorted(
                k for k in set(found) | set(fingerprint) if found.get(k) != fingerprint.get(k)
            )
            # Log, not raise: the rows were of another configuration, and rerunning is what was asked.
            print(
                f"eval: {self.dir} holds trials of a different evaluation (differs in: {', '.join(differs)}); "
                "starting over",
                file=sys.stderr,
                flush=True,
            )
            shutil.rmtree(self.dir)
        self.dir.mkdir(parents=True)
        tmp = run_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(fingerprint, indent=1, sort_keys=True))
        os.replace(tmp, run_file)

    def _part(self, task_id: str, trial: int) -> Path:
        # Task ids are free text: keep a readable stem and make it unique with a hash.
        stem = re.sub(r"[^A-Za-z0-9._-]", "_", task_id)[:60]
        digest = hashlib.sha256(task_id.encode()).hexdigest()[:8]
        return self.dir / f"{stem}-{digest}-t{trial}.parquet"

    def write(self, row: dict[str, Any]) -> Path:
        """Persist one finished trial (atomic)."""
        path = self._part(row["task_id"], int(row["trial"]))
        write_eval_results(path, [row])
        return path

    def load(self) -> list[dict[str, Any]]:
        """Every finished trial on disk. A part that cannot be read (a disk fault) is removed:
        its trial simply runs again."""
        rows = []
        for path in sorted(self.dir.glob("*.parquet")):
            try:
                rows += read_eval_results(path).to_pylist()
            except ArtifactError:
                path.unlink(missing_ok=True)
        return rows

    def merge(self, rows: list[dict[str, Any]], out: str | os.PathLike) -> None:
        """Write the final artifact atomically, then drop the sidecar folder."""
        write_eval_results(out, rows)
        shutil.rmtree(self.dir, ignore_errors=True)


async def resume_trials(
    config: EvalConfig,
    tasks: list[Task],
    parts: TrialParts,
    *,
    engine: Engine | None = None,
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Run the trials ``parts`` does not hold yet, persisting each as it ends; every row, in order.

    ``on_row`` sees each newly finished row after it is on disk (not the resumed ones).
    """
    order = {task.id: index for index, task in enumerate(tasks)}
    done = {
        (r["task_id"], r["trial"]): r
        for r in parts.load()
        if r["task_id"] in order and r["trial"] < config.trials
    }

    def persist(row: dict[str, Any]) -> None:
        parts.write(row)
        if on_row is not None:
            on_row(row)

    fresh = await run_trials(config, tasks, engine=engine, on_row=persist, done=set(done))
    return sorted([*done.values(), *fresh], key=lambda r: (order[r["task_id"]], r["trial"]))
