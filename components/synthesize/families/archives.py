"""Archives: tar (gz, bz2, xz) and zip — extract, create selectively, unpack nested bundles.

easy    extract one archive into a folder (one tar/unzip command)
medium  create a .tar.gz of only some files, paths relative to a folder
hard    a zip holding a compressed tarball: unpack both, repack the CSVs into a flat zip
"""

from __future__ import annotations

import random

from components.synthesize.draft import Draft, py_literal
from components.synthesize.families.phrasing import say
from components.synthesize.families.words import NOUNS, WORDS, base_dir, name, names, token

__all__ = ["TAGS", "generate"]

TAGS = ["archives", "tar", "zip"]

# format → (suffix, command that packs `payload/` into $ARCHIVE, command that extracts into $DEST)
FORMATS = {
    "tar.gz": ("tar -czf {a} -C payload .", "tar -xzf {a} -C {d}", "tar"),
    "tar.bz2": ("tar -cjf {a} -C payload .", "tar -xjf {a} -C {d}", "bzip2"),
    "tar.xz": ("tar -cJf {a} -C payload .", "tar -xJf {a} -C {d}", "xz"),
    "zip": ("(cd payload && zip -qr {a} .)", "unzip -q {a} -d {d}", "zip"),
}


def _payload(rng: random.Random, n: int, exts: list[str]) -> dict[str, str]:
    subdirs = ["", *names(rng, 2, WORDS)]
    files: dict[str, str] = {}
    while len(files) < n:
        d = rng.choice(subdirs)
        path = f"{d}/{rng.choice(NOUNS)}{rng.choice(exts)}".lstrip("/")
        files[path] = f"{token(rng, 12)}\n"
    return dict(sorted(files.items()))


def _write_payload(files: dict[str, str], prefix: str = "payload") -> dict[str, str]:
    return {f"{prefix}/{p}": c for p, c in files.items()}


def _check_tree(dest: str, files: dict[str, str]) -> str:
    return f"""
expected = {py_literal(files)}
for rel, content in expected.items():
    path = os.path.join({dest!r}, rel)
    check(os.path.isfile(path), path + " was not extracted")
    check(read(path) == content, path + " has the wrong content")
"""


def _easy(rng: random.Random) -> Draft:
    fmt = rng.choice(sorted(FORMATS))
    pack, unpack, tool = FORMATS[fmt]
    folder = f"{base_dir(rng)}/{name(rng)}"
    archive = f"{folder}/{rng.choice(['backup', 'release', 'bundle', 'export'])}-{rng.randint(1, 99)}.{fmt}"
    dest = f"{folder}/{rng.choice(['restored', 'extracted', 'unpacked', 'out'])}"
    files = _payload(rng, rng.randint(3, 6), [".txt", ".cfg", ".dat"])
    needs = ("unzip",) if fmt == "zip" else (tool,)
    instruction, style, phrasings = say(
        rng,
        request=f"Extract the archive {archive} into the directory {dest} (create it).",
        report=f"Someone needs the files from {archive} back on disk, but nobody has unpacked it "
        f"yet. Please extract its contents into {dest}; that directory does not exist yet, so "
        "create it.",
        ticket=f"unpack {archive} into {dest}/ (create the dir first).",
    )
    return Draft(
        instruction=instruction,
        solution=f"mkdir -p {dest} && {unpack.format(a=archive, d=dest)}",
        tags=[fmt.split(".")[-1]],
        setup_files=_write_payload(files),
        setup_script=f"mkdir -p {folder}\n{pack.format(a=archive)}",
        check_py=_check_tree(dest, files),
        uses=("tar", tool, *needs),
        metadata={"format": fmt, "phrasing": style, "phrasings": phrasings},
    )


def _medium(rng: random.Random) -> Draft:
    folder = f"/etc/{name(rng)}"
    files = _payload(rng, rng.randint(6, 10), [".conf", ".conf", ".log", ".bak"])
    keep = {p: c for p, c in files.items() if p.endswith(".conf")}
    if not keep:
        files["main.conf"] = keep["main.conf"] = "main\n"
    out = f"/root/{name(rng)}-conf-{rng.randint(2020, 2030)}.tar.gz"
    instruction, style, phrasings = say(
        rng,
        request=f"Create a gzip-compressed tar archive {out} that contains only the `.conf` files "
        f"under {folder} (in all subfolders), stored with paths relative to {folder} (for example "
        "`x.conf` or `sub/x.conf`, not `etc/...`). Do not include any other files.",
        report=f"The last config backup of {folder} swept up the logs and `.bak` files too, and "
        "stored everything under `etc/...`, so it could not be restored cleanly. Please make a new "
        f"one at {out}: a .tar.gz holding only the `.conf` files, from every subfolder, with paths "
        f"relative to {folder} (`x.conf`, `sub/x.conf`) and nothing else in it.",
        ticket=f"{out} (tar.gz): only *.conf under {folder}, subfolders included, paths relative "
        f"to {folder} (`x.conf`, `sub/x.conf`). No other files.",
    )
    # Look at the tree, act, check the archive's listing.
    solution = (
        f"find {folder} -type f | head -n 30\n"
        f"cd {folder} && find . -type f -name '*.conf' | sed 's|^\\./||' | tar -czf {out} -T -\n"
        f"tar -tzf {out}"
    )
    check = f"""
import tarfile
expected = {py_literal(keep)}
check(os.path.isfile({out!r}), "{out} does not exist")
try:
    tf = tarfile.open({out!r}, "r:gz")
except Exception as e:
    fail("{out} is not a gzip tar: %r" % e)
members = {{m.name[2:] if m.name.startswith("./") else m.name: m for m in tf.getmembers() if m.isfile()}}
check(sorted(members) == sorted(expected), "archive holds %s" % sorted(members))
for rel, content in expected.items():
    check(tf.extractfile(members[rel]).read().decode() == content, rel + " has the wrong content")
"""
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["tar", "create"],
        setup_files=_write_payload(files),
        setup_script=f"mkdir -p {folder}\ncp -r payload/. {folder}/",
        check_py=check,
        uses=("tar", "find", "gzip"),
        metadata={
            "kept": len(keep),
            "files": len(files),
            "phrasing": style,
            "phrasings": phrasings,
        },
    )


def _hard(rng: random.Random) -> Draft:
    inner_fmt = rng.choice(["tar.gz", "tar.bz2", "tar.xz"])
    pack, unpack, tool = FORMATS[inner_fmt]
    folder = f"{base_dir(rng)}/{name(rng)}"
    bundle, out = f"{folder}/incoming/bundle-{token(rng, 4)}.zip", f"{folder}/csv-only.zip"
    files: dict[str, str] = {}
    raw = _payload(rng, rng.randint(6, 9), [".csv", ".csv", ".json", ".txt"])
    for i, (path, content) in enumerate(raw.items()):
        # A unique suffix per file: two folders holding x.csv would collide in a flat zip.
        files[path[:-4] + f"-{i}.csv" if path.endswith(".csv") else path] = content
    if not any(p.endswith(".csv") for p in files):
        files["report.csv"] = f"{token(rng, 12)}\n"
    csvs = {p.split("/")[-1]: c for p, c in sorted(files.items()) if p.endswith(".csv")}
    inner = f"data.{inner_fmt}"
    instruction, style, phrasings = say(
        rng,
        request=f"{bundle} is a zip file that contains a compressed tarball. Unpack both, then "
        f"create the zip archive {out} holding every `.csv` file from the tarball (wherever it is "
        "inside) at the top level of the zip, with no folders inside the zip. Leave the original "
        "bundle in place.",
        report=f"A partner delivered {bundle}, a zip wrapping a compressed tarball, but our "
        f"importer only accepts a flat zip of CSV files. Unpack both layers and build {out} "
        "containing every `.csv` from the tarball, however deep it sits, stored at the top level "
        f"with no directories in the zip. Don't move or delete {bundle}.",
        ticket=f"{bundle} = zip > compressed tarball. All .csv from the tarball (any depth) -> "
        f"{out}, flat: no folders in the zip. Keep {bundle}.",
    )
    solution = f"""
work=$(mktemp -d)
unzip -q {bundle} -d "$work/zip"
mkdir -p "$work/tar"
for t in "$work"/zip/*.tar.*; do tar -xf "$t" -C "$work/tar"; done
find "$work/tar" -type f -name '*.csv' -exec zip -qj {out} {{}} +
rm -rf "$work"
"""
    check = f"""
import zipfile
check(os.path.isfile({bundle!r}), "the original bundle was removed")
check(zipfile.is_zipfile({out!r}), "{out} is not a zip file")
z = zipfile.ZipFile({out!r})
names = sorted(n for n in z.namelist() if not n.endswith("/"))
expected = {py_literal(csvs)}
check(names == sorted(expected), "zip holds %s" % names)
for n, content in expected.items():
    check(z.read(n).decode() == content, n + " has the wrong content")
"""
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["zip", "tar", "nested"],
        setup_files=_write_payload(files),
        setup_script=f"mkdir -p {folder}/incoming\n{pack.format(a=inner)}\nzip -q {bundle} {inner}",
        check_py=check,
        uses=("tar", "zip", "unzip", "find", tool),
        metadata={
            "inner_format": inner_fmt,
            "csv_files": len(csvs),
            "phrasing": style,
            "phrasings": phrasings,
        },
    )


def generate(rng: random.Random, difficulty: str) -> Draft:
    """One archives task at ``difficulty``."""
    return {"easy": _easy, "medium": _medium, "hard": _hard}[difficulty](rng)
