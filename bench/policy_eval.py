"""One policy evaluated on a tasks artifact, once: the step ``bench/voices.py`` and ``bench/reach.py`` share.

``add_policy_options`` gives a bench's parser the options ``evaluate`` reads (``--model
LABEL=PATH``, repeatable; ``--out``; the eval settings) and ``policies`` reads the labels.

The eval stage runs as a subprocess with the curriculum's eval settings as the bench's
options give them (greedy, ``--max-turns``, ``--max-new-tokens``, ``--concurrency``); its
results go to ``OUT/LABEL.parquet``, and a label whose results exist is not evaluated again,
so a bench rerun with the same ``--out`` resumes.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def evaluate(label: str, model: str, tasks: Path, out: Path, args: argparse.Namespace) -> Path:
    """``OUT/LABEL.parquet``: ``model`` evaluated on ``tasks`` (a failed eval ends the bench)."""
    results = out / f"{label}.parquet"
    if results.exists():
        return results
    command = [
        sys.executable, "-m", "components.eval", "--tasks", str(tasks), "--model", model,
        "--max-turns", str(args.max_turns), "--max-new-tokens", str(args.max_new_tokens),
        "--concurrency", str(args.concurrency), "--out", str(results), "--run-id", label,
    ]  # fmt: skip
    if subprocess.run(command, cwd=ROOT).returncode != 0:
        raise SystemExit(f"the eval of {label} ({model}) failed: its error is above")
    return results


def add_policy_options(parser: argparse.ArgumentParser) -> None:
    """``--model LABEL=PATH`` (repeatable), ``--out`` and the curriculum's eval settings."""
    parser.add_argument("--model", action="append", required=True, help="LABEL=PATH, repeatable")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--concurrency", type=int, default=16)


def policies(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, str]:
    """Label -> model path, in ``--model``'s order; a repeated label or an empty part is a usage error."""
    models = dict(spec.split("=", 1) for spec in args.model if "=" in spec)
    if len(models) != len(args.model) or not all(models.values()):
        parser.error("--model takes LABEL=PATH, each label once")
    return models
