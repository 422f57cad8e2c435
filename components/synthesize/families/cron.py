"""Scheduled jobs: crontab entries whose schedule is right and whose command really works.

easy    put a provided job script in root's crontab on a schedule (one `crontab -` command)
medium  schedule a cleanup command written by the agent (find -mtime ... -delete)
hard    write a rotation script and install it as a system cron file in /etc/cron.d

No cron daemon runs in a sandbox, so the check does what cron would: it
parses the installed entry, compares its schedule field by field (``*/15``
equals ``0,15,30,45``), then runs its command with cron's bare environment
and checks the effect.
"""

from __future__ import annotations

import random

from components.synthesize.draft import Draft
from components.synthesize.families.phrasing import say
from components.synthesize.families.words import NOUNS, WORDS, name, token

__all__ = ["TAGS", "generate"]

TAGS = ["cron", "scheduling", "crontab"]

# Parses crontab lines and expands schedules to sets, so equivalent spellings compare equal.
CRON_PY = '''
MACROS = {"@hourly": "0 * * * *", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
          "@weekly": "0 0 * * 0", "@monthly": "0 0 1 * *", "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *"}
NAMES = {n: i for i, n in enumerate(["sun", "mon", "tue", "wed", "thu", "fri", "sat"])}
NAMES.update({n: i + 1 for i, n in enumerate(["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug",
                                             "sep", "oct", "nov", "dec"])})
RANGES = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)]


def expand(field, lo, hi):
    out = set()
    for part in field.lower().split(","):
        base, _, step = part.partition("/")
        step = int(step) if step else 1
        val = lambda s: NAMES[s] if s in NAMES else int(s)
        if base == "*":
            a, b = lo, hi
        elif "-" in base:
            a, b = (val(x) for x in base.split("-"))
        else:
            a = val(base)
            b = hi if step != 1 else a
        out.update(range(a, b + 1, step))
    return out


def schedule(fields):
    sets = [expand(f, lo, hi) for f, (lo, hi) in zip(fields, RANGES)]
    if 7 in sets[4]:
        sets[4] = (sets[4] - {7}) | {0}
    return sets


def entries(text, system=False):
    """(schedule sets, user or None, command) for each job line of a crontab."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or ("=" in line.split()[0] and not line.startswith("@")):
            continue
        if line.startswith("@"):
            macro, _, rest = line.partition(" ")
            if macro not in MACROS:
                continue
            fields, rest = MACROS[macro].split(), rest.strip()
        else:
            parts = line.split(None, 5)
            if len(parts) < 6:
                continue
            fields, rest = parts[:5], parts[5]
        user = None
        if system:
            user, _, rest = rest.partition(" ")
        try:
            out.append((schedule(fields), user, rest.strip()))
        except (ValueError, KeyError):
            continue
    return out


def run_like_cron(command):
    env = {"HOME": "/root", "LOGNAME": "root", "PATH": "/usr/bin:/bin", "SHELL": "/bin/sh"}
    return subprocess.run(["/bin/sh", "-c", command], env=env, capture_output=True, text=True, timeout=60)
'''


def _spec(rng: random.Random) -> tuple[str, str, str]:
    """(words for the instruction, a canonical schedule, an equivalent spelling the check must accept)."""
    kind = rng.choice(["every", "hourly", "daily", "weekdays"])
    if kind == "every":
        n = rng.choice([5, 10, 15, 20, 30])
        return (
            f"every {n} minutes",
            f"*/{n} * * * *",
            f"{','.join(str(m) for m in range(0, 60, n))} * * * *",
        )
    m, h = rng.randint(0, 59), rng.randint(0, 23)
    if kind == "hourly":
        return f"every hour at minute {m}", f"{m} * * * *", f"{m} 0-23 * * *"
    if kind == "daily":
        return f"every day at {h:02d}:{m:02d}", f"{m} {h} * * *", f"{m} {h} 1-31 * *"
    return (
        f"at {h:02d}:{m:02d} on weekdays (Monday to Friday)",
        f"{m} {h} * * 1-5",
        f"{m} {h} * * mon-fri",
    )


def _easy(rng: random.Random) -> Draft:
    job = f"/usr/local/bin/{rng.choice(['sync', 'report', 'heartbeat', 'collect', 'poll'])}-{name(rng)}.sh"
    marker_file, marker = f"/var/tmp/{name(rng, WORDS)}.stamp", token(rng)
    words, canonical, _ = _spec(rng)
    instruction, style, phrasings = say(
        rng,
        request=f"Schedule the script {job} to run {words} as root, using root's crontab.",
        report=f"{job} was meant to run {words}, but it was never scheduled, so it has only ever "
        "run when someone started it by hand. Please put it in root's crontab so it runs as root "
        "on that schedule.",
        ticket=f"root's crontab: run {job} {words}.",
    )
    return Draft(
        instruction=instruction,
        solution=f"echo '{canonical} {job}' | crontab -",
        tags=["crontab"],
        setup_files={"job.sh": (f"#!/bin/sh\necho {marker} > {marker_file}\n", 0o755)},
        setup_script=f"cp job.sh {job}",
        check_py=CRON_PY
        + f"""
r = sh("crontab -l -u root")
check(r.returncode == 0, "root has no crontab")
want = schedule({canonical.split()!r})
jobs = [e for e in entries(r.stdout) if {job!r} in e[2]]
check(jobs, "no crontab entry runs {job}")
check(any(s == want for s, _, _ in jobs), "the entry for {job} does not run {words}")
if os.path.exists({marker_file!r}):
    os.remove({marker_file!r})
run_like_cron([c for s, _, c in jobs if s == want][0])
check(os.path.exists({marker_file!r}) and read({marker_file!r}).strip() == {marker!r},
      "running the crontab command did not run {job}")
""",
        uses=("crontab",),
        metadata={"schedule": canonical, "phrasing": style, "phrasings": phrasings},
    )


def _medium(rng: random.Random) -> Draft:
    app = name(rng)
    folder, days = f"/var/tmp/{app}", rng.choice([3, 7, 14, 30])
    words, canonical, _ = _spec(rng)
    instruction, style, phrasings = say(
        rng,
        request=f"Add an entry to root's crontab that runs {words} and deletes the regular files "
        f"in {folder} (including subfolders) that were last modified more than {days} days ago. "
        "Folders themselves and newer files must stay.",
        report=f"{folder} keeps piling up stale files until the disk fills. Please set up an "
        f"automatic cleanup in root's crontab, running {words}, that removes every regular file "
        f"under {folder}, subfolders included, whose last modification is more than {days} days in "
        "the past. The folder structure has to stay, and so do files newer than that.",
        ticket=f"root crontab, {words}: delete regular files under {folder} (recursive) modified "
        f"more than {days} days ago. Keep directories and newer files.",
    )
    command = f"find {folder} -type f -mtime +{days} -delete"
    check = (
        CRON_PY
        + f"""
import time
r = sh("crontab -l -u root")
check(r.returncode == 0, "root has no crontab")
want = schedule({canonical.split()!r})
jobs = [c for s, _, c in entries(r.stdout) if s == want]
check(jobs, "no crontab entry runs {words}")
folder, now = {folder!r}, time.time()
os.makedirs(folder + "/sub", exist_ok=True)
old = [folder + "/old-check.log", folder + "/sub/old-check.dat"]
new = [folder + "/new-check.log", folder + "/sub/new-check.dat"]
for p in old + new:
    open(p, "w").write("x\\n")
for p in old:
    os.utime(p, (now - ({days} + 3) * 86400, now - ({days} + 3) * 86400))
for p in new:
    os.utime(p, (now - max({days} - 2, 0) * 86400 - 60, now - max({days} - 2, 0) * 86400 - 60))
for c in jobs:
    run_like_cron(c)
check(not any(os.path.exists(p) for p in old), "old files were not deleted by the cron command")
check(all(os.path.exists(p) for p in new), "newer files were deleted")
check(os.path.isdir(folder + "/sub"), "a folder was deleted")
"""
    )
    return Draft(
        instruction=instruction,
        # Look at the folder, add the entry, check the crontab.
        solution=f"ls -la {folder}\n"
        f"(crontab -l 2>/dev/null || true; echo '{canonical} {command}') | crontab -\n"
        "crontab -l",
        tags=["crontab", "cleanup", "find"],
        setup_files={f"tmp/{w}.tmp": "x\n" for w in rng.sample(NOUNS, 3)},
        setup_script=f"mkdir -p {folder}\ncp tmp/* {folder}/",
        check_py=check,
        uses=("crontab", "find"),
        metadata={"schedule": canonical, "days": days, "phrasing": style, "phrasings": phrasings},
    )


def _hard(rng: random.Random) -> Draft:
    app = name(rng)
    logs, script, cronfile = (
        f"/var/log/{app}",
        f"/usr/local/bin/rotate-{app}",
        f"/etc/cron.d/rotate-{app}",
    )
    words, canonical, _ = _spec(rng)
    instruction, style, phrasings = say(
        rng,
        request=f"Write an executable script {script} that rotates the logs in {logs}: for every "
        "non-empty `*.log` file there, it writes the file's current content gzip-compressed to "
        "`<file>.N.gz`, where N is the lowest number >= 1 not used yet for that file, then empties "
        "the log file in place (same inode, so the application keeps writing to it). Empty logs "
        f"are skipped. Then schedule the script to run {words} as root with a system cron file "
        f"{cronfile} (system crontab format, with the user field; cron ignores the file if it is "
        "group- or world-writable).",
        report=f"The logs in {logs} grow without limit because nothing rotates them, and the "
        "application holds its log files open, so renaming them away would lose its writes. Please "
        f"write an executable script {script} that goes through each `*.log` there: if it is "
        "non-empty, save its current content gzip-compressed as `<file>.N.gz` (N being the "
        "smallest number from 1 up that this file does not have yet) and then truncate the log in "
        f"place, keeping the same inode; leave empty logs untouched. Have it run {words} as root "
        f"through a system cron file {cronfile}, written in system crontab format including the "
        "user field; keep that file writable by its owner only, or cron will ignore it.",
        ticket=f"Executable {script}: each non-empty {logs}/*.log -> gzip its content to "
        "`<file>.N.gz` (N = lowest unused number >= 1 for that file), then truncate in place (same "
        f"inode). Skip empty logs. Cron: {words}, as root, in {cronfile} (system crontab format, "
        "with user field; not group/world-writable).",
    )
    solution = f"""
cat > {script} <<'SH'
#!/bin/bash
set -euo pipefail
for f in {logs}/*.log; do
  [ -s "$f" ] || continue
  n=1
  while [ -e "$f.$n.gz" ]; do n=$((n + 1)); done
  gzip -c "$f" > "$f.$n.gz"
  : > "$f"
done
SH
chmod 755 {script}
# Created under umask 022, so mode 644 already: cron ignores a group- or world-writable file.
printf 'SHELL=/bin/sh\\nPATH=/usr/sbin:/usr/bin:/sbin:/bin\\n{canonical} root {script}\\n' > {cronfile}
"""
    check = (
        CRON_PY
        + f"""
import gzip
cronfile, logs = {cronfile!r}, {logs!r}
check(os.path.isfile(cronfile), cronfile + " does not exist")
check(os.stat(cronfile).st_mode & 0o022 == 0, cronfile + " is group- or world-writable; cron would ignore it")
want = schedule({canonical.split()!r})
jobs = [c for s, u, c in entries(read(cronfile), system=True) if s == want and u == "root"]
check(jobs, "no entry in %s runs as root {words}" % cronfile)
app_log, empty_log = logs + "/check.log", logs + "/idle.log"
for p in [app_log + ".%d.gz" % i for i in range(1, 5)] + [empty_log + ".1.gz"]:
    if os.path.exists(p):
        os.remove(p)
open(empty_log, "w").close()
contents = ["first batch %d\\n" % os.getpid(), "second batch\\n"]
inode = None
for i, content in enumerate(contents, start=1):
    open(app_log, "w").write(content)
    inode = inode or os.stat(app_log).st_ino
    r = run_like_cron(jobs[0])
    check(r.returncode == 0, "the cron command failed: " + r.stderr)
    rotated = app_log + ".%d.gz" % i
    check(os.path.exists(rotated), rotated + " was not written")
    check(gzip.open(rotated).read().decode() == content, rotated + " does not hold the log's content")
    check(os.path.getsize(app_log) == 0, "the log was not emptied")
    check(os.stat(app_log).st_ino == inode, "the log was replaced instead of emptied in place")
check(not os.path.exists(empty_log + ".1.gz"), "an empty log was rotated")
"""
    )
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["cron.d", "logrotate", "script"],
        setup_files={f"logs/{w}.log": f"{token(rng)} started\n" for w in rng.sample(WORDS, 2)},
        setup_script=f"mkdir -p {logs}\ncp logs/*.log {logs}/",
        check_py=check,
        uses=("gzip",),
        metadata={"schedule": canonical, "phrasing": style, "phrasings": phrasings},
        agent_timeout_sec=900.0,
    )


def generate(rng: random.Random, difficulty: str) -> Draft:
    """One scheduled-jobs task at ``difficulty``."""
    return {"easy": _easy, "medium": _medium, "hard": _hard}[difficulty](rng)
