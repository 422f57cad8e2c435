"""The solution splitter: each case names the steps a reader would count."""

from __future__ import annotations

import subprocess
import textwrap

import pytest

from termrl.shellsteps import split_steps, without_step


def steps_of(script: str) -> list[str]:
    return [s.text for s in split_steps(textwrap.dedent(script))]


def test_simple_lines_comments_and_blank_lines():
    script = """\
        #!/bin/bash
        # a comment line is not a step

        set -e
        echo one   # a trailing comment stays with its step
        echo 'two # not a comment'
        """
    assert steps_of(script) == [
        "set -e",
        "echo one   # a trailing comment stays with its step",
        "echo 'two # not a comment'",
    ]


def test_line_continuations_and_trailing_operators():
    script = """\
        grep x a.txt \\
          | sort
        make &&
          make install
        false ||
          true
        cat a |
          wc -l
        echo end
        """
    assert [s.splitlines()[0] for s in steps_of(script)] == [
        "grep x a.txt \\",
        "make &&",
        "false ||",
        "cat a |",
        "echo end",
    ]
    assert len(steps_of(script)[0].splitlines()) == 2


def test_heredocs_quoted_unquoted_dash_and_two_on_one_line():
    script = """\
        cat > /app/run.sh <<'EOF'
        if true; then
        echo "unbalanced ( quote '
        EOF
        cat <<-END > /app/b
        \tdone
        \tEND
        paste <(cat <<A
        a
        A
        ) <(cat <<"B"
        b
        B
        )
        tr a b <<< "here-string, not a heredoc"
        echo after
        """.replace("\\t", "\t")
    steps = steps_of(script)
    assert len(steps) == 5, steps
    assert steps[0].startswith("cat > /app/run.sh") and steps[0].endswith("EOF")
    assert steps[1].endswith("\tEND")
    assert steps[2].startswith("paste") and steps[2].endswith(")")
    assert steps[3].startswith("tr a b")
    assert steps[4] == "echo after"


def test_compound_commands_are_one_step_each():
    script = """\
        if [ -f /x ]; then
          echo fi
        elif true; then
          :
        else
          echo done
        fi
        for f in *.log; do
          gzip "$f"
        done
        while read -r line
        do
          echo "$line"
        done < input.txt
        until false; do break; done
        case "$1" in
          a|b) echo ab ;;
          (c) echo c;;
          *) if true; then echo x; fi ;;
        esac
        for ((i = 0; i < 3; i++)); do echo $((i << 1)); done
        { echo grouped; echo too; } > out
        (
          cd /tmp && touch sub
        )
        echo last
        """
    steps = steps_of(script)
    firsts = [s.splitlines()[0] for s in steps]
    assert firsts == [
        "if [ -f /x ]; then",
        "for f in *.log; do",
        "while read -r line",
        "until false; do break; done",
        'case "$1" in',
        "for ((i = 0; i < 3; i++)); do echo $((i << 1)); done",
        "{ echo grouped; echo too; } > out",
        "(",
        "echo last",
    ], steps
    assert steps[2].endswith("done < input.txt")
    assert steps[4].endswith("esac")


def test_functions_in_all_three_forms():
    script = """\
        greet() {
          echo "hi $1"
        }
        function shout {
          echo "$1!"
        }
        function quiet()
        {
          :
        }
        greet you
        """
    assert [s.splitlines()[0] for s in steps_of(script)] == [
        "greet() {",
        "function shout {",
        "function quiet()",
        "greet you",
    ]


def test_quotes_and_substitutions_spanning_lines():
    script = """\
        python3 -c 'import os
        print(os.getcwd())'
        x="$(printf '%s\\n' a b |
          sort)"
        y=`date
        `
        msg="multi
        line ${HOME:-"/root"}"
        echo "$x" "$y" "$msg"
        """
    firsts = [s.splitlines()[0] for s in steps_of(script)]
    assert firsts == [
        "python3 -c 'import os",
        "x=\"$(printf '%s\\n' a b |",
        "y=`date",
        'msg="multi',
        'echo "$x" "$y" "$msg"',
    ]


def test_reserved_words_as_arguments_do_not_open_or_close_blocks():
    script = """\
        echo if then do case { done fi esac
        echo "for" while
        ls $# ${#x}
        echo ok
        """
    assert len(steps_of(script)) == 4


def test_unbalanced_script_ends_in_one_last_step():
    script = "echo a\nif true; then\necho b\n"
    assert steps_of(script) == ["echo a", "if true; then\necho b"]


def test_empty_and_comment_only_scripts_have_no_steps():
    assert split_steps("") == []
    assert split_steps("#!/bin/sh\n# nothing\n\n") == []


def test_without_step_removes_exactly_its_lines():
    script = "#!/bin/bash\nset -e\ncat > f <<EOF\nx\nEOF\n# keep\necho done\n"
    steps = split_steps(script)
    assert [s.first_line for s in steps] == [1, 2, 6]
    assert [s.last_line for s in steps] == [1, 4, 6]
    assert without_step(script, steps[1]) == "#!/bin/bash\nset -e\n# keep\necho done\n"
    assert without_step(script, steps[2]) == "#!/bin/bash\nset -e\ncat > f <<EOF\nx\nEOF\n# keep\n"


@pytest.mark.parametrize("index", range(6))
def test_every_ablated_script_is_still_valid_bash(index):
    """bash -n agrees: removing any one step never leaves a broken script."""
    script = textwrap.dedent("""\
        set -eu
        f() {
          echo "$1"
        }
        for i in 1 2; do
          f "$i" | cat
        done
        cat > /dev/null <<'EOF'
        fi done esac
        EOF
        case x in x) f x ;; esac
        f end
        """)
    steps = split_steps(script)
    assert len(steps) == 6
    ablated = without_step(script, steps[index])
    subprocess.run(["bash", "-n"], input=ablated, text=True, check=True)
