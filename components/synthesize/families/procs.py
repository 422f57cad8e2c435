"""Processes and jobs: background workers that outlive the shell, nice levels, stale pid files.

easy    start a worker in the background (detached, PID written), or at a given nice level
medium  a worker refuses to start because of a stale pid file: find out why, fix, start, check
hard    start one worker per enabled queue of a config (none for disabled ones) and record queue/PID pairs

A worker is a plain shell loop that never listens on a port, so scoring
freezes it (SIGSTOP) but it stays alive: the checks read /proc (pid, command
line, nice value), never a heartbeat.
"""

from __future__ import annotations

import random

from components.synthesize.draft import Draft, py_literal
from components.synthesize.families.phrasing import say
from components.synthesize.families.words import NOUNS, name, names
from components.synthesize.perturb import planted_files

__all__ = ["TAGS", "generate"]

TAGS = ["processes", "job-control", "nohup", "kill"]

WORKER = """#!/bin/bash
# {name}: processes its queue forever.
PIDFILE={pidfile}
if [ -f "$PIDFILE" ]; then
  echo "{name}: already running (pid $(cat "$PIDFILE")); remove $PIDFILE if it is not" >&2
  exit 1
fi
echo $$ > "$PIDFILE"
while true; do date +%s > /tmp/{name}-${{1:-main}}.heartbeat; sleep 2; done
"""

PROC_CHECK = """

def proc(pid):
    try:
        argv = open("/proc/%d/cmdline" % pid, "rb").read().split(b"\\0")
        stat = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    except (OSError, ValueError):
        return None
    return {"argv": [a.decode() for a in argv if a], "state": stat[0], "nice": int(stat[16])}


def live(pid):
    p = proc(pid)
    return p is not None and p["state"] != "Z"


def running(script):
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        p = proc(int(pid))
        if p and p["state"] != "Z" and any(a.endswith(script) for a in p["argv"][:2]):
            out.append((int(pid), p))
    return out


def pid_in(path):
    text = read(path).strip()
    check(text.isdigit(), "%s holds %r, not a PID" % (path, text))
    return int(text)
"""


def _easy(rng: random.Random) -> Draft:
    svc = name(rng)
    script, pidfile = f"/opt/{svc}/worker.sh", f"/run/{svc}-worker.pid"
    record = f"/root/{svc}.pid"
    nice = rng.choice([None, 5, 10, 15])
    how = "" if nice is None else f" at nice level {nice}"
    instruction, style, phrasings = say(
        rng,
        request=f"Start {script} in the background{how} so that it keeps running after your shell exits, and "
        f"write its process ID to {record}.",
        report=f"The {svc} worker ({script}) is not running. Please start it{how} as a detached background job "
        f"(it must survive the end of the session) and note its PID in {record}.",
        ticket=f"Run {script} detached{how}. PID -> {record}.",
    )
    prefix = "" if nice is None else f"nice -n {nice} "
    solution = f"{prefix}nohup {script} > /tmp/{svc}.out 2>&1 < /dev/null & echo $! > {record}"
    nice_check = (
        ""
        if nice is None
        else f'check(p["nice"] == {nice}, "the worker runs at nice %d, not {nice}" % p["nice"])'
    )
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["background", "nice" if nice is not None else "nohup"],
        setup_files={"worker.sh": WORKER.format(name=svc, pidfile=pidfile)},
        setup_script=f"mkdir -p /opt/{svc}\ninstall -m 755 worker.sh {script}",
        check_py=PROC_CHECK
        + f"""
pid = pid_in({record!r})
check(live(pid), "process %d from {record} is not running" % pid)
p = proc(pid)
check(any(a.endswith("worker.sh") for a in p["argv"][:2]), "process %d is %r, not the worker" % (pid, p["argv"]))
{nice_check}
""",
        metadata={"nice": nice, "phrasing": style, "phrasings": phrasings},
    )


def _medium(rng: random.Random) -> Draft:
    svc = name(rng)
    script, pidfile = f"/usr/local/bin/{svc}-worker", f"/var/run/{svc}/worker.pid"
    stale = rng.randint(40000, 60000)
    instruction, style, phrasings = say(
        rng,
        request=f"The worker {script} does not start. Find out why, fix it, and start it in the background so "
        "it keeps running after your session ends. Do not edit the script.",
        report=f"`{script}` exits immediately saying it is already running, but `ps` shows no such worker — the "
        "machine was rebooted. Get the worker running again in the background (detached), without changing "
        "the script.",
        ticket=f"{script} won't start (claims already running). Fix + start detached. Don't modify the script.",
    )
    solution = f"""
{script} || cat {pidfile}; ps -p "$(cat {pidfile})" || echo stale
rm -f {pidfile} && setsid nohup {script} > /tmp/{svc}.out 2>&1 < /dev/null &
sleep 1; ps -p "$(cat {pidfile})" -o pid,args
"""
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["pidfile", "stale-lock", "diagnose"],
        setup_files={"worker.sh": WORKER.format(name=svc, pidfile=pidfile)},
        setup_script=f"install -m 755 worker.sh {script}\nmkdir -p /var/run/{svc}\necho {stale} > {pidfile}",
        check_py=PROC_CHECK
        + f"""
workers = running({f"{svc}-worker"!r})
check(len(workers) == 1, "%d {svc} workers are running, not 1" % len(workers))
check(pid_in({pidfile!r}) == workers[0][0], "{pidfile} does not name the running worker")
check(read({script!r}) == {WORKER.format(name=svc, pidfile=pidfile)!r}, "{script} was modified")
""",
        perturbations=(
            planted_files(
                "processes",
                "a stale pid file of an unrelated service that must stay",
                {f"/var/run/{rng.choice(NOUNS)}d.pid": f"{stale + 7}\n"},
            ),
        ),
        metadata={"stale_pid": stale, "phrasing": style, "phrasings": phrasings},
    )


def _hard(rng: random.Random) -> Draft:
    svc = name(rng)
    conf, script, record = (
        f"/etc/{svc}/queues.conf",
        f"/opt/{svc}/queue-worker.sh",
        f"/root/{svc}-workers.txt",
    )
    queues = names(rng, rng.randint(4, 6), NOUNS)
    enabled = sorted(rng.sample(queues, k=rng.randint(2, len(queues) - 1)))
    lines = ["# queue   enabled"] + [f"{q} {'yes' if q in enabled else 'no'}" for q in queues]
    worker = "#!/bin/bash\n# usage: queue-worker.sh QUEUE\nwhile true; do sleep 3; done\n"
    instruction, style, phrasings = say(
        rng,
        request=f"{conf} lists queues and whether each is enabled. Start exactly one `{script} <queue>` "
        "process per enabled queue, in the background and detached from your shell, and none for disabled "
        f"queues. Write {record} with one line `<queue> <pid>` per worker.",
        report=f"No {svc} queue is being processed. Each enabled queue in {conf} needs its own worker "
        f"(`{script} <queue>`), detached so it survives logout; disabled queues must not get one. Record the "
        f"workers as `<queue> <pid>` lines in {record}.",
        ticket=f"{svc}: 1 detached `{script} QUEUE` per enabled queue in {conf}, 0 for disabled. "
        f"List `queue pid` in {record}.",
    )
    solution = f"""
cat {conf}
: > {record}; awk '$2 == "yes" {{print $1}}' {conf} | while read -r q; do nohup {script} "$q" > /dev/null 2>&1 < /dev/null & echo "$q $!" >> {record}; done
cat {record} && pgrep -af queue-worker
"""
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["background", "config-driven", "pids"],
        setup_files={"conf": "\n".join(lines) + "\n", "worker.sh": worker},
        setup_script=f"mkdir -p /etc/{svc} /opt/{svc}\ncp conf {conf}\ninstall -m 755 worker.sh {script}",
        check_py=PROC_CHECK
        + f"""
by_queue = {{}}
for pid, p in running("queue-worker.sh"):
    queue = p["argv"][-1]
    by_queue.setdefault(queue, []).append(pid)
check(sorted(by_queue) == {py_literal(enabled)}, "workers run for %r" % sorted(by_queue))
for q, pids in by_queue.items():
    check(len(pids) == 1, "queue %s has %d workers" % (q, len(pids)))
rows = [l.split() for l in read({record!r}).splitlines() if l.strip()]
check(sorted((r[0], int(r[1])) for r in rows if len(r) == 2) == sorted((q, p[0]) for q, p in by_queue.items()),
      "{record} is %r" % rows)
""",
        metadata={
            "queues": len(queues),
            "enabled": len(enabled),
            "phrasing": style,
            "phrasings": phrasings,
        },
    )


def generate(rng: random.Random, difficulty: str) -> Draft:
    """One process-control task at ``difficulty``."""
    return {"easy": _easy, "medium": _medium, "hard": _hard}[difficulty](rng)
