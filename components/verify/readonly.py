"""Which solution steps only look: the ablation probe does not leave them out.

A step that only reads (``grep -n '^\\[' app.ini``, ``sed -n '/x/p' f``, ``ls -la d && find d |
wc -l``, ``du -ah d | sort -rh | head``) changes nothing a test could observe, so the tests
pass without it by construction. Probing it costs a sandbox and would reject the task for the
habit a medium task's solution shows on purpose: look before acting, check after.

Conservative: the step is split into simple commands (at ``|``, ``||``, ``&&``, ``;``, quotes
respected); each must start with a program of ``READ_ONLY`` (after ``VAR=value`` prefixes) and
use none of its writing options; output may be redirected only to ``/dev/null`` (or another
descriptor); a ``$(...)`` must itself only read; a subshell, a background ``&``, a heredoc, a
backtick or anything unparsable makes the step count as acting (probed as before).
"""

from __future__ import annotations

import re
import shlex

from termrl.llm.toolcalls import READ_ONLY_PROGRAMS

__all__ = ["READ_ONLY", "reads_only"]

# The programs the agent's turn summary already counts as looking, and more that only read
# (their writing options, such as sed -i, are refused below).
READ_ONLY = READ_ONLY_PROGRAMS | frozenset(
    [
        "column",
        "comm",
        "false",
        "getent",
        "join",
        "jq",
        "paste",
        "printf",
        "sed",
        "sha1sum",
        "sha512sum",
        "sleep",
        "tr",
    ]
)
"""Programs that write nothing of their own accord (their writing options are refused below)."""

_WRITING_OPTIONS = {
    "find": re.compile(r"^-(delete|exec|execdir|ok|okdir|fprint|fprint0|fprintf|fls)$"),
    "sort": re.compile(r"^(-o|--output)"),
    "sed": re.compile(r"^(-[a-zA-Z]*i|--in-place)"),
    "date": re.compile(r"^(-s|--set)"),
}


def _tar_lists(args: list[str]) -> bool:
    """``tar -tzf a.tar.gz`` (or ``tar tf``): a listing, no create, extract, append or update."""
    options = [a for a in args if a.startswith("-")] + args[:1] * (
        bool(args) and args[0][:1] != "-"
    )
    short = "".join(o.lstrip("-") for o in options if not o.startswith("--"))
    long = {o.split("=")[0] for o in options if o.startswith("--")}
    listing = "t" in short or "--list" in long
    return listing and not set(short) & set("cxruA") and long <= {"--list", "--file", "--gzip"}


_READS_WITH = {
    "tar": _tar_lists,
    "crontab": lambda args: "-l" in args and not {"-r", "-e"} & set(args),
    # sqlite3 opens the database read-only only when told so; any SQL is then harmless.
    "sqlite3": lambda args: "-readonly" in args,
}
"""Programs that read only with some options: whether these ``args`` are such."""
_SEPARATORS = {"|", "||", "&&", ";"}
_SUBSTITUTION = re.compile(r"\$\(([^()]*)\)")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# A sed script that writes a file (``w``/``W``) or runs a command (``e``).
_SED_WRITES = re.compile(r"(^|[;}\s/])[wWe](\s|$)")


def reads_only(step: str) -> bool:
    """True when every command of the shell ``step`` only reads (see the module doc)."""
    text = step.strip()
    if not text or "`" in text or "<<" in text:
        return False
    for inner in _SUBSTITUTION.findall(text):
        if not reads_only(inner):
            return False
    text = _SUBSTITUTION.sub("SUBST", text)
    if "$(" in text:  # nested or unbalanced substitutions: not worth reading
        return False
    try:
        lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:
        return False
    command: list[str] = []
    skip_target = False
    for token, after in zip(tokens, [*tokens[1:], None], strict=True):
        if skip_target:
            skip_target = False
        elif token in _SEPARATORS:
            if not _command_reads_only(command):
                return False
            command = []
        elif _is_punctuation(token):
            if not _harmless_redirect(token, after):
                return False
            if command and command[-1].isdigit():  # the descriptor of ``2>/dev/null``
                command.pop()
            skip_target = token != "<"  # an input file is an argument like any other
        else:
            command.append(token)
    return _command_reads_only(command)


def _is_punctuation(token: str) -> bool:
    return bool(token) and all(c in "();<>|&" for c in token)


def _harmless_redirect(token: str, target: str | None) -> bool:
    """``< file``, ``> /dev/null``, ``2>&1``: reading, or writing nowhere."""
    if token == "<":
        return True
    if token in (">", ">>", "&>"):
        return target == "/dev/null"
    return token == ">&" and target is not None and target.isdigit()


def _command_reads_only(words: list[str]) -> bool:
    while words and _ASSIGNMENT.match(words[0]):
        words = words[1:]
    if not words:
        return False
    program, args = words[0], words[1:]
    if program in _READS_WITH:
        return _READS_WITH[program](args)
    if program not in READ_ONLY:
        return False
    writing = _WRITING_OPTIONS.get(program)
    if writing is not None and any(writing.match(a) for a in args):
        return False
    if program == "sed" and any(_SED_WRITES.search(a) for a in args if not a.startswith("-")):
        return False
    # ``uniq IN OUT`` writes OUT.
    return not (program == "uniq" and len([a for a in args if not a.startswith("-")]) > 1)
