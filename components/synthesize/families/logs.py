"""Log analysis: counting, ranking and windowed aggregation over application and access logs.

easy    count the lines of one level (grep -c)
medium  the client with the most requests in an access log (awk | sort | uniq -c)
hard    5xx responses per endpoint inside a time window, across rotated and gzipped logs, as JSON
"""

from __future__ import annotations

import gzip
import random

from components.synthesize.draft import Draft, py_literal
from components.synthesize.families.phrasing import say
from components.synthesize.families.words import NOUNS, WORDS, name, names

__all__ = ["TAGS", "generate"]

TAGS = ["logs", "log-analysis", "grep"]

LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]


def _ip(rng: random.Random) -> str:
    return f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"


def _easy(rng: random.Random) -> Draft:
    app = name(rng)
    log = f"/var/log/{app}/{app}.log"
    answer = f"/root/{rng.choice(['answer', 'count', 'result'])}.txt"
    level = rng.choice(["ERROR", "WARNING", "CRITICAL"])
    lines = []
    for i in range(rng.randint(40, 120)):
        lvl = rng.choices(LEVELS, weights=[3, 6, 2, 2, 1])[0]
        words = " ".join(rng.choices(WORDS, k=rng.randint(2, 6)))
        lines.append(
            f"2024-0{rng.randint(1, 9)}-1{rng.randint(0, 9)} 12:{i % 60:02d}:00 {lvl} [{app}] {words}"
        )
    count = sum(f" {level} " in ln for ln in lines)
    instruction, style, phrasings = say(
        rng,
        request=f"How many lines of {log} have the level {level}? Write just the number to "
        f"{answer}.",
        report=f"The {app} service seems to be logging a lot of {level} messages lately and we "
        f"want to know how bad it is. Count the lines in {log} whose level is {level} and put only "
        f"that number in {answer}.",
        ticket=f"count of {level} lines in {log} -> {answer}, number only.",
    )
    return Draft(
        instruction=instruction,
        solution=f"grep -c ' {level} ' {log} > {answer}",
        tags=["count"],
        setup_files={"app.log": "\n".join(lines) + "\n"},
        setup_script=f"mkdir -p /var/log/{app}\ncp app.log {log}",
        check_py=f"""
got = read({answer!r}).strip()
check(got == {str(count)!r}, "{answer} says %r" % got)
""",
        metadata={"level": level, "lines": len(lines), "phrasing": style, "phrasings": phrasings},
    )


def _access_line(rng: random.Random, ip: str, path: str, status: int, stamp: str) -> str:
    size = rng.randint(80, 9000)
    return f'{ip} - - [{stamp} +0000] "GET {path} HTTP/1.1" {status} {size} "-" "curl/8.0"'


def _medium(rng: random.Random) -> Draft:
    site = name(rng)
    log = f"/var/log/nginx/{site}.access.log"
    answer = f"/root/{rng.choice(['top-client', 'busiest-ip', 'top_ip'])}.txt"
    status = rng.choice([None, 200, 404, 304])
    ips = [_ip(rng) for _ in range(rng.randint(5, 9))]
    lines, counts = [], {ip: 0 for ip in ips}
    for _ in range(rng.randint(60, 160)):
        ip, code = rng.choice(ips), rng.choice([200, 200, 304, 404])
        path = "/" + rng.choice(NOUNS + ["", "api/v1/items", "login"])
        stamp = f"1{rng.randint(0, 9)}/Mar/2024:{rng.randint(10, 23)}:{rng.randint(10, 59)}:00"
        lines.append(_access_line(rng, ip, path, code, stamp))
        counts[ip] += status is None or code == status
    top = max(ips, key=lambda ip: counts[ip])
    for _ in range(3):  # a clear winner
        lines.insert(
            rng.randint(0, len(lines)),
            _access_line(rng, top, "/", status or 200, "20/Mar/2024:10:00:00"),
        )
    which = "requests" if status is None else f"requests answered with status {status}"
    short = "requests" if status is None else f"status-{status} responses"
    instruction, style, phrasings = say(
        rng,
        request=f"{log} is an nginx access log. Find the client IP address that made the most "
        f"{which} and write only that IP address to {answer}.",
        report=f"The {site} site is getting an unusual share of its traffic from one client. Using "
        f"the nginx access log {log}, work out which IP address made the most {which}, and write "
        f"just that address (nothing else) to {answer}.",
        ticket=f"{log} (nginx): client IP with the most {short} -> {answer}, IP only.",
    )
    pick = "" if status is None else f"$9 == {status} "
    return Draft(
        instruction=instruction,
        # Look at the log's format, act, check the answer.
        solution=f"head -n 3 {log}\n"
        f"awk '{pick}{{print $1}}' {log} | sort | uniq -c | sort -nr | head -n 1 | awk '{{print $2}}' > {answer}\n"
        f"cat {answer}",
        tags=["access-log", "uniq"],
        setup_files={"access.log": "\n".join(lines) + "\n"},
        setup_script=f"mkdir -p /var/log/nginx\ncp access.log {log}",
        check_py=f"""
got = read({answer!r}).strip()
check(got == {top!r}, "{answer} says %r" % got)
""",
        metadata={
            "clients": len(ips),
            "requests": len(lines),
            "status": status,
            "phrasing": style,
            "phrasings": phrasings,
        },
    )


ENDPOINTS = [
    "api/users",
    "api/orders",
    "login",
    "search",
    "health",
    "upload",
    "api/items",
    "checkout",
    "static/app.js",
]


def _rotated_logs(
    rng: random.Random, endpoints: list[str], start_h: int
) -> tuple[list[list[str]], dict[str, int]]:
    """Three days of access lines, newest first (access.log, .1, .2.gz), and the 5xx count per path
    in the hours ``start_h`` and ``start_h + 1`` of any day: the answer the tests expect."""
    expected: dict[str, int] = {}
    parts: list[list[str]] = [[], [], []]
    for day, part in zip((14, 15, 16), (2, 1, 0), strict=True):  # app.log.2.gz is the oldest
        for _ in range(rng.randint(40, 80)):
            hour = rng.randint(start_h - 3, start_h + 4)
            stamp = f"{day}/Mar/2024:{hour:02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
            path = rng.choice(endpoints)
            status = rng.choices([200, 201, 404, 500, 502, 503], weights=[10, 2, 2, 2, 1, 1])[0]
            parts[part].append(_access_line(rng, _ip(rng), path, status, stamp))
            if status >= 500 and start_h <= hour <= start_h + 1:
                expected[path] = expected.get(path, 0) + 1
    if not expected:  # an empty answer would let a lazy `echo {}` pass
        stamp = f"15/Mar/2024:{start_h:02d}:30:00"
        parts[1].append(_access_line(rng, _ip(rng), endpoints[0], 500, stamp))
        expected[endpoints[0]] = 1
    return parts, expected


def _hard(rng: random.Random) -> Draft:
    site = name(rng)
    folder = f"/var/log/{site}"
    out = f"/root/{site}-5xx.json"
    endpoints = ["/" + p for p in names(rng, 5, ENDPOINTS)]
    start_h = rng.randint(8, 18)
    window = (f"{start_h:02d}:00", f"{start_h + 1:02d}:59")
    parts, expected = _rotated_logs(rng, endpoints, start_h)
    instruction, style, phrasings = say(
        rng,
        request=f"The access logs of {site} are in {folder}: access.log, the rotated access.log.1 "
        "and the compressed access.log.2.gz. Count, over all three files, the requests that got a "
        f"5xx status with a timestamp between {window[0]}:00 and {window[1]}:59 (any day). Write "
        f"{out} as a JSON object mapping each request path that had such a response to its count, "
        'e.g. {"/login": 3}.',
        report=f"Every day between {window[0]} and {window[1]} {site} throws server errors, and we "
        f"want to know which endpoints are hit. Its logs in {folder} are split over access.log, "
        "access.log.1 (rotated) and access.log.2.gz (gzipped). Across all three, count the 5xx "
        f"responses whose time of day is from {window[0]}:00 to {window[1]}:59, on any date, and "
        f"save the result to {out} as a JSON object of request path to count, "
        'like {"/login": 3}.',
        ticket=f"{folder}/access.log + access.log.1 + access.log.2.gz: 5xx responses with time "
        f"of day {window[0]}:00-{window[1]}:59 (any day), counted per path -> {out} as JSON "
        '{"/path": count}.',
    )
    solution = f"""
python3 - <<'PY'
import gzip, json, re
counts = {{}}
for name in ["access.log", "access.log.1", "access.log.2.gz"]:
    path = "{folder}/" + name
    opener = gzip.open if name.endswith(".gz") else open
    with opener(path, "rt") as f:
        for line in f:
            m = re.search(r':(\\d\\d):\\d\\d:\\d\\d [^]]*\\] "\\S+ (\\S+) [^"]*" (\\d{{3}})', line)
            if m and {start_h} <= int(m.group(1)) <= {start_h + 1} and m.group(3).startswith("5"):
                counts[m.group(2)] = counts.get(m.group(2), 0) + 1
json.dump(counts, open("{out}", "w"))
PY
"""
    files = {
        "access.log": "\n".join(parts[0]) + "\n",
        "access.log.1": "\n".join(parts[1]) + "\n",
        # mtime=0: the bytes of the task must not depend on when it was generated.
        "access.log.2.gz": gzip.compress(("\n".join(parts[2]) + "\n").encode(), mtime=0),
    }
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["access-log", "gzip", "json", "time-window"],
        setup_files=files,
        setup_script=f"mkdir -p {folder}\ncp access.log access.log.1 access.log.2.gz {folder}/",
        check_py=f"""
try:
    got = json.loads(read({out!r}))
except ValueError as e:
    fail("{out} is not JSON: %s" % e)
got = {{k: int(v) for k, v in got.items() if int(v) != 0}}
check(got == {py_literal(expected)}, "{out} is %r" % got)
""",
        uses=("gzip",),
        metadata={
            "window": list(window),
            "endpoints_with_5xx": len(expected),
            "phrasing": style,
            "phrasings": phrasings,
        },
        agent_timeout_sec=900.0,
    )


def generate(rng: random.Random, difficulty: str) -> Draft:
    """One log-analysis task at ``difficulty``."""
    return {"easy": _easy, "medium": _medium, "hard": _hard}[difficulty](rng)
