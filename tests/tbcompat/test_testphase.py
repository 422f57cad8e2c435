"""testphase: the offline kit arrives only at test time and works with no network (podman)."""

from __future__ import annotations

import pytest

from termrl.sandbox import SandboxManager, SandboxSpec
from termrl.taskfolders import read_task_folder
from termrl.tbcompat.kit import SANDBOX_KIT_DIR, SANDBOX_UV_CACHE_DIR
from termrl.tbcompat.testphase import SANDBOX_HOOKS_DIR, prepare_test_phase, remove_mount_points

from .conftest import TB_FIXTURES

pytestmark = [pytest.mark.slow, pytest.mark.podman]


async def test_the_kit_makes_uv_and_pip_installs_work_offline(base_images, monkeypatch):
    monkeypatch.delenv("TERMRL_EXIT_GRACE_SEC", raising=False)  # the default grace
    task = read_task_folder(TB_FIXTURES / "yaml-to-json")
    spec = SandboxSpec.from_task(task)
    assert spec.network == "none"
    async with SandboxManager() as manager:
        async with await manager.create(spec) as session:
            before = await session.exec(f"command -v uv; ls {SANDBOX_KIT_DIR}", timeout=30)
            assert before.exit_code != 0 and "uv" not in before.output.split("\n")[0]
            env = (await prepare_test_phase(session, task)).env
            hooks = await session.exec(f"ls {SANDBOX_HOOKS_DIR}", timeout=30)
            assert hooks.output.split() == ["sitecustomize.py", "termrl_exit_grace.py"]
            assert env["PYTHONPATH"] == SANDBOX_HOOKS_DIR and env["TERMRL_EXIT_GRACE_SEC"] == "30"
            exports = " ".join(f"{k}={v}" for k, v in env.items())
            checks = {
                # what the installer line would have left behind
                "uv": f"{exports} bash -c 'source $HOME/.local/bin/env && uv --version'",
                # pip in a venv, from the kit's wheels only
                "pip": f"python3 -m venv /tmp/v && {exports} /tmp/v/bin/pip install -q pytest==8.4.1 pyyaml==6.0.2"
                " && /tmp/v/bin/python -c 'import pytest, yaml; print(pytest.__version__, yaml.__version__)'",
                # uv's project flow, as Terminal-Bench 1.0's run-tests.sh drives it
                "uv add": f"mkdir -p /tmp/p && cd /tmp/p && {exports} bash -c "
                "'source $HOME/.local/bin/env && uv init -q && uv add -q pytest==8.4.1 pyyaml==6.0.2 "
                '&& uv run python -c "import yaml; print(yaml.__version__)"\'',
                "network": "curl -sS --max-time 10 https://pypi.org/simple/ >/dev/null",
            }
            results = {
                name: await session.exec(command, timeout=180) for name, command in checks.items()
            }
            assert results["uv"].output.strip() == "uv 0.7.13", results["uv"].output
            assert results["pip"].exit_code == 0 and "8.4.1 6.0.2" in results["pip"].output, (
                results["pip"].output
            )
            assert results["uv add"].exit_code == 0 and "6.0.2" in results["uv add"].output, (
                results["uv add"].output
            )
            assert results["network"].exit_code != 0  # none of that came from the network
        async with await manager.create(spec) as fresh:  # the kit is never part of the image
            assert (
                await fresh.exec(f"ls {SANDBOX_KIT_DIR} $HOME/.local/bin/uv", timeout=30)
            ).exit_code != 0


async def test_with_private_mounts_the_kit_is_the_tests_alone(base_images, tmp_path):
    """Where the tests get private mounts, the kit never enters the sandbox: a service could not swap
    uv or the ``env`` file the script sources. What the agent left at those paths is not used, and
    the mount points made for the kit are gone afterwards."""
    task = read_task_folder(TB_FIXTURES / "yaml-to-json")
    async with (
        SandboxManager() as manager,
        await manager.create(SandboxSpec.from_task(task)) as session,
    ):
        assert session.private_binds
        await session.exec("mkdir -p ~/.local/bin && echo 'echo forged' > ~/.local/bin/env")
        phase = await prepare_test_phase(session, task, tmp_path)
        assert set(phase.binds) == {
            SANDBOX_KIT_DIR,
            *(f"/root/.local/bin/{n}" for n in ("uv", "uvx", "env")),
            SANDBOX_UV_CACHE_DIR,  # what the tests install is theirs alone too
            "/app/.venv",  # the virtualenv `uv add` makes in the working directory
            SANDBOX_HOOKS_DIR,  # a finished pytest run ends within the grace period
        }
        assert phase.binds[SANDBOX_HOOKS_DIR][1]
        assert not phase.binds["/app/.venv"][1] and not phase.binds[SANDBOX_UV_CACHE_DIR][1]
        exports = " ".join(f"{k}={v}" for k, v in phase.env.items())
        seen = await session.exec_fresh(
            f"source $HOME/.local/bin/env && {exports} uv --version && ls {SANDBOX_KIT_DIR}/wheels | grep -c whl",
            binds=phase.binds,
        )
        assert (
            seen.output.splitlines()[0] == "uv 0.7.13" and int(seen.output.splitlines()[1]) > 0
        ), seen.output
        installed = await session.exec_fresh(
            f"{exports} bash -c 'source $HOME/.local/bin/env && uv init -q && uv add -q pytest==8.4.1 "
            'pyyaml==6.0.2 && uv run python -c "import yaml; print(yaml.__file__)"\'',
            timeout=180,
            binds=phase.binds,
        )
        assert installed.output.startswith("/app/.venv/lib/"), installed.output
        sandbox_view = await session.exec(
            f"ls -A {SANDBOX_KIT_DIR} {SANDBOX_UV_CACHE_DIR} {SANDBOX_HOOKS_DIR} /app/.venv; "
            "wc -c < ~/.local/bin/uv",
            timeout=30,
        )
        assert sandbox_view.output.split() == [  # empty mount points only
            "/app/.venv:",
            f"{SANDBOX_HOOKS_DIR}:",
            f"{SANDBOX_KIT_DIR}:",
            f"{SANDBOX_UV_CACHE_DIR}:",
            "0",
        ], sandbox_view.output
        assert (await session.exec("cat ~/.local/bin/env")).output == "echo forged\n"  # kept
        await remove_mount_points(session, phase)
        after = await session.exec(
            f"ls -d {SANDBOX_KIT_DIR} {SANDBOX_UV_CACHE_DIR} {SANDBOX_HOOKS_DIR} /app/.venv "
            "~/.local/bin/uv",
            timeout=30,
        )
        assert after.output.count("No such file") == 5, after.output
        # A .venv that is there already is the task's: the tests use it as it is.
        await session.exec("mkdir /app/.venv", timeout=30)
        again = await prepare_test_phase(session, task, tmp_path / "again")
        assert "/app/.venv" not in again.binds and SANDBOX_UV_CACHE_DIR in again.binds
