"""Checksums and integrity: write a manifest, verify against one, restore what fails.

easy    write a SHA256SUMS-style manifest for a folder (sha256sum / md5sum)
medium  verify downloads against their manifest and move the corrupted ones aside (sha256sum -c)
hard    restore corrupted files from a folder of candidate copies, picking the one whose hash matches
"""

from __future__ import annotations

import hashlib
import random

from components.synthesize.draft import Draft, py_literal
from components.synthesize.families.phrasing import say
from components.synthesize.families.words import NOUNS, WORDS, base_dir, name, names, token
from components.synthesize.perturb import planted_files

__all__ = ["TAGS", "generate"]

TAGS = ["checksums", "integrity", "sha256sum"]

ALGOS = {"sha256": hashlib.sha256, "md5": hashlib.md5, "sha1": hashlib.sha1}


def _files(rng: random.Random, n: int, exts: list[str]) -> dict[str, str]:
    files: dict[str, str] = {}
    for noun in names(rng, n, NOUNS):
        files[f"{noun}-{rng.randint(1, 9)}.{rng.choice(exts)}"] = (
            "\n".join(token(rng, 24) for _ in range(rng.randint(2, 6))) + "\n"
        )
    return files


def _copy_in(folder: str, files: dict[str, str], prefix: str = "payload") -> tuple[dict, str]:
    setup = {f"{prefix}/{p}": c for p, c in files.items()}
    return setup, f"mkdir -p {folder}\ncp -r {prefix}/. {folder}/"


# Parses a `HASH  NAME` / `HASH *NAME` manifest and checks every entry against the file's bytes.
MANIFEST_CHECK = """
import hashlib


def manifest(path):
    entries = {}
    for line in read(path).splitlines():
        if not line.strip():
            continue
        parts = line.split(None, 1)
        check(len(parts) == 2, "%s: unreadable line %r" % (path, line))
        entries[os.path.basename(parts[1].strip().lstrip("*"))] = parts[0].lower()
    return entries
"""


def _easy(rng: random.Random) -> Draft:
    folder = f"{base_dir(rng)}/{name(rng)}-release"
    algo = rng.choice(["sha256", "sha256", "md5"])
    out = f"{folder}/{algo.upper()}SUMS"
    files = _files(rng, rng.randint(3, 6), ["tar.gz", "bin", "iso", "txt"])
    setup, script = _copy_in(folder, files)
    instruction, style, phrasings = say(
        rng,
        request=f"Please create a checksum manifest {out} for every file in {folder}: one line per file "
        f"in the format `{algo}sum` prints (`<{algo} hash>  <file name>`), so that "
        f"`cd {folder} && {algo}sum -c {out.rsplit('/', 1)[1]}` succeeds.",
        report=f"Users downloading from {folder} cannot check their downloads: there is no {out}. "
        f"Generate it with the {algo} of each file there (the usual `{algo}sum` output, file names relative "
        "to the folder).",
        ticket=f"Missing {out}. Add {algo} sums for all files in {folder}, names relative, `{algo}sum -c` format.",
    )
    expected = {p: ALGOS[algo](c.encode()).hexdigest() for p, c in files.items()}
    return Draft(
        instruction=instruction,
        solution=f"cd {folder} && {algo}sum -- * > {out}.tmp && mv {out}.tmp {out}",
        tags=[algo],
        setup_files=setup,
        setup_script=script,
        check_py=MANIFEST_CHECK
        + f"""
got = manifest({out!r})
got.pop({out.rsplit("/", 1)[1]!r}, None)
check(got == {py_literal(expected)}, "{out} lists %r" % got)
""",
        metadata={"algo": algo, "files": len(files), "phrasing": style, "phrasings": phrasings},
    )


def _corrupt(rng: random.Random, text: str) -> str:
    i = rng.randrange(len(text) - 1)
    return text[:i] + ("x" if text[i] != "x" else "y") + text[i + 1 :]


def _medium(rng: random.Random) -> Draft:
    folder = f"/srv/downloads/{name(rng)}"
    quarantine = f"{folder}/{rng.choice(['quarantine', 'corrupt', 'bad'])}"
    files = _files(rng, rng.randint(5, 8), ["tar.gz", "deb", "img", "zip"])
    sums = "".join(f"{hashlib.sha256(c.encode()).hexdigest()}  {p}\n" for p, c in files.items())
    bad = sorted(rng.sample(sorted(files), k=rng.randint(1, 2)))
    on_disk = {p: (_corrupt(rng, c) if p in bad else c) for p, c in files.items()}
    setup, script = _copy_in(folder, {**on_disk, "SHA256SUMS": sums})
    instruction, style, phrasings = say(
        rng,
        request=f"Some downloads in {folder} are corrupted. Check every file listed in {folder}/SHA256SUMS "
        f"and move each file whose checksum does not match into {quarantine}/ (create it); leave the good "
        "files where they are.",
        report=f"Installs from {folder} keep failing with bad archives. I suspect some files there do not "
        f"match {folder}/SHA256SUMS. Find the ones that fail the check and move them to {quarantine}/ so "
        "nobody installs them; the good ones stay.",
        ticket=f"{folder}: verify against SHA256SUMS, mv failures -> {quarantine}/, keep good files in place.",
    )
    solution = f"""
cd {folder} && sha256sum -c SHA256SUMS 2>/dev/null | grep -v ': OK$' || true
mkdir -p {quarantine}
{{ sha256sum -c SHA256SUMS 2>/dev/null || true; }} | sed -n 's/: FAILED$//p' | while read -r f; do mv -- "$f" {quarantine}/; done
sha256sum -c --ignore-missing SHA256SUMS && ls {quarantine}
"""
    good = sorted(p for p in files if p not in bad)
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["verify", "sha256sum"],
        setup_files=setup,
        setup_script=script,
        check_py=f"""
for p in {py_literal(bad)}:
    check(os.path.isfile(os.path.join({quarantine!r}, p)), p + " is not in {quarantine}")
    check(not os.path.exists(os.path.join({folder!r}, p)), p + " is still in {folder}")
for p in {py_literal(good)}:
    check(os.path.isfile(os.path.join({folder!r}, p)), "the good file " + p + " was moved or removed")
""",
        perturbations=(
            planted_files(
                "checksums",
                "an old, partial manifest sits beside the real one",
                {f"{folder}/SHA256SUMS.old": sums.splitlines()[0][::-1] + "\n"},
            ),
        ),
        metadata={"corrupted": len(bad), "phrasing": style, "phrasings": phrasings},
    )


def _hard(rng: random.Random) -> Draft:
    app = name(rng)
    folder, backups = f"/opt/{app}/assets", f"/var/backups/{app}"
    algo = rng.choice(["sha256", "sha1"])
    manifest = f"/opt/{app}/{algo}.manifest"
    files = _files(rng, rng.randint(5, 7), ["png", "css", "js", "json"])
    bad = sorted(rng.sample(sorted(files), k=rng.randint(2, 3)))
    on_disk = {p: (_corrupt(rng, c) if p in bad else c) for p, c in files.items()}
    candidates: dict[str, str] = {}
    for p in bad:  # several snapshots hold a copy; only one of them is intact
        snaps = names(rng, 3, WORDS)
        good_snap = rng.choice(snaps)
        for s in snaps:
            candidates[f"{s}/{p}"] = files[p] if s == good_snap else _corrupt(rng, files[p])
    lines = "".join(f"{ALGOS[algo](c.encode()).hexdigest()}  {p}\n" for p, c in files.items())
    setup = {
        **{f"live/{p}": c for p, c in on_disk.items()},
        **{f"bk/{p}": c for p, c in candidates.items()},
    }
    script = f"mkdir -p {folder} {backups}\ncp -r live/. {folder}/\ncp -r bk/. {backups}/\ncp manifest {manifest}"
    setup["manifest"] = lines
    instruction, style, phrasings = say(
        rng,
        request=f"Several files in {folder} no longer match {manifest} ({algo} hashes, names relative to "
        f"{folder}). Snapshots under {backups}/<snapshot>/ hold older copies, not all of them intact. Restore "
        f"every damaged file in {folder} from a copy whose {algo} matches the manifest, so that the whole "
        "manifest checks.",
        report=f"The {app} site serves broken assets: files in {folder} fail the {algo} check of {manifest}. "
        f"The backups in {backups} are a mix of good and bad copies. Put intact copies back so every entry "
        "of the manifest verifies again.",
        ticket=f"{folder} fails {manifest} ({algo}). Restore from {backups}/*/ — only copies matching the "
        "manifest. Whole manifest must verify.",
    )
    solution = f"""
cd {folder} && {algo}sum -c {manifest} 2>/dev/null | grep -v ': OK$' || true
cd {folder} && {{ {algo}sum -c {manifest} 2>/dev/null || true; }} | sed -n 's/: FAILED$//p' > /tmp/damaged.txt
while read -r f; do
  want=$(awk -v f="$f" '$2 == f {{print $1}}' {manifest})
  for c in {backups}/*/"$f"; do
    if [ "$({algo}sum < "$c" | cut -d' ' -f1)" = "$want" ]; then cp -- "$c" {folder}/"$f"; break; fi
  done
done < /tmp/damaged.txt
cd {folder} && {algo}sum -c {manifest}
"""
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["restore", algo],
        setup_files=setup,
        setup_script=script,
        check_py=MANIFEST_CHECK
        + f"""
expected = {py_literal(files)}
for p, content in expected.items():
    got = read(os.path.join({folder!r}, p), "rb")
    check(got == content.encode(), p + " in {folder} does not match the manifest")
check(len(manifest({manifest!r})) == len(expected), "{manifest} was changed")
""",
        perturbations=(
            planted_files(
                "checksums",
                "a stray copy with a look-alike name sits among the backups",
                {f"{backups}/{bad[0]}.orig": _corrupt(rng, files[bad[0]])},
            ),
        ),
        metadata={"algo": algo, "damaged": len(bad), "phrasing": style, "phrasings": phrasings},
    )


def generate(rng: random.Random, difficulty: str) -> Draft:
    """One checksums task at ``difficulty``."""
    return {"easy": _easy, "medium": _medium, "hard": _hard}[difficulty](rng)
