"""find and xargs: select files by name, age and size across a tree, act on them safely.

easy    delete every file matching a pattern under a tree, or count files above a size (find)
medium  move files older than N days to an archive folder; names with spaces (find -print0 | xargs -0)
hard    find files with identical content across a tree and keep one copy of each (find | sha256sum)

Set-up gives files real modification times (``touch -d``) and names with
spaces, so a plain ``ls | xargs`` or a name-only ``rm`` breaks.
"""

from __future__ import annotations

import random

from components.synthesize.draft import Draft, py_literal
from components.synthesize.families.phrasing import say
from components.synthesize.families.words import NOUNS, WORDS, base_dir, name, names, token
from components.synthesize.perturb import planted_files

__all__ = ["TAGS", "generate"]

TAGS = ["find", "xargs", "files"]


def _tree(rng: random.Random, n: int, exts: list[str]) -> list[str]:
    dirs = [
        "",
        *[f"{w}/" for w in names(rng, 3, WORDS)],
        f"{rng.choice(WORDS)}/{rng.choice(NOUNS)}/",
    ]
    paths: set[str] = set()
    while len(paths) < n:
        stem = rng.choice(NOUNS) + rng.choice(["", " copy", f" {rng.randint(1, 9)}", "_old", "-v2"])
        paths.add(f"{rng.choice(dirs)}{stem}{rng.choice(exts)}")
    return sorted(paths)


def _place(root: str, files: dict[str, tuple[str, int]]) -> tuple[dict[str, str], str]:
    """Set-up files and a script that copies them under ``root`` with their ages (days)."""
    setup, lines = {}, [f"mkdir -p {root!r}"]
    for i, (rel, (content, age)) in enumerate(sorted(files.items())):
        setup[f"f{i}"] = content
        dest = f"{root}/{rel}"
        lines.append(f"mkdir -p \"$(dirname '{dest}')\" && cp f{i} '{dest}'")
        lines.append(f"touch -d '{age} days ago' '{dest}'")
    return setup, "\n".join(lines)


def _easy(rng: random.Random) -> Draft:
    root = f"{base_dir(rng)}/{name(rng)}"
    ext = rng.choice([".tmp", ".bak", ".swp", ".orig"])
    paths = _tree(rng, rng.randint(8, 14), [ext, ".txt", ".conf", ".log", ext])
    files = {p: (token(rng, rng.choice([10, 3000])) + "\n", rng.randint(0, 30)) for p in paths}
    setup, script = _place(root, files)
    if rng.random() < 0.5:
        junk = [p for p in paths if p.endswith(ext)]
        keep = [p for p in paths if not p.endswith(ext)]
        instruction, style, phrasings = say(
            rng,
            request=f"Please delete every `*{ext}` file anywhere under {root} (in all subfolders); keep every other file.",
            report=f"{root} is littered with leftover `{ext}` files in its subfolders. Remove all of them, but nothing else.",
            ticket=f"rm all *{ext} under {root}, recursive. Other files stay.",
        )
        solution = f"find {root} -type f -name '*{ext}' -delete"
        check = f"""
for p in {py_literal(junk)}:
    check(not os.path.exists(os.path.join({root!r}, p)), p + " is still there")
for p in {py_literal(keep)}:
    check(os.path.isfile(os.path.join({root!r}, p)), p + " was removed too")
"""
        variant = "delete"
    else:
        answer = f"/root/{rng.choice(['count', 'big-files', 'answer'])}.txt"
        big = sum(len(c) > 1024 for c, _ in files.values())
        instruction, style, phrasings = say(
            rng,
            request=f"How many regular files under {root} (all subfolders) are larger than 1 KiB? "
            f"Write just the number to {answer}.",
            report=f"We need to know how many files bigger than 1 KiB live under {root}, subfolders included. "
            f"Put the count, only the number, in {answer}.",
            ticket=f"count files > 1KiB under {root} (recursive) -> {answer}, number only.",
        )
        solution = f"find {root} -type f -size +1k | wc -l > {answer}"
        check = f"""
got = read({answer!r}).strip()
check(got == "{big}", "{answer} says %r" % got)
"""
        variant = "count"
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=[variant],
        setup_files=setup,
        setup_script=script,
        check_py=check,
        metadata={"variant": variant, "phrasing": style, "phrasings": phrasings},
    )


def _medium(rng: random.Random) -> Draft:
    root = f"/var/spool/{name(rng)}"
    archive = f"/srv/archive/{name(rng)}"
    days = rng.choice([7, 14, 30])
    ext = rng.choice([".csv", ".log", ".json"])
    paths = _tree(rng, rng.randint(10, 16), [ext, ext, ".lock", ".txt"])
    files = {
        p: (token(rng, 16) + "\n", rng.choice([0, 1, 2, days + 10, days + 20, 90])) for p in paths
    }
    old = sorted(p for p in paths if p.endswith(ext) and files[p][1] > days)
    if not old:
        old = [p for p in paths if p.endswith(ext)][:1]
        files[old[0]] = (files[old[0]][0], days + 5)
    stay = sorted(p for p in paths if p not in old)
    setup, script = _place(root, files)
    flat = {p.rsplit("/", 1)[-1] for p in old}
    if len(flat) < len(old):  # two old files share a name: keep paths unique in the archive
        return _medium(rng)
    instruction, style, phrasings = say(
        rng,
        request=f"Move every `{ext}` file under {root} (any subfolder) that was last modified more than "
        f"{days} days ago into {archive} (create it), directly in that folder. Leave newer files and other "
        "file types alone.",
        report=f"{root} keeps growing because old `{ext}` files are never cleared out. Anything of that type "
        f"older than {days} days should go to {archive} (flat, no subfolders); recent ones stay. Careful, "
        "some names contain spaces.",
        ticket=f"{root}: *{ext} with mtime > {days}d -> mv to {archive}/ (flat). Newer + other types stay.",
    )
    solution = f"""
find {root} -type f -name '*{ext}' -mtime +{days} -print
mkdir -p {archive} && find {root} -type f -name '*{ext}' -mtime +{days} -print0 | xargs -0 -r mv -t {archive}
ls -la {archive} && find {root} -type f -name '*{ext}' -mtime +{days} | wc -l
"""
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["mtime", "xargs", "spaces"],
        setup_files=setup,
        setup_script=script,
        check_py=f"""
for p in {py_literal(sorted(flat))}:
    check(os.path.isfile(os.path.join({archive!r}, p)), p + " is not in {archive}")
for p in {py_literal(old)}:
    check(not os.path.exists(os.path.join({root!r}, p)), p + " is still under {root}")
for p in {py_literal(stay)}:
    check(os.path.isfile(os.path.join({root!r}, p)), p + " should have stayed under {root}")
""",
        perturbations=(
            planted_files(
                "find",
                "an old file of the same type outside the tree, which must not move",
                {f"/var/spool/{rng.choice(WORDS)}-old{ext}": "keep me\n"},
            ),
        ),
        metadata={"moved": len(old), "days": days, "phrasing": style, "phrasings": phrasings},
    )


def _hard(rng: random.Random) -> Draft:
    root = f"{base_dir(rng)}/{name(rng)}-photos"
    report = f"/root/{rng.choice(['duplicates', 'dupes'])}.txt"
    paths = _tree(rng, rng.randint(10, 14), [".jpg", ".png", ".jpg"])
    contents = [token(rng, 40) for _ in range(len(paths))]
    groups: dict[str, list[str]] = {}
    files: dict[str, tuple[str, int]] = {}
    for p, c in zip(paths, contents, strict=True):
        if groups and rng.random() < 0.4:
            c = rng.choice(sorted(groups))
        groups.setdefault(c, []).append(p)
        files[p] = (c + "\n", rng.randint(1, 50))
    if all(len(v) < 2 for v in groups.values()):
        first, second = paths[0], paths[1]
        groups[files[first][0].strip()].append(second)
        groups[files[second][0].strip()].remove(second)
        files[second] = files[first]
    keep = sorted(min(v) for v in groups.values() if v)
    removed = sorted(p for v in groups.values() for p in v if p != min(v))
    setup, script = _place(root, files)
    instruction, style, phrasings = say(
        rng,
        request=f"{root} has many duplicate images (same bytes, different names or folders). For each set of "
        "identical files keep only the one whose path relative to the folder sorts first (plain byte order), "
        f"delete the others, and write the relative paths you deleted to {report}, one per line.",
        report=f"Disk is filling up: {root} holds the same images several times under different names. Keep one "
        "copy of each (the path that sorts first, byte order, relative to the folder), remove the rest, and list "
        f"the removed relative paths in {report}, one per line.",
        ticket=f"Dedupe {root} by content. Keep first relative path (C sort) per group, rm others, list removed -> {report}.",
    )
    solution = f"""
cd {root} && find . -type f -print0 | xargs -0 sha256sum | sort | uniq -w64 -D | head -n 40
cd {root} && find . -type f -printf '%P\\0' | xargs -0 sha256sum | LC_ALL=C sort -k1,1 -k2 > /tmp/sums.txt
awk '{{h=substr($0,1,64); f=substr($0,67)}} h==prev {{print f}} {{prev=h}}' /tmp/sums.txt > {report}
cd {root} && while IFS= read -r f; do rm -f -- "$f"; done < {report}
cat {report} && find {root} -type f | wc -l
"""
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["duplicates", "sha256sum", "xargs"],
        setup_files=setup,
        setup_script=script,
        check_py=f"""
for p in {py_literal(keep)}:
    check(os.path.isfile(os.path.join({root!r}, p)), "the first copy " + p + " was removed")
for p in {py_literal(removed)}:
    check(not os.path.exists(os.path.join({root!r}, p)), "the duplicate " + p + " is still there")
listed = sorted(l.strip().removeprefix("./") for l in read({report!r}).splitlines() if l.strip())
check(listed == {py_literal(removed)}, "{report} lists %r" % listed)
""",
        metadata={
            "groups": len(keep),
            "removed": len(removed),
            "phrasing": style,
            "phrasings": phrasings,
        },
        agent_timeout_sec=900.0,
    )


def generate(rng: random.Random, difficulty: str) -> Draft:
    """One find/xargs task at ``difficulty``."""
    return {"easy": _easy, "medium": _medium, "hard": _hard}[difficulty](rng)
