"""Downloads and uploads against what an agent can plant: symlinks to devices, FIFOs, huge files."""

from __future__ import annotations

import pytest

from termrl.sandbox import SandboxSpec
from termrl.sandbox.session import FileTooLarge, NotRegularFile

pytestmark = [
    pytest.mark.podman,
    pytest.mark.timeout(300),
]  # a blocked read would hang: fail instead

PLANT = (
    "ln -s /dev/zero /tmp/zero; mkfifo /tmp/fifo; ln -s /tmp/fifo /tmp/fifo-link;"
    " head -c 5000 /dev/zero > /tmp/big; mkdir /tmp/dir; echo ok > /tmp/ok; ln -s /tmp/ok /tmp/ok-link"
)


async def test_download_returns_regular_files_only_and_never_blocks_or_reads_too_much(
    local, base_images
):
    async with await local.create(SandboxSpec(image=base_images)) as session:
        await session.exec(PLANT)
        # podman's copier refuses a device outright ("no such file"); bwrap names what it found.
        with pytest.raises((NotRegularFile, FileNotFoundError)):
            await session.download("/tmp/zero")
        for path in ("/tmp/fifo", "/tmp/fifo-link"):
            with pytest.raises(NotRegularFile):
                await session.download(path)
        with pytest.raises(IsADirectoryError):
            await session.download("/tmp/dir")
        with pytest.raises(FileTooLarge):
            await session.download("/tmp/big", max_bytes=4096)
        assert await session.download("/tmp/big", max_bytes=5000) == bytes(5000)
        assert (
            await session.download("/tmp/ok-link") == b"ok\n"
        )  # a symlink to a regular file still reads
        assert (await session.exec("echo alive")).output == "alive\n"


async def test_upload_replaces_a_fifo_planted_at_its_path(local, base_images):
    async with await local.create(SandboxSpec(image=base_images)) as session:
        await session.exec("mkdir -p /tests && mkfifo /tests/test.sh")
        await session.upload(b"#!/bin/sh\necho uploaded\n", "/tests/test.sh", mode=0o755)
        assert (
            await session.exec("[ -f /tests/test.sh ] && /tests/test.sh")
        ).output == "uploaded\n"
