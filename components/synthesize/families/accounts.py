"""Users and groups in flat files: passwd/group-format files of an image being prepared.

easy    list the accounts with a given login shell or in a uid range (awk -F:)
medium  every member of a group: its primary-group users from passwd plus the group file's list
hard    add an account by hand: next free uid, a private group, supplementary groups, files still consistent

The files live in a staging folder (``/srv/<name>/rootfs/etc``), never the
sandbox's own /etc; the checks parse them as colon-separated records.
"""

from __future__ import annotations

import random

from components.synthesize.draft import Draft, py_literal
from components.synthesize.families.phrasing import say
from components.synthesize.families.words import PEOPLE, name, names
from components.synthesize.perturb import planted_files

__all__ = ["TAGS", "generate"]

TAGS = ["users", "groups", "passwd", "awk"]

SHELLS = ["/bin/bash", "/bin/sh", "/usr/sbin/nologin", "/bin/false", "/bin/zsh"]
SYSTEM = [
    ("root", 0, 0, "/root", "/bin/bash"),
    ("daemon", 1, 1, "/usr/sbin", "/usr/sbin/nologin"),
    ("bin", 2, 2, "/bin", "/usr/sbin/nologin"),
    ("www-data", 33, 33, "/var/www", "/usr/sbin/nologin"),
]


def _accounts(rng: random.Random) -> tuple[list[tuple], dict[str, tuple[int, list[str]]]]:
    groups = {"root": (0, []), "daemon": (1, []), "bin": (2, []), "www-data": (33, [])}
    users = list(SYSTEM)
    uid = 1000
    team_names = names(rng, 3, ["dev", "ops", "audit", "backup", "docker", "staff", "sudo"])
    for person in rng.sample(PEOPLE, k=rng.randint(7, 11)):
        uid += rng.randint(1, 4)
        users.append((person, uid, uid, f"/home/{person}", rng.choice(SHELLS)))
        groups[person] = (uid, [])
    gid = 2000
    for team in team_names:
        gid += rng.randint(1, 9)
        members = sorted(rng.sample([u[0] for u in users[4:]], k=rng.randint(1, 4)))
        groups[team] = (gid, members)
    for i, u in enumerate(users):  # some humans have a team as their primary group
        if u[1] >= 1000 and rng.random() < 0.3:
            team = rng.choice(team_names)
            users[i] = (u[0], u[1], groups[team][0], u[3], u[4])
    return users, groups


def _render(users: list[tuple], groups: dict[str, tuple[int, list[str]]]) -> tuple[str, str]:
    passwd = "".join(f"{n}:x:{u}:{g}:{n.title()}:{h}:{s}\n" for n, u, g, h, s in users)
    group = "".join(f"{n}:x:{g}:{','.join(m)}\n" for n, (g, m) in groups.items())
    return passwd, group


def _staging(rng: random.Random) -> str:
    return f"/srv/{name(rng)}/rootfs/etc"


def _setup(etc: str, users: list[tuple], groups: dict) -> tuple[dict[str, str], str]:
    passwd, group = _render(users, groups)
    return {"passwd": passwd, "group": group}, f"mkdir -p {etc}\ncp passwd group {etc}/"


def _easy(rng: random.Random) -> Draft:
    etc, answer = _staging(rng), f"/root/{rng.choice(['users', 'accounts', 'logins'])}.txt"
    users, groups = _accounts(rng)
    shell = rng.choice(["/bin/bash", "/usr/sbin/nologin", "/bin/zsh"])
    if rng.random() < 0.5 and any(u[4] == shell for u in users):
        want = sorted(u[0] for u in users if u[4] == shell)
        what = f"whose login shell is {shell}"
        solution = f"awk -F: '$7 == \"{shell}\" {{print $1}}' {etc}/passwd | sort > {answer}"
        variant = "shell"
    else:
        want = sorted(u[0] for u in users if u[1] >= 1000)
        what = "with a uid of 1000 or more (the human accounts)"
        solution = f"awk -F: '$3 >= 1000 {{print $1}}' {etc}/passwd | sort > {answer}"
        variant = "uid"
    instruction, style, phrasings = say(
        rng,
        request=f"{etc}/passwd is the passwd file of an image we are preparing. List the user names {what} "
        f"in {answer}, one per line, sorted.",
        report=f"For the access review I need every account {what} from the staged passwd file {etc}/passwd. "
        f"Please put the names in {answer}, one per line, alphabetical.",
        ticket=f"{etc}/passwd: users {what} -> {answer}, one per line, sorted.",
    )
    files, script = _setup(etc, users, groups)
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=[variant],
        setup_files=files,
        setup_script=script,
        check_py=f"""
got = sorted(l.strip() for l in read({answer!r}).splitlines() if l.strip())
check(got == {py_literal(want)}, "{answer} lists %r" % got)
""",
        metadata={"variant": variant, "phrasing": style, "phrasings": phrasings},
    )


def _medium(rng: random.Random) -> Draft:
    etc, answer = _staging(rng), f"/root/{rng.choice(['members', 'team'])}.txt"
    users, groups = _accounts(rng)
    teams = [g for g, (gid, _) in groups.items() if gid >= 2000]
    team = rng.choice(teams)
    gid, listed = groups[team]
    primary = [u[0] for u in users if u[2] == gid]
    if not primary:  # make the primary-group half of the answer matter
        i = rng.choice([i for i, u in enumerate(users) if u[1] >= 1000 and u[0] not in listed])
        users[i] = (*users[i][:2], gid, *users[i][3:])
        primary = [users[i][0]]
    want = sorted(set(primary) | set(listed))
    instruction, style, phrasings = say(
        rng,
        request=f"Using the staged account files {etc}/passwd and {etc}/group, list every member of the group "
        f"`{team}` — users listed in the group entry and users whose primary group it is — in {answer}, one "
        "name per line, sorted, no duplicates.",
        report=f"Someone in `{team}` was missing from our last audit: it only looked at the member list in "
        f"{etc}/group and forgot users whose primary group (in {etc}/passwd) is `{team}`. Write the complete "
        f"membership to {answer}, one per line, sorted, unique.",
        ticket=f"All members of group {team} (group list + primary gid in passwd). Files {etc}/passwd, "
        f"{etc}/group. Out: {answer}, sorted, unique.",
    )
    solution = f"""
grep '^{team}:' {etc}/group
cd {etc}
gid=$(awk -F: '$1 == "{team}" {{print $3}}' group)
{{ awk -F: -v g="$gid" '$4 == g {{print $1}}' passwd; awk -F: '$1 == "{team}" {{print $4}}' group | tr ',' '\\n'; }} | grep -v '^$' | sort -u > {answer}
cat {answer}
"""
    files, script = _setup(etc, users, groups)
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["group-members"],
        setup_files=files,
        setup_script=script,
        check_py=f"""
got = [l.strip() for l in read({answer!r}).splitlines() if l.strip()]
check(sorted(set(got)) == {py_literal(want)}, "{answer} lists %r" % got)
check(len(got) == len(set(got)), "{answer} has duplicates")
""",
        perturbations=(
            planted_files(
                "accounts",
                "an outdated group- backup file sits beside the group file",
                {f"{etc}/group-": f"{team}:x:{gid}:nobody\n"},
            ),
        ),
        metadata={"members": len(want), "phrasing": style, "phrasings": phrasings},
    )


def _hard(rng: random.Random) -> Draft:
    etc = _staging(rng)
    users, groups = _accounts(rng)
    new = rng.choice([p for p in PEOPLE if p not in groups]) + rng.choice(["", "2", "x"])
    shell = rng.choice(["/bin/bash", "/bin/zsh"])
    extra = rng.sample([g for g, (gid, _) in groups.items() if gid >= 2000], k=2)
    instruction, style, phrasings = say(
        rng,
        request=f"Add an account `{new}` to the staged files {etc}/passwd and {etc}/group by editing them "
        "(not with useradd, which would change this machine): uid = the smallest free uid that is 1000 or more, "
        f"a new private group `{new}` whose gid equals that uid (the gid is free), home /home/{new}, shell "
        f"{shell}, password field `x`, and make {new} a member of the groups {extra[0]} and {extra[1]}. Keep "
        "every existing entry.",
        report=f"The image staged under {etc} needs a user `{new}`, but useradd only works on the live system. "
        f"Please add it to {etc}/passwd and {etc}/group by hand: lowest unused uid >= 1000, its own group "
        f"`{new}` with gid = uid, home /home/{new}, shell {shell}, password `x`, plus supplementary membership "
        f"in {extra[0]} and {extra[1]}. Don't break the existing entries.",
        ticket=f"Staged {etc}: add user {new} (lowest free uid>=1000, private group gid=uid, /home/{new}, "
        f"{shell}, pw x), add to {extra[0]},{extra[1]}. Edit files directly, keep existing lines.",
    )
    used = {u[1] for u in users}
    uid = next(
        i for i in range(1000, 70000) if i not in used and i not in {g for g, _ in groups.values()}
    )
    solution = f"""
cut -d: -f1,3,4 {etc}/passwd && cut -d: -f1,3,4 {etc}/group
uid=1000; while cut -d: -f3 {etc}/passwd {etc}/group | grep -qx "$uid"; do uid=$((uid+1)); done; echo "$uid"
echo "{new}:x:$uid:$uid:{new.title()}:/home/{new}:{shell}" >> {etc}/passwd && echo "{new}:x:$uid:" >> {etc}/group
for g in {extra[0]} {extra[1]}; do sed -i "/^$g:/ {{ s/:$/:{new}/; t; s/$/,{new}/ }}" {etc}/group; done
grep -n '{new}' {etc}/passwd {etc}/group
"""
    passwd, group = _render(users, groups)
    files, script = _setup(etc, users, groups)
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["add-user", "uid"],
        setup_files=files,
        setup_script=script,
        check_py=f"""
def records(path, width):
    rows = [l.split(":") for l in read(path).splitlines() if l.strip()]
    for r in rows:
        check(len(r) == width, "%s has a malformed line %r" % (path, ":".join(r)))
    return rows


pw, gr = records({etc + "/passwd"!r}, 7), records({etc + "/group"!r}, 4)
for line in {passwd!r}.splitlines():
    check(line.split(":") in pw, "existing passwd entry changed: " + line)
mine = [r for r in pw if r[0] == {new!r}]
check(len(mine) == 1, "{new} has %d passwd entries" % len(mine))
u = mine[0]
check(u[1] == "x" and u[2] == "{uid}" and u[3] == "{uid}", "{new}'s passwd entry is %r (uid/gid should be {uid})" % u)
check(u[5] == "/home/{new}" and u[6] == {shell!r}, "{new}'s home or shell is wrong: %r" % u)
own = [r for r in gr if r[0] == {new!r}]
check(len(own) == 1 and own[0][2] == "{uid}", "group {new} with gid {uid} is missing: %r" % own)
old_groups = {{l.split(":")[0]: l.split(":") for l in {group!r}.splitlines()}}
for r in gr:
    if r[0] in old_groups:
        members = set(filter(None, r[3].split(",")))
        before = set(filter(None, old_groups[r[0]][3].split(",")))
        want = before | ({{{new!r}}} if r[0] in {py_literal(extra)} else set())
        check(r[2] == old_groups[r[0]][2] and members == want, "group %s is now %r" % (r[0], r))
check(len(gr) == len(old_groups) + 1, "{etc}/group gained or lost entries")
""",
        metadata={"uid": uid, "phrasing": style, "phrasings": phrasings},
    )


def generate(rng: random.Random, difficulty: str) -> Draft:
    """One users/groups task at ``difficulty``."""
    return {"easy": _easy, "medium": _medium, "hard": _hard}[difficulty](rng)
