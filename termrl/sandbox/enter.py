"""Start a new process inside a running bwrap sandbox, with the sandbox's own limits.

Run by the host (root) as ``python -I -S enter.py CONFIG_JSON``; never
imported. It is what ``podman exec`` is for a container: a process that is no
child of anything in the sandbox, yet lives in the sandbox's namespaces and
cgroups and has no more privilege than the sandbox's own processes, so a
binary the agent replaced runs with what the agent had, no more.

    join the session's cgroups (host paths)                   as the host root
    open the target's namespaces and root, the host's /dev/null
    clone each private bind's host directory (open_tree)
    setns: cgroup, ipc, uts, net, pid, mnt
    with private binds: pin each bind's path in the sandbox's mount namespace
    fork ─► child (pid namespace joined only by children)
            new session
            with private binds: a mount namespace of its own (a private copy of the
              sandbox's), each cloned host directory moved onto its sandbox path, then a
              user namespace of its own (ids mapped one to one by the parent)
            chroot to the target's root, stdin /dev/null
            uid/gid/groups of the target (or the caller's ``user``: another uid gets
              no capabilities at all, as after a setuid to it)
            bounding set: the target's, cut to what it holds; then the target's
            inheritable, permitted, effective and ambient sets
            no_new_privs, then the sandbox's seccomp filter
            execve(argv, env)
    parent: waits, unpins, exits with the child's status (128 + signal when killed)

The target is a process the sandbox started (its shell supervisor): its
``/proc/<pid>/status`` gives the credentials to copy. Everything the helper
needs is imported before it enters the sandbox's mount namespace, and it
executes no file from the sandbox before its privileges are cut: a module or
binary planted there is never run with the host's privilege.

Private binds are how scoring keeps the tests' directories out of the agent's
reach: the process sees host directories at ``/tests`` (read-only) and
``/logs/verifier`` that no process of the sandbox can see or write, since the
mounts exist only in its own mount namespace (and its children's). It also gets
a user namespace of its own, created by the host's root under a user no process
runs as, mapping every id to itself: a sandbox process would need CAP_SYS_PTRACE
over it (no sandbox has it)
to reach its files through ``/proc/<pid>/root`` or its output through
``/proc/<pid>/fd``. Its capabilities are the target's, held in that namespace,
so they act on nothing the sandbox's own do not, with one loss: ports below
``ip_unprivileged_port_start`` and raw sockets belong to the network namespace's
owner, so the tests cannot bind those themselves (a service the agent started can).

A private mount sits on a directory entry that the sandbox shares, and the
kernel lets a process of another mount namespace rename or remove an entry that
is a mount point only in ours: the mount then follows the renamed entry or is
detached, and the path shows whatever a service put there (``mv /tests x &&
mkdir /tests``). So, before the child copies the namespace, the parent *pins*
every component of each bind's path in the sandbox's own mount namespace: it
binds each one onto itself. Entries that are mount points in the sandbox's own
namespace cannot be renamed, removed or replaced from it (EBUSY), and no
sandbox process may unmount them (no CAP_SYS_ADMIN; seccomp). Each component is
opened without following symbolic links and must stay the same file once
pinned, so no link the agent left, or swapped in meanwhile, redirects a private
mount. The parent removes the pins when the child has exited; on a timeout the
caller kills the child's tree first, so that the parent can.

With ``freeze`` in its configuration (and no command), the helper instead
makes those top-level folders read-only in the sandbox's mount namespace, a
read-only copy of each mounted over it, prints the names it froze, holds until
its stdin closes, then detaches them (``termrl.sandbox.fresh.Frozen``). A
process started with private binds meanwhile is given ``unfreeze``: it
detaches those copies in its own namespace and writes where the sandbox's
other processes cannot.
"""

import ctypes
import errno
import json
import os
import signal
import stat
import sys

CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS = 0x00020000, 0x02000000, 0x04000000
CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNET = 0x08000000, 0x20000000, 0x40000000
NAMESPACES = (
    ("cgroup", CLONE_NEWCGROUP),
    ("ipc", CLONE_NEWIPC),
    ("uts", CLONE_NEWUTS),
    ("net", CLONE_NEWNET),
    ("pid", CLONE_NEWPID),
    ("mnt", CLONE_NEWNS),
)
PR_SET_PDEATHSIG, PR_SET_KEEPCAPS, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 8, 24, 38
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, PR_CAP_AMBIENT_CLEAR_ALL = 47, 2, 4
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x1, 0x20, 0x1000, 0x4000, 0x40000
MNT_DETACH, UMOUNT_NOFOLLOW = 0x2, 0x8
CLONE_NEWUSER = 0x10000000
NAMESPACE_OWNER = 4294967293  # a uid no process runs as ((uid_t) -1 and -2 are reserved)
OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC, AT_RECURSIVE, AT_EMPTY_PATH = 1, os.O_CLOEXEC, 0x8000, 0x1000
MOVE_MOUNT_F_EMPTY_PATH, MOVE_MOUNT_T_EMPTY_PATH = 0x4, 0x40
AT_FDCWD = -100
SYS_OPEN_TREE, SYS_MOVE_MOUNT = (
    428,
    429,
)  # the same number on every architecture (added in Linux 5.2)
SYS_MOUNT_SETATTR, MOUNT_ATTR_RDONLY = 442, 0x1  # Linux 5.12
CAPABILITY_VERSION_3 = 0x20080522
CAP_LAST = 63
SYS_CAPSET = {"x86_64": 126, "aarch64": 91}

libc = ctypes.CDLL(None, use_errno=True)


class CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


class MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]


def check(result, what):
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def credentials(pid):
    """The target's ids and capability sets, from /proc/<pid>/status."""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.split()
    return {
        "uid": int(fields["Uid"][0]),
        "gid": int(fields["Gid"][0]),
        "groups": [int(g) for g in fields.get("Groups", [])],
        **{
            key: int(fields[key][0], 16)
            for key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")
        },
    }


def cut_privileges(creds, seccomp, machine):
    """Become the target's user with the target's capability sets, then seccomp (irreversible)."""
    # The bounding set limits what an exec can grant: no more than the target holds. Dropped
    # first, while this process still holds CAP_SETPCAP: a setuid away from root clears the
    # effective set, and a non-root user's entry would then fail here.
    bounding = creds["CapBnd"] & (creds["CapPrm"] | creds["CapInh"])
    for cap in range(CAP_LAST + 1):
        dropped = bounding & (1 << cap) or libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0
        if not dropped and ctypes.get_errno() != 22:  # EINVAL: past the kernel's last capability
            check(-1, f"drop capability {cap} from the bounding set")
    check(libc.prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0), "keepcaps")
    os.setgroups(creds["groups"])
    os.setresgid(creds["gid"], creds["gid"], creds["gid"])
    os.setresuid(creds["uid"], creds["uid"], creds["uid"])
    header = CapHeader(CAPABILITY_VERSION_3, 0)
    data = (CapData * 2)()
    for word in (0, 1):
        shift = 32 * word
        data[word].effective = (creds["CapEff"] >> shift) & 0xFFFFFFFF
        data[word].permitted = (creds["CapPrm"] >> shift) & 0xFFFFFFFF
        data[word].inheritable = (creds["CapInh"] >> shift) & 0xFFFFFFFF
    check(libc.syscall(SYS_CAPSET[machine], ctypes.byref(header), data), "capset")
    check(
        libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient capabilities"
    )
    for cap in range(CAP_LAST + 1):
        if creds["CapAmb"] & (1 << cap):
            check(
                libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0),
                f"raise ambient capability {cap}",
            )
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    if seccomp:
        program = SockFprog(len(seccomp) // 8, seccomp)
        check(
            libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(program), 0, 0), "seccomp"
        )


def clone_tree(path):
    """A detached copy of the mount tree at host ``path`` (open_tree), to move into the sandbox later."""
    fd = libc.syscall(
        SYS_OPEN_TREE, AT_FDCWD, path.encode(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE
    )
    if fd < 0:
        check(-1, f"open_tree {path}")
    return fd


def mount_over_itself(fd, what, readonly=False):
    """Mount a copy of the mount tree at ``fd`` (an O_PATH fd) over it, read-only if asked."""
    tree = libc.syscall(
        SYS_OPEN_TREE, fd, b"", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | AT_EMPTY_PATH
    )
    if tree < 0:
        check(-1, f"open_tree {what}")
    try:
        if readonly:
            attr = MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
            flags = AT_EMPTY_PATH | AT_RECURSIVE
            check(
                libc.syscall(
                    SYS_MOUNT_SETATTR, tree, b"", flags, ctypes.byref(attr), ctypes.sizeof(attr)
                ),
                f"make {what} read-only",
            )
        flags = MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH
        check(libc.syscall(SYS_MOVE_MOUNT, tree, b"", fd, b"", flags), f"mount over {what}")
    finally:
        os.close(tree)


def pin(root, targets, tops):
    """Bind every component of each target path onto itself (see the module docstring).

    Walks from the sandbox's root fd, one component at a time, without following
    symbolic links. Appends the names of the topmost pins under the root to ``tops``
    at once (detaching those detaches the rest, which are mounted inside them).
    """
    pinned = {}
    for target in targets:
        parent, path = root, ""
        parts = target.strip("/").split("/")
        for i, name in enumerate(parts):
            path += "/" + name
            if path in pinned:
                parent = pinned[path]
                continue
            fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
            before = os.fstat(fd)
            last = i == len(parts) - 1
            if not (stat.S_ISDIR(before.st_mode) or (last and stat.S_ISREG(before.st_mode))):
                raise OSError(f"{path} is not a directory{' or a file' if last else ''}")
            mount_over_itself(fd, path)
            os.close(fd)
            # The entry again, now through the pin: it must be what was pinned, not a swap.
            fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
            after = os.fstat(fd)
            if (after.st_dev, after.st_ino, stat.S_IFMT(after.st_mode)) != (
                before.st_dev,
                before.st_ino,
                stat.S_IFMT(before.st_mode),
            ):
                raise OSError(f"{path} changed while it was pinned")
            pinned[path] = fd
            if parent == root:
                tops.append(name)
            parent = fd


def detach(root, names):
    """Detach the topmost mount at each of these names under the root, with what is mounted inside
    it: the pins (a pinned entry is still the pin), the frozen folders."""
    os.fchdir(root)
    for name in names:
        check(libc.umount2(name.encode(), MNT_DETACH | UMOUNT_NOFOLLOW), f"detach /{name}")


def freeze(root, names, frozen):
    """Make these top-level folders read-only in the sandbox's mount namespace; each one frozen
    is appended to ``frozen`` at once (a failure halfway leaves nothing behind that is not listed).

    A read-only copy of each folder's mount tree is mounted over it: files stay
    what they are, only writing through these paths fails (EROFS), for every
    process of the sandbox. Links (a merged /bin) and missing names are skipped.
    """
    for name in names:
        try:
            fd = os.open(
                name, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=root
            )
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                continue
            raise
        mount_over_itself(fd, f"/{name}", readonly=True)
        frozen.append(name)
        os.close(fd)


def hold_frozen(config, root):
    """Freeze, say which names on stdout, hold until stdin closes, thaw (the ``freeze`` mode)."""
    mnt = os.open(f"/proc/{config['target']}/ns/mnt", os.O_RDONLY)
    check(libc.setns(mnt, CLONE_NEWNS), "setns mnt")
    frozen = []
    try:
        freeze(root, config["freeze"], frozen)
        os.write(1, (json.dumps(frozen) + "\n").encode())
        while os.read(0, 4096):
            pass
    finally:
        detach(root, frozen)


def isolate(binds, to_parent, from_parent, unfreeze=()):
    """Private mounts, then a user namespace of our own (see the module docstring).

    Called with the working directory at the sandbox's root: unshare moves it to its
    copy in the new mount namespace, where the cloned trees can be attached. The user
    namespace comes last (a chrooted process may not create one); the parent maps its
    ids one to one, so files keep their owners.
    """
    check(libc.unshare(CLONE_NEWNS), "unshare mount namespace")
    check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "make mounts private")
    for name in unfreeze:  # the tests write where the sandbox's other processes may not, meanwhile
        check(libc.umount2(name.encode(), MNT_DETACH | UMOUNT_NOFOLLOW), f"unfreeze /{name}")
    for tree, target, readonly in binds:
        path = target.strip("/").encode()  # from the sandbox's root; no final symlink followed
        check(
            libc.syscall(SYS_MOVE_MOUNT, tree, b"", AT_FDCWD, path, MOVE_MOUNT_F_EMPTY_PATH),
            f"mount {target}",
        )
        if readonly:
            check(
                libc.mount(None, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY, None),
                f"make {target} read-only",
            )
    # The namespace's owner has every capability in it: not root, whom the sandbox's processes may
    # share, but a user nothing runs as. The new namespace grants its creator every capability in it.
    os.seteuid(NAMESPACE_OWNER)
    check(libc.unshare(CLONE_NEWUSER), "unshare user namespace")
    os.write(to_parent, b"u")
    if os.read(from_parent, 1) != b"m":
        raise OSError("the parent did not map the user namespace")


def map_ids(host_proc, pid):
    """The child's user namespace maps every id to itself (written by the host's root through the
    host's /proc: the sandbox's numbers its processes in its own pid namespace)."""
    for name in ("uid_map", "gid_map"):
        fd = os.open(f"{pid}/{name}", os.O_WRONLY, dir_fd=host_proc)
        try:
            os.write(fd, b"0 0 4294967295\n")
        finally:
            os.close(fd)


def child(config, creds, root, null, seccomp, binds, sync):
    check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "pdeathsig")
    os.setsid()
    os.fchdir(root)
    if binds:
        isolate(binds, *sync, config.get("unfreeze", ()))
    os.chroot(".")
    os.chdir("/")
    os.dup2(null, 0)
    cut_privileges(creds, seccomp, config["machine"])
    argv = config["argv"]
    os.execve(argv[0], argv, config["env"])


def main():
    config = json.loads(sys.argv[1])
    target = config["target"]
    if "freeze" in config:
        check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "pdeathsig")
        hold_frozen(config, os.open(f"/proc/{target}/root", os.O_RDONLY | os.O_DIRECTORY))
        os._exit(0)
    creds = credentials(target)
    if config.get("user"):
        creds.update(config["user"])
        if creds["uid"] != 0:  # a user other than root holds nothing, whatever the target held
            creds.update(CapInh=0, CapPrm=0, CapEff=0, CapAmb=0)
    seccomp = bytes.fromhex(config["seccomp"])
    check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "pdeathsig")
    for cgroup in config["cgroups"]:
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    namespaces = [
        (os.open(f"/proc/{target}/ns/{name}", os.O_RDONLY), flag) for name, flag in NAMESPACES
    ]
    root = os.open(f"/proc/{target}/root", os.O_RDONLY | os.O_DIRECTORY)
    null = os.open("/dev/null", os.O_RDWR)
    binds = [
        (clone_tree(host), target, readonly) for host, target, readonly in config.get("binds", [])
    ]
    host_proc = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY)
    for fd, flag in namespaces:
        check(libc.setns(fd, flag), f"setns {flag:#x}")
    pins = []
    try:
        pin(root, [target for _, target, _ in binds], pins)
        (from_child, to_parent), (from_parent, to_child) = os.pipe(), os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                child(config, creds, root, null, seccomp, binds, (to_parent, from_parent))
            except BaseException as exc:  # noqa: BLE001 - report and leave: nothing may run after a failure
                os.write(2, f"termrl-enter: {exc}\n".encode(errors="replace"))
            os._exit(126)
        if binds and os.read(from_child, 1) == b"u":
            map_ids(host_proc, pid)
            os.write(to_child, b"m")
        _, status = os.waitpid(pid, 0)
    finally:
        detach(root, pins)  # a pin made before a failure too
    code = os.waitstatus_to_exitcode(status)
    os._exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    try:
        main()
    except BaseException as exc:  # noqa: BLE001
        os.write(2, f"termrl-enter: {exc}\n".encode(errors="replace"))
        os._exit(125)
