"""The scripts the verifier container of a kubernetes sandbox pod runs, with its own bash and python3.

Each is passed on the command line (``bash -c SCRIPT ARGS`` or ``python_argv(SCRIPT, ARGS)``),
never written into either container, so nothing from the agent's filesystem runs. The comment
above each script gives its arguments and what it prints; ``termrl.sandbox.kubernetes_verifier``
says when each one runs.
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "AGENT_INIT",
    "BASELINE",
    "BASELINE_FILE",
    "ENTER_SOURCE",
    "FREEZE_HOLDER",
    "KILL_TREE",
    "PACK",
    "STOP_PRELUDE",
    "UNPACK",
    "python_argv",
]

BASELINE_FILE = "/var/tmp/termrl-baseline.json"
"""Where the verifier keeps the agent's files and environment as they were at start (its own disk)."""
ENTER_SOURCE = (Path(__file__).with_name("enter.py")).read_text()
"""``enter.py``, run by the verifier's python3 as ``python3 -I -S -c ENTER_SOURCE CONFIG``."""


def python_argv(script: str, *args: str) -> list[str]:
    """The verifier's python3 running ``script`` isolated from its environment and site packages."""
    return ["python3", "-I", "-S", "-c", script, *args]


# Prints the pid of the agent container's init: the oldest process whose parent is outside the pod
# (ppid 0: a container's init, or an exec'd process) in a mount namespace that is neither the
# verifier's nor pid 1's (the pause container's). The agent cannot unshare its mount namespace.
AGENT_INIT = r"""
own=$(readlink /proc/self/ns/mnt) pause=$(readlink /proc/1/ns/mnt) best= oldest=
for d in /proc/[0-9]*; do
  m=$(readlink "$d/ns/mnt" 2>/dev/null) || continue
  [ "$m" = "$own" ] || [ "$m" = "$pause" ] && continue
  read -r line 2>/dev/null < "$d/stat" || continue
  set -- ${line##*) }
  [ "$2" = 0 ] || continue
  if [ -z "$best" ] || [ "${20}" -lt "$oldest" ]; then best=${d#/proc/} oldest=${20}; fi
done
[ -n "$best" ] && echo "$best"
"""

# $1: the agent's init. Prints the pids scoring never waits for as services starting up (every
# process outside the agent's mount namespace, the agent container's init and its idle sleep),
# then runs STOP_HELPER (given as $2) with them: stop-helper stop GRACE SETTLED...
STOP_PRELUDE = r"""
agent=$1 helper=$2 grace=$3; shift 3
mnt=$(readlink "/proc/$agent/ns/mnt") || exit 3
settled=("$@")
for d in /proc/[0-9]*; do
  p=${d#/proc/}
  read -r line 2>/dev/null < "$d/stat" || continue
  set -- ${line##*) }
  # ppid 0: the agent's init and what the API exec'd (its shell); ppid agent: the init's idle sleep
  if [ "$(readlink "$d/ns/mnt" 2>/dev/null)" != "$mnt" ] || [ "$2" = 0 ] || [ "$2" = "$agent" ]; then
    settled+=("$p")
  fi
done
exec bash -c "$helper" termrl stop "$grace" "${settled[@]}"
"""

# argv: record|diff PID. record: writes the agent's files (path -> [inode, ctime, size, type]) and
# its init's environment to BASELINE_FILE. diff: prints {path: "A"|"C"} of what was added or changed
# since, as JSON. Only the root's own filesystem: /proc, /sys, /dev and bind-mounted files are other
# mounts, skipped.
BASELINE = r"""
import json, os, stat, sys
mode, pid, store = sys.argv[1], sys.argv[2], sys.argv[3]
root = f"/proc/{pid}/root"
def files():
    found, todo = {}, [""]
    dev = os.stat(root).st_dev  # the root itself (an lstat would be /proc's link)
    while todo:
        rel = todo.pop()
        try:
            entries = list(os.scandir(root + (rel or "/")))
        except OSError:
            continue
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if info.st_dev != dev:
                continue
            path = rel + "/" + entry.name
            found[path] = [info.st_ino, info.st_ctime_ns, info.st_size, stat.S_IFMT(info.st_mode)]
            if stat.S_ISDIR(info.st_mode):
                todo.append(path)
    return found
if mode == "record":
    with open(f"/proc/{pid}/environ", "rb") as f:
        env = [item.decode("utf-8", "surrogateescape") for item in f.read().split(b"\0") if b"=" in item]
    with open(store + ".tmp", "w") as f:
        json.dump({"files": files(), "env": dict(item.split("=", 1) for item in env)}, f)
    os.replace(store + ".tmp", store)
elif mode == "env":
    with open(store) as f:
        print(json.dumps(json.load(f)["env"]))
else:
    with open(store) as f:
        before = json.load(f)["files"]
    now = files()
    print(json.dumps({p: "A" if p not in before else "C" for p, v in now.items() if before.get(p) != v}))
"""

# argv: SIZE DEST. Reads a tar of SIZE bytes from stdin and extracts it under DEST (made 0700).
UNPACK = r"""
import io, os, sys, tarfile
size, dest = int(sys.argv[1]), sys.argv[2]
data = b""
while len(data) < size:
    chunk = sys.stdin.buffer.read1(size - len(data))
    if not chunk:
        sys.exit("the archive ended early")
    data += chunk
os.makedirs(dest, mode=0o700, exist_ok=True)
with tarfile.open(fileobj=io.BytesIO(data)) as tar:
    tar.extractall(dest, numeric_owner=True)
print("unpacked", flush=True)
"""

# argv: DIR. Prints a base64 tar of what DIR holds: folders, regular files, symbolic links and FIFOs
# (what the tests left there, as they left it; never a device).
PACK = r"""
import base64, io, os, stat, sys, tarfile
top = sys.argv[1]
buffer = io.BytesIO()
with tarfile.open(fileobj=buffer, mode="w") as tar:
    for parent, dirs, files in os.walk(top):
        for name in dirs + files:
            path = os.path.join(parent, name)
            kind = os.lstat(path).st_mode
            if stat.S_ISDIR(kind) or stat.S_ISREG(kind) or stat.S_ISLNK(kind) or stat.S_ISFIFO(kind):
                tar.add(path, arcname=os.path.relpath(path, top), recursive=False)
sys.stdout.write(base64.b64encode(buffer.getvalue()).decode())
"""

# argv: PID GRACE. SIGKILLs what PID started, gives PID (enter.py: it removes its pins when its
# child is gone) GRACE seconds to end, then kills it and whatever is left below it.
KILL_TREE = r"""
import os, signal, sys, time
root, grace = int(sys.argv[1]), float(sys.argv[2])
def below():
    kids = {}
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/stat") as f:
                kids.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(name))
        except (OSError, ValueError, IndexError):
            continue
    found, todo = [], list(kids.get(root, []))
    while todo:
        found.append(todo.pop())
        todo += kids.get(found[-1], [])
    return found
def kill(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
kill(below())
give_up = time.monotonic() + grace
while os.path.exists(f"/proc/{root}") and time.monotonic() < give_up:
    time.sleep(0.05)
kill([root, *below()])
"""

# argv: CONFIG (enter.py's, freeze mode). Starts enter.py's freeze under it, prints its line (the
# names frozen), then waits for a line "thaw" (or the end of its stdin), thaws, prints "thawed".
FREEZE_HOLDER = r"""
import subprocess, sys
helper = subprocess.Popen([sys.executable, "-I", "-S", "-c", sys.argv[1], sys.argv[2]],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
sys.stdout.buffer.write(helper.stdout.readline())
sys.stdout.flush()
while True:
    line = sys.stdin.readline()
    if not line or line.strip() == "thaw":
        break
helper.stdin.close()
rest = helper.stdout.read()
helper.wait()
sys.stdout.write("thawed %d %s\n" % (helper.returncode, rest.decode(errors="replace").strip()))
sys.stdout.flush()
"""
