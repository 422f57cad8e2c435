"""A podman session's writable layer on a disk of its own: how ``storage_mb`` bounds what a container writes.

podman's own per-container limit (``--storage-opt size=``) needs its store on XFS
with project quotas, which this kind of machine does not have. So the podman
backend assembles the container's root itself, as the bwrap launcher does, and
runs the container with ``--rootfs``:

    podman image mount IMAGE                       lower: the image's rootfs (never written)
    DIR/disk.img, a sparse ext4 of storage_mb  ─►  loop-mounted on DIR/layer (upper/, work/)
    overlay(lower, DIR/layer/upper)            ─►  DIR/root, the container's /

A sandbox that fills its disk gets ENOSPC and nothing else does; the image file
takes only what was written. ``storage_mb`` 0 means no limit: the layer is a
plain folder. The mounts live in the host's mount namespace (podman's processes
must see the root), so closing a session unmounts them, and ``remove_stale``
takes away the layers a crashed run left behind.

What the agent changed is the overlay's upper layer (``rootfs.overlay_changes``),
read from the host: ``podman diff`` knows nothing of a ``--rootfs`` container.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from termrl.errors import EnvInitFailed

__all__ = ["DiskLayer", "mount_layer", "remove_stale", "unmount_layer"]


@dataclass(frozen=True)
class DiskLayer:
    """The mounted pieces of one session's root."""

    directory: Path
    lower: Path

    @property
    def root(self) -> Path:
        return self.directory / "root"

    @property
    def upper(self) -> Path:
        return self.directory / "layer" / "upper"


def _mount(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise EnvInitFailed(f"{' '.join(argv[:3])} failed: {done.stderr.strip()[-500:]}")


def mount_layer(directory: Path, lower: Path, storage_mb: int) -> DiskLayer:
    """Mount a session's root in ``directory`` (created; must not exist): ``lower`` under a writable layer
    of at most ``storage_mb`` MiB (0: unbounded). Needs root. On failure nothing stays mounted."""
    layer = DiskLayer(directory, lower)
    (directory / "layer").mkdir(parents=True)
    layer.root.mkdir()
    try:
        if storage_mb:
            disk = directory / "disk.img"
            with disk.open("wb") as f:
                f.truncate(storage_mb << 20)
            # No journal, no reserved blocks: the sandbox gets all of storage_mb; nodiscard: mkfs
            # would otherwise spend its time trimming a file that is sparse anyway.
            _mount(
                [
                    "mkfs.ext4",
                    "-q",
                    "-F",
                    "-m",
                    "0",
                    "-O",
                    "^has_journal",
                    "-E",
                    "nodiscard",
                    str(disk),
                ]
            )
            _mount(["mount", "-o", "loop", str(disk), str(directory / "layer")])
        layer.upper.mkdir()
        (directory / "layer" / "work").mkdir()
        options = f"lowerdir={lower},upperdir={layer.upper},workdir={directory / 'layer' / 'work'}"
        _mount(["mount", "-t", "overlay", "overlay", "-o", options, str(layer.root)])
    except (OSError, EnvInitFailed):
        unmount_layer(directory)
        raise
    return layer


def unmount_layer(directory: Path) -> None:
    """Unmount and remove a session's root (what ``mount_layer`` made); safe to repeat, and on a partial one."""
    for mountpoint in (directory / "root", directory / "layer"):
        if os.path.ismount(mountpoint):
            # Lazy: a process still leaving (conmon's cleanup) must not leave the mount behind.
            subprocess.run(["umount", "--lazy", str(mountpoint)], capture_output=True)
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(directory)


def remove_stale(parent: Path, live: set[str], min_age_sec: float = 600.0) -> int:
    """Unmount and remove the session roots under ``parent`` whose name is not in ``live``; how many.

    A root younger than ``min_age_sec`` is kept: another process may have mounted it for a
    container that ``podman run`` has not registered yet.
    """
    if not parent.is_dir():
        return 0
    now = time.time()
    stale = [
        entry
        for entry in parent.iterdir()
        if entry.is_dir() and entry.name not in live and now - entry.stat().st_mtime > min_age_sec
    ]
    for directory in stale:
        unmount_layer(directory)
    return len(stale)
