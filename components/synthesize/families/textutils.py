"""Everyday coreutils text filters on one file: the one-liners people type daily.

easy    one of sixteen filters: tac, nl, head, tail, sed -n, wc, tr, cut, uniq -c, sort -n, paste...
medium  a pipeline (top K of a CSV column; matching names sorted and numbered): look, act, check
hard    an access-log summary with a header: requests, clients, errors, the top paths

The checks compare normalised content (trailing newline and spacing around counts
do not matter, ``cat -n``, ``nl`` and ``1. line`` numbering all pass), so awk, sed,
Python or the coreutils one-liner of the golden solution all pass.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from components.synthesize.draft import Draft, py_literal
from components.synthesize.families.phrasing import say
from components.synthesize.families.words import NOUNS, PEOPLE, WORDS, base_dir, name, names
from components.synthesize.perturb import planted_files

__all__ = ["OPERATIONS", "TAGS", "generate"]

TAGS = ["text-utils", "coreutils", "head-tail", "uniq"]

# Readers every check starts with: they normalise what legitimately varies between tools.
HELPERS_PY = """
import re


def lines(path):
    # The lines of path without trailing whitespace; blank lines at the very end dropped.
    rows = [row.rstrip() for row in read(path).splitlines()]
    while rows and not rows[-1]:
        rows.pop()
    return rows


def numbered(path):
    # cat -n, nl, `1. x`, `1: x`: the text after each leading number; the numbers must run 1..n.
    found = [re.match(r"\\s*(\\d+)(?:[.:)]\\s*|\\s+)(.*)$", row) for row in lines(path)]
    check(all(found), "%s: a line does not start with its number" % path)
    numbers = [int(m.group(1)) for m in found]
    check(numbers == list(range(1, len(found) + 1)), "%s is numbered %r" % (path, numbers))
    return [m.group(2) for m in found]


def counted(path):
    # `uniq -c` output (`   3 value`), any spacing: [[3, "value"], ...].
    found = [re.match(r"\\s*(\\d+)\\s+(\\S.*)$", row) for row in lines(path) if row.strip()]
    check(all(found), "%s: a line is not `count value`" % path)
    return [[int(m.group(1)), m.group(2)] for m in found]
"""


def _text(rows: list[str]) -> str:
    return "".join(f"{r}\n" for r in rows)


def _prose(rng: random.Random, n: int, lo: int = 3, hi: int = 7) -> list[str]:
    """``n`` distinct lines of words (distinct, so an order or a line count has one answer)."""
    rows: list[str] = []
    while len(rows) < n:
        row = " ".join(rng.choices(WORDS, k=rng.randint(lo, hi)))
        if row not in rows:
            rows.append(row)
    return rows


def _codes(rng: random.Random, n: int) -> list[str]:
    """``n`` distinct short identifiers such as ``cobalt-42``."""
    codes: list[str] = []
    while len(codes) < n:
        code = f"{rng.choice(NOUNS)}-{rng.randint(1, 99)}"
        if code not in codes:
            codes.append(code)
    return codes


@dataclass
class _Op:
    """One easy operation: its input, where the result goes, how it is asked and checked."""

    src: str
    out: str  # == src when the file is edited in place
    rows: list[str]
    voices: tuple[str, str, str]  # request, report, ticket
    solution: str
    check: str
    params: dict[str, Any] = field(default_factory=dict)


def _expect_lines(path: str, want: list[str], what: str) -> str:
    return f"""
got = lines({path!r})
check(got == {py_literal(want)}, "{path} does not hold {what}: %r" % got[:5])
"""


def _reverse(rng: random.Random, folder: str) -> _Op:
    src = f"{folder}/{rng.choice(['history', 'changelog', 'journal', 'events'])}.txt"
    out = f"{folder}/{rng.choice(['reversed', 'newest-first', 'latest-first'])}.txt"
    rows = _prose(rng, rng.randint(7, 14))
    return _Op(
        src,
        out,
        rows,
        (
            f"Write the lines of {src} to {out} in reverse order, so the last line comes first.",
            f"{src} is appended to at the bottom, so the newest entries are hard to find. I'd like "
            f"a copy at {out} with the line order flipped: newest (last) line on top.",
            f"{src} -> {out}, lines in reverse order (last first).",
        ),
        f"tac {src} > {out}",
        _expect_lines(out, rows[::-1], "the lines in reverse order"),
    )


def _number(rng: random.Random, folder: str) -> _Op:
    stem = rng.choice(["poem", "steps", "checklist", "lyrics", "runbook"])
    src, out = f"{folder}/{stem}.txt", f"{folder}/{stem}-numbered.txt"
    rows = _prose(rng, rng.randint(6, 12))
    return _Op(
        src,
        out,
        rows,
        (
            f"Number the lines of {src}: write each line to {out} preceded by its line number, "
            "counting from 1.",
            f"In the review everyone refers to lines of {src} by number and keeps miscounting. Make "
            f"{out}, a copy where every line starts with its number (1, 2, 3, ...).",
            f"{out} = {src} with line numbers from 1 in front of each line.",
        ),
        rng.choice([f"cat -n {src} > {out}", f"nl -ba {src} > {out}"]),
        f"""
got = numbered({out!r})
check(got == {py_literal(rows)}, "{out}: the numbered text is not the lines of {src}")
""",
    )


def _head(rng: random.Random, folder: str) -> _Op:
    src = f"{folder}/{rng.choice(['server', 'build', 'import', 'deploy'])}.log"
    n = rng.randint(3, 8)
    out = f"{folder}/{rng.choice(['first', 'top', 'head'])}-{n}.txt"
    rows = _prose(rng, n + rng.randint(5, 12))
    return _Op(
        src,
        out,
        rows,
        (
            f"Save the first {n} lines of {src} to {out}.",
            f"The failure shows up right at the start of {src}, and the bug tracker only takes "
            f"short attachments. Put just its first {n} lines into {out}.",
            f"first {n} lines of {src} -> {out}",
        ),
        f"head -n {n} {src} > {out}",
        _expect_lines(out, rows[:n], f"the first {n} lines"),
        {"n": n},
    )


def _tail(rng: random.Random, folder: str) -> _Op:
    src = f"{folder}/{rng.choice(['worker', 'cron', 'backup', 'sync'])}.log"
    n = rng.randint(3, 8)
    out = f"{folder}/{rng.choice(['last', 'latest', 'tail'])}-{n}.txt"
    rows = _prose(rng, n + rng.randint(5, 12))
    return _Op(
        src,
        out,
        rows,
        (
            f"Copy the last {n} lines of {src} into {out}.",
            f"Whatever broke happened at the end of {src}; the earlier lines are noise. Please "
            f"extract its final {n} lines to {out} so I can paste them into the incident.",
            f"{src}: last {n} lines -> {out}",
        ),
        f"tail -n {n} {src} > {out}",
        _expect_lines(out, rows[-n:], f"the last {n} lines"),
        {"n": n},
    )


def _range(rng: random.Random, folder: str) -> _Op:
    src = f"{folder}/{rng.choice(['chapter', 'transcript', 'minutes', 'report'])}.txt"
    first = rng.randint(3, 7)
    last = first + rng.randint(2, 6)
    out = f"{folder}/excerpt.txt"
    rows = _prose(rng, last + rng.randint(3, 8))
    return _Op(
        src,
        out,
        rows,
        (
            f"Write lines {first} to {last} of {src}, both included, to {out}.",
            f"Someone quoted lines {first} through {last} of {src} in a review comment and I need "
            f"exactly that passage (line {first} and line {last} included) in {out}.",
            f"{src} lines {first}..{last} inclusive -> {out}",
        ),
        f"sed -n '{first},{last}p' {src} > {out}",
        _expect_lines(out, rows[first - 1 : last], f"lines {first} to {last}"),
        {"first": first, "last": last},
    )


def _count(rng: random.Random, folder: str) -> _Op:
    src = f"{folder}/{rng.choice(['essay', 'abstract', 'draft', 'notes'])}.txt"
    kind, flag = rng.choice([("lines", "l"), ("words", "w"), ("characters", "c")])
    out = f"{folder}/{kind}.txt"
    rows = _prose(rng, rng.randint(5, 15))
    text = _text(rows)
    want = {"lines": len(rows), "words": len(text.split()), "characters": len(text)}[kind]
    what = "characters (newlines included)" if kind == "characters" else kind
    return _Op(
        src,
        out,
        rows,
        (
            f"Count the {what} in {src} and write only that number to {out}.",
            f"The submission form asks how many {what} {src} has. Put the count in {out}, just "
            "the number.",
            f"number of {what} in {src} -> {out} (the number only)",
        ),
        f"wc -{flag} < {src} > {out}",
        f"""
got = read({out!r}).split()
check(got[:1] == [{str(want)!r}], "{out} says %r, not the number of {kind}" % got[:2])
""",
        {"kind": kind},
    )


def _case(rng: random.Random, folder: str) -> _Op:
    upper = rng.random() < 0.5
    src = f"{folder}/{rng.choice(['labels', 'titles', 'headings', 'tags'])}.txt"
    out = f"{folder}/{'upper' if upper else 'lower'}.txt"
    rows = [
        " ".join(
            w.upper() if rng.random() < 0.2 else w.title() if rng.random() < 0.4 else w
            for w in r.split()
        )
        for r in _prose(rng, rng.randint(5, 10))
    ]
    if upper:
        voices = (
            f"Convert all of {src} to upper case and write the result to {out}.",
            f"The label printer only takes capital letters and chokes on {src}. Make an all-caps "
            f"copy of it at {out}, otherwise unchanged.",
            f"{src} -> {out}, everything upper-cased",
        )
        solution, want = f"tr 'a-z' 'A-Z' < {src} > {out}", [r.upper() for r in rows]
    else:
        voices = (
            f"Write {src} converted entirely to lower case to {out}.",
            f"Our search index is case-sensitive and {src} mixes capitals all over. Write a "
            f"lower-case version of it to {out}, nothing else changed.",
            f"lowercase {src} -> {out}",
        )
        solution, want = f"tr '[:upper:]' '[:lower:]' < {src} > {out}", [r.lower() for r in rows]
    return _Op(
        src,
        out,
        rows,
        voices,
        solution,
        _expect_lines(out, want, "the file in the asked case"),
        {"case": "upper" if upper else "lower"},
    )


# A delimiter, how people call it, and the file extension it usually comes with.
DELIMITERS = [
    (",", "commas", "csv"),
    (":", "colons", "txt"),
    (";", "semicolons", "csv"),
    ("|", "`|` characters", "txt"),
    ("\t", "tabs", "tsv"),
]
ORDINALS = ["first", "second", "third", "fourth"]


def _column(rng: random.Random, folder: str) -> _Op:
    delim, called, ext = rng.choice(DELIMITERS)
    src = f"{folder}/{rng.choice(['members', 'records', 'export', 'roster'])}.{ext}"
    k = rng.randint(1, 4)
    out = f"{folder}/{rng.choice(['column', 'field', 'values'])}-{k}.txt"
    table = [
        [rng.choice(PEOPLE), rng.choice(NOUNS), str(rng.randint(1, 999)), rng.choice(WORDS)]
        for _ in range(rng.randint(6, 12))
    ]
    rows = [delim.join(t) for t in table]
    cut = f"cut -f{k}" if delim == "\t" else f"cut -d'{delim}' -f{k}"
    return _Op(
        src,
        out,
        rows,
        (
            f"Every line of {src} has four fields separated by {called}. Write the "
            f"{ORDINALS[k - 1]} field of each line to {out}, one value per line.",
            f"I only need field {k} out of {src} (four fields per line, split by {called}), but "
            f"the whole rows keep getting pasted. Put that field alone, one per line, in {out}.",
            f"{src} ({called}-separated): field {k} of every line -> {out}",
        ),
        f"{cut} {src} > {out}",
        _expect_lines(out, [t[k - 1] for t in table], f"field {k}"),
        {"delimiter": delim, "field": k},
    )


def _frequency(rng: random.Random, folder: str) -> _Op:
    stem, pool = rng.choice([("visitors", PEOPLE), ("hosts", NOUNS), ("votes", WORDS)])
    src, out = f"{folder}/{stem}.txt", f"{folder}/{stem}-counts.txt"
    values = rng.sample(pool, rng.randint(4, 6))
    counts = rng.sample(range(1, 10), len(values))  # distinct counts: one right order
    rows = [v for v, c in zip(values, counts, strict=True) for _ in range(c)]
    rng.shuffle(rows)
    want = sorted(([c, v] for v, c in zip(values, counts, strict=True)), reverse=True)
    return _Op(
        src,
        out,
        rows,
        (
            f"For each distinct line of {src}, write a line `count value` to {out} (how many "
            "times it occurs, then the line), most frequent first.",
            f"{src} has lots of repeats and I want to see which entries dominate. Give me {out} "
            "with each distinct entry once as `count value`, the most frequent at the top.",
            f"{src} -> {out}: `count value` per distinct line, sorted by count, highest first",
        ),
        f"sort {src} | uniq -c | sort -rn > {out}",
        f"""
got = counted({out!r})
check(got == {py_literal(want)}, "{out} lists %r" % got)
""",
    )


def _sort_numeric(rng: random.Random, folder: str) -> _Op:
    src = f"{folder}/{rng.choice(['sizes', 'scores', 'latencies', 'ports'])}.txt"
    descending = rng.random() < 0.5
    # Mixed widths, so a text sort (10 before 9) gives a wrong order.
    numbers = {rng.randint(1, 9), rng.randint(10, 99)} | {
        rng.randint(1, 5000) for _ in range(rng.randint(6, 12))
    }
    want = sorted(numbers, reverse=descending)
    rows = [str(x) for x in rng.sample(sorted(numbers), len(numbers))]
    if rows == [str(x) for x in want]:  # already sorted: doing nothing must not pass
        rows.reverse()
    order = "largest to smallest" if descending else "smallest to largest"
    return _Op(
        src,
        src,
        rows,
        (
            f"Sort the numbers in {src} numerically from {order}, editing the file in place.",
            f"{src} is in random order and a plain text sort puts 10 before 9. Rewrite the file "
            f"itself so the numbers go from {order}, compared as numbers.",
            f"{src}: numeric sort, {order}, in place",
        ),
        f"sort -{'r' if descending else ''}n -o {src} {src}",
        _expect_lines(src, [str(x) for x in want], f"the numbers from {order}"),
        {"descending": descending},
    )


def _join(rng: random.Random, folder: str) -> _Op:
    delim, called = rng.choice([(",", "commas"), (";", "semicolons"), (" ", "single spaces")])
    src = f"{folder}/{rng.choice(['hosts', 'recipients', 'modules', 'servers'])}.txt"
    out = f"{folder}/{rng.choice(['joined', 'oneline', 'list'])}.txt"
    rows = _codes(rng, rng.randint(4, 9))
    want = delim.join(rows)
    return _Op(
        src,
        out,
        rows,
        (
            f"Join all lines of {src} into a single line, separated by {called}, and write it "
            f"to {out}.",
            f"The setting wants the items of {src} on one line, separated by {called} (no "
            f"separator at the end). Write that line to {out}.",
            f"{src} -> {out}: one line, items separated by {called}",
        ),
        f"paste -sd'{delim}' {src} > {out}",
        f"""
got = read({out!r}).strip()
check(got == {want!r}, "{out} holds %r" % got[:200])
""",
        {"delimiter": delim},
    )


def _drop_blank(rng: random.Random, folder: str) -> _Op:
    src = f"{folder}/{rng.choice(['readme', 'notes', 'todo', 'agenda'])}.txt"
    kept = _prose(rng, rng.randint(6, 12))
    rows = list(kept)
    for i in sorted(rng.sample(range(1, len(kept)), k=rng.randint(2, 4)), reverse=True):
        rows[i:i] = [""] * rng.randint(1, 2)  # empty lines between the text, never only at the end
    return _Op(
        src,
        src,
        rows,
        (
            f"Remove every empty line from {src}, editing the file in place.",
            f"Copy-pasting left {src} full of empty lines. Clean up the file itself: drop the empty "
            "lines and keep the rest in order.",
            f"{src}: delete empty lines, in place",
        ),
        f"sed -i '/^$/d' {src}",
        _expect_lines(src, kept, "the text without empty lines"),
    )


def _squeeze(rng: random.Random, folder: str) -> _Op:
    src = f"{folder}/{rng.choice(['ocr', 'scan', 'pasted', 'export'])}.txt"
    out = f"{folder}/clean.txt"
    clean = _prose(rng, rng.randint(5, 10), lo=4)
    rows = [
        "".join(w + " " * rng.choice([1, 1, 2, 3, 5]) for w in r.split()[:-1]) + r.split()[-1]
        for r in clean
    ]
    rows[0] = rows[0].replace(" ", "   ", 1)  # at least one run to squeeze
    return _Op(
        src,
        out,
        rows,
        (
            f"Squeeze each run of repeated spaces in {src} down to one space and write the result "
            f"to {out}.",
            f"The scanner output in {src} has random runs of spaces between words. Write a copy to "
            f"{out} where every run of spaces is a single space.",
            f"{src} -> {out}: repeated spaces squeezed to one",
        ),
        f"tr -s ' ' < {src} > {out}",
        _expect_lines(out, clean, "the lines with single spaces"),
    )


def _longest(rng: random.Random, folder: str) -> _Op:
    src = f"{folder}/{rng.choice(['quotes', 'slogans', 'captions', 'titles'])}.txt"
    out = f"{folder}/longest.txt"
    rows = _prose(rng, rng.randint(6, 12), hi=6)
    i = rng.randrange(len(rows))
    longest_other = max(len(r) for j, r in enumerate(rows) if j != i)
    while len(rows[i]) <= longest_other:  # exactly one longest line
        rows[i] += " " + rng.choice(WORDS)
    return _Op(
        src,
        out,
        rows,
        (
            f"Find the longest line of {src} and write it to {out}.",
            f"The layout breaks on the longest line of {src}. Which one is it? Save that line "
            f"(the whole line) to {out}.",
            f"longest line of {src} -> {out}",
        ),
        f"awk 'length > max {{ max = length; line = $0 }} END {{ print line }}' {src} > {out}",
        f"""
got = read({out!r}).strip()
check(got == {rows[i]!r}, "{out} holds %r, not the longest line" % got[:200])
""",
    )


def _unique(rng: random.Random, folder: str) -> _Op:
    src = f"{folder}/{rng.choice(['ids', 'tickets', 'serials', 'badges'])}.txt"
    out = f"{folder}/{rng.choice(['once', 'singles', 'unique'])}.txt"
    codes = _codes(rng, rng.randint(7, 11))
    once = codes[: rng.randint(2, 4)]
    rows = once + [c for c in codes[len(once) :] for _ in range(rng.randint(2, 3))]
    rng.shuffle(rows)
    return _Op(
        src,
        out,
        rows,
        (
            f"Write the lines of {src} that occur exactly once in it to {out}, one per line.",
            f"Most ids in {src} are listed two or three times; the ones that appear only a single "
            f"time are the suspicious ones. List those in {out}, one per line.",
            f"{src}: lines occurring exactly once -> {out}",
        ),
        f"sort {src} | uniq -u > {out}",
        f"""
got = sorted(lines({out!r}))
check(got == {py_literal(sorted(once))}, "{out} lists %r" % got)
""",
    )


def _reverse_chars(rng: random.Random, folder: str) -> _Op:
    src = f"{folder}/{rng.choice(['mirror', 'puzzle', 'cipher', 'backwards'])}.txt"
    out = f"{folder}/{rng.choice(['decoded', 'flipped', 'plain'])}.txt"
    rows = [r[::-1] for r in _prose(rng, rng.randint(4, 9))]
    return _Op(
        src,
        out,
        rows,
        (
            f"Reverse the characters of every line of {src} (last character first) and write the "
            f"result to {out}, keeping the lines in their order.",
            f"Every line in {src} was written backwards, character by character. Write {out} with "
            "each line turned the right way round; the line order stays.",
            f"{src} -> {out}: each line's characters reversed, same line order",
        ),
        f"rev {src} > {out}",
        _expect_lines(out, [r[::-1] for r in rows], "each line reversed"),
    )


OPERATIONS = {
    "reverse": _reverse,
    "number": _number,
    "head": _head,
    "tail": _tail,
    "range": _range,
    "count": _count,
    "case": _case,
    "column": _column,
    "frequency": _frequency,
    "sort-numeric": _sort_numeric,
    "join": _join,
    "drop-blank": _drop_blank,
    "squeeze": _squeeze,
    "longest": _longest,
    "unique": _unique,
    "reverse-chars": _reverse_chars,
}
"""The easy operations: one filter each, drawn uniformly."""


def _easy(rng: random.Random) -> Draft:
    folder = f"{base_dir(rng)}/{name(rng)}"
    op_name = rng.choice(sorted(OPERATIONS))
    op = OPERATIONS[op_name](rng, folder)
    request, report, ticket = op.voices
    instruction, style, phrasings = say(rng, request=request, report=report, ticket=ticket)
    return Draft(
        instruction=instruction,
        solution=op.solution,
        tags=[op_name],
        setup_files={"input.txt": _text(op.rows)},
        setup_script=f"mkdir -p {folder}\ncp input.txt {op.src}",
        check_py=HELPERS_PY + op.check,
        metadata={
            "op": op_name,
            "src": op.src,
            "out": op.out,
            **op.params,
            "phrasing": style,
            "phrasings": phrasings,
        },
    )


def _top_values(rng: random.Random, folder: str) -> Draft:
    src = f"{folder}/{rng.choice(['activity', 'audit', 'events'])}.csv"
    column, index, pool = rng.choice([("user", 2, PEOPLE), ("action", 3, WORDS)])
    k = rng.randint(3, 4)
    out = f"{folder}/top-{column}s.txt"
    values = rng.sample(pool, rng.randint(k + 2, k + 4))
    counts = rng.sample(range(1, 13), len(values))  # distinct: the top k and their order are clear
    picked = [v for v, c in zip(values, counts, strict=True) for _ in range(c)]
    rng.shuffle(picked)
    rows = ["date,user,action"]
    for v in picked:
        user = v if column == "user" else rng.choice(PEOPLE)
        action = v if column == "action" else rng.choice(WORDS)
        rows.append(f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d},{user},{action}")
    want = sorted(([c, v] for v, c in zip(values, counts, strict=True)), reverse=True)[:k]
    instruction, style, phrasings = say(
        rng,
        request=f"{src} is a CSV file with a header line and the columns date,user,action. Write "
        f"the {k} most frequent values of the `{column}` column to {out}, one `count value` line "
        "each, most frequent first.",
        report=f"We want to know which {column}s show up most in {src} (CSV, header line, columns "
        f"date,user,action). Put the top {k} into {out} as `count value` lines, biggest count first.",
        ticket=f"{src} (CSV, header; date,user,action): top {k} `{column}` values -> {out} as "
        "`count value`, descending.",
    )
    solution = f"""
head -n 5 {src}
tail -n +2 {src} | cut -d, -f{index} | sort | uniq -c | sort -rn | head -n {k} > {out}
cat {out}
"""
    decoy = f"{folder}/{src.rsplit('/', 1)[1].replace('.csv', '-2023.csv')}"
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["top-k", "pipeline"],
        setup_files={"input.csv": _text(rows)},
        setup_script=f"mkdir -p {folder}\ncp input.csv {src}",
        check_py=HELPERS_PY
        + f"""
got = counted({out!r})
check(got == {py_literal(want)}, "{out} lists %r" % got)
""",
        perturbations=(
            planted_files(
                "text-utils",
                "last year's export with other counts sits beside the CSV",
                {decoy: _text(["date,user,action"] + [f"2023-01-01,{v},{v}" for v in values])},
            ),
        ),
        metadata={"variant": "top-values", "phrasing": style, "phrasings": phrasings},
    )


def _numbered_matches(rng: random.Random, folder: str) -> Draft:
    src = f"{folder}/{rng.choice(['jobs', 'checks', 'tasks'])}.txt"
    state = rng.choice(["failed", "skipped", "pending"])
    out = f"{folder}/{state}.txt"
    jobs = names(rng, rng.randint(10, 16), NOUNS)
    states = {j: rng.choice(["ok", "ok", "failed", "skipped", "pending"]) for j in jobs}
    for j in rng.sample(jobs, 3):  # at least three rows in the answer
        states[j] = state
    rows = ["job state seconds"] + [f"{j} {states[j]} {rng.randint(1, 900)}" for j in jobs]
    want = sorted(j for j in jobs if states[j] == state)
    instruction, style, phrasings = say(
        rng,
        request=f"{src} has a header line and then lines `job state seconds`. Write the names of the "
        f"jobs whose state is `{state}` to {out}, sorted alphabetically and numbered from 1 "
        "(one numbered name per line).",
        report=f"The morning summary needs the `{state}` jobs from {src} (header, then `job state "
        f"seconds` lines) as a numbered list: write the job names to {out}, in alphabetical order, "
        "each line starting with its number from 1.",
        ticket=f"{src} (header; `job state seconds`): names with state `{state}` -> {out}, sorted, "
        "numbered 1..n.",
    )
    solution = f"""
head -n 5 {src}
awk '$2 == "{state}" {{ print $1 }}' {src} | sort | cat -n > {out}
cat {out}
"""
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["filter", "pipeline", "nl"],
        setup_files={"input.txt": _text(rows)},
        setup_script=f"mkdir -p {folder}\ncp input.txt {src}",
        check_py=HELPERS_PY
        + f"""
got = numbered({out!r})
check(got == {py_literal(want)}, "{out} lists %r" % got)
""",
        perturbations=(
            planted_files(
                "text-utils",
                "yesterday's rotated copy with other states sits beside the file",
                {f"{src}.1": _text(["job state seconds"] + [f"{j} {state} 1" for j in jobs])},
            ),
        ),
        metadata={"variant": "numbered-matches", "phrasing": style, "phrasings": phrasings},
    )


def _medium(rng: random.Random) -> Draft:
    folder = f"{base_dir(rng)}/{name(rng)}"
    make = rng.choice([_top_values, _numbered_matches])
    return make(rng, folder)


def _hard(rng: random.Random) -> Draft:
    app = name(rng)
    folder = f"/var/log/{app}"
    src, out = f"{folder}/access.log", f"{folder}/summary.txt"
    header = f"{app} access summary"
    paths = rng.sample(
        ["/", "/login", "/api/items", "/api/users", "/health", "/static/app.js", "/search"], k=5
    )
    hits = rng.sample(range(1, 12), len(paths))  # distinct: the top three are unambiguous
    ips = [f"10.0.{rng.randint(0, 9)}.{rng.randint(1, 254)}" for _ in range(rng.randint(4, 8))]
    requests = []
    for p, n in zip(paths, hits, strict=True):
        for _ in range(n):
            status = rng.choice([200, 200, 200, 304, 404, 500, 502, 503])
            requests.append(f"{rng.choice(ips)} {rng.choice(['GET', 'POST'])} {p} {status}")
    rng.shuffle(requests)
    rows = ["# ip method path status"]
    for r in requests:
        rows.append(r)
        if rng.random() < 0.12:
            rows.append(rng.choice(["", "# log rotated", ""]))
    top = sorted(zip(hits, paths, strict=True), reverse=True)[:3]
    want = [
        header,
        f"requests {len(requests)}",
        f"clients {len({r.split()[0] for r in requests})}",
        f"errors {sum(r.split()[3].startswith('5') for r in requests)}",
        *(f"{n} {p}" for n, p in top),
    ]
    instruction, style, phrasings = say(
        rng,
        request=f"{src} has lines `ip method path status`, plus `#` comment lines and empty lines "
        f"to ignore. Write a report to {out}: first the line `{header}`, then `requests N` (number "
        "of requests), `clients N` (distinct ips), `errors N` (requests with a 5xx status), and "
        "last the 3 most requested paths as `count path` lines, most requested first.",
        report=f"The weekly review wants a summary of {src} in {out}. Skip the `#` comments and "
        f"empty lines; the rest is `ip method path status`. The file starts with a line `{header}`, "
        "followed by `requests N` (how many requests), `clients N` (how many distinct ips) and "
        "`errors N` (how many had a 5xx status), then the top 3 paths as `count path`, busiest first.",
        ticket=f"{src} (`ip method path status`; skip # and empty lines) -> {out}: line `{header}`, "
        "`requests N`, `clients N` (distinct ips), `errors N` (5xx), then top 3 paths `count path` "
        "descending.",
    )
    solution = f"""
head -n 5 {src}
grep -v -e '^#' -e '^$' {src} > /tmp/requests.txt
echo '{header}' > {out}
echo "requests $(wc -l < /tmp/requests.txt)" >> {out}
echo "clients $(cut -d' ' -f1 /tmp/requests.txt | sort -u | wc -l)" >> {out}
echo "errors $(cut -d' ' -f4 /tmp/requests.txt | grep -c '^5')" >> {out}
cut -d' ' -f3 /tmp/requests.txt | sort | uniq -c | sort -rn | head -n 3 >> {out}
cat {out}
"""
    rotated = [f"10.9.9.9 GET {paths[-1]} 500" for _ in range(20)]
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["report", "pipeline"],
        setup_files={"access.log": _text(rows)},
        setup_script=f"mkdir -p {folder}\ncp access.log {src}",
        check_py=HELPERS_PY
        + f"""
got = [" ".join(row.split()) for row in lines({out!r}) if row.strip()]
want = {py_literal(want)}
check(got[:1] == want[:1], "{out} does not start with the header line: %r" % got[:1])
check(got == want, "{out} is %r" % got)
""",
        perturbations=(
            planted_files(
                "text-utils",
                "last week's rotated log and an old summary sit beside the live log",
                {f"{src}.1": _text(rotated), f"{out}.old": f"{header}\nrequests 0\n"},
            ),
        ),
        metadata={"requests": len(requests), "phrasing": style, "phrasings": phrasings},
    )


def generate(rng: random.Random, difficulty: str) -> Draft:
    """One text-utils task at ``difficulty``."""
    return {"easy": _easy, "medium": _medium, "hard": _hard}[difficulty](rng)
