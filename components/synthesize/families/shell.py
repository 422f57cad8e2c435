"""Shell scripting: one-liners, then scripts with arguments, exit codes and rotation.

easy    a one-line loop or pipeline (rename by extension, count files)
medium  a script that summarises any folder it is given; usage errors exit 2
hard    a numbered backup script that keeps only the newest K archives

Scripts are checked by running them on inputs the check creates itself, so a
script that only fits the example folder fails.
"""

from __future__ import annotations

import random

from components.synthesize.draft import Draft, py_literal
from components.synthesize.families.phrasing import say
from components.synthesize.families.words import NOUNS, WORDS, base_dir, name, names, token

__all__ = ["TAGS", "generate"]

TAGS = ["shell", "bash", "scripting"]


def _easy(rng: random.Random) -> Draft:
    folder = f"{base_dir(rng)}/{name(rng)}/{rng.choice(['inbox', 'notes', 'docs', 'drafts'])}"
    stems = names(rng, rng.randint(4, 8), WORDS)
    if rng.random() < 0.5:
        old, new = rng.choice(
            [(".txt", ".md"), (".jpeg", ".jpg"), (".htm", ".html"), (".yml", ".yaml")]
        )
        files = {f"{s}{old}": token(rng) for s in stems[:-1]} | {f"{stems[-1]}.keep": token(rng)}
        expected = {(k[: -len(old)] + new if k.endswith(old) else k): v for k, v in files.items()}
        instruction, style, phrasings = say(
            rng,
            request=f"Rename every `{old}` file in {folder} so it ends in `{new}` instead (keep "
            "the rest of each name).",
            report=f"The tool that picks up the files in {folder} only looks for `{new}`, so "
            f"every file there ending in `{old}` gets skipped. Please rename those so they end in "
            f"`{new}`, with the rest of each name and the contents unchanged, and leave other "
            "files as they are.",
            ticket=f"{folder}: rename *{old} -> *{new}, same base names, other files untouched.",
        )
        solution = f'for f in {folder}/*{old}; do mv "$f" "${{f%{old}}}{new}"; done'
        variant = "rename"
        check = f"""
expected = {py_literal(expected)}
got = sorted(os.listdir({folder!r}))
check(got == sorted(expected), "the folder holds %s" % got)
for f, content in expected.items():
    check(read(os.path.join({folder!r}, f)).strip() == content, f + " lost its content")
"""
    else:
        ext = rng.choice([".log", ".tmp", ".csv"])
        files = {}
        for i, s in enumerate(stems):
            sub = rng.choice(["", "a/", "a/b/", "old/"])
            files[f"{sub}{s}{ext if i % 3 else '.dat'}"] = token(rng)
        files[f"{name(rng)}{ext}.bak"] = token(rng)  # not a match: the extension is .bak
        count = sum(1 for f in files if f.endswith(ext))
        answer = f"/root/{ext[1:]}-count.txt"
        instruction, style, phrasings = say(
            rng,
            request=f"Count the `{ext}` files in {folder} and all its subfolders, and write just "
            f"the number to {answer}.",
            report=f"Before we clean up {folder} I'd like to know how many files ending in `{ext}` "
            "have piled up in it, counting every subfolder too. Please write only that number to "
            f"{answer}.",
            ticket=f"Count files named *{ext} under {folder}, recursive -> {answer}, number only.",
        )
        solution = f"find {folder} -type f -name '*{ext}' | wc -l > {answer}"
        variant = "count"
        check = f"""
check(read({answer!r}).strip() == {str(count)!r}, "{answer} says %r" % read({answer!r}).strip())
"""
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=[variant],
        setup_files={f"files/{k}": v + "\n" for k, v in files.items()},
        setup_script=f"mkdir -p {folder}\ncp -r files/. {folder}/",
        check_py=check,
        uses=("find",),
        metadata={"variant": variant, "phrasing": style, "phrasings": phrasings},
    )


def _medium(rng: random.Random) -> Draft:
    folder = rng.choice(["/usr/local/bin", "/opt/tools/bin", "/root/bin", "/usr/local/sbin"])
    tool = f"{rng.choice(['extstat', 'countext', 'filetypes', 'extsummary', 'bytype'])}{rng.randint(1, 9)}"
    script = f"{folder}/{tool}"
    none, status = rng.choice(["none", "noext", "(none)", "-", "other"]), rng.choice([1, 2, 3, 64])
    fmt, sep = rng.choice(
        [("<extension> <count>", " "), ("<extension>: <count>", ": "), ("<extension>,<count>", ",")]
    )
    instruction, style, phrasings = say(
        rng,
        request=f"Write an executable script {script} that takes one argument, a directory, and "
        "prints how many regular files it contains (recursively) per file extension, one line per "
        f"extension formatted as `{fmt}` (extension without the dot, e.g. `txt{sep}3`), sorted by "
        "count from high to low and then alphabetically by extension. Files without an extension "
        f"are counted under `{none}`. If the argument is missing or is not a directory, print an "
        f"error to stderr and exit with status {status}.",
        report="We keep retyping the same find | awk pipeline to see what kinds of files a "
        f"directory holds. Please turn it into a tool, {script} (executable), that takes a single "
        "argument, a directory, counts the regular files anywhere below it by extension and "
        f"prints one line per extension as `{fmt}`, the extension written without its dot (e.g. "
        f"`txt{sep}3`). The most common extension comes first; ties go alphabetically by "
        f"extension. Files that have no extension are counted as `{none}`. Called without an "
        "argument or with something that isn't a directory, it should complain on stderr and exit "
        f"{status}.",
        ticket=f"New executable {script} DIR: count regular files under DIR (recursive) per "
        f"extension, one line each as `{fmt}` (no dot, e.g. `txt{sep}3`). Sort: count desc, then "
        f"extension asc. No extension -> `{none}`. Missing arg or not a dir: error to stderr, "
        f"exit {status}.",
    )
    solution = f"""
mkdir -p {folder} && cd {folder}
cat > {tool} <<'SH'
#!/bin/bash
if [ $# -ne 1 ] || [ ! -d "$1" ]; then
  echo "usage: $(basename "$0") DIR" >&2
  exit {status}
fi
SH
cat >> {tool} <<'SH'
find "$1" -type f -printf '%f\\n' | awk -F. '{{ c[NF > 1 && $1 != "" ? $NF : "{none}"]++ }} END {{ for (e in c) print e, c[e] }}' | sort -k2nr -k1,1 | sed 's/ /{sep}/'
SH
chmod +x {tool}
"""
    check = f"""
import random, shutil, tempfile
from collections import Counter
script = {script!r}
check(os.access(script, os.X_OK), script + " is not executable")
rng = random.Random(os.getpid())
for trial in range(3):
    d = tempfile.mkdtemp()
    counts = Counter()
    for i in range(rng.randint(5, 25)):
        ext = rng.choice(["txt", "md", "py", "log", "none", "gz"])
        sub = os.path.join(d, rng.choice(["", "x", "x/y", "z"]))
        os.makedirs(sub, exist_ok=True)
        fname = "f%d" % i + ("" if ext == "none" else "." + ext)
        open(os.path.join(sub, fname), "w").close()
        counts[{none!r} if ext == "none" else ext] += 1
    want = "\\n".join("%s{sep}%d" % kv for kv in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    r = sh(script + " " + d)
    got = "\\n".join(line.strip() for line in r.stdout.strip().splitlines())
    check(r.returncode == 0 and got == want, "for %s got:\\n%s\\nwanted:\\n%s" % (d, r.stdout, want))
    shutil.rmtree(d)
r = sh(script)
check(r.returncode == {status}, "without an argument the exit status is %d, not {status}" % r.returncode)
r = sh(script + " /nonexistent/dir")
check(r.returncode == {status}, "for a missing directory the exit status is %d, not {status}" % r.returncode)
"""
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["script", "exit-codes"],
        check_py=check,
        uses=("find",),
        metadata={
            "script": script,
            "usage_status": status,
            "phrasing": style,
            "phrasings": phrasings,
        },
    )


def _hard(rng: random.Random) -> Draft:
    script = f"/usr/local/bin/{rng.choice(['snapshot', 'backup-dir', 'numbered-backup', 'archive-dir'])}{rng.randint(1, 9)}"
    keep, status = rng.randint(2, 5), rng.choice([1, 2, 64])
    example = f"{base_dir(rng)}/{name(rng)}"
    usage = f"{script.rsplit('/', 1)[1]} SRC_DIR DEST_DIR"
    instruction, style, phrasings = say(
        rng,
        request=f"Write an executable bash script {script} with usage `{usage}` that backs up "
        "SRC_DIR into a gzip-compressed tar archive `DEST_DIR/<name>-<NNN>.tar.gz`, where <name> "
        "is the base name of SRC_DIR and NNN is a three-digit number one higher than the highest "
        "existing backup of that name in DEST_DIR (starting at 001). Paths inside the archive are "
        f"relative to SRC_DIR. After each backup, only the {keep} highest-numbered backups of "
        "that name are kept (older ones are deleted; other files in DEST_DIR are left alone). "
        "Create DEST_DIR if needed and print the new archive's path. With a wrong number of "
        "arguments or a SRC_DIR that is not a directory, print an error to stderr and exit with "
        f"status {status}. There is an example folder to try it on in {example}.",
        report="Our backups are made by hand with ad-hoc tar commands, and the old archives never "
        f"get cleaned up. Please write an executable bash script {script}, used as `{usage}`. "
        "Each run should pack SRC_DIR into a gzip-compressed tarball "
        "`DEST_DIR/<name>-<NNN>.tar.gz`: <name> is SRC_DIR's base name and NNN a three-digit "
        "counter, one above the highest backup of that name already in DEST_DIR, 001 for the "
        "first. Paths in the archive must be relative to SRC_DIR. After the backup, keep only the "
        f"{keep} highest-numbered backups of that name, delete the older ones and don't touch "
        "anything else in DEST_DIR. Create DEST_DIR when it doesn't exist, and print the path of "
        "the new archive (just that, on stdout). If it gets the wrong number of arguments or "
        f"SRC_DIR isn't a directory, it should print an error to stderr and exit {status}. "
        f"{example} is an example folder you can try it on.",
        ticket=f"Executable bash script {script}, usage `{usage}`. Back up SRC_DIR to "
        "DEST_DIR/<basename of SRC_DIR>-<NNN>.tar.gz (tar + gzip, paths relative to SRC_DIR); NNN "
        "= 3 digits, highest existing NNN for that name + 1, first 001. Then keep only the "
        f"{keep} highest-numbered backups of that name, delete older, leave other files in "
        "DEST_DIR alone. mkdir DEST_DIR if missing; print only the new archive path. Wrong arg "
        f"count or SRC_DIR not a dir: error to stderr, exit {status}. Try it on {example}.",
    )
    solution = f"""
cat > {script} <<'SH'
#!/bin/bash
set -euo pipefail
if [ $# -ne 2 ] || [ ! -d "$1" ]; then
  echo "usage: $(basename "$0") SRC_DIR DEST_DIR" >&2
  exit {status}
fi
src=$(cd "$1" && pwd)
dest=$2
name=$(basename "$src")
mkdir -p "$dest"
last=$(ls "$dest" | sed -n "s/^$name-\\([0-9][0-9][0-9]\\)\\.tar\\.gz$/\\1/p" | sort -n | tail -n 1 || true)
next=$(printf '%03d' $((10#${{last:-0}} + 1)))
out="$dest/$name-$next.tar.gz"
tar -czf "$out" -C "$src" .
ls "$dest" | {{ grep -E "^$name-[0-9]{{3}}\\.tar\\.gz$" || true; }} | sort | head -n -{keep} | while read -r f; do
  rm -f "$dest/$f"
done
echo "$out"
SH
chmod +x {script}
"""
    check = f"""
import tarfile, tempfile
script, keep = {script!r}, {keep}
check(os.access(script, os.X_OK), script + " is not executable")
tmp = tempfile.mkdtemp()
src, dest = os.path.join(tmp, "proj-" + str(os.getpid())), os.path.join(tmp, "backups")
os.makedirs(os.path.join(src, "sub"))
os.makedirs(dest)
open(os.path.join(dest, "unrelated.txt"), "w").write("keep me\\n")
for n in range(1, keep + 3):
    open(os.path.join(src, "sub", "v.txt"), "w").write("version %d\\n" % n)
    r = sh(f"{{script}} {{src}} {{dest}}")
    want = os.path.join(dest, "%s-%03d.tar.gz" % (os.path.basename(src), n))
    check(r.returncode == 0, "backup %d failed: %s" % (n, r.stderr))
    check(r.stdout.strip() == want, "backup %d printed %r, expected %r" % (n, r.stdout.strip(), want))
left = sorted(os.listdir(dest))
want_left = sorted(["unrelated.txt"] + ["%s-%03d.tar.gz" % (os.path.basename(src), n) for n in range(3, keep + 3)])
check(left == want_left, "after %d backups DEST holds %s" % (keep + 2, left))
with tarfile.open(os.path.join(dest, "%s-%03d.tar.gz" % (os.path.basename(src), keep + 2))) as tf:
    names = {{m.name[2:] if m.name.startswith("./") else m.name for m in tf.getmembers() if m.isfile()}}
    check(names == {{"sub/v.txt"}}, "archive members are %s" % names)
    check(tf.extractfile([m for m in tf.getmembers() if m.name.endswith("sub/v.txt")][0]).read() ==
          ("version %d\\n" % (keep + 2)).encode(), "the newest archive does not hold the newest content")
for args in ["", src, f"/nonexistent {{dest}}", f"{{src}} {{dest}} extra"]:
    r = sh(f"{{script}} {{args}}")
    check(r.returncode == {status}, "`%s %s` exited %d, not {status}" % (script, args, r.returncode))
"""
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["script", "backup", "rotation"],
        setup_files={f"example/{w}.txt": token(rng) + "\n" for w in names(rng, 3, NOUNS)},
        setup_script=f"mkdir -p {example}\ncp -r example/. {example}/",
        check_py=check,
        uses=("tar", "gzip"),
        metadata={"keep": keep, "usage_status": status, "phrasing": style, "phrasings": phrasings},
        agent_timeout_sec=900.0,
    )


def generate(rng: random.Random, difficulty: str) -> Draft:
    """One shell-scripting task at ``difficulty``."""
    return {"easy": _easy, "medium": _medium, "hard": _hard}[difficulty](rng)
