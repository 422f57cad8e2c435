"""Text processing with grep, sed, awk, sort.

easy    one sed/sort command: replace a word in place, delete matching lines, or sort -u
medium  extract with a pattern (emails) or filter columns with awk
hard    aggregate a report with awk: skip comments/header, sum per group, order by total
"""

from __future__ import annotations

import random

from components.synthesize.draft import Draft, py_literal
from components.synthesize.families.phrasing import say
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
        instruction, style, phrasings = say(
            rng,
            request=f"Replace every occurrence of the word `{old}` with `{new}` in {path}, editing "
            "the file in place.",
            report=f"We renamed `{old}` to `{new}`, but {path} still says `{old}` all over. Please "
            f"fix the file itself (in place) so that every `{old}` in it reads `{new}`.",
            ticket=f"{path}: `{old}` -> `{new}`, all occurrences, edit in place.",
        )
        solution = f"sed -i 's/{old}/{new}/g' {path}"
        target, expected = path, original.replace(old, new)
    elif variant == "delete":
        instruction, style, phrasings = say(
            rng,
            request=f"Delete every line that contains the word `{old}` from {path}, editing the "
            "file in place.",
            report=f"The lines of {path} that mention `{old}` are stale and keep confusing "
            "readers. Remove all of them from the file itself (edit it in place) and leave the "
            "other lines alone.",
            ticket=f"{path}: drop every line containing `{old}`, in place.",
        )
        solution = f"sed -i '/{old}/d' {path}"
        target, expected = path, "".join(f"{ln}\n" for ln in lines if old not in ln)
    else:
        target = f"{folder}/sorted.txt"
        instruction, style, phrasings = say(
            rng,
            request=f"Write the lines of {path} sorted alphabetically, with duplicate lines "
            f"removed, to {target}.",
            report=f"{path} is in no particular order and some lines appear more than once. I need "
            f"a clean copy in {target}: the same lines in alphabetical order, each distinct line "
            "only once.",
            ticket=f"{path} -> {target}: sort alphabetically, remove duplicate lines.",
        )
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
        metadata={"variant": variant, "path": path, "phrasing": style, "phrasings": phrasings},
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
        instruction, style, phrasings = say(
            rng,
            request=f"Extract every email address that appears in {src}. Write them to {out}, one "
            "per line, sorted alphabetically and without duplicates.",
            report=f"We have to contact everyone mentioned in {src}, but the addresses are buried "
            f"in the message text. Pull out all the email addresses into {out}: one per line, in "
            "alphabetical order, each address listed once.",
            ticket=f"All email addresses in {src} -> {out}, one per line, sorted, unique.",
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
        instruction, style, phrasings = say(
            rng,
            request=f"{src} lists one item per line as `name quantity location`. Write the names "
            f"of the items stored at `{where}` whose quantity is below {limit} to {out}, one per "
            "line, in the order they appear.",
            report=f"Stock at `{where}` is running low and we need a restock list. Each line of "
            f"{src} is `name quantity location`; put the names of the `{where}` items with fewer "
            f"than {limit} units into {out}, one per line, keeping the order they have in the "
            "file.",
            ticket=f"{src} (`name quantity location`): names where location = {where} and quantity "
            f"< {limit} -> {out}, one per line, file order.",
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
        metadata={"variant": variant, "phrasing": style, "phrasings": phrasings},
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
    instruction, style, phrasings = say(
        rng,
        request=f"{src} is a payroll export: a header line, comment lines starting with `#`, blank "
        f"lines, and rows `employee department amount`. Write to {out} one line per department, "
        "`department total`, where total is the sum of its amounts, ordered from the largest total "
        "to the smallest, and then a last line `TOTAL <sum of all amounts>`.",
        report=f"Finance wants payroll totals per department, but the export {src} is messy: a "
        "header line, `#` comments and blank lines sit between the `employee department amount` "
        f"rows. Add up each department's amounts and write {out} with one `department total` line "
        "per department, biggest total first, followed by a final line "
        "`TOTAL <sum of all amounts>`.",
        ticket=f"{src} (header, # comments, blank lines; rows `employee department amount`) -> "
        f"{out}: `department total` per department, sorted by total descending, then a last line "
        "`TOTAL <grand total>`.",
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
        metadata={"departments": len(used), "phrasing": style, "phrasings": phrasings},
    )


def generate(rng: random.Random, difficulty: str) -> Draft:
    """One text-processing task at ``difficulty``."""
    return {"easy": _easy, "medium": _medium, "hard": _hard}[difficulty](rng)
