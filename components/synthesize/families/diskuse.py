"""Disk usage: du and df reports, the biggest files, trimming a cache to a budget.

easy    the subfolder of a folder that takes the most space (du), or the mount point holding a path (df)
medium  the N largest files under a tree, largest first (look with du, list with find -printf, check)
hard    a cache over its budget: delete the oldest files until the total size fits, nothing more

Files are written with real blocks (``head -c N /dev/zero``), not sparse, so
du and the byte sizes agree on the ranking.
"""

from __future__ import annotations

import random

from components.synthesize.draft import Draft, py_literal
from components.synthesize.families.phrasing import say
from components.synthesize.families.words import NOUNS, WORDS, base_dir, name, names
from components.synthesize.perturb import planted_files

__all__ = ["TAGS", "generate"]

TAGS = ["disk-usage", "du", "df"]


def _make(root: str, sizes: dict[str, int], ages: dict[str, int] | None = None) -> str:
    lines = [f"mkdir -p {root}"]
    for rel, size in sorted(sizes.items()):
        lines.append(
            f"mkdir -p \"$(dirname '{root}/{rel}')\" && head -c {size} /dev/zero > '{root}/{rel}'"
        )
        if ages:
            lines.append(f"touch -d '{ages[rel]} minutes ago' '{root}/{rel}'")
    return "\n".join(lines)


def _easy(rng: random.Random) -> Draft:
    root = f"{base_dir(rng)}/{name(rng)}"
    answer = f"/root/{rng.choice(['biggest', 'answer', 'largest-dir'])}.txt"
    if rng.random() < 0.7:
        dirs = names(rng, rng.randint(3, 5), WORDS)
        kib = {d: rng.randint(1, 8) * 64 for d in dirs}
        top = rng.choice(dirs)
        kib[top] = max(kib.values()) * 2 + 64
        sizes = {}
        for d in dirs:  # spread each folder's size over a few files
            parts = rng.randint(1, 3)
            for i in range(parts):
                sizes[f"{d}/{rng.choice(NOUNS)}-{i}.bin"] = kib[d] * 1024 // parts
        instruction, style, phrasings = say(
            rng,
            request=f"Which subfolder of {root} uses the most disk space? Write just its name (not the path) to {answer}.",
            report=f"{root} is eating the disk and I want to know which of its subfolders is responsible. Put the "
            f"name of the biggest one in {answer}, nothing else.",
            ticket=f"Largest subdir of {root} by du -> {answer} (name only).",
        )
        solution = f"du -s {root}/*/ | sort -nr | head -n 1 | awk '{{print $2}}' | xargs basename > {answer}"
        check = f'got = read({answer!r}).strip().rstrip("/").rsplit("/", 1)[-1]\ncheck(got == {top!r}, "{answer} says %r" % got)'
        variant, script = "du", _make(root, sizes)
    else:
        sizes = {f"{rng.choice(NOUNS)}.dat": 4096}
        instruction, style, phrasings = say(
            rng,
            request=f"On which mount point is the filesystem that holds {root}? Write that mount point to {answer}.",
            report=f"Before we fill {root} we need to know which filesystem it lives on. Write the mount point "
            f"(as df shows it) to {answer}.",
            ticket=f"df: mount point of fs holding {root} -> {answer}.",
        )
        solution = f"df --output=target {root} | tail -n 1 > {answer}"
        check = f"""
p = os.path.realpath({root!r})
while not os.path.ismount(p):
    p = os.path.dirname(p)
got = read({answer!r}).strip()
check(got == p, "{answer} says %r, the mount point is %r" % (got, p))
"""
        variant, script = "df", _make(root, sizes)
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=[variant],
        setup_script=script,
        check_py=check,
        metadata={"variant": variant, "phrasing": style, "phrasings": phrasings},
    )


def _medium(rng: random.Random) -> Draft:
    root = f"/var/lib/{name(rng)}"
    n = rng.choice([3, 4, 5])
    answer = f"/root/top{n}.txt"
    dirs = ["", *[f"{w}/" for w in names(rng, 3, WORDS)]]
    sizes: dict[str, int] = {}
    used: set[int] = set()
    count = rng.randint(12, 18)
    while len(sizes) < count:
        size = rng.randint(1, 300) * 1024 + rng.randint(0, 1023)
        if size // 1024 in used:  # distinct sizes: the ranking must not depend on ties
            continue
        used.add(size // 1024)
        sizes[
            f"{rng.choice(dirs)}{rng.choice(NOUNS)}-{len(sizes)}.{rng.choice(['db', 'log', 'img'])}"
        ] = size
    want = [f"{root}/{p}" for p in sorted(sizes, key=lambda p: -sizes[p])[:n]]
    instruction, style, phrasings = say(
        rng,
        request=f"List the {n} largest files under {root} (all subfolders), largest first, as full paths, one "
        f"per line, in {answer}.",
        report=f"Disk alerts keep firing for {root}. Find its {n} biggest files (anywhere below it) and write "
        f"their full paths to {answer}, biggest first, one per line.",
        ticket=f"Top {n} files by size under {root} -> {answer}, full paths, desc.",
    )
    solution = f"""
du -ah {root} | sort -rh | head -n 10
find {root} -type f -printf '%s %p\\n' | sort -nr | head -n {n} | cut -d' ' -f2- > {answer}
cat {answer}
"""
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["largest-files", "find"],
        setup_script=_make(root, sizes),
        check_py=f"""
got = [os.path.normpath(l.strip()) for l in read({answer!r}).splitlines() if l.strip()]
check(got == {py_literal(want)}, "{answer} lists %r" % got)
""",
        perturbations=(
            planted_files(
                "disk-usage",
                "a large log outside the tree, which must not be counted",
                {f"/var/lib/{rng.choice(WORDS)}-huge.log": "x" * 400000},
            ),
        ),
        metadata={"files": len(sizes), "n": n, "phrasing": style, "phrasings": phrasings},
    )


def _hard(rng: random.Random) -> Draft:
    cache = f"/var/cache/{name(rng)}"
    files = [
        f"{rng.choice(['', 'blobs/', 'tmp/'])}{rng.choice(NOUNS)}-{i}.cache"
        for i in range(rng.randint(10, 16))
    ]
    sizes = {p: rng.randint(8, 64) * 1024 for p in files}
    ages = dict(zip(files, rng.sample(range(10, 5000), k=len(files)), strict=True))
    total = sum(sizes.values())
    budget_kib = (total // 1024) * rng.randint(40, 70) // 100
    oldest_first = sorted(files, key=lambda p: -ages[p])
    removed, remaining = [], total
    for p in oldest_first:
        if remaining <= budget_kib * 1024:
            break
        removed.append(p)
        remaining -= sizes[p]
    kept = [p for p in files if p not in removed]
    instruction, style, phrasings = say(
        rng,
        request=f"The cache {cache} may hold at most {budget_kib} KiB of file data (the sum of the files' sizes "
        "in bytes, subfolders included). Delete the least recently modified files, oldest first, until the "
        "total fits, and delete nothing more than that.",
        report=f"{cache} is over its {budget_kib} KiB budget (counting file sizes in bytes, all subfolders). "
        "Evict the oldest files by modification time, one by one, until it fits — don't throw away more than "
        "needed, the newer entries are still hot.",
        ticket=f"Trim {cache} to <= {budget_kib} KiB (sum of file bytes, recursive): rm oldest-mtime first, "
        "stop as soon as it fits.",
    )
    solution = f"""
du -sh {cache} && find {cache} -type f -printf '%T@ %s %p\\n' | sort -n | head -n 5
find {cache} -type f -printf '%T@ %s %p\\n' | sort -n > /tmp/by-age.txt
total=$(awk '{{s += $2}} END {{print s}}' /tmp/by-age.txt); while read -r t size path; do [ "$total" -le $(({budget_kib} * 1024)) ] && break; rm -f -- "$path"; total=$((total - size)); done < /tmp/by-age.txt
find {cache} -type f -printf '%s\\n' | awk '{{s += $1}} END {{print s / 1024, "KiB"}}'
"""
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["cache", "eviction", "mtime"],
        setup_script=_make(cache, sizes, {p: a for p, a in ages.items()}),
        check_py=f"""
for p in {py_literal(removed)}:
    check(not os.path.exists(os.path.join({cache!r}, p)), p + " (among the oldest) is still there")
for p in {py_literal(kept)}:
    check(os.path.isfile(os.path.join({cache!r}, p)), p + " was deleted, but the cache already fit without that")
""",
        metadata={
            "budget_kib": budget_kib,
            "removed": len(removed),
            "phrasing": style,
            "phrasings": phrasings,
        },
    )


def generate(rng: random.Random, difficulty: str) -> Draft:
    """One disk-usage task at ``difficulty``."""
    return {"easy": _easy, "medium": _medium, "hard": _hard}[difficulty](rng)
