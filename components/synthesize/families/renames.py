"""Bulk renames by pattern: extensions, dates in names, normalised names across a tree.

easy    change one extension to another for every file in a folder (a loop or parameter expansion)
medium  rename camera-style names `IMG_YYYYMMDD_NNNN.jpg` to `YYYY-MM-DD_NNNN.jpg`, others untouched
hard    normalise names in a tree: lower case, spaces to hyphens, numbers zero-padded to 3 digits

No ``rename`` (perl's or util-linux's) is in the image: the golden solutions
use bash loops with parameter expansion or sed. The checks compare the set of
files and their contents, so any tool that gets there passes.
"""

from __future__ import annotations

import random
import re

from components.synthesize.draft import Draft, py_literal
from components.synthesize.families.phrasing import say
from components.synthesize.families.words import NOUNS, WORDS, base_dir, name, names, token
from components.synthesize.perturb import planted_files

__all__ = ["TAGS", "generate"]

TAGS = ["rename", "regex", "bash-loops"]

TREE_CHECK = """
def tree(root):
    out = {}
    for d, _, fs in os.walk(root):
        for f in fs:
            p = os.path.join(d, f)
            out[os.path.relpath(p, root)] = read(p)
    return out


got = tree(ROOT)
check(sorted(got) == sorted(WANT), "the files are now %r" % sorted(got))
for rel, content in WANT.items():
    check(got[rel] == content, rel + " has the wrong content (renamed the wrong file?)")
"""


def _check(root: str, want: dict[str, str]) -> str:
    return f"ROOT = {root!r}\nWANT = {py_literal(want)}\n" + TREE_CHECK


def _setup(root: str, files: dict[str, str]) -> tuple[dict[str, str], str]:
    setup, lines = {}, [f"mkdir -p '{root}'"]
    for i, (rel, content) in enumerate(sorted(files.items())):
        setup[f"f{i}"] = content
        lines.append(f"mkdir -p \"$(dirname '{root}/{rel}')\" && cp f{i} '{root}/{rel}'")
    return setup, "\n".join(lines)


def _easy(rng: random.Random) -> Draft:
    root = f"{base_dir(rng)}/{name(rng)}"
    old, new = rng.choice(
        [("jpeg", "jpg"), ("txt", "md"), ("htm", "html"), ("yml", "yaml"), ("tif", "tiff")]
    )
    stems = names(rng, rng.randint(4, 8), NOUNS)
    files = {f"{s}{rng.choice(['', ' 2', '_v1'])}.{old}": token(rng) + "\n" for s in stems}
    files[f"{rng.choice(WORDS)}.{rng.choice(['png', 'csv'])}"] = "other\n"
    want = {(p[: -len(old)] + new if p.endswith(f".{old}") else p): c for p, c in files.items()}
    instruction, style, phrasings = say(
        rng,
        request=f"Rename every `.{old}` file in {root} to end in `.{new}` instead (keep the rest of each name).",
        report=f"The importer only accepts `.{new}`, but the files in {root} end in `.{old}`. Please rename "
        "them (same names otherwise); leave other files alone.",
        ticket=f"{root}: *.{old} -> *.{new}. Names otherwise unchanged.",
    )
    setup, script = _setup(root, files)
    return Draft(
        instruction=instruction,
        solution=f'for f in {root}/*.{old}; do mv -- "$f" "${{f%.{old}}}.{new}"; done',
        tags=["extension"],
        setup_files=setup,
        setup_script=script,
        check_py=_check(root, want),
        metadata={"files": len(files), "phrasing": style, "phrasings": phrasings},
    )


def _medium(rng: random.Random) -> Draft:
    root = f"/home/user/{rng.choice(['Pictures', 'photos', 'camera'])}/{name(rng)}"
    files, want = {}, {}
    for _ in range(rng.randint(6, 10)):
        y, m, d, n = (
            rng.randint(2015, 2026),
            rng.randint(1, 12),
            rng.randint(1, 28),
            rng.randint(1, 9999),
        )
        src = f"IMG_{y}{m:02d}{d:02d}_{n:04d}.jpg"
        content = token(rng, 20) + "\n"
        files[src], want[f"{y}-{m:02d}-{d:02d}_{n:04d}.jpg"] = content, content
    for other in (
        f"IMG_{rng.choice(WORDS)}.jpg",
        f"notes {rng.randint(1, 9)}.txt",
        "IMG_2020_01.jpg",
    ):
        files[other] = want[other] = token(rng) + "\n"
    instruction, style, phrasings = say(
        rng,
        request=f"Rename the photos in {root} from the camera's `IMG_YYYYMMDD_NNNN.jpg` to `YYYY-MM-DD_NNNN.jpg` "
        "(e.g. IMG_20240315_0042.jpg -> 2024-03-15_0042.jpg). Files not matching that exact pattern keep their names.",
        report=f"Our gallery sorts by name and the camera files in {root} (IMG_YYYYMMDD_NNNN.jpg) end up in the "
        "wrong place. Rename those to YYYY-MM-DD_NNNN.jpg, like 2024-03-15_0042.jpg; anything else stays as is.",
        ticket=f"{root}: IMG_YYYYMMDD_NNNN.jpg -> YYYY-MM-DD_NNNN.jpg. Non-matching names untouched.",
    )
    solution = f"""
ls {root}
cd {root}
ls | grep -E '^IMG_[0-9]{{8}}_[0-9]{{4}}\\.jpg$' | while read -r f; do mv -n -- "$f" "${{f:4:4}}-${{f:8:2}}-${{f:10:2}}_${{f:13}}"; done
ls {root}
"""
    setup, script = _setup(root, files)
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["regex", "sed", "dates"],
        setup_files=setup,
        setup_script=script,
        check_py=_check(root, want),
        perturbations=(
            planted_files(
                "rename",
                "an IMG_ file in a sibling folder, outside the one to rename",
                {f"{root}-backup/IMG_20200101_0001.jpg": "backup\n"},
            ),
        ),
        metadata={"phrasing": style, "phrasings": phrasings},
    )


def _normal(name_: str) -> str:
    stem, dot, ext = name_.rpartition(".")
    stem = re.sub(r"\d+", lambda m: f"{int(m.group()):03d}", stem.lower().replace(" ", "-"))
    return f"{stem}.{ext.lower()}"


def _hard(rng: random.Random) -> Draft:
    root = f"/srv/{name(rng)}/media"
    files, want = {}, {}
    dirs = ["", *[f"{w}/" for w in names(rng, 2, WORDS)]]
    count = rng.randint(8, 12)
    while len(files) < count:
        words = [
            rng.choice(NOUNS + WORDS).title() if rng.random() < 0.5 else rng.choice(NOUNS)
            for _ in range(2)
        ]
        base = f"{' '.join(words)} {rng.randint(1, 120)}.{rng.choice(['MKV', 'mp4', 'Mp3'])}"
        d = rng.choice(dirs)
        if _normal(base) in {
            _normal(p.rsplit("/", 1)[-1])
            for p in files
            if p.startswith(d) and "/" not in p[len(d) :]
        }:
            continue
        content = token(rng, 12) + "\n"
        files[d + base] = content
        want[d + _normal(base)] = content
    instruction, style, phrasings = say(
        rng,
        request=f"Normalise the file names under {root} (all subfolders; folder names stay): lower case, each "
        "space replaced by `-`, and every number zero-padded to 3 digits. Example: `Blue Falcon 7.MKV` -> "
        "`blue-falcon-007.mkv`.",
        report=f"The media server can't match the files under {root}: names have capitals, spaces and unpadded "
        "numbers. Rename every file (recursively, not the folders) to lower case, spaces as `-`, numbers padded "
        "to 3 digits — `Blue Falcon 7.MKV` should become `blue-falcon-007.mkv`.",
        ticket=f"Rename files under {root} recursively: lowercase, ' ' -> '-', numbers to 3 digits "
        "(`Blue Falcon 7.MKV` -> `blue-falcon-007.mkv`). Folders unchanged.",
    )
    solution = f"""
find {root} -type f | head -n 20
find {root} -type f -print0 | while IFS= read -r -d '' f; do d=$(dirname "$f"); b=$(basename "$f"); n=$(python3 -c 'import re,sys; s,_,e=sys.argv[1].rpartition("."); print(re.sub(r"\\d+", lambda m: "%03d" % int(m.group()), s.lower().replace(" ", "-")) + "." + e.lower())' "$b"); [ "$b" = "$n" ] || mv -n -- "$f" "$d/$n"; done
find {root} -type f | sort
"""
    setup, script = _setup(root, files)
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["normalise", "recursive"],
        setup_files=setup,
        setup_script=script,
        check_py=_check(root, want),
        metadata={"files": len(files), "phrasing": style, "phrasings": phrasings},
    )


def generate(rng: random.Random, difficulty: str) -> Draft:
    """One bulk-rename task at ``difficulty``."""
    return {"easy": _easy, "medium": _medium, "hard": _hard}[difficulty](rng)
