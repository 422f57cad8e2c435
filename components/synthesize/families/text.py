"""Text processing with grep, sed, awk, sort.

easy    one sed/sort command: replace a word in place, delete matching lines, or sort -u
medium  extract with a pattern (emails) or filter columns with awk
hard    aggregate a report with awk: skip comments/header, sum per group, order by total
"""

from __future__ import annotations

import random

from components.synthesize.draft import Draft, py_literal
from components.synthesize.families.words import NOUNS, PEOPLE, WORDS, base_dir, name, names

__all__ = ["TAGS", "generate"]

TAGS = ["text-processing", "sed", "awk", "grep"]


def _filler(rng: random.Random, avoid: list[str], n: int) -> list[str]:
    pool = [w for w in WORDS if not any(a in w or w in a for a in avoid)]
    return [" ".join(rng.choices(pool, k=rng.randint(3, 7))) for _ in range(n)]


def _easy(rng: random.Random) -> Draft:
    folder = f"{base_dir(rng)}/{name(rng)}"
    path = f"{folder}/{rng.choice(['notes', 'draft', 'memo', 'story', 'words'])}.txt"
    old, new = names(rng, 2, WORDS)
    lines = _filler(rng, [old, new], rng.randint(8, 16))
    variant = rng.choice(["replace", "delete", "sort"])
    for i in rng.sample(range(len(lines)), k=max(2, len(lines) // 3)):
        words = lines[i].split()
        words.insert(rng.randint(0, len(words)), old)
        lines[i] = " ".join(words)
    if variant == "sort":
        lines += rng.sample(lines, k=3)  # duplicates for sort -u to drop
        rng.shuffle(lines)
    original = "\n".join(lines) + "\n"
    if variant == "replace":
        instruction = f"Replace every occurrence of the word `{old}` with `{new}` in {path}, editing the file in place."
        solution = f"sed -i 's/{old}/{new}/g' {path}"
        target, expected = path, original.replace(old, new)
    elif variant == "delete":
        instruction = f"Delete every line that contains the word `{old}` from {path}, editing the file in place."
        solution = f"sed -i '/{old}/d' {path}"
        target, expected = path, "".join(f"{ln}\n" for ln in lines if old not in ln)
    else:
        target = f"{folder}/sorted.txt"
        instruction = f"Write the lines of {path} sorted alphabetically, with duplicate lines removed, to {target}."
        solution = f"LC_ALL=C sort -u {path} > {target}"
        expected = "".join(f"{ln}\n" for ln in sorted(set(lines)))
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=[variant],
        setup_files={"input.txt": original},
        setup_script=f"mkdir -p {folder}\ncp input.txt {path}",
        check_py=f"""
got = read({target!r})
check(got.strip() == {py_literal(expected)}.strip(), "{target} does not have the expected content")
""",
        metadata={"variant": variant, "path": path},
    )


def _medium(rng: random.Random) -> Draft:
    folder = f"{base_dir(rng)}/{name(rng)}"
    if rng.random() < 0.5:
        src, out = f"{folder}/messages.log", f"{folder}/emails.txt"
        domains = [f"{n}.{rng.choice(['com', 'org', 'net', 'io'])}" for n in names(rng, 4)]
        emails = sorted(
            {f"{rng.choice(PEOPLE)}.{rng.randint(1, 99)}@{rng.choice(domains)}" for _ in range(10)}
        )
        lines = []
        for _ in range(rng.randint(25, 40)):
            words = _filler(rng, [], 1)[0].split()
            if rng.random() < 0.6:
                words.insert(rng.randint(0, len(words)), rng.choice(emails))
            lines.append(" ".join(words))
        expected = sorted({w for ln in lines for w in ln.split() if "@" in w})
        instruction = (
            f"Extract every email address that appears in {src}. Write them to {out}, "
            "one per line, sorted alphabetically and without duplicates."
        )
        act = f"grep -oE '[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\\.[A-Za-z]+' {src} | LC_ALL=C sort -u > {out}"
        variant = "emails"
    else:
        src, out = f"{folder}/inventory.txt", f"{folder}/restock.txt"
        places = names(rng, 3, ["north", "south", "east", "west", "dock", "yard", "loft"])
        where, limit = places[0], rng.randint(10, 40)
        items = names(rng, 18, NOUNS + WORDS)
        rows = [(it, rng.randint(0, 80), rng.choice(places)) for it in items]
        lines = [f"{it} {q} {p}" for it, q, p in rows]
        expected = [it for it, q, p in rows if p == where and q < limit]
        if not expected:  # make sure the answer is not empty
            rows[0] = (rows[0][0], 0, where)
            lines[0] = f"{rows[0][0]} 0 {where}"
            expected = [it for it, q, p in rows if p == where and q < limit]
        instruction = (
            f"{src} lists one item per line as `name quantity location`. Write the names of the items "
            f"stored at `{where}` whose quantity is below {limit} to {out}, one per line, in the order they appear."
        )
        act = f"awk '$3 == \"{where}\" && $2 < {limit} {{ print $1 }}' {src} > {out}"
        variant = "awk-filter"
    # A medium task is worked in turns: look at the input, act, check the output.
    solution = f"head -n 5 {src}\n{act}\ncat {out}"
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=[variant],
        setup_files={"input.txt": "\n".join(lines) + "\n"},
        setup_script=f"mkdir -p {folder}\ncp input.txt {src}",
        check_py=f"""
got = read({out!r}).split()
check(got == {py_literal(expected)}, f"{out} lists {{got}}")
""",
        metadata={"variant": variant},
    )


def _hard(rng: random.Random) -> Draft:
    folder = f"{base_dir(rng)}/{name(rng)}"
    src, out = f"{folder}/payroll.txt", f"{folder}/totals.txt"
    depts = names(
        rng, rng.randint(3, 5), ["sales", "ops", "research", "support", "legal", "design", "infra"]
    )
    totals = {d: 0 for d in depts}
    lines = ["# payroll export", "employee department amount"]
    for person in rng.sample(PEOPLE, k=rng.randint(12, 20)):
        dept, amount = rng.choice(depts), rng.randint(100, 5000)
        totals[dept] += amount
        lines.append(f"{person} {dept} {amount}")
        if rng.random() < 0.2:
            lines.append(rng.choice(["", "# corrected below", "   "]))
    for d in depts:  # ties would make the order ambiguous
        while list(totals.values()).count(totals[d]) > 1:
            totals[d] += 1
            lines.append(f"{rng.choice(PEOPLE)} {d} 1")
    used = [d for d in depts if totals[d] > 0]
    expected = [f"{d} {totals[d]}" for d in sorted(used, key=lambda d: -totals[d])]
    expected.append(f"TOTAL {sum(totals.values())}")
    instruction = (
        f"{src} is a payroll export: a header line, comment lines starting with `#`, blank lines, and "
        f"rows `employee department amount`. Write to {out} one line per department, `department total`, "
        "where total is the sum of its amounts, ordered from the largest total to the smallest, and then a "
        "last line `TOTAL <sum of all amounts>`."
    )
    solution = (
        f"awk '$1 !~ /^#/ && NF == 3 && $3 ~ /^[0-9]+$/ {{ t[$2] += $3 }} "
        f"END {{ for (d in t) print d, t[d] }}' {src} | sort -k2,2nr > {out}\n"
        f"awk '$1 !~ /^#/ && NF == 3 && $3 ~ /^[0-9]+$/ {{ s += $3 }} END {{ print \"TOTAL\", s }}' {src} >> {out}"
    )
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["aggregate"],
        setup_files={"input.txt": "\n".join(lines) + "\n"},
        setup_script=f"mkdir -p {folder}\ncp input.txt {src}",
        check_py=f"""
got = [" ".join(l.split()) for l in read({out!r}).splitlines() if l.strip()]
check(got == {py_literal(expected)}, f"{out} is {{got}}")
""",
        metadata={"departments": len(used)},
    )


def generate(rng: random.Random, difficulty: str) -> Draft:
    """One text-processing task at ``difficulty``."""
    return {"easy": _easy, "medium": _medium, "hard": _hard}[difficulty](rng)
