"""Date and time arithmetic: date -d, epoch seconds, time zones, durations.

easy    one date computation: N days after a date, the weekday of a date, an epoch time in UTC
medium  rewrite a log's epoch timestamps as ISO 8601 UTC (look at the format, convert, check)
hard    per-job run time from start/end events stamped in different UTC offsets, as a sorted CSV

Expected values come from Python's datetime; the checks parse what was written
(``T`` or a space, ``Z`` or ``+00:00``), so formatting people vary on passes.
"""

from __future__ import annotations

import random
from datetime import UTC, date, datetime, timedelta, timezone

from components.synthesize.draft import Draft, py_literal
from components.synthesize.families.phrasing import say
from components.synthesize.families.words import NOUNS, WORDS, base_dir, name, names
from components.synthesize.perturb import planted_files

__all__ = ["TAGS", "generate"]

TAGS = ["date", "time", "timezones"]

PARSE_UTC = """
from datetime import datetime, timezone


def utc(text):
    text = text.strip().replace(" ", "T", 1).replace("Z", "+00:00").replace("UTC", "+00:00")
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        return None
    if t.tzinfo is not None:
        t = t.astimezone(timezone.utc).replace(tzinfo=None)
    return t.strftime("%Y-%m-%d %H:%M:%S")
"""


def _day(rng: random.Random) -> date:
    return date(rng.randint(2019, 2027), rng.randint(1, 12), rng.randint(1, 28))


def _easy(rng: random.Random) -> Draft:
    answer = f"{base_dir(rng)}/{rng.choice(['answer', 'date', 'result'])}.txt"
    variant = rng.choice(["add-days", "weekday", "epoch"])
    d = _day(rng)
    if variant == "add-days":
        n = rng.randint(10, 400)
        want = (d + timedelta(days=n)).isoformat()
        instruction, style, phrasings = say(
            rng,
            request=f"What date is {n} days after {d.isoformat()}? Write it as YYYY-MM-DD to {answer}.",
            report=f"The contract signed on {d.isoformat()} expires {n} days later and nobody wrote down the "
            f"date. Compute it and put it in {answer} (YYYY-MM-DD).",
            ticket=f"{d.isoformat()} + {n} days -> {answer} (YYYY-MM-DD).",
        )
        solution = f"date -u -d '{d.isoformat()} + {n} days' +%F > {answer}"
        check = f'got = read({answer!r}).strip()\ncheck(got == "{want}", "{answer} says %r" % got)'
    elif variant == "weekday":
        want = d.strftime("%A")
        instruction, style, phrasings = say(
            rng,
            request=f"On which day of the week is {d.isoformat()}? Write the English day name (e.g. Monday) to {answer}.",
            report=f"Someone needs to know what weekday {d.isoformat()} falls on. Please write the day's name "
            f"(like Tuesday) into {answer}.",
            ticket=f"weekday of {d.isoformat()} -> {answer} (full English name).",
        )
        solution = f"date -d '{d.isoformat()}' +%A > {answer}"
        check = f'got = read({answer!r}).strip().lower()\ncheck(got == "{want.lower()}", "{answer} says %r" % got)'
    else:
        t = datetime(
            d.year,
            d.month,
            d.day,
            rng.randint(0, 23),
            rng.randint(0, 59),
            rng.randint(0, 59),
            tzinfo=UTC,
        )
        epoch = int(t.timestamp())
        want = t.strftime("%Y-%m-%d %H:%M:%S")
        instruction, style, phrasings = say(
            rng,
            request=f"Convert the Unix timestamp {epoch} to a UTC date and time and write it to {answer} "
            "as `YYYY-MM-DD HH:MM:SS`.",
            report=f"An alert fired at epoch {epoch} and we need it in human terms. Write the UTC time as "
            f"YYYY-MM-DD HH:MM:SS to {answer}.",
            ticket=f"epoch {epoch} -> UTC `YYYY-MM-DD HH:MM:SS` in {answer}.",
        )
        solution = f"date -u -d @{epoch} '+%Y-%m-%d %H:%M:%S' > {answer}"
        check = (
            PARSE_UTC
            + f'got = utc(read({answer!r}))\ncheck(got == "{want}", "{answer} says %r" % got)'
        )
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=[variant],
        setup_script=f"mkdir -p {answer.rsplit('/', 1)[0]}",
        check_py=check,
        metadata={"variant": variant, "phrasing": style, "phrasings": phrasings},
    )


def _medium(rng: random.Random) -> Draft:
    app = name(rng)
    src, out = f"/var/log/{app}/events.log", f"/var/log/{app}/events-utc.log"
    start = int(
        datetime(
            rng.randint(2021, 2026), rng.randint(1, 12), rng.randint(1, 28), tzinfo=UTC
        ).timestamp()
    )
    lines, want = [], []
    t = start
    for _ in range(rng.randint(12, 25)):
        t += rng.randint(1, 20000)
        msg = f"{rng.choice(['INFO', 'WARN', 'ERROR'])} {rng.choice(WORDS)} {rng.choice(NOUNS)}"
        lines.append(f"{t} {msg}")
        want.append([datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S"), msg])
    instruction, style, phrasings = say(
        rng,
        request=f"Every line of {src} starts with a Unix timestamp. Write {out} with the same lines in the same "
        "order, but with that timestamp replaced by the UTC time in ISO 8601 form (e.g. 2024-03-05T14:03:09Z).",
        report=f"Nobody can read the timestamps in {src}: they are raw epoch seconds. Produce {out} where each "
        "line's leading timestamp is an ISO 8601 UTC time like 2024-03-05T14:03:09Z, rest of the line unchanged.",
        ticket=f"{src}: epoch prefix -> ISO 8601 UTC (2024-03-05T14:03:09Z). Output {out}, same order.",
    )
    solution = f"""
head -n 3 {src}
while read -r ts rest; do printf '%s %s\\n' "$(date -u -d "@$ts" +%Y-%m-%dT%H:%M:%SZ)" "$rest"; done < {src} > {out}
head -n 3 {out} && wc -l {src} {out}
"""
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["epoch", "iso8601"],
        setup_files={"events.log": "\n".join(lines) + "\n"},
        setup_script=f"mkdir -p /var/log/{app}\ncp events.log {src}",
        check_py=PARSE_UTC
        + f"""
want = {py_literal(want)}
got = [l for l in read({out!r}).splitlines() if l.strip()]
check(len(got) == len(want), "{out} has %d lines, not %d" % (len(got), len(want)))
for line, (stamp, msg) in zip(got, want):
    head, _, rest = line.strip().partition(" ")
    if utc(head) is None:  # `2024-03-05 14:03:09 msg`: the stamp is two words
        more, _, rest = rest.partition(" ")
        head = head + " " + more
    check(utc(head) == stamp and rest.strip() == msg, "line %r should be %s %s" % (line, stamp, msg))
""",
        perturbations=(
            planted_files(
                "dates",
                "yesterday's rotated log, in the same format, sits beside it",
                {f"/var/log/{app}/events.log.1": f"{start - 86400} INFO rotated\n"},
            ),
        ),
        metadata={"lines": len(lines), "phrasing": style, "phrasings": phrasings},
    )


def _hard(rng: random.Random) -> Draft:
    folder = f"/srv/{name(rng)}-batch"
    src, out = f"{folder}/jobs.log", f"{folder}/durations.csv"
    jobs = names(rng, rng.randint(4, 6), NOUNS)
    offsets = [timezone(timedelta(hours=h)) for h in (0, 2, -5, 9, 5.5)]
    events, totals = [], {}
    t = datetime(2024, rng.randint(1, 12), rng.randint(1, 28), 6, 0, tzinfo=UTC)
    for job in jobs:
        total = 0
        for _ in range(rng.randint(1, 2)):  # a job may run twice: durations add up
            t += timedelta(minutes=rng.randint(1, 90))
            seconds = rng.randint(30, 7200)
            end = t + timedelta(seconds=seconds)
            total += seconds
            for kind, when in (("start", t), ("end", end)):
                tz = rng.choice(offsets)
                events.append((when, f"{when.astimezone(tz).isoformat()} job={job} event={kind}"))
            t = end  # a job's runs never overlap, so start/end pair up in time order
        totals[job] = total
    events.sort(key=lambda e: e[0])
    ordered = sorted(totals, key=lambda j: (-totals[j], j))
    instruction, style, phrasings = say(
        rng,
        request=f"{src} records `start` and `end` events of batch jobs; the timestamps carry different UTC "
        "offsets. A job can run more than once. Write {out} with a header `job,seconds` and one row per job "
        "with its total run time in seconds, longest first.".replace("{out}", out),
        report=f"The batch report is wrong because the machines writing {src} are in different time zones "
        f"(see the offsets in the timestamps). Recompute each job's total run time (all its start/end pairs) in "
        f"seconds and write {out}: header `job,seconds`, then rows sorted by seconds, largest first.",
        ticket=f"{src}: total seconds per job (sum of start->end pairs, mixed UTC offsets). CSV {out}, "
        "header job,seconds, desc by seconds.",
    )
    solution = f"""
head -n 5 {src}
python3 - <<'PY'
from datetime import datetime
open_at, totals = {{}}, {{}}
for line in open("{src}"):
    stamp, job, event = line.split()
    job, event, when = job.split("=")[1], event.split("=")[1], datetime.fromisoformat(stamp)
    if event == "start":
        open_at[job] = when
    else:
        totals[job] = totals.get(job, 0) + int((when - open_at.pop(job)).total_seconds())
with open("{out}", "w") as f:
    f.write("job,seconds\\n")
    for job in sorted(totals, key=lambda j: (-totals[j], j)):
        f.write(f"{{job}},{{totals[job]}}\\n")
PY
cat {out}
"""
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["durations", "timezones", "csv"],
        setup_files={"jobs.log": "\n".join(e[1] for e in events) + "\n"},
        setup_script=f"mkdir -p {folder}\ncp jobs.log {src}",
        check_py=f"""
rows = [[c.strip() for c in l.split(",")] for l in read({out!r}).splitlines() if l.strip()]
check(rows and rows[0] == ["job", "seconds"], "{out} has no `job,seconds` header")
got = [(r[0], int(float(r[1]))) for r in rows[1:] if len(r) == 2]
want = {py_literal([[j, totals[j]] for j in ordered])}
check(sorted(got) == sorted(map(tuple, want)), "{out} holds %r" % got)
check([s for _, s in got] == sorted([s for _, s in got], reverse=True), "{out} is not longest first")
""",
        metadata={"jobs": len(jobs), "phrasing": style, "phrasings": phrasings},
    )


def generate(rng: random.Random, difficulty: str) -> Draft:
    """One date/time task at ``difficulty``."""
    return {"easy": _easy, "medium": _medium, "hard": _hard}[difficulty](rng)
