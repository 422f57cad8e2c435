"""Environment variables and shell start-up files: ~/.bashrc, /etc/profile.d, PATH.

easy    make a variable set in every new interactive shell (~/.bashrc) or login shell (/etc/profile.d)
medium  a tool under /opt is "command not found": put its folder on PATH for login shells, keeping PATH
hard    a broken ~/.bashrc clobbers PATH and sets a wrong variable: repair it so new shells work

The checks start fresh shells (``bash -ic`` / ``bash -lc``) the way a user
would and read what they see; the agent's own shell does not count.
"""

from __future__ import annotations

import random

from components.synthesize.draft import Draft
from components.synthesize.families.phrasing import say
from components.synthesize.families.words import NOUNS, WORDS, name, token
from components.synthesize.perturb import planted_files

__all__ = ["TAGS", "generate"]

TAGS = ["environment-variables", "bashrc", "profile", "path"]

SHELL_CHECK = """

def shell(kind, script):
    # A fresh shell as a user opens it: HOME set, no inherited PATH tweaks.
    env = {"HOME": "/root", "TERM": "dumb", "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    r = subprocess.run(["bash", kind, script], capture_output=True, text=True, env=env, timeout=30,
                       stdin=subprocess.DEVNULL)
    return r.stdout.strip().splitlines()[-1] if r.stdout.strip() else "", r
"""


def _var(rng: random.Random) -> tuple[str, str]:
    return (
        f"{rng.choice(NOUNS).upper()}_{rng.choice(['HOME', 'MODE', 'ENV', 'REGION', 'PROFILE'])}",
        f"{rng.choice(WORDS)}-{token(rng, 4)}",
    )


def _easy(rng: random.Random) -> Draft:
    var, value = _var(rng)
    if rng.random() < 0.5:
        where, kind, how = "/root/.bashrc", "-ic", "every new interactive bash shell of root"
        solution = f"echo 'export {var}={value}' >> /root/.bashrc"
    else:
        where, kind, how = f"/etc/profile.d/{var.lower()}.sh", "-lc", "every new login shell"
        solution = f"echo 'export {var}={value}' > /etc/profile.d/{var.lower()}.sh"
    instruction, style, phrasings = say(
        rng,
        request=f"Make the environment variable `{var}` equal `{value}` in {how}, by adding it to {where}.",
        report=f"Scripts started from a new shell fail because `{var}` is not set. It should be `{value}` in "
        f"{how}; configure that in {where}.",
        ticket=f"export {var}={value} for {how} via {where}.",
    )
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["export"],
        setup_script="touch /root/.bashrc",
        check_py=SHELL_CHECK
        + f"""
got, r = shell({kind!r}, 'printf "%s\\\\n" "${{{var}:-}}"')
check(got == {value!r}, "a new shell (bash {kind}) sees {var}=%r; stderr: %s" % (got, r.stderr[-300:]))
""",
        metadata={"file": where, "phrasing": style, "phrasings": phrasings},
    )


TOOL = """#!/bin/sh
echo "{name} {version}"
"""


def _medium(rng: random.Random) -> Draft:
    tool = f"{name(rng)}ctl"
    prefix = f"/opt/{tool}-{rng.randint(1, 9)}.{rng.randint(0, 9)}"
    version = f"{rng.randint(1, 5)}.{rng.randint(0, 20)}.{rng.randint(0, 9)}"
    instruction, style, phrasings = say(
        rng,
        request=f"The tool `{tool}` is installed somewhere under {prefix} but `{tool}` is not found in a login "
        f"shell. Add its folder to PATH for all login shells (a file in /etc/profile.d), keeping the existing "
        "PATH entries.",
        report=f"`{tool} --version` says `command not found` after logging in, although the package put it in "
        f"{prefix}. Please fix PATH for login shells (via /etc/profile.d) without dropping the standard folders.",
        ticket=f"{tool} (under {prefix}) not on PATH. Fix for login shells via /etc/profile.d, keep existing PATH.",
    )
    solution = f"""
find {prefix} -name '{tool}' -type f
echo 'export PATH="$PATH:{prefix}/bin"' > /etc/profile.d/{tool}.sh
bash -lc '{tool} --version && command -v ls'
"""
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["path", "profile.d"],
        setup_files={"tool": TOOL.format(name=tool, version=version)},
        setup_script=f"mkdir -p {prefix}/bin {prefix}/share\ninstall -m 755 tool {prefix}/bin/{tool}",
        check_py=SHELL_CHECK
        + f"""
got, r = shell("-lc", "{tool} --version")
check(got == "{tool} {version}", "a login shell cannot run {tool}: %r %s" % (got, r.stderr[-300:]))
got, r = shell("-lc", "command -v ls python3 | wc -l")
check(got == "2", "a login shell lost the standard PATH (ls or python3 not found)")
""",
        perturbations=(
            planted_files(
                "shell-env",
                "an old copy of the tool, of another version, elsewhere",
                {f"/usr/local/lib/{tool}-old/{tool}": "#!/bin/sh\necho old\n"},
            ),
        ),
        metadata={"phrasing": style, "phrasings": phrasings},
    )


def _hard(rng: random.Random) -> Draft:
    var, value = _var(rng)
    wrong = f"{rng.choice(WORDS)}-{token(rng, 4)}"
    extra = f"/opt/{name(rng)}/bin"
    bashrc = f"""# ~/.bashrc
[ -z "$PS1" ] && return
HISTSIZE=1000
alias ll='ls -l'
export PATH={extra}
export {var}={value}
source /etc/{rng.choice(WORDS)}/missing-env.sh
export {var}={wrong}
"""
    instruction, style, phrasings = say(
        rng,
        request=f"New interactive shells of root are broken: `ls` is not found and `{var}` has the wrong value. "
        f"Repair /root/.bashrc so that a new interactive shell finds the standard commands, also finds "
        f"commands in {extra}, has `{var}={value}`, and prints no errors on start.",
        report=f"Since someone edited /root/.bashrc, opening a terminal as root prints an error, `ls` gives "
        f"`command not found`, and `{var}` comes out as `{wrong}` instead of `{value}`. Tools in {extra} should "
        "still be on PATH. Fix the file.",
        ticket=f"/root/.bashrc broken: PATH clobbered (keep std dirs + {extra}), {var} must be {value}, "
        "no start-up errors.",
    )
    solution = f"""
cat -n /root/.bashrc
sed -i -e 's|^export PATH={extra}$|export PATH="$PATH:{extra}"|' -e '/missing-env.sh$/d' -e '/^export {var}={wrong}$/d' /root/.bashrc
bash -ic 'command -v ls; echo "${var}"' 2>&1
"""
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=["bashrc", "path", "repair"],
        setup_files={"bashrc": bashrc, "tool": TOOL.format(name="helper", version="1")},
        setup_script=f"cp bashrc /root/.bashrc\nmkdir -p {extra}\ninstall -m 755 tool {extra}/helper",
        check_py=SHELL_CHECK
        + f"""
got, r = shell("-ic", 'command -v ls >/dev/null && command -v python3 >/dev/null && helper && printf "%s\\\\n" "${var}"')
check(got == {value!r}, "a new interactive shell: %r (stderr %r)" % (got, r.stderr[-300:]))
noise = [l for l in r.stderr.splitlines() if "job control" not in l and "ioctl" not in l and l.strip()]
check(not noise, "a new interactive shell prints errors: %r" % noise)
""",
        metadata={"phrasing": style, "phrasings": phrasings},
    )


def generate(rng: random.Random, difficulty: str) -> Draft:
    """One shell-environment task at ``difficulty``."""
    return {"easy": _easy, "medium": _medium, "hard": _hard}[difficulty](rng)
