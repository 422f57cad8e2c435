"""Git: branches and tags, merges with conflicts, hooks that must actually fire.

easy    create a branch or a tag at the current commit (one git command)
medium  merge a branch and resolve a conflict, or install a pre-commit hook (the check commits)
hard    push-to-deploy: a post-receive hook on a bare repo (the check pushes, like the seed's git server)

The set-up gives root a git identity; the ``git-identity-missing`` and
``git-hooks-path-broken`` perturbations take it away or point hooks elsewhere,
and the golden solutions repair both when they need them.
"""

from __future__ import annotations

import random

from components.synthesize.draft import Draft, Perturbation
from components.synthesize.families.phrasing import say
from components.synthesize.families.words import NOUNS, PEOPLE, WORDS, base_dir, name, names, token

__all__ = ["TAGS", "generate"]

TAGS = ["git", "version-control"]

IDENTITY_MISSING = Perturbation(
    name="git-identity-missing",
    description="root has no git user.name/user.email, so commits fail until one is set",
    run="git config --global --unset user.name; git config --global --unset user.email; true",
)
HOOKS_PATH_BROKEN = Perturbation(
    name="git-hooks-path-broken",
    description="the global git config sets core.hooksPath to a folder that does not exist",
    run="git config --global core.hooksPath /usr/share/git-core/hooks-disabled",
)

FIX_IDENTITY = (
    "git config --global user.email >/dev/null || git config --global user.email root@localhost\n"
    "git config --global user.name >/dev/null || git config --global user.name root"
)
FIX_HOOKS_PATH = "git config --global --unset core.hooksPath || true"


def _identity(rng: random.Random) -> str:
    person = rng.choice(PEOPLE)
    return f'git config --global user.name "{person.title()}"\ngit config --global user.email "{person}@example.com"'


def _repo_setup(rng: random.Random, repo: str, main: str, files: dict[str, str]) -> str:
    lines = [_identity(rng), f"mkdir -p {repo}", f"git -C {repo} init -q -b {main}"]
    for path, content in files.items():
        lines.append(
            f"mkdir -p $(dirname {repo}/{path}) && printf '%s\\n' '{content}' > {repo}/{path}"
        )
        lines.append(f"git -C {repo} add {path} && git -C {repo} commit -qm 'add {path}'")
    return "\n".join(lines)


def _files(rng: random.Random, n: int) -> dict[str, str]:
    return {f"{rng.choice(['', 'src/', 'docs/'])}{w}.txt": token(rng) for w in names(rng, n, WORDS)}


def _easy(rng: random.Random) -> Draft:
    repo, main = f"{base_dir(rng)}/{name(rng)}", rng.choice(["main", "master", "trunk"])
    setup = _repo_setup(rng, repo, main, _files(rng, rng.randint(2, 4)))
    if rng.random() < 0.5:
        branch = (
            f"{rng.choice(['feature', 'fix', 'topic'])}/{rng.choice(NOUNS)}-{rng.randint(1, 99)}"
        )
        instruction, style, phrasings = say(
            rng,
            request=f"In the git repository {repo}, create a branch named `{branch}` from the "
            "current commit and switch to it.",
            report=f"I'm about to start on `{branch}` in {repo}, but that branch doesn't exist "
            "yet. Could you create it at the commit that is checked out now and leave me on it?",
            ticket=f"{repo}: new branch `{branch}` from current commit, check it out.",
        )
        solution = f"git -C {repo} checkout -b {branch}"
        check = f"""
r = sh("git -C {repo} rev-parse --abbrev-ref HEAD")
check(r.stdout.strip() == {branch!r}, "current branch is %r" % r.stdout.strip())
check(sh("git -C {repo} rev-parse {branch}").stdout == sh("git -C {repo} rev-parse {main}").stdout,
      "{branch} does not start at the tip of {main}")
"""
        variant = "branch"
    else:
        tag = f"v{rng.randint(0, 9)}.{rng.randint(0, 20)}.{rng.randint(0, 9)}"
        instruction, style, phrasings = say(
            rng,
            request=f"Tag the current commit of the git repository {repo} as `{tag}`.",
            report=f"The release built from the current commit of {repo} went out untagged, so "
            f"nobody can find it later. Please add the tag `{tag}` to that commit.",
            ticket=f"{repo}: tag current commit `{tag}`.",
        )
        solution = f"git -C {repo} tag {tag}"
        check = f"""
r = sh("git -C {repo} rev-parse {tag}^{{commit}}")
check(r.returncode == 0, "there is no tag {tag}")
check(r.stdout == sh("git -C {repo} rev-parse {main}").stdout, "{tag} is not on the tip of {main}")
"""
        variant = "tag"
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=[variant],
        setup_script=setup,
        check_py=check,
        uses=("git",),
        perturbations=(IDENTITY_MISSING,),
        metadata={"variant": variant, "main": main, "phrasing": style, "phrasings": phrasings},
    )


def _merge(rng: random.Random) -> Draft:
    repo, main = f"{base_dir(rng)}/{name(rng)}", rng.choice(["main", "master"])
    feature = f"feature/{rng.choice(NOUNS)}"
    conflict = f"{rng.choice(['config', 'settings', 'app'])}.ini"
    key = rng.choice(["timeout", "workers", "retries", "port"])
    base_v, main_v, feat_v = rng.sample(range(1, 999), 3)
    main_file, feat_file = f"{rng.choice(WORDS)}-main.txt", f"{rng.choice(WORDS)}-feature.txt"
    feat_content = f"[server]\n{key} = {feat_v}\nname = {rng.choice(NOUNS)}\n"
    feat_printf = feat_content.replace("\n", "\\n")
    setup = f"""
{_repo_setup(rng, repo, main, {"README.md": "project " + token(rng)})}
printf '[server]\\n{key} = {base_v}\\n' > {repo}/{conflict}
git -C {repo} add . && git -C {repo} commit -qm 'add {conflict}'
git -C {repo} checkout -qb {feature}
printf '{feat_printf}' > {repo}/{conflict}
echo feature > {repo}/{feat_file}
git -C {repo} add . && git -C {repo} commit -qm 'tune {key} on the feature branch'
git -C {repo} checkout -q {main}
printf '[server]\\n{key} = {main_v}\\n' > {repo}/{conflict}
echo main > {repo}/{main_file}
git -C {repo} add . && git -C {repo} commit -qm 'main moves on'
"""
    instruction, style, phrasings = say(
        rng,
        request=f"In the git repository {repo}, merge the branch `{feature}` into `{main}` with a "
        f"merge commit. The merge conflicts in `{conflict}`: resolve it by taking the version "
        f"from `{feature}`. `{main}` must end up checked out, with the merge committed and a "
        "clean working tree.",
        report=f"`{feature}` in {repo} is ready to land, but merging it into `{main}` stops on a "
        f"conflict in `{conflict}`. The `{feature}` side of that file is the right one, so keep "
        f"it. Finish the job as a real merge commit on `{main}` (no squash, no rebase), leave "
        f"`{main}` checked out and don't leave anything uncommitted.",
        ticket=f"{repo}: merge `{feature}` into `{main}` (merge commit). Conflict in `{conflict}` "
        f"-> take `{feature}` version. End on `{main}`, merge committed, clean tree.",
    )
    solution = f"""
{FIX_IDENTITY}
cd {repo}
git checkout -q {main}
if ! git merge --no-ff --no-edit {feature}; then
  git checkout --theirs {conflict}
  git add {conflict}
  git commit --no-edit
fi
"""
    check = f"""
def git(args):
    return sh("git -C {repo} " + args).stdout.strip()


check(git("rev-parse --abbrev-ref HEAD") == {main!r}, "{main} is not checked out")
parents = git("rev-list --parents -n 1 HEAD").split()[1:]
check(len(parents) == 2, "HEAD is not a merge commit")
check(git("log -1 --format=%s HEAD^1") == "main moves on", "the merge's first parent is not the old {main}")
check(parents[1] == git("rev-parse {feature}"), "the merge's second parent is not {feature}")
check(read({repo + "/" + conflict!r}) == {feat_content!r}, "{conflict} is not the {feature} version")
for f in [{main_file!r}, {feat_file!r}]:
    check(os.path.exists({repo!r} + "/" + f), f + " is missing after the merge")
check(git("status --porcelain") == "", "the working tree is not clean")
"""
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["merge", "conflict"],
        setup_script=setup,
        check_py=check,
        uses=("git",),
        perturbations=(IDENTITY_MISSING,),
        metadata={"variant": "merge-conflict", "phrasing": style, "phrasings": phrasings},
    )


def _pre_commit(rng: random.Random) -> Draft:
    repo, main = f"{base_dir(rng)}/{name(rng)}", rng.choice(["main", "master"])
    banned = rng.choice(["DO NOT COMMIT", "NOCOMMIT", "FIXME-BEFORE-MERGE", "SECRET_KEY="])
    setup = _repo_setup(rng, repo, main, _files(rng, 2))
    instruction, style, phrasings = say(
        rng,
        request=f"Add a git pre-commit hook to the repository {repo} that rejects any commit "
        f"whose staged changes add a line containing `{banned}` (the commit must fail), while "
        "other commits go through normally.",
        report=f"Lines marked `{banned}` keep slipping into commits in {repo}. Please set up a "
        "pre-commit hook in that repository so that a commit fails whenever its staged changes "
        f"add a line containing `{banned}`. Every other commit should still go through as usual.",
        ticket=f"{repo}: pre-commit hook. Staged diff adds a line containing `{banned}` -> commit "
        "fails; other commits pass.",
    )
    solution = f"""
{FIX_HOOKS_PATH}
cd {repo}/.git/hooks
cat > pre-commit <<'HOOK'
#!/bin/sh
if git diff --cached -U0 | grep '^+' | grep -qF -- '{banned}'; then
  echo "pre-commit: refusing to commit '{banned}'" >&2
  exit 1
fi
HOOK
chmod +x pre-commit
"""
    check = f"""
import shutil, tempfile
repo = {repo!r}
ident = "-c user.name=check -c user.email=check@localhost"
with open(os.path.join(repo, "allowed.txt"), "w") as f:
    f.write("harmless change\\n")
r = sh(f"cd {{repo}} && git add allowed.txt && git {{ident}} commit -qm 'allowed change'")
check(r.returncode == 0, "a normal commit was rejected: " + r.stdout + r.stderr)
with open(os.path.join(repo, "bad.txt"), "w") as f:
    f.write("value = 1  # " + {banned!r} + "\\n")
r = sh(f"cd {{repo}} && git add bad.txt && git {{ident}} commit -qm 'bad change'")
check(r.returncode != 0, "a commit adding {banned} went through")
check("bad.txt" not in sh(f"git -C {{repo}} ls-tree -r --name-only HEAD").stdout, "bad.txt was committed")
"""
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["hooks", "pre-commit"],
        setup_script=setup,
        check_py=check,
        uses=("git",),
        perturbations=(HOOKS_PATH_BROKEN,),
        metadata={"variant": "pre-commit-hook", "phrasing": style, "phrasings": phrasings},
    )


def _hard(rng: random.Random) -> Draft:
    project, main = name(rng), rng.choice(["main", "master"])
    bare, work = f"/srv/git/{project}.git", f"{base_dir(rng)}/{project}"
    site, deploy = f"/var/www/{project}", rng.choice(["production", "live", "deploy"])
    files = {"index.html": f"<h1>{project} {token(rng)}</h1>", **_files(rng, 2)}
    setup = f"""
{_repo_setup(rng, work, main, files)}
mkdir -p /srv/git
git clone -q --bare {work} {bare}
git -C {work} remote remove origin 2>/dev/null || true
git -C {work} remote add origin {bare}
git -C {work} fetch -q origin
"""
    instruction, style, phrasings = say(
        rng,
        request=f"{bare} is a bare git repository and {work} a clone of it (remote `origin`). "
        f"Make pushes deploy: whenever branch `{deploy}` is pushed to {bare}, {site} must be "
        "replaced by exactly the files of that branch (files deleted in git disappear from "
        f"{site}). Pushes to other branches must not touch {site}. Finally push the current "
        f"`{main}` of {work} to `{deploy}` so the site is deployed now.",
        report=f"Every release of {site} is still copied over by hand, and last time a file we "
        f"had deleted stayed online. The code lives in the bare repository {bare}; {work} is a "
        f"clone of it (remote `origin`). We'd like push-to-deploy: each push of branch `{deploy}` "
        f"to {bare} should make {site} hold exactly that branch's files, so anything deleted in "
        f"git is gone from the site too, while pushes of any other branch leave {site} untouched. "
        f"Once that works, push the current `{main}` of {work} to `{deploy}` so the site is live "
        "now.",
        ticket=f"Push-to-deploy. Bare repo {bare}, clone {work} (remote origin). Push to "
        f"`{deploy}` -> {site} = exactly that branch's files (deleted files removed). Other "
        f"branches: {site} untouched. Then push {work}'s `{main}` to `{deploy}` to deploy now.",
    )
    solution = f"""
{FIX_HOOKS_PATH}
cat > {bare}/hooks/post-receive <<'HOOK'
#!/bin/bash
while read -r old new ref; do
  if [ "$ref" = "refs/heads/{deploy}" ]; then
    rm -rf {site}.tmp && mkdir -p {site}.tmp
    git archive "$new" | tar -x -C {site}.tmp
    rm -rf {site} && mv {site}.tmp {site}
  fi
done
HOOK
chmod +x {bare}/hooks/post-receive
git -C {work} push -q origin {main}:{deploy}
"""
    check = f"""
import tempfile
site, bare = {site!r}, {bare!r}
for f, content in {files!r}.items():
    check(read(os.path.join(site, f)).strip() == content, f + " was not deployed by the first push")
tmp = tempfile.mkdtemp()
ident = "-c user.name=check -c user.email=check@localhost"
# file:// — a plain-path clone hardlinks objects, which fails across overlayfs layers.
r = sh(f"git clone -q -b {deploy} file://{{bare}} {{tmp}}/c")
check(r.returncode == 0, "cannot clone {deploy}: " + r.stderr)
marker = "deployed-" + str(os.getpid())
r = sh(f"cd {{tmp}}/c && echo {{marker}} > check.txt && git rm -q index.html && git add check.txt"
       f" && git {{ident}} commit -qm check && git push -q origin {deploy}")
check(r.returncode == 0, "push failed: " + r.stdout + r.stderr)
check(read(os.path.join(site, "check.txt")).strip() == marker, "a push to {deploy} did not deploy")
check(not os.path.exists(os.path.join(site, "index.html")), "a file deleted in git is still deployed")
r = sh(f"cd {{tmp}}/c && git checkout -qb other && echo other > other.txt && git add other.txt"
       f" && git {{ident}} commit -qm other && git push -q origin other")
check(r.returncode == 0, "push of another branch failed: " + r.stderr)
check(not os.path.exists(os.path.join(site, "other.txt")), "a push to another branch changed the site")
"""
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["hooks", "post-receive", "deploy", "bare-repo"],
        setup_script=setup,
        check_py=check,
        uses=("git", "tar"),
        perturbations=(HOOKS_PATH_BROKEN,),
        metadata={
            "variant": "push-to-deploy",
            "deploy_branch": deploy,
            "phrasing": style,
            "phrasings": phrasings,
        },
        agent_timeout_sec=900.0,
    )


def generate(rng: random.Random, difficulty: str) -> Draft:
    """One git task at ``difficulty``."""
    if difficulty == "medium":
        return _merge(rng) if rng.random() < 0.5 else _pre_commit(rng)
    return {"easy": _easy, "hard": _hard}[difficulty](rng)
