"""The CPU stage image builds with podman and runs a stage (slow: installs every dependency)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.podman]

ROOT = Path(__file__).resolve().parents[2]
TAG = "pytest"


@pytest.mark.skipif(shutil.which("podman") is None, reason="needs podman")
def test_cpu_image_builds_and_runs_a_stage():
    build = subprocess.run(
        [str(ROOT / "images/stage-cpu/build.sh"), TAG],
        capture_output=True,
        text=True,
        timeout=3600,
        env={**os.environ, "PYTHON": sys.executable},
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    image = f"localhost/termrl/stage-cpu:{TAG}"
    try:
        run = subprocess.run(
            [
                "podman",
                "run",
                "--rm",
                "--network=none",
                image,
                "sh",
                "-ec",
                "python -m components.synthesize --count 3 --seed 1 --no-progress --out /tmp/t.parquet && "
                'python -c "from termrl.artifacts import load_tasks; import torch, kfp; '
                "print(len(load_tasks('/tmp/t.parquet')), torch.__version__, kfp.__version__)\"",
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        count, torch_version, _ = run.stdout.strip().splitlines()[-1].split()
        assert count == "3" and torch_version.startswith("2.13.0")
        # the host's extra CAs were mounted for the build only, never stored in a layer
        inside = subprocess.run(
            ["podman", "run", "--rm", image, "cat", "/etc/ssl/certs/ca-certificates.crt"],
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout
        for cert in Path("/usr/local/share/ca-certificates").glob("*.crt"):
            body = "".join(cert.read_text().split("-----")[2].split())
            assert body[:120] not in "".join(inside.split()), cert
    finally:
        subprocess.run(["podman", "rmi", "-f", image], capture_output=True, timeout=120)
