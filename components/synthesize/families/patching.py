"""diff and patch: make a unified diff, apply one, carry a change between trees.

easy    write the unified diff between two versions of a file (diff -u)
medium  apply a patch to a project tree (no `patch` in the image: git apply, look and check first)
hard    turn the changes between two release trees into a patch and apply it to a deployed copy with local edits

The checks apply what the agent wrote (``git apply``) or compare trees, so any
diff that turns the old text into the new passes, whatever its context size.
"""

from __future__ import annotations

import difflib
import random

from components.synthesize.draft import Draft, py_literal
from components.synthesize.families.phrasing import say
from components.synthesize.families.words import NOUNS, WORDS, base_dir, name, names, token
from components.synthesize.perturb import planted_files

__all__ = ["TAGS", "generate"]

TAGS = ["diff", "patch", "git-apply"]


def _text(rng: random.Random, n: int) -> list[str]:
    return [f"{rng.choice(WORDS)} = {token(rng, 6)}" for _ in range(n)]


def _edit(rng: random.Random, lines: list[str], k: int) -> list[str]:
    new = list(lines)
    for i in sorted(rng.sample(range(len(new)), k=k), reverse=True):
        op = rng.choice(["change", "delete", "insert"])
        if op == "change":
            new[i] = new[i].split(" = ")[0] + f" = {token(rng, 6)}"
        elif op == "delete":
            del new[i]
        else:
            new.insert(i, f"{rng.choice(NOUNS)} = {token(rng, 6)}")
    return new


def _join(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


APPLY_CHECK = """
import shutil, tempfile


def applies(patch, files, strip):
    work = tempfile.mkdtemp()
    for rel, content in files.items():
        os.makedirs(os.path.dirname(os.path.join(work, rel)), exist_ok=True)
        with open(os.path.join(work, rel), "w") as f:
            f.write(content)
    r = subprocess.run(["git", "apply", "-p%d" % strip, "--unidiff-zero", patch], cwd=work,
                       capture_output=True, text=True)
    out = {}
    for rel in files:
        p = os.path.join(work, rel)
        out[rel] = open(p).read() if os.path.exists(p) else None
    shutil.rmtree(work)
    return r.returncode == 0, r.stderr, out
"""


def _easy(rng: random.Random) -> Draft:
    folder = f"{base_dir(rng)}/{name(rng)}"
    stem = rng.choice(["settings", "hosts", "rules", "mapping"])
    old, new = f"{folder}/{stem}.conf.orig", f"{folder}/{stem}.conf"
    out = f"{folder}/{stem}.patch"
    a = _text(rng, rng.randint(10, 18))
    b = _edit(rng, a, rng.randint(1, 3))
    instruction, style, phrasings = say(
        rng,
        request=f"Write a unified diff that turns {old} into {new} and save it as {out}.",
        report=f"A reviewer wants to see what changed between {old} and {new}. Please produce a unified "
        f"diff (old file first) in {out}.",
        ticket=f"diff -u {old} -> {new}, save to {out}.",
    )
    return Draft(
        instruction=instruction,
        solution=f"diff -u {old} {new} > {out} || true",
        tags=["diff"],
        setup_files={"a": _join(a), "b": _join(b)},
        setup_script=f"mkdir -p {folder}\ncp a {old}\ncp b {new}",
        check_py=APPLY_CHECK
        + f"""
check(os.path.isfile({out!r}), "{out} does not exist")
text = read({out!r})
check("@@" in text, "{out} is not a unified diff")
# Whatever headers it carries (diff -u, git diff --no-index), its hunks must turn the old text into the new one.
lines = text.splitlines(True)
start = next((i for i, l in enumerate(lines) if l.startswith("@@")), None)
check(start is not None, "{out} has no hunk")
body = "".join(l for l in lines[start:] if not l.startswith(("--- ", "+++ ", "diff ", "index ")))
with open("/tmp/check.patch", "w") as f:
    f.write("--- a/x\\n+++ b/x\\n" + body)
ok, err, out = applies("/tmp/check.patch", {{"x": {_join(a)!r}}}, 1)
check(ok, "the diff does not apply to the old file: " + err)
check(out["x"] == {_join(b)!r}, "applying the diff does not give the new file")
""",
        uses=("git", "diff"),
        metadata={"old": old, "new": new, "out": out, "phrasing": style, "phrasings": phrasings},
    )


def _tree(rng: random.Random, n: int) -> dict[str, str]:
    dirs = ["", "src/", "src/" + rng.choice(WORDS) + "/", "docs/"]
    return {
        f"{rng.choice(dirs)}{w}.{rng.choice(['py', 'cfg', 'md'])}": _join(
            _text(rng, rng.randint(6, 12))
        )
        for w in names(rng, n, NOUNS)
    }


def _diff(old: dict[str, str], new: dict[str, str]) -> str:
    parts = []
    for rel in sorted(set(old) | set(new)):
        a, b = old.get(rel, ""), new.get(rel, "")
        if a != b:
            parts += difflib.unified_diff(
                a.splitlines(True), b.splitlines(True), f"a/{rel}", f"b/{rel}"
            )
    return "".join(parts)


def _medium(rng: random.Random) -> Draft:
    project = f"{base_dir(rng)}/{name(rng)}"
    patch = f"/tmp/{rng.choice(['fix', 'hotfix', 'security'])}-{rng.randint(100, 999)}.patch"
    old = _tree(rng, rng.randint(4, 6))
    changed = rng.sample(sorted(old), k=rng.randint(1, 3))
    new = {**old, **{p: _join(_edit(rng, old[p].splitlines(), 2)) for p in changed}}
    instruction, style, phrasings = say(
        rng,
        request=f"Apply the patch {patch} to the project in {project} (its paths start with a/ and b/). "
        "Note that the `patch` command is not installed here.",
        report=f"The fix in {patch} was never applied to {project}, so the old code is still running. Apply "
        "it to the working tree (paths are a/... b/...; there is no `patch` binary on this box).",
        ticket=f"Apply {patch} to {project} (-p1). No `patch` binary available.",
    )
    solution = f"""
cat {patch} && cd {project} && git apply --stat -p1 {patch} && git apply --check -p1 {patch}
cd {project} && git apply -p1 {patch}
cd {project} && git apply --check -R -p1 {patch}
"""
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["patch", "git-apply"],
        setup_files={**{f"tree/{p}": c for p, c in old.items()}, "change.patch": _diff(old, new)},
        setup_script=f"mkdir -p {project}\ncp -r tree/. {project}/\ncp change.patch {patch}",
        check_py=f"""
for rel, content in {py_literal(new)}.items():
    check(read(os.path.join({project!r}, rel)) == content, rel + " does not have the patched content")
""",
        uses=("git",),
        perturbations=(
            planted_files(
                "patch",
                "an older, already superseded patch sits next to the real one",
                {
                    patch.replace(
                        ".patch", "-v0.patch"
                    ): "--- a/README\n+++ b/README\n@@ -1 +1 @@\n-x\n+y\n"
                },
            ),
        ),
        metadata={"files_changed": len(changed), "phrasing": style, "phrasings": phrasings},
    )


def _hard(rng: random.Random) -> Draft:
    app = name(rng)
    v1, v2, live = f"/srv/releases/{app}-1.0", f"/srv/releases/{app}-1.1", f"/opt/{app}"
    out = f"/root/{app}-1.0-to-1.1.patch"
    old = _tree(rng, rng.randint(4, 6))
    changed = rng.sample(sorted(old), k=2)
    new = {**old, **{p: _join(_edit(rng, old[p].splitlines(), 2)) for p in changed}}
    added = f"src/{rng.choice(NOUNS)}_new.py"
    new[added] = _join(_text(rng, 4))
    local = rng.choice([p for p in sorted(old) if p not in changed])
    deployed = {**old, local: old[local] + f"# local tweak {token(rng, 4)}\n"}
    final = {**new, local: deployed[local]}
    instruction, style, phrasings = say(
        rng,
        request=f"{v1} and {v2} are two releases of {app}; {live} is a deployed copy of 1.0 with a local edit. "
        f"Write the changes from 1.0 to 1.1 as a unified patch {out} (paths relative to the release folder, "
        f"a/ and b/ prefixes), then apply it to {live} so it becomes 1.1 while keeping the local edit.",
        report=f"Upgrading {live} by copying {v2} over it would lose a local edit someone made. Instead, make a "
        f"patch of what changed between {v1} and {v2} (save it as {out}, -p1 style paths) and apply that to "
        f"{live}; the local change must survive.",
        ticket=f"Patch {v1} -> {v2} into {out} (-p1, relative paths). Apply to {live}, keep local edits.",
    )
    solution = f"""
diff -rq {v1} {v2} || true
cd /srv/releases && diff -ruN {app}-1.0 {app}-1.1 | sed -e 's|^--- {app}-1.0/|--- a/|' -e 's|^+++ {app}-1.1/|+++ b/|' > {out} || true
cd {live} && git apply --check -p1 {out} && git apply -p1 {out}
diff -rq {v2} {live} || true
"""
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["diff", "patch", "release"],
        setup_files={
            **{f"v1/{p}": c for p, c in old.items()},
            **{f"v2/{p}": c for p, c in new.items()},
            **{f"live/{p}": c for p, c in deployed.items()},
        },
        setup_script=f"mkdir -p {v1} {v2} {live}\ncp -r v1/. {v1}/\ncp -r v2/. {v2}/\ncp -r live/. {live}/",
        check_py=APPLY_CHECK
        + f"""
for rel, content in {py_literal(final)}.items():
    check(os.path.isfile(os.path.join({live!r}, rel)), rel + " is missing in {live}")
    check(read(os.path.join({live!r}, rel)) == content, rel + " in {live} is not 1.1 with the local edit")
ok, err, out = applies({out!r}, {py_literal(old)}, 1)
check(ok, "{out} does not apply to a copy of 1.0: " + err)
check({{k: v for k, v in out.items() if v}} == {{k: v for k, v in {py_literal(new)}.items() if k in {py_literal(sorted(old))}}}, "{out} does not turn 1.0 into 1.1")
""",
        uses=("git", "diff"),
        metadata={"phrasing": style, "phrasings": phrasings},
        agent_timeout_sec=900.0,
    )


def generate(rng: random.Random, difficulty: str) -> Draft:
    """One diff/patch task at ``difficulty``."""
    return {"easy": _easy, "medium": _medium, "hard": _hard}[difficulty](rng)
