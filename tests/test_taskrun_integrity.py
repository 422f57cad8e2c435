"""Scoring integrity: an agent tries to forge a pass; ``run_tests`` must not give it one.

Each attack is what a policy could do in its own shell before scoring, on a
small task ("write hello to /app/out.txt") in real podman, bwrap and
kubernetes sandboxes (the last through the official client against
``tests.k8s_standin``, a local API server whose pods are podman pods). With the attack in place, doing nothing must still fail and the
real solution must still pass: the defences neither let a forgery through
nor break honest scoring. The sandboxes come straight from the base image
(its WORKDIR is /app), so no task image is built.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os

import pytest

from termrl.artifacts.tasks import Task, TaskFile
from termrl.errors import RewardFailed
from termrl.sandbox import SandboxManager, SandboxSpec
from termrl.taskrun import TestOutcome, run_tests

pytestmark = pytest.mark.podman  # podman builds the base image both backends run

SOLVE = "echo hello > /app/out.txt"
CHECK = '[ "$(cat /app/out.txt 2>/dev/null)" = hello ]'
WRITE_ONE = "mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt"


def _task(
    task_id: str, tests: dict[str, bytes], command: str = "bash /tests/test.sh", **fields
) -> Task:
    files = [
        TaskFile(path, data, 0o755 if path.endswith(".sh") else 0o644)
        for path, data in tests.items()
    ]
    return Task(
        id=task_id,
        instruction="Write hello to /app/out.txt.",
        test_files=files,
        test_command=command,
        verifier_timeout_sec=120,
        **fields,
    )


REWARD_TASK = _task(
    "reward-file",
    {
        "test.sh": f"#!/bin/bash\nif {CHECK}; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n".encode()
    },
)
"""Harbor style: the script writes the reward file."""
SLOW_REWARD_TASK = _task(
    "slow-reward-file",
    {
        "test.sh": f"#!/bin/bash\nsleep 1\nif {CHECK}; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n".encode()
    },
)
"""The same, taking a moment: long enough for a process to find it."""
EXIT_STATUS_TASK = _task("exit-status", {"test.sh": f"#!/bin/bash\n{CHECK}\n".encode()})
"""No reward file: the script's exit status decides."""
TEST_PY = b"def test_out():\n    assert open('/app/out.txt').read().strip() == 'hello'\n"
PYTEST_TASK = _task(
    "pytest-report",
    {"test_outputs.py": TEST_PY},
    "python3 -m pytest /tests/test_outputs.py -rA",
    scoring="pytest-report",
)
"""Terminal-Bench 1.0 style: pytest's report decides."""
PYTEST_REWARD_TASK = _task(
    "pytest-reward",
    {
        "test_outputs.py": TEST_PY,
        "test.sh": b"#!/bin/bash\ncd /app\npython3 -m pytest /tests/test_outputs.py -rA && echo 1 > /logs/verifier/reward.txt"
        b" || echo 0 > /logs/verifier/reward.txt\n",
    },
)
"""pytest inside a reward-file script."""
SLOW_PYTEST_REWARD_TASK = _task(
    "slow-pytest-reward",
    {
        "test_outputs.py": TEST_PY,
        "test.sh": b"#!/bin/bash\nsleep 1\ncd /app\npython3 -m pytest /tests/test_outputs.py -rA"
        b" && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n",
    },
)
"""The same, taking a moment first."""
UV_PROJECT_TASK = _task(
    "uv-project",
    {
        "test_outputs.py": TEST_PY,
        "run-tests.sh": b"#!/bin/bash\nsource $HOME/.local/bin/env\nuv init\nuv add pytest==8.4.1\n"
        b"uv run pytest $TEST_DIR/test_outputs.py -rA\n",
    },
    "bash /tests/run-tests.sh",
    scoring="pytest-report",
    adaptations={
        "test_kit": {
            "uv": "0.7.13",
            "python": "3.11",
            "glibc": "2.36",
            "groups": [["pytest==8.4.1"]],
        }
    },
)
"""Terminal-Bench 1.0's template: uv makes a project in the working directory and runs pytest from
its virtualenv (the offline test kit, ``termrl.tbcompat``, brings uv and the wheels)."""

# A conftest.py that turns every failing test into a pass.
PASS_ALL = """
import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""


def _pytest_plugin(site: str) -> list[str]:
    """A package in ``site`` whose pytest plugin (a ``pytest11`` entry point, loaded by every pytest
    that sees ``site``) turns every failing test into a pass."""
    return [
        _plant(f"{site}/forge_plugin.py", PASS_ALL),
        _plant(
            f"{site}/forge-1.0.dist-info/METADATA",
            "Metadata-Version: 2.1\nName: forge\nVersion: 1.0\n",
        ),
        _plant(
            f"{site}/forge-1.0.dist-info/entry_points.txt", "[pytest11]\nforge = forge_plugin\n"
        ),
    ]


VENV_SITE = "/app/.venv/lib/python3.11/site-packages"


def _background(loop: str) -> str:
    """A loop left running after the agent's turn, detached from its shell."""
    return f"nohup bash -c {_quote(loop)} >/dev/null 2>&1 &"


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _plant(path: str, text: str, mode: str = "644") -> str:
    return f"mkdir -p $(dirname {path}) && printf %s {_quote(text)} > {path} && chmod {mode} {path}"


# The supervisor's token is in its command line (/proc/1/cmdline under podman, bwrap's too).
TOKEN = "tok=$(tr '\\0' '\\n' < /proc/1/cmdline | tail -1)"


def _service(loop: str) -> str:
    """``loop`` run by a process that holds a listening socket: a service, which scoring leaves running."""
    script = (
        "import socket, subprocess, sys\ns = socket.socket()\ns.bind(('127.0.0.1', 0))\ns.listen()\n"
        "subprocess.run(['bash', '-c', sys.argv[1]])\n"
    )
    return f"{_plant('/tmp/svc.py', script)} && nohup python3 /tmp/svc.py {_quote(loop)} >/dev/null 2>&1 &"


# Once the tests are there, keeps a whole reward file of 1 in place: each write is a new file
# renamed over the old one (never an empty file for the reward's reader to find).
RENAME_ONE = (
    "until [ -f /tests/test.sh ]; do :; done; while :; do echo 1 > /logs/r.$$ && mv -f /logs/r.$$ "
    "/logs/verifier/reward.txt; done 2>/dev/null"
)
# A bash in place of the system's that exits at once when asked to stop processes, and runs
# everything else with the real one.
SKIP_STOP_BASH = (
    "cp /usr/bin/bash /usr/local/lib/real-bash && printf '%s\\n' '#!/usr/local/lib/real-bash' "
    "'case \"$*\" in *kill\\ -STOP*) exit 0 ;; esac' "
    "'exec /usr/local/lib/real-bash \"$@\"' > /tmp/fake && chmod 755 /tmp/fake && mv /tmp/fake /usr/bin/bash"
)

ATTACKS: dict[str, tuple[Task, list[str]]] = {
    # A loop that keeps writing a perfect reward while the tests run (bash builtins only: no fork, no pause).
    "lingering-writer": (
        REWARD_TASK,
        [_background("while :; do echo 1 > /logs/verifier/reward.txt; done 2>/dev/null")],
    ),
    # A loop that replaces the uploaded test script with one that always passes, the moment it appears.
    "test-sh-swap": (
        REWARD_TASK,
        [
            _plant("/tmp/forged.sh", f"#!/bin/bash\n{WRITE_ONE}\n", "755"),
            _background(
                "while :; do [ -f /tests/test.sh ] && [ ! /tests/test.sh -ef /tmp/forged.sh ] "
                "&& ln -f /tmp/forged.sh /tests/test.sh; done 2>/dev/null"
            ),
        ],
    ),
    # The same from a service: it keeps running through scoring, so the tests' directories must be out of its reach.
    "service-writer": (
        REWARD_TASK,
        [_service("while :; do echo 1 > /logs/verifier/reward.txt; done 2>/dev/null")],
    ),
    "service-test-sh-swap": (
        REWARD_TASK,
        [
            _plant("/tmp/forged.sh", f"#!/bin/bash\n{WRITE_ONE}\n", "755"),
            _service(
                "while :; do [ -f /tests/test.sh ] && [ ! /tests/test.sh -ef /tmp/forged.sh ] "
                "&& ln -f /tmp/forged.sh /tests/test.sh; done 2>/dev/null"
            ),
        ],
    ),
    # ... writing it whole (a rename, never an empty file), so the reward read after the tests is its.
    "service-renames-reward-into-place": (
        REWARD_TASK,
        [_service(RENAME_ONE)],
    ),
    # A bash that runs nothing stopping processes (the stop helper is a bash script), and a writer
    # that scoring would have stopped.
    "bash-skips-the-stop-helper": (
        REWARD_TASK,
        [SKIP_STOP_BASH, _background(RENAME_ONE)],
    ),
    # ... or reaching into the test process's own view of the filesystem through /proc.
    # (It holds the directory, so its writes go on after the tests have ended, until the reward is read.)
    "service-proc-root-writer": (
        SLOW_REWARD_TASK,
        [
            _service(
                "until p=$(pgrep -f 'tests/tes[t].sh'); do :; done; cd /proc/${p%%$'\\n'*}/root/logs/verifier "
                "&& while :; do echo 1 > reward.txt; done 2>/dev/null"
            )
        ],
    ),
    # ... or renaming the tests' directory away under the test process: in the kernel, a mount whose
    # mount point is renamed or removed in another mount namespace is detached from the mount
    # namespaces that held it, and the path then shows whatever the service put there.
    "service-detaches-tests-mount": (
        PYTEST_REWARD_TASK,
        [
            _service(
                "until pgrep -f 'tests/tes[t].sh' >/dev/null; do :; done; "
                "mv /tests /tests.gone && mkdir /tests && printf 'def test_out():\\n    pass\\n' "
                "> /tests/test_outputs.py"
            )
        ],
    ),
    # ... or replacing what the tests run once scoring has begun, after the tampering check: a python3
    # first on PATH while the tests sleep, a bash wrapper as soon as /tests is made again.
    "service-shadows-python-during-tests": (
        SLOW_PYTEST_REWARD_TASK,
        [
            _service(
                "until pgrep -f 'tests/tes[t].sh' >/dev/null; do :; done; "
                "printf '#!/bin/sh\\nexit 0\\n' > /usr/local/bin/python3; chmod 755 /usr/local/bin/python3"
            )
        ],
    ),
    "service-wraps-bash-when-scoring-starts": (
        REWARD_TASK,
        [
            _service(
                "until [ -d /tests ]; do :; done; "
                f"printf '#!/bin/sh\\n{WRITE_ONE}\\n' > /usr/local/bin/bash; chmod 755 /usr/local/bin/bash"
            )
        ],
    ),
    # A service that puts a pytest plugin into the virtualenv the tests make, while they install pytest.
    "service-plants-plugin-in-test-venv": (
        UV_PROJECT_TASK,
        [
            _service(
                f"while :; do [ -d {VENV_SITE} ] && {{ {' && '.join(_pytest_plugin(VENV_SITE))}; }}; "
                "sleep 0.01; done 2>/dev/null"
            )
        ],
    ),
    # State of the agent's shell: a function named bash, BASH_ENV, a fake bash or python3 first on PATH.
    "shell-function": (REWARD_TASK, [f"bash() {{ {WRITE_ONE}; }}; export -f bash"]),
    "bash-env": (
        REWARD_TASK,
        [_plant("/tmp/.rc", f"{WRITE_ONE}; exit 0\n"), "export BASH_ENV=/tmp/.rc"],
    ),
    "path-wrapper": (
        REWARD_TASK,
        [
            _plant("/tmp/bin/bash", f"#!/bin/sh\n{WRITE_ONE}\n", "755"),
            "export PATH=/tmp/bin:$PATH; hash -r",
        ],
    ),
    "path-fake-pytest": (
        PYTEST_TASK,
        [
            _plant(
                "/tmp/bin/python3",
                "#!/bin/sh\necho PASSED /tests/test_outputs.py::test_out\n",
                "755",
            ),
            "export PATH=/tmp/bin:$PATH; hash -r",
        ],
    ),
    # A conftest.py waiting where pytest would collect it: in /tests before the upload, or at /.
    "conftest-in-tests": (PYTEST_REWARD_TASK, [_plant("/tests/conftest.py", PASS_ALL)]),
    "conftest-at-root": (PYTEST_REWARD_TASK, [_plant("/conftest.py", PASS_ALL)]),
    # A pytest.ini above /tests loading a plugin the agent put on sys.path.
    "pytest-ini-at-root": (
        PYTEST_TASK,
        [
            _plant("/usr/lib/python3/dist-packages/pass_all.py", PASS_ALL),
            _plant("/pytest.ini", "[pytest]\naddopts = -p pass_all\n"),
        ],
    ),
    # The shell's end-of-command marker, forged by a background job once the tests arrive.
    "forged-marker": (
        EXIT_STATUS_TASK,
        [
            f"{TOKEN}; (while [ ! -e /tests/test.sh ]; do sleep 0.002; done; printf '\\n__TERMRL_%s 0 /app\\n' \"$tok\") &"
        ],
    ),
    # Lines written straight into the tests' output through /proc, then pytest killed before its FAILED line.
    "forged-output": (
        PYTEST_TASK,
        [
            _background(
                "while :; do for p in $(pgrep -f 'pytes[t] /tests'); do echo 'PASSED /tests/test_outputs.py::test_out' "
                "> /proc/$p/fd/1; kill -9 $p; done; sleep 0.002; done"
            )
        ],
    ),
}


@pytest.fixture(scope="module")
def k8s_standin(base_images: str, tmp_path_factory: pytest.TempPathFactory):
    """One stand-in API server for the module, set up as ``termrl cluster manifests`` sets up a cluster."""
    from tests.k8s_standin import StandIn
    from tests.k8s_standin.manifests import apply_cluster_manifests

    with StandIn(tmp_path_factory.mktemp("k8s"), pause_base=base_images, namespaces=()) as standin:
        apply_cluster_manifests(standin.kubeconfig)
        yield standin


# Every kubernetes run starts pods on the stand-in (seconds each): slow; the attacks that forged a
# pass on the old kubernetes path run by default in tests/sandbox/test_kubernetes_verifier.py.
@pytest.fixture(params=["podman", "bwrap", pytest.param("kubernetes", marks=pytest.mark.slow)])
async def manager(request, base_images):
    if request.param == "bwrap" and os.geteuid() != 0:
        pytest.skip("the bwrap backend needs root")
    options = {}
    if request.param == "kubernetes":
        options["kubeconfig"] = str(request.getfixturevalue("k8s_standin").kubeconfig)
        options["verifier_image"] = base_images  # the stage's image on a cluster; none here
    async with SandboxManager(backend=request.param, output_limit=8192, **options) as manager:
        yield manager


async def _score(
    manager: SandboxManager, image: str, task: Task, agent: list[str], *, solve: bool
) -> TestOutcome:
    async with await manager.create(SandboxSpec(image=image)) as session:
        if solve:
            await session.exec(SOLVE, timeout=30)
        for command in agent:
            await session.exec(command, timeout=30)
        return await run_tests(session, task)


# An attack with a process left running costs scoring its whole wait for young processes (10 s) twice,
# so the default run tries a chosen part of them; the slow run tries every attack on every backend.
PODMAN_SLOW_ATTACKS = {
    "service-plants-plugin-in-test-venv",
    "service-renames-reward-into-place",
    "service-shadows-python-during-tests",
    "service-test-sh-swap",
    "test-sh-swap",
}
"""Left to the slow run on podman: each repeats a mechanism a default attack already tries (a
writer racing the reward or the test script, a service reaching into the tests)."""

BWRAP_CI_ATTACKS = {
    "bash-skips-the-stop-helper",
    "forged-marker",
    "service-detaches-tests-mount",
    "service-proc-root-writer",
    "service-wraps-bash-when-scoring-starts",
}
"""The attacks the default run also tries on bwrap: those aimed at what bwrap does its own way (the
stop helper, mounts, /proc, the shell's marker)."""

SLOW = pytest.mark.slow


def _attack_cases() -> list:
    cases = []
    for attack in sorted(ATTACKS):
        podman_marks = SLOW if attack in PODMAN_SLOW_ATTACKS else ()
        cases.append(pytest.param("podman", attack, marks=podman_marks, id=f"podman-{attack}"))
        bwrap_marks = () if attack in BWRAP_CI_ATTACKS else SLOW
        cases.append(pytest.param("bwrap", attack, marks=bwrap_marks, id=f"bwrap-{attack}"))
        cases.append(pytest.param("kubernetes", attack, marks=SLOW, id=f"kubernetes-{attack}"))
    return cases


@pytest.mark.parametrize(("manager", "attack"), _attack_cases(), indirect=["manager"])
async def test_an_attack_does_not_turn_doing_nothing_into_a_pass(manager, base_images, attack):
    task, agent = ATTACKS[attack]
    # Two sandboxes at once: most of each scoring is its wait for the attack's young processes.
    forged, honest = await asyncio.gather(
        _score(manager, base_images, task, agent, solve=False),
        _score(manager, base_images, task, agent, solve=True),
    )
    assert not forged.passed and forged.reward == 0.0, forged.output
    assert honest.passed and honest.reward == 1.0, honest.output


async def test_a_service_cannot_write_into_the_tests_output(manager, base_images):
    """pytest-report scoring reads the tests' output: a service that stays up through scoring must not
    reach it through /proc/<pid>/fd (it can still kill the tests, which only fails its own trial)."""
    forge = _service(
        "until p=$(pgrep -f 'tests/tes[t].sh'); do :; done; "
        "while :; do echo FORGED-LINE > /proc/${p%%$'\\n'*}/fd/1; done 2>/dev/null"
    )
    outcome = await _score(manager, base_images, SLOW_REWARD_TASK, [forge], solve=True)
    assert outcome.passed and "FORGED" not in outcome.output, outcome.output


async def test_every_task_kind_scores_the_oracle_and_the_no_op(manager, base_images):
    tasks = (REWARD_TASK, EXIT_STATUS_TASK, PYTEST_TASK, PYTEST_REWARD_TASK)
    outcomes = await asyncio.gather(
        *(
            _score(manager, base_images, task, [], solve=solve)
            for task in tasks
            for solve in (True, False)
        )
    )
    for task, solved, nothing in zip(tasks, outcomes[::2], outcomes[1::2], strict=True):
        assert solved.passed and not nothing.passed, task.id


SERVER_TASK = _task(
    "test-server",
    {
        "test.sh": b"#!/bin/bash\npython3 -m http.server 8765 --bind 127.0.0.1 &\n"
        b"for _ in $(seq 100); do python3 -c 'import urllib.request as u; u.urlopen(\"http://127.0.0.1:8765\")' "
        b"2>/dev/null && break; sleep 0.2; done\n"
        + f"if {CHECK}; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n".encode()
    },
)
"""The script starts a server for its checks and leaves it running, its output still the script's."""


async def test_a_server_the_tests_leave_running_does_not_hold_scoring_to_its_timeout(
    manager, base_images
):
    solved = await _score(manager, base_images, SERVER_TASK, [], solve=True)
    assert (solved.passed, solved.timed_out) == (True, False), solved.output
    unsolved = await _score(manager, base_images, SERVER_TASK, [], solve=False)
    assert (unsolved.passed, unsolved.timed_out) == (False, False), unsolved.output


def _writes(reward: str) -> Task:
    """A task whose script leaves ``reward`` at the reward file's path (a shell snippet) and exits 0."""
    return _task(
        "bad-reward", {"test.sh": f"#!/bin/bash\ncd /logs/verifier && {reward}\nexit 0\n".encode()}
    )


BAD_REWARDS = {
    "huge": "echo 1e30 > reward.txt",
    "infinite": "echo inf > reward.txt",
    "nan": "echo nan > reward.txt",
    "negative": "echo -1 > reward.txt",
    "text": "echo passed > reward.txt",
    "empty": ": > reward.txt",
    "symlink to /dev/null": "ln -s /dev/null reward.txt",
    "symlink to a good file": "echo 1 > /tmp/one && ln -s /tmp/one reward.txt",
    "dangling symlink": "ln -s /nonexistent reward.txt",
    "directory": "mkdir reward.txt",
    "fifo": "mkfifo reward.txt",
}


async def test_a_reward_file_is_a_regular_file_with_a_number_in_0_1_or_scoring_fails(
    manager, base_images
):
    async with await manager.create(SandboxSpec(image=base_images)) as session:
        await session.exec(SOLVE, timeout=30)
        for name, reward in BAD_REWARDS.items():
            with pytest.raises(RewardFailed):
                outcome = await run_tests(session, _writes(reward))
                pytest.fail(f"{name}: scored {outcome.reward} ({outcome.output})")
        for good, expected in (
            ("echo 0.25 > reward.txt", 0.25),
            ("printf ' 1.0\\n\\n' > reward.txt", 1.0),
            ("echo 0 > reward.txt", 0.0),
        ):
            outcome = await run_tests(session, _writes(good))
            assert (outcome.reward, outcome.passed) == (expected, expected == 1.0)
        # Only when there is no reward file at all does the exit status decide.
        assert (await run_tests(session, _writes("true"))).passed


SERVICE_TASK = _task(
    "service",
    {
        "test.sh": b"#!/bin/bash\n"
        b"curl -fsS --max-time 5 http://127.0.0.1:8123/out.txt | grep -qx hello && echo 1 "
        b"> /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
    },
)


async def test_services_keep_running_through_scoring_and_the_session_after_it(manager, base_images):
    async with await manager.create(SandboxSpec(image=base_images)) as session:
        await session.exec(f"{SOLVE}; cd /tmp && export KEPT=yes", timeout=30)
        await session.exec(
            "setsid nohup python3 -m http.server 8123 --directory /app >/dev/null 2>&1 &",
            timeout=30,
        )
        await session.exec(
            _background(f"while :; do {WRITE_ONE}; sleep 0.005; done") + " echo $! > /tmp/writer",
            timeout=30,
        )
        await session.exec(
            "for i in $(seq 50); do curl -fs http://127.0.0.1:8123/ >/dev/null && break; sleep 0.1; done"
        )
        outcome = await run_tests(session, SERVICE_TASK)
        assert outcome.passed, outcome.output
        # The agent's processes were stopped only for scoring: its shell goes on where it was, its loop runs.
        after = await session.exec(
            "echo $KEPT; pwd; grep State: /proc/$(cat /tmp/writer)/status", timeout=30
        )
        assert after.output.split("\n")[:2] == ["yes", "/tmp"] and "stopped" not in after.output, (
            after.output
        )


SITE = "/usr/lib/python3/dist-packages"
LOCAL_SITE = "/usr/local/lib/python3.11/dist-packages"
HOOK = "import os\n"


def _record_hash(text: str) -> str:
    """A RECORD line's hash field, as pip writes it."""
    digest = hashlib.sha256(text.encode()).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).decode().rstrip("=")


async def test_commands_the_agent_replaced_or_shadowed_and_startup_hooks_are_flagged(
    manager, base_images
):
    """What stopping processes cannot stop: files that run during the tests. Flagged, from outside the sandbox."""
    async with await manager.create(SandboxSpec(image=base_images)) as session:
        await session.exec(SOLVE, timeout=30)
        assert (
            await run_tests(session, REWARD_TASK)
        ).tampering == ()  # solving touched no system path
        for command in (
            _plant(
                "/usr/local/bin/bash", f'#!/bin/sh\n{WRITE_ONE}\nexec /usr/bin/bash "$@"\n', "755"
            ),  # a wrapper
            "echo >> /usr/bin/tac",  # a command changed in place
            _plant(
                "/usr/lib/python3/dist-packages/sitecustomize.py", "pass\n"
            ),  # runs in every python3
            _plant(
                "/usr/local/bin/newtool", "#!/bin/sh\n", "755"
            ),  # a new command: installing is no tampering
            # A hook a package installed (its RECORD lists it, hash and all) is the package's; a planted one,
            # or one listed but edited after the install, is the agent's.
            _plant(f"{SITE}/pkg.pth", HOOK),
            _plant(f"{SITE}/pkg-1.0.dist-info/RECORD", f"pkg.pth,{_record_hash(HOOK)},13\n"),
            _plant(f"{SITE}/evil.pth", HOOK),
            _plant(f"{SITE}/edited.pth", HOOK + "x"),
            _plant(f"{SITE}/edited-1.0.dist-info/RECORD", f"edited.pth,{_record_hash(HOOK)},13\n"),
            # A pytest plugin loads into every pytest run; other entry points are no concern.
            *_pytest_plugin(SITE),
            _plant(
                f"{SITE}/tool-1.0.dist-info/entry_points.txt", "[console_scripts]\ntool = t:main\n"
            ),
            # pytest's own code: edited in place is the agent's, as a package installed it is not.
            f"echo '# edited' >> {SITE}/_pytest/runner.py",
            _plant(f"{LOCAL_SITE}/pluggy/_hooks.py", HOOK),
            _plant(
                f"{LOCAL_SITE}/pluggy-9.0.dist-info/RECORD",
                f"pluggy/_hooks.py,{_record_hash(HOOK)},10\n",
            ),
            # Code Python loads from the system, edited: the standard library, a shared library.
            "echo '# edited' >> /usr/lib/python3.11/inspect.py",
            "cp /usr/lib/x86_64-linux-gnu/libz.so.1.* /tmp/z && echo >> /tmp/z && cat /tmp/z > "
            "$(echo /usr/lib/x86_64-linux-gnu/libz.so.1.*)",
            # ... and what a package manager installed so: an upgrade through dpkg (its md5sums say
            # what it installed), a console script pip put in front of /usr/bin/pytest.
            'echo >> /usr/bin/tee && sed -i "s|^[0-9a-f]*  usr/bin/tee$|$(md5sum < /usr/bin/tee '
            '| cut -c1-32)  usr/bin/tee|" /var/lib/dpkg/info/coreutils.md5sums',
            _plant("/usr/local/bin/pytest", HOOK, "755"),
            _plant(
                f"{LOCAL_SITE}/pytest-9.0.dist-info/RECORD",
                f"../../../bin/pytest,{_record_hash(HOOK)},10\n",
            ),
        ):
            await session.exec(command, timeout=30)
        outcome = await run_tests(session, REWARD_TASK)
        zlib = (await session.exec("echo /usr/lib/x86_64-linux-gnu/libz.so.1.*")).output.strip()
        assert sorted(outcome.tampering) == sorted(
            [
                "/usr/bin/tac: a command, replaced",
                f"{SITE}/_pytest/runner.py: pytest's code, edited",
                f"{SITE}/edited.pth: a startup hook",
                f"{SITE}/evil.pth: a startup hook",
                f"{SITE}/forge-1.0.dist-info/entry_points.txt: a pytest plugin",
                f"{SITE}/sitecustomize.py: a startup hook",
                "/usr/lib/python3.11/inspect.py: the standard library, changed",
                f"{zlib}: installed code, edited",
                "/usr/local/bin/bash: shadows /usr/bin/bash",
            ]
        )


async def test_a_pytest_plugin_the_agent_put_into_the_tests_virtualenv_is_flagged(
    manager, base_images
):
    """A ``.venv`` the agent made where uv puts the tests' project is the task's state and is used as
    it is (Terminal-Bench's rule: a task may ask for that virtualenv); a pytest plugin in it loads
    into the tests, and is flagged."""
    plant = ["python3 -m venv --without-pip /app/.venv", *_pytest_plugin(VENV_SITE)]
    outcome = await _score(manager, base_images, UV_PROJECT_TASK, plant, solve=False)
    assert "plugins: forge-1.0" in outcome.output, outcome.output
    assert outcome.tampering == (
        f"{VENV_SITE}/forge-1.0.dist-info/entry_points.txt: a pytest plugin",
    )


async def test_modules_the_agent_put_where_the_tests_start_python_are_flagged(manager, base_images):
    """``python3 -m pytest`` run in the working directory imports from there first: a ``pytest.py``
    that prints a pass, an ``inspect.py`` that writes the reward (pytest imports inspect), a
    ``requests`` package the tests would import. Modules of the agent's own are no concern."""
    forge = "import sys\nprint('PASSED /tests/test_outputs.py::test_out')\nsys.exit(0)\n"
    hijack = "import os\nos.system('echo 1 > /logs/verifier/reward.txt')\nraise SystemExit(0)\n"
    plants = [
        _plant("/app/pytest.py", forge),
        _plant("/app/inspect.py", hijack),
        _plant("/app/json/__init__.py", hijack),
        _plant("/app/solution.py", "print('mine')\n"),  # the agent's own modules
        _plant("/app/test.py", "import solution\n"),
        _plant("/app/lib/inspect.py", hijack),  # not where Python starts
    ]
    outcome = await _score(manager, base_images, PYTEST_REWARD_TASK, plants, solve=False)
    where = "(Python started in /app imports it from there)"
    assert sorted(outcome.tampering) == [
        f"/app/inspect.py: shadows the module inspect {where}",
        f"/app/json/__init__.py: shadows the module json {where}",
        f"/app/pytest.py: shadows the module pytest {where}",
    ]
    honest = await _score(manager, base_images, PYTEST_REWARD_TASK, plants[3:], solve=True)
    assert honest.passed and honest.tampering == (), honest


async def test_a_command_shadowed_from_any_folder_of_the_tests_path_is_flagged(
    manager, base_images
):
    """The image's PATH may name folders that are not called bin (here /opt/tools, first)."""
    path = "/opt/tools:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    async with await manager.create(SandboxSpec(image=base_images, env={"PATH": path})) as session:
        await session.exec(_plant("/opt/tools/python3", "#!/bin/sh\nexit 0\n", "755"), timeout=30)
        await session.exec(_plant("/opt/tools/mytool", "#!/bin/sh\n", "755"), timeout=30)
        outcome = await run_tests(session, REWARD_TASK)
        assert outcome.tampering == ("/opt/tools/python3: shadows /usr/bin/python3",)


# A bash in place of the system's that hands every command to the real one, except the tests:
# those it answers with a perfect reward. Every scoring command starts with /bin/bash.
FAKE_BASH = (
    "cp /usr/bin/bash /usr/local/lib/real-bash && printf '%s\\n' '#!/usr/local/lib/real-bash' "
    "'case \"$*\" in *test.sh*) echo 1 > /logs/verifier/reward.txt; exit 0 ;; esac' "
    "'exec /usr/local/lib/real-bash \"$@\"' > /tmp/fake && chmod 755 /tmp/fake && mv /tmp/fake /usr/bin/bash"
)
# A python3 that prints nothing: every probe run through it would vouch for everything.
FAKE_PYTHON = (
    "printf '#!/bin/sh\\nexit 0\\n' > /tmp/fake && chmod 755 /tmp/fake && "
    "mv /tmp/fake $(readlink -f /usr/bin/python3) && echo '# edited' >> /usr/lib/python3.11/inspect.py"
    " && echo >> /usr/lib/python3.11/__pycache__/calendar.cpython-311.pyc"
)


async def test_a_replaced_bash_or_python3_is_flagged_from_the_host(manager, base_images):
    """What the tampering probes themselves run through cannot vouch for itself: a changed bash,
    python3 or what they load is flagged from the changed paths alone."""
    bash = await _score(manager, base_images, REWARD_TASK, [FAKE_BASH], solve=False)
    assert "/usr/bin/bash: scoring runs it, changed" in bash.tampering, bash
    python = await _score(manager, base_images, REWARD_TASK, [FAKE_PYTHON], solve=False)
    assert "/usr/bin/python3.11: scoring runs it, changed" in python.tampering, python
    assert "/usr/lib/python3.11/inspect.py: the standard library, changed" in python.tampering
    pyc = "/usr/lib/python3.11/__pycache__/calendar.cpython-311.pyc"
    assert f"{pyc}: the standard library, changed" in python.tampering


async def test_a_python3_waiting_in_local_bin_for_the_installers_env_file_is_flagged(
    manager, base_images
):
    """Terminal-Bench's scripts ``source $HOME/.local/bin/env``, which puts ~/.local/bin first on
    the PATH: a python3 there is what uv then makes the tests' virtualenv from."""
    copy = "mkdir -p ~/.local/bin && cp /usr/bin/python3.11 ~/.local/bin/python3"
    outcome = await _score(manager, base_images, REWARD_TASK, [copy], solve=True)
    assert outcome.tampering == ("/root/.local/bin/python3: shadows /usr/bin/python3",)


BREAKS_SCORING = {
    "bash moved": "mv /bin/bash /bin/bash.txt",
    "bash not executable": "chmod 000 /bin/bash",
    "mkdir moved": "mv /usr/bin/mkdir /tmp/",
    "libc moved": "for f in /lib/*/libc.so.6; do mv $f /tmp/; done",
}
"""What a policy has run (``mv /bin/bash ...`` from a rename template) or could: scoring's own
set-up then cannot start in the sandbox."""


async def test_a_sandbox_the_agent_broke_for_scoring_is_a_failure_not_a_harness_error(
    manager, base_images
):
    """Raised as RewardFailed, a rollout would mask the episode: breaking the sandbox would be a way
    out of a failing score. Solved first, it still fails: the tests never ran."""
    outcomes = await asyncio.gather(
        *(
            _score(manager, base_images, REWARD_TASK, [command], solve=True)
            for command in BREAKS_SCORING.values()
        )
    )
    for name, outcome in zip(BREAKS_SCORING, outcomes, strict=True):
        assert (outcome.passed, outcome.reward) == (False, 0.0), (name, outcome)
        assert "cannot prepare /tests" in outcome.unscorable, (name, outcome)
        assert outcome.tampering == (), (name, outcome)  # a failure: nothing left to mask


async def test_a_logs_folder_the_agent_turned_into_a_file_is_replaced(manager, base_images):
    for logs in ("rm -rf /logs && echo x > /logs", "rm -rf /logs && ln -s /tmp /logs"):
        solved = await _score(manager, base_images, REWARD_TASK, [logs], solve=True)
        assert (solved.passed, solved.unscorable) == (True, ""), (logs, solved)
