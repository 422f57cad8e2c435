"""Archive helpers of uploads and downloads (the podman tests run them for real)."""

from __future__ import annotations

import io
import tarfile

import pytest

from termrl.sandbox.session import pack_files, unpack_file


def test_pack_files_roots_entries_at_slash_without_directory_entries():
    archive = pack_files(
        [("test.sh", b"#!/bin/sh\n", 0o755), ("sub/data.bin", b"\x00\x01", 0o600)], "/tests"
    )
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        members = {m.name: (m.mode, m.uid, m.isfile()) for m in tar}
    assert members == {"tests/test.sh": (0o755, 0, True), "tests/sub/data.bin": (0o600, 0, True)}


@pytest.mark.parametrize("bad", ["../escape", "/abs/path", "a/../../b", ""])
def test_pack_files_refuses_paths_leaving_the_destination(bad):
    with pytest.raises(ValueError):
        pack_files([(bad, b"", 0o644)], "/tests")


def test_pack_files_needs_an_absolute_destination():
    with pytest.raises(ValueError):
        pack_files([("a", b"", 0o644)], "tests")


def test_unpack_file_reads_the_single_file_and_rejects_directories():
    archive = pack_files([("x.txt", b"payload", 0o644)], "/")
    assert unpack_file(archive, "/x.txt") == b"payload"
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("dir")
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
    with pytest.raises(IsADirectoryError):
        unpack_file(buffer.getvalue(), "/dir")
    with pytest.raises(FileNotFoundError):
        unpack_file(pack_files([], "/"), "/none")
