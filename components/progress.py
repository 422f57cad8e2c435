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
is written.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

__all__ = ["progress_folder"]


def progress_folder(stage: str, output_uri: str) -> Path:
    """The folder of one task's partial progress: the same for every attempt of that task."""
    cache = os.environ.get("TERMRL_CACHE")
    root = Path(cache).expanduser() if cache else Path.home() / ".cache" / "termrl"
    return root / "progress" / stage / hashlib.sha256(output_uri.encode()).hexdigest()[:24]
