"""testphase: the offline kit arrives only at test time and works with no network (podman)."""

from __future__ import annotations

import pytest

from termrl.sandbox import SandboxManager, SandboxSpec
from termrl.taskfolders import read_task_folder
from termrl.tbcompat.kit import SANDBOX_KIT_DIR
from termrl.tbcompat.testphase import prepare_test_phase

from .conftest import TB_FIXTURES

pytestmark = [pytest.mark.slow, pytest.mark.podman]


async def test_the_kit_makes_uv_and_pip_installs_work_offline(base_images):
    task = read_task_folder(TB_FIXTURES / "yaml-to-json")
    spec = SandboxSpec.from_task(task)
    assert spec.network == "none"
    async with SandboxManager() as manager:
        async with await manager.create(spec) as session:
            before = await session.exec(f"command -v uv; ls {SANDBOX_KIT_DIR}", timeout=30)
            assert before.exit_code != 0 and "uv" not in before.output.split("\n")[0]
            env = await prepare_test_phase(session, task)
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
