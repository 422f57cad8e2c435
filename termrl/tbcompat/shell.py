"""Simple commands of a shell script, as bash would split them, read without running anything.

The test-kit scanner (``termrl.tbcompat.scan``) needs each simple command's
words: ``pip install pytest==8.4.1 2>/dev/null`` is ``pip install
pytest==8.4.1`` (the ``2`` is a file descriptor, ``/dev/null`` a target), and
the body of a here-document is data, not commands. ``simple_commands`` uses
the standard library's POSIX tokenizer (``shlex`` with punctuation
characters, so quotes and comments are bash's) and then applies what shlex
does not know about the shell:

    line continuations      joined before tokenizing
    here-documents          <<EOF / <<-'EOF' ... EOF: the body lines are dropped
    redirections            [n]> >> >| &> &>> [n]>&m < <> <<< and the word after them
    $( ... )                one opaque word (its words are unknown until it runs)
    ; & && || | |& ( )      end a simple command

A line whose quotes do not balance is split on whitespace instead.
"""

from __future__ import annotations

import re
import shlex

__all__ = ["simple_commands"]

_OPERATORS = re.compile(r"&>>|&>|>>|>\||>&|<&|<<<|<<-|<<|<>|&&|\|\||;;|\|&|[<>;&|()]")
_REDIRECTIONS = frozenset({"&>>", "&>", ">>", ">|", ">&", "<&", "<<<", "<<-", "<<", "<>", ">", "<"})
_PUNCTUATION = ";&|()<>"
# <<WORD, <<-WORD, <<'WORD', <<"WORD" (not the here-string <<<).
_HEREDOC = re.compile(r"(?<![<\\])<<-?[ \t]*(['\"]?)([A-Za-z0-9_.-]+)\1")


def _without_heredoc_bodies(text: str) -> list[str]:
    """The script's logical lines (continuations joined), here-document bodies left out."""
    lines = re.sub(r"\\\r?\n", " ", text).splitlines()
    out: list[str] = []
    pending: list[str] = []  # delimiters whose bodies come next, in order
    for line in lines:
        if pending:
            if line.strip() == pending[0]:
                pending.pop(0)
            continue
        out.append(line)
        code = line.split(" #", 1)[0]
        pending += [m.group(2) for m in _HEREDOC.finditer(code)]
    return out


def _tokens(line: str) -> list[str]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=_PUNCTUATION)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        raw = list(lexer)
    except ValueError:  # unbalanced quotes: plain words, as a last resort
        raw = line.split("#", 1)[0].split()
    tokens: list[str] = []
    for token in raw:  # shlex glues neighbouring punctuation ("2>&1|"): split it into operators
        tokens += (
            _OPERATORS.findall(token) if token and set(token) <= set(_PUNCTUATION) else [token]
        )
    return tokens


def _substitutions_joined(tokens: list[str]) -> list[str]:
    """``$`` ``(`` ... ``)`` as one word ``$(...)``: what it prints is not known here."""
    out: list[str] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token.endswith("$") and index + 1 < len(tokens) and tokens[index + 1] == "(":
            depth, end = 0, index + 1
            while end < len(tokens):
                depth += {"(": 1, ")": -1}.get(tokens[end], 0)
                if depth == 0:
                    break
                end += 1
            out.append(token + "(" + " ".join(tokens[index + 2 : end]) + ")")
            index = end + 1
            continue
        out.append(token)
        index += 1
    return out


def _split(tokens: list[str]) -> list[list[str]]:
    commands: list[list[str]] = []
    current: list[str] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token in _REDIRECTIONS:
            if current and current[-1].isdigit():  # `2>`: the number is the file descriptor
                current.pop()
            index += 2  # the operator and its target (a file, a descriptor, a delimiter)
            continue
        if token and set(token) <= set(_PUNCTUATION):
            if current:
                commands.append(current)
            current = []
        else:
            current.append(token)
        index += 1
    if current:
        commands.append(current)
    return commands


def simple_commands(text: str) -> list[list[str]]:
    """The words of every simple command in the shell script ``text``, in order."""
    commands: list[list[str]] = []
    for line in _without_heredoc_bodies(text):
        commands += _split(_substitutions_joined(_tokens(line)))
    return commands
