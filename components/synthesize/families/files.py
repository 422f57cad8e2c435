"""Files and permissions: modes, links, ownership, setgid shared folders.

easy    one command: make a script executable, lock a key file down, or make a symlink
medium  normalise a whole tree's modes (dirs 755, files 644, scripts 755)
hard    a group-shared folder: group ownership, setgid, 2770; checked by acting as the users
"""

from __future__ import annotations

import random

from components.synthesize.draft import Draft, py_literal
from components.synthesize.families.phrasing import say
from components.synthesize.families.words import NOUNS, PEOPLE, WORDS, base_dir, name, names, token

__all__ = ["TAGS", "generate"]

TAGS = ["files", "permissions", "chmod"]


def _easy(rng: random.Random) -> Draft:
    folder = f"{base_dir(rng)}/{name(rng)}"
    variant = rng.choice(["exec", "private", "symlink"])
    marker = token(rng)
    if variant == "exec":
        path = f"{folder}/bin/{rng.choice(['deploy', 'backup', 'report', 'cleanup', 'sync'])}.sh"
        instruction, style, phrasings = say(
            rng,
            request=f"Please make the script {path} executable so that it can be run directly.",
            report=f"The script {path} cannot be run because it is not executable. Make it "
            "executable.",
            ticket=f"{path}: add the execute bit (chmod +x).",
        )
        solution = f"chmod +x {path}"
        setup = f"mkdir -p {folder}/bin\ncp script.sh {path}\nchmod 644 {path}"
        files = {"script.sh": f"#!/bin/sh\necho {marker}\n"}
        check = f"""
check(os.access({path!r}, os.X_OK), "{path} is not executable")
r = sh({path!r})
check(r.stdout.strip() == {marker!r}, "running {path} did not print its marker: " + r.stdout + r.stderr)
"""
    elif variant == "private":
        path = f"{folder}/{rng.choice(['id_ed25519', 'secret.key', 'token.txt', 'credentials'])}"
        instruction, style, phrasings = say(
            rng,
            request=f"Restrict {path} so only its owner can read and write it (mode 600), without "
            "changing its contents.",
            report=f"A security scan flagged {path}: anyone on the machine can read and modify it. "
            "Lock it down so that only the owner has read and write access (mode 600); keep what "
            "is in it.",
            ticket=f"{path} -> mode 600 (owner rw only). Content unchanged.",
        )
        solution = f"chmod 600 {path}"
        setup = f"mkdir -p {folder}\necho {marker} > {path}\nchmod 666 {path}"
        files = {}
        check = f"""
check(os.stat({path!r}).st_mode & 0o777 == 0o600, "mode of {path} is %o" % (os.stat({path!r}).st_mode & 0o777))
check(read({path!r}).strip() == {marker!r}, "{path} content changed")
"""
    else:
        ver = f"{rng.randint(1, 5)}.{rng.randint(0, 9)}.{rng.randint(0, 9)}"
        target, link = f"{folder}/releases/v{ver}", f"{folder}/current"
        instruction, style, phrasings = say(
            rng,
            request=f"Create a symbolic link {link} that points to the directory {target}.",
            report=f"The deploy scripts look for the live release at {link}, but that path does "
            f"not exist yet. Create it as a symlink to the release directory {target}.",
            ticket=f"symlink {link} -> {target}",
        )
        solution = f"ln -s {target} {link}"
        setup = f"mkdir -p {target}\necho {marker} > {target}/VERSION"
        files = {}
        check = f"""
check(os.path.islink({link!r}), "{link} is not a symlink")
check(os.path.realpath({link!r}) == {target!r}, "{link} points to " + os.path.realpath({link!r}))
check(read({link!r} + "/VERSION").strip() == {marker!r}, "{link}/VERSION is wrong")
"""
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=[variant],
        setup_files=files,
        setup_script=setup,
        check_py=check,
        metadata={"variant": variant, "phrasing": style, "phrasings": phrasings},
    )


def _medium(rng: random.Random) -> Draft:
    root = f"{base_dir(rng)}/{name(rng)}"
    dirs = ["", *[f"{a}" for a in names(rng, 3, WORDS)]]
    dirs += [f"{dirs[1]}/{n}" for n in names(rng, 2, NOUNS)]
    files: list[str] = []
    for d in dirs:
        for _ in range(rng.randint(1, 3)):
            ext = rng.choice([".txt", ".conf", ".sh", ".md", ".sh", ".py"])
            files.append(f"{d}/{rng.choice(WORDS)}{rng.randint(1, 9)}{ext}".lstrip("/"))
    files = sorted(set(files))
    modes = ["777", "600", "700", "640", "444", "755", "666"]
    lines = [f"mkdir -p {root}/{d}" for d in dirs[1:]]
    lines += [f"echo x > {root}/{f} && chmod {rng.choice(modes)} {root}/{f}" for f in files]
    lines += [f"chmod {rng.choice(['700', '777', '750'])} {root}/{d}".rstrip("/") for d in dirs]
    expected = {f"{root}/{d}".rstrip("/"): 0o755 for d in dirs}
    expected |= {f"{root}/{f}": 0o755 if f.endswith(".sh") else 0o644 for f in files}
    instruction, style, phrasings = say(
        rng,
        request=f"Normalise the permissions under {root} (including {root} itself): every "
        "directory must be 755, every regular file 644, except files ending in `.sh`, which must "
        "be 755.",
        report=f"After a copy from another machine the modes under {root} are all over the place, "
        f"world-writable in one spot and owner-only in the next. Reset the whole tree, {root} "
        "itself included, to directories 755 and regular files 644, but give the `.sh` scripts 755 "
        "so they stay runnable.",
        ticket=f"{root} recursively (incl. {root}): dirs 755, files 644, *.sh 755.",
    )
    # Look at the modes, act, check them again.
    solution = (
        f"find {root} -printf '%m %y %p\\n' | head -n 40\n"
        # One acting turn: the three changes belong together (a 3-turn episode has room for it).
        f"find {root} -type d -exec chmod 755 {{}} + && find {root} -type f -exec chmod 644 {{}} + "
        f"&& find {root} -type f -name '*.sh' -exec chmod 755 {{}} +\n"
        f"find {root} -printf '%m %y %p\\n' | head -n 40"
    )
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["find", "tree"],
        setup_script="\n".join(lines),
        check_py=f"""
expected = {py_literal(expected)}
for path, mode in expected.items():
    check(os.path.exists(path), path + " is missing")
    got = os.stat(path).st_mode & 0o7777
    check(got == mode, "%s has mode %o, want %o" % (path, got, mode))
""",
        uses=("find",),
        metadata={
            "files": len(files),
            "dirs": len(dirs),
            "phrasing": style,
            "phrasings": phrasings,
        },
    )


def _hard(rng: random.Random) -> Draft:
    team, member, outsider = name(rng), *names(rng, 2, PEOPLE)
    shared = f"{base_dir(rng)}/{team}/shared"
    gid, uid = rng.randint(2000, 2999), rng.randint(3000, 3999)
    docs = names(rng, 3, WORDS)
    # Users are appended to the account files directly: the base image may lack useradd.
    setup = f"""
echo '{team}:x:{gid}:{member}' >> /etc/group
echo '{member}:x:{uid}:{uid}::/home/{member}:/bin/bash' >> /etc/passwd
echo '{member}:x:{uid}:' >> /etc/group
echo '{outsider}:x:{uid + 1}:{uid + 1}::/home/{outsider}:/bin/bash' >> /etc/passwd
echo '{outsider}:x:{uid + 1}:' >> /etc/group
mkdir -p {shared}
""" + "\n".join(f"echo {d} > {shared}/{d}.txt && chmod 644 {shared}/{d}.txt" for d in docs)
    instruction, style, phrasings = say(
        rng,
        request=f"Make {shared} a folder shared by the group `{team}`: the folder and the files "
        f"already in it must belong to group `{team}`, group members must be able to read and "
        "write every file in it and create new files there, new files must automatically belong to "
        f"group `{team}` (setgid), and users outside the group (such as `{outsider}`) must have no "
        f"access at all: the folder's mode must be 2770. User `{member}` is already in the group.",
        report=f"The `{team}` team can't use {shared}: `{member}` (already in the group) cannot "
        f"save changes to the files there, and `{outsider}`, who is not in the team, can still "
        "list the folder. Please fix it: the folder and its existing files should belong to group "
        f"`{team}`, members need to read and write every file and create new ones, new files "
        f"should get group `{team}` automatically (setgid), and nobody outside the group gets any "
        "access, so the folder's mode must be 2770.",
        ticket=f"Shared dir {shared} for group {team}: chgrp folder + existing files to {team}, "
        f"group rw on every file, members can create files, setgid so new files get {team}, no "
        f"access for others (e.g. {outsider}); folder mode 2770. {member} is already in {team}.",
    )
    solution = f"""
chgrp -R {team} {shared}
chmod 2770 {shared}
find {shared} -type f -exec chmod g+rw,o-rwx {{}} +
"""
    check = f"""
import grp, pwd
shared, team = {shared!r}, {team!r}
st = os.stat(shared)
check(st.st_mode & 0o7777 == 0o2770, "mode of %s is %o" % (shared, st.st_mode & 0o7777))
check(grp.getgrgid(st.st_gid).gr_name == team, shared + " is not group " + team)


def as_user(user, fn):
    pid = os.fork()
    if pid == 0:
        try:
            pw = pwd.getpwnam(user)
            os.initgroups(user, pw.pw_gid)
            os.setgid(pw.pw_gid)
            os.setuid(pw.pw_uid)
            fn()
            os._exit(0)
        except BaseException as e:
            print(user, "failed:", repr(e))
            os._exit(1)
    return os.waitpid(pid, 0)[1] == 0


def member_works():
    for doc in {docs!r}:
        with open(os.path.join(shared, doc + ".txt"), "a") as f:
            f.write("edited\\n")
    with open(os.path.join(shared, "new-by-member.txt"), "w") as f:
        f.write("hi\\n")


check(as_user({member!r}, member_works), "group member {member} cannot edit or create files in " + shared)
new = os.stat(os.path.join(shared, "new-by-member.txt"))
check(grp.getgrgid(new.st_gid).gr_name == team, "a new file does not inherit group " + team)


def outsider_reads():
    os.listdir(shared)


check(not as_user({outsider!r}, outsider_reads), "{outsider} can list " + shared)
"""
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["groups", "setgid"],
        setup_script=setup,
        check_py=check,
        uses=("find",),
        metadata={"shared": shared, "phrasing": style, "phrasings": phrasings},
    )


def generate(rng: random.Random, difficulty: str) -> Draft:
    """One files-and-permissions task at ``difficulty``."""
    return {"easy": _easy, "medium": _medium, "hard": _hard}[difficulty](rng)
