"""Set operations on line files and joins on a key: comm, join, sort, cut, paste.

easy    the lines of one list that are not in another (or in both): comm on sorted input
medium  join two files on a key column into `key a b` rows (sort, join) — look at both first
hard    reconcile three account lists with messy case and whitespace: active in HR, present on the
        system, not in the disabled list

The checks compare sets of normalised lines, so ``comm``, ``grep -Fxf``, awk
or Python all pass.
"""

from __future__ import annotations

import random

from components.synthesize.draft import Draft, py_literal
from components.synthesize.families.phrasing import say
from components.synthesize.families.words import NOUNS, PEOPLE, WORDS, base_dir, name
from components.synthesize.perturb import planted_files

__all__ = ["TAGS", "generate"]

TAGS = ["set-operations", "comm", "join", "sort"]


def _lines(items: list[str]) -> str:
    return "".join(f"{i}\n" for i in items)


def _easy(rng: random.Random) -> Draft:
    folder = f"{base_dir(rng)}/{name(rng)}"
    pool = rng.sample(PEOPLE + [f"{n}{rng.randint(1, 9)}" for n in NOUNS], k=24)
    a = pool[:16]
    b = pool[8:24]
    a_name, b_name = rng.choice(
        [("subscribers", "unsubscribed"), ("expected", "received"), ("hosts", "patched")]
    )
    fa, fb = f"{folder}/{a_name}.txt", f"{folder}/{b_name}.txt"
    out = f"{folder}/{rng.choice(['result', 'diff', 'missing'])}.txt"
    both = rng.random() < 0.4
    want = sorted(set(a) & set(b)) if both else sorted(set(a) - set(b))
    rng.shuffle(a)
    rng.shuffle(b)
    what = f"appear in both {fa} and {fb}" if both else f"are in {fa} but not in {fb}"
    instruction, style, phrasings = say(
        rng,
        request=f"Write the lines that {what} to {out}, one per line, sorted.",
        report=f"I need to know which entries {what}. The files are not sorted. Put the answer in {out}, sorted.",
        ticket=f"Lines that {what} -> {out} (sorted).",
    )
    flag = "-12" if both else "-23"
    return Draft(
        instruction=instruction,
        solution=f"LC_ALL=C comm {flag} <(LC_ALL=C sort -u {fa}) <(LC_ALL=C sort -u {fb}) > {out}",
        tags=["comm"],
        setup_files={"a": _lines(a), "b": _lines(b)},
        setup_script=f"mkdir -p {folder}\ncp a {fa}\ncp b {fb}",
        check_py=f"""
got = sorted(l.strip() for l in read({out!r}).splitlines() if l.strip())
check(got == {py_literal(want)}, "{out} lists %r" % got)
""",
        metadata={
            "variant": "both" if both else "difference",
            "phrasing": style,
            "phrasings": phrasings,
        },
    )


def _medium(rng: random.Random) -> Draft:
    folder = f"/srv/{name(rng)}/reports"
    ids = [f"{rng.choice(['A', 'B', 'C'])}{rng.randint(100, 999)}" for _ in range(18)]
    ids = sorted(set(ids))
    owners = {i: rng.choice(PEOPLE) for i in ids}
    hosts = {
        i: f"{rng.choice(NOUNS)}-{rng.randint(1, 9)}" for i in rng.sample(ids, k=len(ids) * 2 // 3)
    }
    owner_ids = rng.sample(ids, k=len(ids) * 3 // 4)
    fa, fb, out = f"{folder}/owners.txt", f"{folder}/hosts.txt", f"{folder}/joined.txt"
    a = [f"{i} {owners[i]}" for i in owner_ids]
    b = [f"{i} {h}" for i, h in hosts.items()]
    rng.shuffle(a)
    rng.shuffle(b)
    want = sorted(f"{i} {owners[i]} {hosts[i]}" for i in owner_ids if i in hosts)
    instruction, style, phrasings = say(
        rng,
        request=f"{fa} has lines `id owner` and {fb} has lines `id host` (neither is sorted). Write {out} with "
        "a line `id owner host` for every id that appears in both files, sorted by id.",
        report=f"The inventory report lost the link between owners and hosts. {fa} maps ids to owners, {fb} ids "
        f"to hosts; combine them into {out} as `id owner host` lines (only ids present in both), sorted by id.",
        ticket=f"join {fa} (id owner) + {fb} (id host) on id -> {out} `id owner host`, ids in both, sorted.",
    )
    solution = f"""
head -n 3 {fa} {fb}
LC_ALL=C join <(LC_ALL=C sort -k1,1 {fa}) <(LC_ALL=C sort -k1,1 {fb}) > {out}
wc -l {fa} {fb} {out}
"""
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["join"],
        setup_files={"a": _lines(a), "b": _lines(b)},
        setup_script=f"mkdir -p {folder}\ncp a {fa}\ncp b {fb}",
        check_py=f"""
got = sorted(" ".join(l.split()) for l in read({out!r}).splitlines() if l.strip())
check(got == {py_literal(want)}, "{out} holds %r" % got)
""",
        perturbations=(
            planted_files(
                "set-ops",
                "last month's joined report, outdated, sits in the folder",
                {f"{folder}/joined-old.txt": f"{ids[0]} nobody nowhere\n"},
            ),
        ),
        metadata={"joined": len(want), "phrasing": style, "phrasings": phrasings},
    )


def _hard(rng: random.Random) -> Draft:
    folder = f"/srv/{name(rng)}/audit"
    users = rng.sample(PEOPLE, k=16)
    hr = rng.sample(users, k=12)
    system = rng.sample(users, k=11)
    disabled = rng.sample(users, k=4)
    want = sorted(set(hr) & set(system) - set(disabled))
    if not want:
        return _hard(rng)

    def messy(u: str) -> str:
        return rng.choice([u, u.upper(), u.title(), f"  {u}", f"{u} \t"])

    hr_lines = ["name,department"] + [f"{messy(u)},{rng.choice(WORDS)}" for u in hr]
    sys_lines = [f"{u}:x:{1000 + i}:{1000 + i}::/home/{u}:/bin/bash" for i, u in enumerate(system)]
    dis_lines = ["# disabled accounts"] + [messy(u) for u in disabled]
    out = f"{folder}/active.txt"
    instruction, style, phrasings = say(
        rng,
        request=f"Three lists: {folder}/hr.csv (CSV with header, first column the user name), "
        f"{folder}/passwd (passwd format) and {folder}/disabled.txt (one name per line, `#` comments). Names "
        "may differ in case and have stray spaces. Write to {out} the lower-case names that are in the HR list "
        "and in passwd but not disabled, one per line, sorted.".replace("{out}", out),
        report=f"The access audit needs every person who is employed ({folder}/hr.csv, first column), has an "
        f"account ({folder}/passwd) and is not disabled ({folder}/disabled.txt). The HR export has random "
        f"capitalisation and padding. Write their names in lower case to {out}, sorted, one per line.",
        ticket=f"{out}: lower-case names in {folder}/hr.csv (col 1, header) AND {folder}/passwd, NOT in "
        f"{folder}/disabled.txt (# comments). Normalise case/spaces. Sorted.",
    )
    solution = f"""
head -n 3 {folder}/hr.csv {folder}/passwd {folder}/disabled.txt
cd {folder} && tail -n +2 hr.csv | cut -d, -f1 | tr -d ' \\t' | tr 'A-Z' 'a-z' | sort -u > /tmp/hr.txt
cd {folder} && cut -d: -f1 passwd | sort -u > /tmp/sys.txt && grep -v '^#' disabled.txt | tr -d ' \\t' | tr 'A-Z' 'a-z' | sort -u > /tmp/dis.txt
comm -12 /tmp/hr.txt /tmp/sys.txt | comm -23 - /tmp/dis.txt > {out}
cat {out}
"""
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["comm", "normalise", "csv"],
        setup_files={"hr": _lines(hr_lines), "passwd": _lines(sys_lines), "dis": _lines(dis_lines)},
        setup_script=f"mkdir -p {folder}\ncp hr {folder}/hr.csv\ncp passwd {folder}/passwd\ncp dis {folder}/disabled.txt",
        check_py=f"""
got = [l.strip() for l in read({out!r}).splitlines() if l.strip()]
check(sorted(set(got)) == {py_literal(want)} and len(got) == len(set(got)), "{out} lists %r" % got)
""",
        metadata={"active": len(want), "phrasing": style, "phrasings": phrasings},
    )


def generate(rng: random.Random, difficulty: str) -> Draft:
    """One set-operations task at ``difficulty``."""
    return {"easy": _easy, "medium": _medium, "hard": _hard}[difficulty](rng)
