"""The seccomp filter, loaded into a real process on this kernel (no sandbox needed)."""

from __future__ import annotations

import errno
import json
import platform
import struct
import subprocess
import sys

import pytest

from termrl.sandbox import seccomp

# Loads the filter from stdin into itself (no_new_privs first: no privilege needed), then
# prints "label result errno" for each call tried. Syscall numbers come from the filter's table.
PROBE = r"""
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
program = sys.stdin.buffer.read()
numbers = json.loads(sys.argv[1])

class Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

assert libc.prctl(38, 1, 0, 0, 0) == 0
assert libc.prctl(22, 2, ctypes.byref(Fprog(len(program) // 8, program)), 0, 0) == 0, ctypes.get_errno()

def call(label, name, *args):
    ctypes.set_errno(0)
    result = libc.syscall(numbers[name], *args)
    print(label, result, ctypes.get_errno() if result < 0 else 0)

call("keyctl", "keyctl", 0, -3, 0)                      # the session keyring's id
call("add_key", "add_key", b"user", b"x", b"y", 1, -3)
call("new-user-ns", "unshare", 0x10000000)              # CLONE_NEWUSER
call("unshare-fs", "unshare", 0x00000200)               # CLONE_FS: harmless, allowed
call("clone3", "clone3", 0, 0)
call("mount", "mount", b"none", b"/mnt", b"tmpfs", 0, 0)
call("bpf", "bpf", 0, 0, 0)
call("getpid", "getpid") if "getpid" in numbers else print("getpid", os.getpid(), 0)
"""

MACHINE = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine(), platform.machine())


@pytest.mark.skipif(MACHINE not in ("x86_64", "aarch64"), reason="no filter for this architecture")
def test_the_filter_denies_keyrings_new_user_namespaces_mount_and_bpf_and_allows_the_rest():
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(seccomp.SYSCALLS[MACHINE])],
        input=seccomp.program(),
        capture_output=True,
        check=True,
    )
    seen = {
        label: (int(result), int(err))
        for label, result, err in map(str.split, done.stdout.decode().splitlines())
    }
    eperm, enosys = (-1, errno.EPERM), (-1, errno.ENOSYS)
    assert (
        seen["keyctl"]
        == seen["add_key"]
        == seen["new-user-ns"]
        == seen["mount"]
        == seen["bpf"]
        == eperm
    )
    assert seen["clone3"] == enosys  # libc falls back to clone, whose flags the filter can read
    assert seen["unshare-fs"] == (0, 0) and seen["getpid"][0] > 0


def test_every_jump_is_forward_and_in_range_and_unknown_architectures_are_denied():
    program = seccomp.program("x86_64")
    count = len(program) // 8
    assert len(program) % 8 == 0
    for at in range(count):
        code, jt, jf, _ = struct.unpack("=HBBI", program[8 * at : 8 * at + 8])
        if code in (0x15, 0x35, 0x45):  # conditional jumps land inside the program
            assert at + 1 + max(jt, jf) < count
    # After the architecture checks (x86_64, i386), any other architecture is denied.
    assert struct.unpack("=HBBI", program[24:32]) == (0x06, 0, 0, 0x00050000 | errno.EPERM)
    with pytest.raises(ValueError, match="no seccomp filter"):
        seccomp.program("riscv64")
