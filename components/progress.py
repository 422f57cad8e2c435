"""Where a stage component keeps its partial progress, so that a retried task picks it up.

The stages write each finished unit (an episode, a trial, a demonstration) to a
sidecar folder and resume from it (``parts_dir`` of their configs). Beside the
output artifact, that folder is gone with the pod on a cluster: a retry is a
new pod. The components put it in the termrl cache instead, under a name made
from the output artifact's URI, which KFP fixes before the task's first
attempt, so every attempt of one task finds the same folder:

    $TERMRL_CACHE/progress/<stage>/<sha256(output uri)[:24]>

On a cluster the cache is the model-cache PVC (``termrl compile
--model-cache-pvc``), which every attempt mounts; without one the folder is
pod-local and a retry starts over. A stage drops the folder once its artifact
is written. Train keeps its whole output folder there (step checkpoints with the
optimizer state, what a retry resumes from) and moves it onto the artifact path
when done (``move_onto``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Any

__all__ = ["artifact_path", "move_onto", "progress_folder"]


def artifact_path(artifact: Any) -> Path | None:
    """The local path of a kfp artifact, or None for an optional input left unconnected."""
    return Path(artifact.path) if artifact is not None else None


def progress_folder(stage: str, output_uri: str) -> Path:
    """The folder of one task's partial progress: the same for every attempt of that task."""
    cache = os.environ.get("TERMRL_CACHE")
    root = Path(cache).expanduser() if cache else Path.home() / ".cache" / "termrl"
    return root / "progress" / stage / hashlib.sha256(output_uri.encode()).hexdigest()[:24]


def move_onto(folder: Path, artifact_path: str) -> None:
    """Put ``folder`` at ``artifact_path`` (an output path kfp may have created empty): a rename
    where both are on one filesystem, else a copy; ``folder`` is gone afterwards."""
    target = Path(artifact_path)
    if target.is_dir():
        shutil.rmtree(target)
    elif target.exists():
        target.unlink()
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(folder), str(target))
