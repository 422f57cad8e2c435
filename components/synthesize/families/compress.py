"""Compression formats: gzip, bzip2, xz — per-file, by content not by name, with integrity tests.

easy    decompress one file keeping the compressed original, or compress one with a given tool
medium  files whose names hide their format: tell gzip/bzip2/xz apart by their bytes and decompress all
hard    recompress a tree of .gz logs to .xz, testing each, and leave (and report) the corrupt ones

The ``file`` tool may be missing (a perturbation); the golden solutions read
magic bytes or let each decompressor's own test (``-t``) decide.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import random

from components.synthesize.draft import Draft, py_literal
from components.synthesize.families.phrasing import say
from components.synthesize.families.words import NOUNS, WORDS, base_dir, name, names, token
from components.synthesize.perturb import planted_files

__all__ = ["TAGS", "generate"]

TAGS = ["compression", "gzip", "xz", "bzip2"]

# tool -> (suffix, compress bytes)
CODECS = {
    "gzip": (".gz", lambda b: gzip.compress(b, mtime=0)),
    "bzip2": (".bz2", bz2.compress),
    "xz": (".xz", lzma.compress),
}


def _text(rng: random.Random, n: int) -> str:
    return "".join(f"{rng.choice(WORDS)} {rng.choice(NOUNS)} {token(rng, 6)}\n" for _ in range(n))


def _easy(rng: random.Random) -> Draft:
    folder = f"{base_dir(rng)}/{name(rng)}"
    tool = rng.choice(sorted(CODECS))
    suffix, pack = CODECS[tool]
    plain = f"{folder}/{rng.choice(['dump', 'export', 'report', 'data'])}.{rng.choice(['sql', 'csv', 'txt'])}"
    content = _text(rng, rng.randint(20, 60))
    if rng.random() < 0.5:
        instruction, style, phrasings = say(
            rng,
            request=f"Decompress {plain}{suffix} so that {plain} exists, and keep the compressed file as well.",
            report=f"A job needs {plain} but only {plain}{suffix} is there. Unpack it next to it; do not delete "
            "the compressed copy.",
            ticket=f"unpack {plain}{suffix} -> {plain}, keep the {suffix}.",
        )
        solution = f"{tool} -dk {plain}{suffix}"
        setup = {"blob": pack(content.encode())}
        script = f"mkdir -p {folder}\ncp blob {plain}{suffix}"
        check = f"""
check(read({plain!r}) == {content!r}, "{plain} does not hold the decompressed data")
check(os.path.isfile({plain + suffix!r}), "the compressed file was removed")
"""
        variant = "decompress"
    else:
        instruction, style, phrasings = say(
            rng,
            request=f"Compress {plain} with {tool} into {plain}{suffix}, keeping the original file.",
            report=f"{plain} has to be shipped as a {tool} file ({plain}{suffix}). Please create it, but leave "
            "the uncompressed file in place.",
            ticket=f"{tool} {plain} -> {plain}{suffix}, keep original.",
        )
        solution = f"{tool} -k {plain}"
        setup = {"plain": content}
        script = f"mkdir -p {folder}\ncp plain {plain}"
        opener = {"gzip": "gzip", "bzip2": "bz2", "xz": "lzma"}[tool]
        check = f"""
import {opener}
check(os.path.isfile({plain!r}), "the original was removed")
try:
    got = {opener}.decompress(read({plain + suffix!r}, "rb")).decode()
except Exception as e:
    fail("{plain}{suffix} is not a {tool} file: %r" % e)
check(got == {content!r}, "{plain}{suffix} does not decompress to the original")
"""
        variant = "compress"
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=[variant, tool],
        setup_files=setup,
        setup_script=script,
        check_py=check,
        uses=(tool,),
        metadata={"variant": variant, "tool": tool, "phrasing": style, "phrasings": phrasings},
    )


def _medium(rng: random.Random) -> Draft:
    inbox, out = f"/srv/{name(rng)}/inbox", f"/srv/{name(rng)}/decoded"
    stems = names(rng, rng.randint(4, 6), NOUNS)
    contents = {s: _text(rng, rng.randint(3, 8)) for s in stems}
    tools = {s: rng.choice(sorted(CODECS)) for s in stems}
    tools[stems[0]], tools[stems[1]] = "gzip", rng.choice(["bzip2", "xz"])
    setup = {f"in/{s}.dat": CODECS[tools[s]][1](c.encode()) for s, c in contents.items()}
    instruction, style, phrasings = say(
        rng,
        request=f"Each `.dat` file in {inbox} is compressed, with gzip, bzip2 or xz — the name does not say "
        f"which. Decompress every one into {out}/<name>.txt (e.g. `x.dat` becomes {out}/x.txt).",
        report=f"The uploader saved compressed files in {inbox} with a `.dat` extension, and they are a mix of "
        f"gzip, bzip2 and xz. We need the plain text of each one as {out}/<name>.txt (x.dat -> x.txt).",
        ticket=f"{inbox}/*.dat: mixed gzip/bzip2/xz. Decompress each -> {out}/<name>.txt.",
    )
    solution = f"""
for f in {inbox}/*.dat; do printf '%s ' "$f"; head -c 6 "$f" | od -An -tx1; done
mkdir -p {out}
cd {inbox}
for f in *.dat; do for t in gzip bzip2 xz; do if $t -t < "$f" 2>/dev/null; then $t -dc < "$f" > {out}/"${{f%.dat}}".txt; break; fi; done; done
ls -l {out}
"""
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["magic-bytes", "gzip", "bzip2", "xz"],
        setup_files=setup,
        setup_script=f"mkdir -p {inbox}\ncp in/*.dat {inbox}/",
        check_py=f"""
for stem, content in {py_literal(contents)}.items():
    check(read(os.path.join({out!r}, stem + ".txt")) == content, stem + ".txt is missing or wrong")
""",
        uses=("gzip", "bzip2", "xz", "od"),
        perturbations=(
            planted_files(
                "compression",
                "a plain-text README.dat that is not compressed at all",
                {f"{inbox}/README.dat": "uploads land here\n"},
            ),
        ),
        metadata={
            "files": len(stems),
            "formats": sorted(set(tools.values())),
            "phrasing": style,
            "phrasings": phrasings,
        },
    )


def _hard(rng: random.Random) -> Draft:
    root = f"/var/log/{name(rng)}"
    report = f"/root/{rng.choice(['corrupt', 'broken'])}-archives.txt"
    files: dict[str, bytes] = {}
    plain: dict[str, str] = {}
    for d in ["", *[f"{w}/" for w in names(rng, 2, WORDS)]]:
        for i in range(rng.randint(2, 3)):
            rel = f"{d}{rng.choice(NOUNS)}.log.{i + 1}.gz"
            text = _text(rng, rng.randint(5, 15))
            plain[rel] = text
            files[rel] = gzip.compress(text.encode(), mtime=0)
    bad = sorted(rng.sample(sorted(files), k=rng.randint(1, 2)))
    for rel in bad:
        files[rel] = files[rel][: len(files[rel]) // 2]  # truncated in transfer
    good = sorted(p for p in files if p not in bad)
    instruction, style, phrasings = say(
        rng,
        request=f"Recompress every `.gz` file under {root} (subfolders too) to xz: `x.gz` becomes `x.xz` with "
        "the same uncompressed content, and the .gz is removed once the .xz is written and tested. Some .gz "
        f"files are corrupt: leave those untouched and list their paths (as found under {root}) in {report}.",
        report=f"Log storage in {root} is full; xz compresses much better than the gzip we use. Convert each "
        f".gz under {root} into a .xz of the same data (x.gz -> x.xz), deleting a .gz only after its .xz checks "
        f"out. A few archives are damaged — don't touch them, just write their full paths to {report}.",
        ticket=f"{root}/**/*.gz -> .xz (same data), rm .gz after verify. Corrupt .gz: leave, list paths in {report}.",
    )
    solution = f"""
find {root} -name '*.gz' -exec gzip -t {{}} \\; 2>&1 | head -n 20 || true
: > {report}; find {root} -type f -name '*.gz' | sort | while read -r f; do if gzip -t "$f" 2>/dev/null; then gzip -dc "$f" | xz -c > "${{f%.gz}}.xz" && xz -t "${{f%.gz}}.xz" && rm -- "$f"; else echo "$f" >> {report}; fi; done
cat {report} && find {root} -type f | sort
"""
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["recompress", "integrity", "xz"],
        setup_files={f"logs/{p}": b for p, b in files.items()},
        setup_script=f"mkdir -p {root}\ncp -r logs/. {root}/",
        check_py=f"""
import lzma
for rel, text in {py_literal({p: plain[p] for p in good})}.items():
    gz, xzp = os.path.join({root!r}, rel), os.path.join({root!r}, rel[:-3] + ".xz")
    check(not os.path.exists(gz), gz + " was not removed")
    try:
        got = lzma.decompress(read(xzp, "rb")).decode()
    except Exception as e:
        fail("%s is missing or not xz: %r" % (xzp, e))
    check(got == text, xzp + " does not hold the original data")
listed = sorted(os.path.normpath(os.path.join({root!r}, l.strip())) for l in read({report!r}).splitlines() if l.strip())
want = sorted(os.path.join({root!r}, p) for p in {py_literal(bad)})
check(listed == want, "{report} lists %r" % listed)
for p in want:
    check(os.path.isfile(p), p + " (corrupt) was removed")
""",
        uses=("gzip", "xz"),
        metadata={
            "root": root,
            "report": report,
            "corrupt": len(bad),
            "phrasing": style,
            "phrasings": phrasings,
        },
    )


def generate(rng: random.Random, difficulty: str) -> Draft:
    """One compression task at ``difficulty``."""
    return {"easy": _easy, "medium": _medium, "hard": _hard}[difficulty](rng)
