"""A seccomp filter for bwrap sandboxes, assembled here as classic BPF (no libseccomp needed).

podman and Kubernetes apply their runtime's default profile; bwrap applies
none unless given a program (``bwrap --seccomp FD``). This one is a deny list
in the spirit of moby's default profile (``profiles/seccomp/default.json``):
the calls a container without ``CAP_SYS_ADMIN`` has no business making, and
those that reach kernel surfaces the other isolation does not cover:

- the kernel keyrings (``keyctl``, ``add_key``, ``request_key``): not
  namespaced, so a sandbox could read the host's session keyring;
- new user namespaces (``unshare``/``clone`` with ``CLONE_NEWUSER``): inside
  one a process holds every capability, and with it mount, BPF and more of the
  kernel to attack; ``clone3`` (whose flags live in memory a filter cannot
  read) answers ENOSYS, so libc falls back to ``clone``;
- mounting (``mount``, ``umount2``, ``pivot_root`` and the new mount API),
  kernel modules and ``kexec``, ``bpf``, ``perf_event_open``,
  ``userfaultfd``, file handles (``open_by_handle_at``), accounting, swap,
  quotas, reboot, the clock, raw I/O ports.

Denied calls fail with EPERM (ENOSYS for ``clone3``); anything else is
allowed. x86_64, i386 (32-bit programs on an x86_64 host) and aarch64 have
their own syscall numbers; x32 calls and any other architecture are denied
outright.

    program(machine) -> bytes       struct sock_filter[] in native byte order, for
                                    ``bwrap --seccomp FD`` or ``prctl(PR_SET_SECCOMP, ...)``
"""

from __future__ import annotations

import errno
import platform
import struct

__all__ = ["CLONE_NEWUSER", "DENIED", "SYSCALLS", "program"]

CLONE_NEWUSER = 0x10000000

DENIED = (
    "keyctl",
    "add_key",
    "request_key",
    "mount",
    "umount",
    "umount2",
    "pivot_root",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "open_by_handle_at",
    "name_to_handle_at",
    "acct",
    "swapon",
    "swapoff",
    "quotactl",
    "reboot",
    "setns",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "iopl",
    "ioperm",
    "lookup_dcookie",
    "vm86",
    "vm86old",
    "uselib",
    "ustat",
    "sysfs",
    "_sysctl",
    "nfsservctl",
    "create_module",
    "get_kernel_syms",
    "query_module",
)
"""Denied whatever their arguments (skipped where an architecture does not have them)."""

NEWUSER_CHECKED = ("unshare", "clone")
"""Denied when their first argument (the flags) has CLONE_NEWUSER."""

AUDIT_ARCH = {"x86_64": 0xC000003E, "i386": 0x40000003, "aarch64": 0xC00000B7}
X32_BIT = 0x40000000

SYSCALLS: dict[str, dict[str, int]] = {
    "x86_64": {
        "keyctl": 250,
        "add_key": 248,
        "request_key": 249,
        "mount": 165,
        "umount2": 166,
        "pivot_root": 155,
        "open_tree": 428,
        "move_mount": 429,
        "fsopen": 430,
        "fsconfig": 431,
        "fsmount": 432,
        "fspick": 433,
        "mount_setattr": 442,
        "init_module": 175,
        "finit_module": 313,
        "delete_module": 176,
        "kexec_load": 246,
        "kexec_file_load": 320,
        "bpf": 321,
        "perf_event_open": 298,
        "userfaultfd": 323,
        "open_by_handle_at": 304,
        "name_to_handle_at": 303,
        "acct": 163,
        "swapon": 167,
        "swapoff": 168,
        "quotactl": 179,
        "reboot": 169,
        "setns": 308,
        "settimeofday": 164,
        "clock_settime": 227,
        "clock_adjtime": 305,
        "iopl": 172,
        "ioperm": 173,
        "lookup_dcookie": 212,
        "uselib": 134,
        "ustat": 136,
        "sysfs": 139,
        "_sysctl": 156,
        "nfsservctl": 180,
        "create_module": 174,
        "get_kernel_syms": 177,
        "query_module": 178,
        "unshare": 272,
        "clone": 56,
        "clone3": 435,
    },
    "i386": {
        "keyctl": 288,
        "add_key": 286,
        "request_key": 287,
        "mount": 21,
        "umount": 22,
        "umount2": 52,
        "pivot_root": 217,
        "open_tree": 428,
        "move_mount": 429,
        "fsopen": 430,
        "fsconfig": 431,
        "fsmount": 432,
        "fspick": 433,
        "mount_setattr": 442,
        "init_module": 128,
        "finit_module": 350,
        "delete_module": 129,
        "kexec_load": 283,
        "bpf": 357,
        "perf_event_open": 336,
        "userfaultfd": 374,
        "open_by_handle_at": 342,
        "name_to_handle_at": 341,
        "acct": 51,
        "swapon": 87,
        "swapoff": 115,
        "quotactl": 131,
        "reboot": 88,
        "setns": 346,
        "settimeofday": 79,
        "clock_settime": 264,
        "clock_adjtime": 343,
        "iopl": 110,
        "ioperm": 101,
        "lookup_dcookie": 253,
        "vm86": 166,
        "vm86old": 113,
        "uselib": 86,
        "ustat": 62,
        "sysfs": 135,
        "_sysctl": 149,
        "nfsservctl": 169,
        "create_module": 127,
        "get_kernel_syms": 130,
        "query_module": 167,
        "unshare": 310,
        "clone": 120,
        "clone3": 435,
    },
    "aarch64": {
        "keyctl": 219,
        "add_key": 217,
        "request_key": 218,
        "mount": 40,
        "umount2": 39,
        "pivot_root": 41,
        "open_tree": 428,
        "move_mount": 429,
        "fsopen": 430,
        "fsconfig": 431,
        "fsmount": 432,
        "fspick": 433,
        "mount_setattr": 442,
        "init_module": 105,
        "finit_module": 273,
        "delete_module": 106,
        "kexec_load": 104,
        "kexec_file_load": 294,
        "bpf": 280,
        "perf_event_open": 241,
        "userfaultfd": 282,
        "open_by_handle_at": 265,
        "name_to_handle_at": 264,
        "acct": 89,
        "swapon": 224,
        "swapoff": 225,
        "quotactl": 60,
        "reboot": 142,
        "setns": 268,
        "settimeofday": 170,
        "clock_settime": 112,
        "clock_adjtime": 266,
        "lookup_dcookie": 18,
        "nfsservctl": 42,
        "unshare": 97,
        "clone": 220,
        "clone3": 435,
    },
}
"""Syscall numbers (Linux uapi unistd tables) of the calls this filter looks at."""

MACHINES = {
    "x86_64": ("x86_64", "i386"),
    "amd64": ("x86_64", "i386"),
    "aarch64": ("aarch64",),
    "arm64": ("aarch64",),
}
"""The architectures a host's processes may use, by ``platform.machine()``."""

# Classic BPF opcodes (linux/filter.h) and seccomp return values (linux/seccomp.h).
LD_W_ABS = 0x20
JEQ_K, JGE_K, JSET_K = 0x15, 0x35, 0x45
RET_K = 0x06
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]
OFFSET_NR, OFFSET_ARCH, OFFSET_ARG0_LOW = (
    0,
    4,
    16,
)  # little-endian: the low half of args[0] comes first


class _Assembler:
    """Instructions with symbolic forward jump targets; resolved into 8-bit offsets."""

    def __init__(self) -> None:
        self.code: list[tuple[int, int | str, int | str, int]] = []
        self.labels: dict[str, int] = {}

    def load(self, offset: int) -> None:
        self.code.append((LD_W_ABS, 0, 0, offset))

    def jump(self, op: int, k: int, true: int | str = 0, false: int | str = 0) -> None:
        self.code.append((op, true, false, k))

    def ret(self, value: int) -> None:
        self.code.append((RET_K, 0, 0, value))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def assemble(self) -> bytes:
        out = []
        for at, (op, true, false, k) in enumerate(self.code):
            jt, jf = (self._offset(at, t) for t in (true, false))
            out.append(struct.pack("=HBBI", op, jt, jf, k))
        return b"".join(out)

    def _offset(self, at: int, target: int | str) -> int:
        if isinstance(target, int):
            return target
        offset = self.labels[target] - at - 1
        if not 0 <= offset <= 255:
            raise ValueError(f"seccomp jump to {target} out of range ({offset})")
        return offset


def _arch_section(asm: _Assembler, arch: str) -> None:
    numbers = SYSCALLS[arch]
    deny = f"{arch}-deny"
    asm.label(arch)
    asm.load(OFFSET_NR)
    if arch == "x86_64":
        asm.jump(JGE_K, X32_BIT, deny)  # x32 numbering: a second syscall table, denied whole
    asm.jump(JEQ_K, numbers["clone3"], f"{arch}-enosys")
    for name in DENIED:
        if name in numbers:
            asm.jump(JEQ_K, numbers[name], deny)
    for name in NEWUSER_CHECKED:
        asm.jump(JEQ_K, numbers[name], f"{arch}-flags")
    asm.ret(RET_ALLOW)
    asm.label(f"{arch}-flags")
    asm.load(OFFSET_ARG0_LOW)
    asm.jump(JSET_K, CLONE_NEWUSER, deny)
    asm.ret(RET_ALLOW)  # BPF jumps only forward: a second ALLOW rather than a jump back
    asm.label(f"{arch}-enosys")
    asm.ret(RET_ERRNO | errno.ENOSYS)
    asm.label(deny)
    asm.ret(RET_ERRNO | errno.EPERM)


def program(machine: str | None = None) -> bytes:
    """The filter for a host of ``machine`` (default: this one) as raw ``struct sock_filter``s."""
    machine = machine or platform.machine()
    arches = MACHINES.get(machine)
    if arches is None:
        raise ValueError(
            f"no seccomp filter for {machine!r} hosts (known: {', '.join(sorted(MACHINES))})"
        )
    asm = _Assembler()
    asm.load(OFFSET_ARCH)
    for arch in arches:
        asm.jump(JEQ_K, AUDIT_ARCH[arch], arch)
    asm.ret(RET_ERRNO | errno.EPERM)  # an architecture this filter has no table for
    for arch in arches:
        _arch_section(asm, arch)
    return asm.assemble()
