"""Split a shell script into its top-level steps, and drop one of them.

Two users: verify's solution ablation reruns a task's reference solution with
one step removed (if the tests still pass, they do not check that step), and a
demonstration (``termrl.demonstrations``) turns each step into one agent turn.
A *step* is one top-level
command as a reader would count it, so the splitter keeps together what bash
would run as one unit:

    #!/bin/bash                      comment: not a step
    set -e                           step 0
    cat > /app/run.sh <<'EOF'        step 1: the heredoc body belongs to its command
    echo hi
    EOF
    for f in *.log; do               step 2: a compound command (if/for/while/until/
      gzip "$f"                              case, { }, ( ), functions) is one step
    done
    python3 -c 'import os;           step 3: quotes and $( ) spanning lines
    print(os.getcwd())'
    grep x a.txt \\                  step 4: backslash continuations and lines ending
      | sort &&                              in | && || continue the step
      echo ok

It is a scanner, not a bash parser: it tracks quotes, ``$( )``/``${ }``/
backticks, arithmetic ``(( ))``, heredocs and the reserved words that open and
close compound commands (only where bash reads a command, so ``echo done`` is
not the end of a loop). A script it cannot balance ends in one last step, which
is the safe direction: a coarser step is still a real step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Step", "split_steps", "without_step"]


@dataclass(frozen=True)
class Step:
    """One top-level step: its source text and its line span (0-based, inclusive)."""

    index: int
    text: str
    first_line: int
    last_line: int


# What each reserved word pushes on the nesting stack, and what each closer pops.
# A loop keyword opens "loop", which its `do` turns into "do" (so `while x` on one
# line and `do` on the next stay one step).
_OPENERS = {
    "if": "if",
    "case": "case",
    "{": "{",
    "for": "loop",
    "while": "loop",
    "until": "loop",
    "select": "loop",
}
_CLOSERS = {"fi": "if", "esac": "case", "done": "do", "}": "{"}
# Reserved words after which bash reads a command again.
_COMMAND_LEADERS = {"then", "do", "else", "elif", "if", "while", "until", "!", "time", "{"}
_META = set(";&|()<>")
_FUNCTION_HEADER = re.compile(r"^\s*(function\s+[\w.:-]+(\s*\(\s*\))?|[\w.:-]+\s*\(\s*\))\s*$")
_HEREDOC_WORD = re.compile(r"""\s*(?:'([^']*)'|"([^"]*)"|\\?([^\s;&|()<>]+))""")


class _Scanner:
    """Walks the script once, keeping the nesting stack across lines."""

    def __init__(self, text: str):
        self.text = text
        self.i = 0
        self.stack: list[str] = []
        self.word = ""
        self.word_quoted = False
        self.command_position = True
        self.after_for = False
        self.function_name_next = False
        self.paren_opened_at = 0
        self.pending_heredocs: list[tuple[str, bool]] = []
        self.last_token = ""  # the last non-blank token on the line: continuation operators

    @property
    def top(self) -> str:
        return self.stack[-1] if self.stack else ""

    def finish_word(self) -> None:
        word, quoted = self.word, self.word_quoted
        self.word, self.word_quoted = "", False
        if not word:
            return
        self.last_token = word
        in_normal = self.top not in ('"', "'", "`", "${") and not self.top.startswith("arith")
        if not in_normal:
            return
        if self.function_name_next:  # `function NAME` is followed by its body
            self.function_name_next = False
            self.command_position = True
            return
        if self.command_position and not quoted:
            if word == "do" and self.top == "loop":
                self.stack[-1] = "do"
            elif word in _OPENERS or word == "do":
                self.stack.append(_OPENERS.get(word, word))
            elif word in _CLOSERS and self.top == _CLOSERS[word]:
                self.stack.pop()
            self.after_for = word == "for"
            self.function_name_next = word == "function"
            self.command_position = word in _COMMAND_LEADERS
            return
        self.after_for = False
        self.command_position = False

    def read_heredoc_word(self) -> None:
        """After ``<<``: record the delimiter (quotes stripped) and skip it."""
        strip_tabs = self.text.startswith("-", self.i)
        if strip_tabs:
            self.i += 1
        match = _HEREDOC_WORD.match(self.text, self.i)
        if match is None:
            return
        delimiter = next(g for g in match.groups() if g is not None)
        self.pending_heredocs.append((delimiter, strip_tabs))
        self.i = match.end()
        self.last_token = "<<"

    def skip_heredoc_bodies(self) -> None:
        """At a newline with heredocs pending: skip each body through its delimiter line."""
        for delimiter, strip_tabs in self.pending_heredocs:
            while self.i < len(self.text):
                end = self.text.find("\n", self.i)
                end = len(self.text) if end < 0 else end
                line = self.text[self.i : end]
                self.i = end + 1
                if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                    break
        self.pending_heredocs = []

    def scan_line_end(self) -> None:
        """Consume the rest of one physical line (through its newline and heredoc bodies).

        One character at a time, read as the innermost open context (``self.top``) says: inside
        single quotes, after a backslash, inside double quotes, inside ``${ }``, or unquoted. Each
        reader returns True when the line (or a continuation) has ended.
        """
        text = self.text
        self.last_token = ""
        while self.i < len(text):
            c = text[self.i]
            nxt = text[self.i + 1] if self.i + 1 < len(text) else ""
            top = self.top
            if top == "'":
                self.i += 1
                if c == "'":
                    self.stack.pop()
                continue
            if c == "\\":
                ended = self._scan_backslash(nxt, top)
            elif top == '"':
                ended = self._scan_double_quoted(c, nxt)
            elif top == "${":
                ended = self._scan_parameter(c, nxt)
            else:
                ended = self._scan_unquoted(c, nxt, top)
            if ended:
                return
        self.finish_word()

    def _scan_backslash(self, nxt: str, top: str) -> bool:
        """A backslash: a continuation before a newline (the line ends, the command goes on), else
        an escaped character kept in the word."""
        if nxt == "\n":
            if top != '"':
                self.finish_word()
            self.i += 2
            self.last_token = "\\"
            return True
        self.word += self.text[self.i : self.i + 2]
        self.i += 2
        return False

    def _scan_double_quoted(self, c: str, nxt: str) -> bool:
        """One character inside double quotes: its end, a ``$( )``, ``${ }`` or backquote opening."""
        self.i += 1
        if c == '"':
            self.stack.pop()
        elif c == "$" and nxt == "(":
            self.stack.append("$(")
            self.i += 1
            self.command_position = True
        elif c == "$" and nxt == "{":
            self.stack.append("${")
            self.i += 1
        elif c == "`":
            self.stack.append("`")
            self.command_position = True
        elif c == "\n":
            self.skip_heredoc_bodies()
            return True
        return False

    def _scan_parameter(self, c: str, nxt: str) -> bool:
        """One character inside ``${ }``: its end, quotes or a nested ``${``."""
        self.i += 1
        if c == "}":
            self.stack.pop()
        elif c in "'\"":
            self.stack.append(c)
        elif c == "$" and nxt == "{":
            self.stack.append("${")
            self.i += 1
        elif c == "\n":
            self.skip_heredoc_bodies()
            return True
        return False

    def _scan_unquoted(self, c: str, nxt: str, top: str) -> bool:
        """Normal lexing: top level, $( ), ( ), ` `, arithmetic, keyword blocks."""
        text = self.text
        if c == "\n":
            self.finish_word()
            self.i += 1
            if self.pending_heredocs:
                self.skip_heredoc_bodies()
            if not top.startswith("arith"):
                self.command_position = True
            return True
        if c in " \t":
            self.finish_word()
            self.i += 1
        elif c == "#" and not self.word:
            end = text.find("\n", self.i)
            self.i = len(text) if end < 0 else end
        elif c in "'\"":
            self.stack.append(c)
            self.word_quoted = True
            self.word += c
            self.i += 1
        elif c == "`":
            self.finish_word()
            if top == "`":
                self.stack.pop()
                self.command_position = False
            else:
                self.stack.append("`")
                self.command_position = True
            self.i += 1
        elif c == "$" and nxt in "({":
            self._open_substitution(nxt)
        elif c in _META:
            self.finish_word()
            self.scan_operator(c, nxt)
        else:
            self.word += c
            self.i += 1
        return False

    def _open_substitution(self, nxt: str) -> None:
        """``$((`` (arithmetic), ``$(`` (a command: its first word is a command) or ``${``."""
        if self.text.startswith("$((", self.i):
            self.stack.append("arith")
            self.i += 3
        elif nxt == "(":
            self.stack.append("$(")
            self.command_position = True
            self.i += 2
        else:
            self.stack.append("${")
            self.i += 2
        self.word += "$"

    def scan_operator(self, c: str, nxt: str) -> None:
        text, top = self.text, self.top
        if top.startswith("arith"):
            if c == ")" and nxt == ")" and top == "arith":
                self.stack.pop()
                self.i += 2
                self.command_position = False
            elif c == "(":
                self.stack.append("arith(")
                self.i += 1
            elif c == ")" and top == "arith(":
                self.stack.pop()
                self.i += 1
            else:
                self.i += 1
            self.last_token = c
            return
        if c == "(":
            if nxt == "(" and (self.command_position or self.after_for):
                self.stack.append("arith")
                self.i += 2
            elif top == "case":  # an optional '(' before a case pattern
                self.i += 1
            else:
                self.stack.append("(")
                self.paren_opened_at = self.i
                self.command_position = True
                self.i += 1
            self.last_token = c
            return
        if c == ")":
            # `NAME ()` declares a function: its body (`{`, `(`) is read as a command.
            empty_parens = top == "(" and not text[self.paren_opened_at + 1 : self.i].strip()
            self.i += 1
            if top in ("(", "$("):
                self.stack.pop()
            self.command_position = top == "case" or empty_parens  # after a pattern comes a command
            self.last_token = c
            return
        if c == "<" and text.startswith("<<", self.i) and not text.startswith("<<<", self.i):
            self.i += 2
            self.read_heredoc_word()
            return
        if c in "<>":
            # a redirection: `>&2` / `<&0` are not control operators; `<<<` is a here-string
            self.i += 3 if text.startswith("<<<", self.i) else 2 if nxt in "&>|" else 1
            self.command_position = False
            self.last_token = c
            return
        operator = c + nxt if nxt in "&|;" and c in "&|;" else c
        self.i += len(operator)
        if operator == "&" and nxt == ">":
            self.i += 1  # &> redirection
            self.last_token = "&>"
            return
        self.command_position = True
        self.after_for = False
        self.last_token = operator

    def line_continues(self) -> bool:
        """Whether the statement started before the newline just consumed goes on."""
        return bool(self.stack) or self.last_token in ("\\", "|", "&&", "||", "|&")


def split_steps(script: str) -> list[Step]:
    """The top-level steps of a shell script, in order (see the module docstring)."""
    lines = script.splitlines(keepends=True)
    starts, offset = [], 0
    for line in lines:
        starts.append(offset)
        offset += len(line)
    scanner = _Scanner(script)
    steps: list[Step] = []
    first: int | None = None
    while scanner.i < len(script):
        line_no = _line_of(starts, scanner.i)
        if first is None:
            blank = not lines[line_no].strip() or lines[line_no].lstrip().startswith("#")
            if blank:
                scanner.i = starts[line_no] + len(lines[line_no])
                continue
            first = line_no
        scanner.scan_line_end()
        if scanner.line_continues() or _FUNCTION_HEADER.match(lines[line_no]):
            continue
        last = _line_of(starts, max(scanner.i - 1, 0))
        steps.append(Step(len(steps), "".join(lines[first : last + 1]).rstrip("\n"), first, last))
        first = None
    if first is not None:
        steps.append(Step(len(steps), "".join(lines[first:]).rstrip("\n"), first, len(lines) - 1))
    return steps


def without_step(script: str, step: Step) -> str:
    """``script`` with ``step``'s lines removed; every other byte is kept."""
    lines = script.splitlines(keepends=True)
    return "".join(lines[: step.first_line] + lines[step.last_line + 1 :])


def _line_of(starts: list[int], offset: int) -> int:
    low, high = 0, len(starts) - 1
    while low < high:
        mid = (low + high + 1) // 2
        if starts[mid] <= offset:
            low = mid
        else:
            high = mid - 1
    return low
