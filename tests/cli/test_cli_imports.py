"""The `termrl` command line stays quick to start: heavy libraries load only in the commands that use them."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "transformers", "kfp", "matplotlib", "kubernetes")


def test_help_loads_no_heavy_library():
    probe = (
        "import sys; from click.testing import CliRunner; from pipelines.cli import main; "
        "r = CliRunner().invoke(main, ['--help']); assert r.exit_code == 0, r.output; "
        "r = CliRunner().invoke(main, ['stage', 'train', '--help']); assert r.exit_code == 0, r.output; "
        f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert loaded.stdout.split() == []
