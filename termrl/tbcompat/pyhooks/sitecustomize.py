"""termrl's test phase: let a finished pytest run end although its tests left a thread running.

Put on ``PYTHONPATH`` for the tests alone (``termrl.tbcompat.testphase``). In a
pytest process it names the plugin ``termrl_exit_grace`` (beside this file)
in ``PYTEST_PLUGINS``, for this process only: the plugin takes the name out
again when pytest loads it, so the processes the tests start do not inherit
it. Every other Python program is left as it is. Written for any Python that
may find it (no annotations, no starred lists): a task's own old interpreter
must not print an error at start-up.
"""

import os
import sys


def _is_pytest(argv):
    """``python [options] -m pytest ...`` or ``python [options] .../pytest ...`` (a console script)."""
    args = list(argv[1:])
    while args:
        arg = args.pop(0)
        if arg == "-m":
            return args[:1] == ["pytest"]
        if not arg.startswith("-"):
            return os.path.basename(arg) in ("pytest", "py.test")
    return False


if os.environ.get("TERMRL_EXIT_GRACE_SEC") and _is_pytest(getattr(sys, "orig_argv", [])):
    _plugins = [p for p in os.environ.get("PYTEST_PLUGINS", "").split(",") if p]
    os.environ["PYTEST_PLUGINS"] = ",".join(_plugins + ["termrl_exit_grace"])
