"""Docker's default container security, for the backends that bring none of their own.

Podman applies its own defaults (a smaller capability set). bwrap cuts a
sandbox's capabilities to ``DOCKER_CAPS`` and masks and write-protects /proc
as Docker does (``MASKED_FILES``, ``MASKED_DIRS``, ``READ_ONLY``); a
Kubernetes pod drops every capability and adds ``DOCKER_CAPS`` back. The
seccomp filter is ``termrl.sandbox.seccomp``'s.
"""

from __future__ import annotations

__all__ = ["DOCKER_CAPS", "MASKED_DIRS", "MASKED_FILES", "READ_ONLY"]

# Docker's default capability set (moby oci/caps/defaults.go).
DOCKER_CAPS = (
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
)

# What Docker's defaults hide (moby's oci/defaults.go masked and read-only paths), for paths this
# kernel has. Masked files are covered by /dev/null, masked directories by an empty read-only tmpfs.
MASKED_FILES = (
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
)
MASKED_DIRS = (
    "/proc/acpi",
    "/proc/asound",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
)
READ_ONLY = ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")
"""Read-only: /proc/sys holds host-wide settings (kernel.core_pattern runs a program as the host's root)."""
