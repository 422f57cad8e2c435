"""scan: the uv installer line and the pins of uv add / uv pip install / pip install / uvx --with."""

from __future__ import annotations

from termrl.artifacts.tasks import TaskFile
from termrl.tbcompat.scan import install_commands, scan_scripts, uv_installer_version

RUN_TESTS = b"""#!/bin/bash
apt-get update
apt-get install -y curl
curl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh
source $HOME/.local/bin/env
if [ "$PWD" = "/" ]; then
    echo "Error: No working directory set."
    exit 1
fi
uv init
uv add pytest==8.4.1
uv run pytest $TEST_DIR/test_outputs.py -rA
"""


def sh(path: str, text: str | bytes) -> TaskFile:
    return TaskFile(path, text.encode() if isinstance(text, str) else text, 0o755)


def test_the_terminal_bench_boilerplate_needs_uv_0_7_13_and_pytest():
    result = scan_scripts(
        [sh("run-tests.sh", RUN_TESTS), TaskFile("test_outputs.py", b"# pip install nothing==1\n")]
    )
    assert result.uv_version == "0.7.13"
    assert result.uses_uv
    assert result.groups == [["pytest==8.4.1"]]
    assert result.found_in == ["run-tests.sh"]  # the .py file is not a script
    assert result.problems == []


def test_installer_urls_with_and_without_a_version():
    assert uv_installer_version("curl -LsSf https://astral.sh/uv/install.sh | sh") == (True, None)
    assert uv_installer_version("wget -qO- https://astral.sh/uv/0.9.5/install.sh | sh") == (
        True,
        "0.9.5",
    )
    github = "curl -L https://github.com/astral-sh/uv/releases/download/0.6.1/uv-installer.sh | sh"
    assert uv_installer_version(github) == (True, "0.6.1")
    assert uv_installer_version("pip install uv") == (False, None)


def test_each_install_command_is_its_own_group_and_options_are_skipped():
    setup = """
uv venv .tbench-testing
source .tbench-testing/bin/activate
uv pip install pytest==8.2.0 "numpy>=2,<3" \\
    requests==2.32.3
pip install -i https://mirror.invalid/simple --no-cache-dir requests==2.31.0  # an older pin on purpose
sudo pip3 install --upgrade pip
VAR=1 python3 -m pip install -q 'pandas==2.2.3'
uv add --dev --group test pytest-timeout==2.3.1
# uv add commented-out==1.0
echo "uv add quoted==1.0"
"""
    result = scan_scripts([sh("tests/setup.sh", setup)])
    assert result.groups == [
        ["pytest==8.2.0", "numpy>=2,<3", "requests==2.32.3"],
        ["requests==2.31.0"],  # conflicts with the first group: resolved on its own
        ["pip"],
        ["pandas==2.2.3"],
        ["pytest-timeout==2.3.1"],  # --group's value "test" is not a requirement
    ]
    assert result.uses_uv and result.uv_version is None  # uv used, no installer line


def test_uvx_with_pins_and_the_tool_itself():
    harbor = """
curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh
source $HOME/.local/bin/env
uvx \\
  -p 3.13 \\
  -w pytest==8.4.1 \\
  -w pytest-json-ctrf==0.3.5 \\
  pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA
uv run --with pandas==2.2.3,pyarrow==18.0.0 python -c 'import pandas'
uvx ruff@0.6.9 check .
"""
    result = scan_scripts([sh("test.sh", harbor)])
    assert result.uv_version == "0.9.5"
    assert result.groups == [
        ["pytest==8.4.1", "pytest-json-ctrf==0.3.5", "pytest"],
        [
            "pandas==2.2.3",
            "pyarrow==18.0.0",
        ],  # uv run: the command after the options is not installed
        ["ruff==0.6.9"],
    ]


def test_requirement_files_among_the_test_files_are_followed():
    files = [
        sh(
            "run-tests.sh",
            "pip install -r $TEST_DIR/requirements.txt\npip install -r /elsewhere/reqs.txt\n",
        ),
        TaskFile(
            "requirements.txt",
            b"# test deps\npytest==8.3.3\n\nhypothesis==6.112.0  # property tests\n",
        ),
    ]
    result = scan_scripts(files)
    assert result.groups == [["pytest==8.3.3", "hypothesis==6.112.0"]]
    assert result.problems == [
        "run-tests.sh: requirements file '/elsewhere/reqs.txt' is not among the task's test files"
    ]


def test_what_cannot_be_read_statically_is_reported_not_guessed():
    result = scan_scripts(
        [
            sh(
                "install.sh",
                "pip install $PKG\npip install .\npip install ./dist/x-1.0-py3-none-any.whl\n",
            )
        ]
    )
    assert result.groups == []
    assert len(result.problems) == 3
    assert all(p.startswith("install.sh: cannot prepare") for p in result.problems)


def test_a_script_without_uv_or_installs_needs_nothing():
    result = scan_scripts(
        [sh("run-tests.sh", 'python3 -m pytest "$TEST_DIR/test_outputs.py" -rA\n')]
    )
    assert (result.uses_uv, result.groups, result.found_in) == (False, [], [])


def test_install_commands_split_on_shell_operators():
    assert install_commands("cd /app && uv add a==1; pip install b==2 || true") == [
        ("uv-add", ["a==1"]),
        ("pip", ["b==2"]),
    ]


def test_redirections_are_not_requirements():
    script = """
pip install pytest==8.4.1 2>/dev/null
uv pip install requests==2.32.3 &>/dev/null || true
uv add numpy==2.1.0 >| /tmp/log 2>&1
pip3 install rich==13.9.4 2>&1 | tee /tmp/pip.log
uvx --with pytest-json-ctrf==0.3.5 pytest==8.4.1 </dev/null >>/tmp/out
"""
    assert scan_scripts([sh("tests/test.sh", script)]).groups == [
        ["pytest==8.4.1"],
        ["requests==2.32.3"],
        ["numpy==2.1.0"],
        ["rich==13.9.4"],
        ["pytest-json-ctrf==0.3.5", "pytest==8.4.1"],
    ]
    assert scan_scripts([sh("tests/test.sh", script)]).problems == []


HEREDOCS = (
    "cat > /tmp/notes.txt <<END\n"
    "pip install not-a-command==1.0\n"
    "END\n"
    "cat <<-'PY' > /tmp/x.py\n"
    "\tuv add also-not==2.0\n"
    "\tPY\n"
    "pip install after-heredoc==3.0\n"
)


def test_here_document_bodies_are_data_not_commands():
    result = scan_scripts([sh("tests/test.sh", HEREDOCS)])
    assert result.groups == [["after-heredoc==3.0"]]
    assert result.problems == []


def test_command_substitution_is_one_unknown_word():
    result = scan_scripts([sh("tests/test.sh", "pip install $(cat reqs.txt) pytest==8.4.1\n")])
    assert result.groups == [["pytest==8.4.1"]]
    assert result.problems == [
        "tests/test.sh: cannot prepare '$(cat reqs.txt)' offline (not a plain requirement)"
    ]


def test_the_interpreters_uv_is_asked_for():
    script = """
uvx --python 3.12 --with pytest==8.4.1 pytest
uv venv -p 3.11 .venv
uv run --python=3.12 pytest
uv pip install --python 3.13 x==1
"""
    assert scan_scripts([sh("tests/test.sh", script)]).pythons == ["3.12", "3.11", "3.13"]
