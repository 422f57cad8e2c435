"""Files inside a sandbox's root, reached from the host through an fd of that root.

bwrap sandboxes are reached host-side through ``/proc/<pid>/root`` of a
sandbox process. Every path is walked one component at a time with
``O_NOFOLLOW``, and symlinks are resolved by hand *inside* the sandbox root:
a symlink the agent planted (``/app/link -> /etc``) leads to the sandbox's
/etc, never the host's.

    walk(root, parts, create)         an fd of a directory below root (created if asked)
    open_in(root, parent, name)       an O_PATH fd of what a name resolves to: opening it
                                      neither blocks (FIFO) nor calls a device driver
    read_regular(handle, path, max)   the bytes, only for a regular file within the limit
    write_in(parent, name, data)      a regular file; a FIFO/device planted there is replaced
    overlay_changes(upper, lower)     what the sandbox added or changed: its overlay's upper layer
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path, PurePosixPath

from termrl.sandbox.session import FileTooLarge, NotRegularFile

__all__ = ["open_in", "overlay_changes", "read_regular", "walk", "write_in"]


def walk(root: int, parts: tuple[str, ...], *, create: bool, hops: int = 0) -> int:
    """An fd of the directory ``parts`` below ``root``, symlinks resolved inside ``root``."""
    current = os.dup(root)
    stack: list[str] = []
    todo = list(parts)
    while todo:
        part = todo.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if stack:
                stack.pop()
            os.close(current)
            current = walk(root, tuple(stack), create=False, hops=hops)
            continue
        try:
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=current)
        except FileNotFoundError:
            if not create:
                os.close(current)
                raise
            os.mkdir(part, 0o755, dir_fd=current)
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=current)
        except OSError as e:
            if e.errno not in (errno.ELOOP, errno.ENOTDIR) or hops > 40:
                os.close(current)
                raise
            link = os.readlink(part, dir_fd=current)
            hops += 1
            if link.startswith("/"):
                stack = []
                os.close(current)
                current = os.dup(root)
            todo = [p for p in link.split("/") if p] + todo
            continue
        os.close(current)
        current = nxt
        stack.append(part)
    return current


def open_in(root: int, parent: int, name: str, hops: int = 0) -> int:
    """An ``O_PATH`` fd of what ``name`` in ``parent`` is, symlinks resolved inside ``root``.

    ``O_PATH`` opens nothing for reading: a FIFO does not block, a device's driver is not called.
    """
    fd = os.open(name, os.O_PATH | os.O_NOFOLLOW, dir_fd=parent)
    if not stat.S_ISLNK(os.fstat(fd).st_mode):
        return fd
    os.close(fd)
    if hops > 40:
        raise OSError(errno.ELOOP, "too many levels of symbolic links", name)
    link = PurePosixPath(os.readlink(name, dir_fd=parent))
    base = (
        walk(root, link.parent.parts[1:], create=False)
        if link.is_absolute()
        else walk(parent, link.parent.parts, create=False)
    )
    try:
        return open_in(root, base, link.name, hops + 1)
    finally:
        os.close(base)


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "special file"


def read_regular(handle: int, path: str, max_bytes: int) -> bytes:
    """The contents of the regular file behind the ``O_PATH`` fd ``handle``, at most ``max_bytes``."""
    info = os.fstat(handle)
    if stat.S_ISDIR(info.st_mode):
        raise IsADirectoryError(path)
    if not stat.S_ISREG(info.st_mode):
        raise NotRegularFile(path, _kind(info.st_mode))
    if info.st_size > max_bytes:
        raise FileTooLarge(path, info.st_size, max_bytes)
    # Reopening through /proc/self/fd opens this very inode, whatever the path points to by now.
    fd = os.open(f"/proc/self/fd/{handle}", os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        chunks, size = [], 0
        while size <= max_bytes and (chunk := os.read(fd, min(1 << 20, max_bytes + 1 - size))):
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > max_bytes:  # it grew after the fstat
        raise FileTooLarge(path, size, max_bytes)
    return b"".join(chunks)


def write_in(parent: int, name: str, data: bytes, mode: int, path: str) -> None:
    """Write a regular file ``name`` in ``parent``: a device, FIFO or socket found there is replaced."""
    try:
        found = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        found = None
    if found is not None and not (
        stat.S_ISREG(found.st_mode) or stat.S_ISDIR(found.st_mode) or stat.S_ISLNK(found.st_mode)
    ):
        os.unlink(name, dir_fd=parent)
    # O_NOFOLLOW: a symlink at the name fails (ELOOP); O_NONBLOCK: a FIFO swapped in meanwhile cannot block.
    fd = os.open(
        name,
        os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY,
        0o600,
        dir_fd=parent,
    )
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFile(path, _kind(info.st_mode))
        os.ftruncate(fd, 0)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def overlay_changes(upper: Path, lower: Path) -> dict[str, str]:
    """Paths in an overlay's upper layer: added ("A") or, when the lower layer has them, changed ("C").

    Whiteouts (character devices 0:0, deletions) are not changes in this sense.
    """
    changes: dict[str, str] = {}
    for directory, dirs, files in os.walk(upper):
        for name in [*dirs, *files]:
            path = os.path.join(directory, name)
            info = os.lstat(path)
            if stat.S_ISCHR(info.st_mode) and info.st_rdev == 0:
                continue
            relative = os.path.relpath(path, upper)
            changes["/" + relative] = "C" if os.path.lexists(lower / relative) else "A"
    return changes
