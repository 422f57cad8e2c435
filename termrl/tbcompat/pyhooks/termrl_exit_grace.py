"""A pytest plugin of termrl's test phase: a finished run ends within a grace period.

A test that leaves a non-daemon thread running keeps Python from exiting after
pytest has finished and printed its summary; the verifier then waits for its
timeout (Harbor does the same). Once pytest is done, a daemon thread waits
``TERMRL_EXIT_GRACE_SEC`` seconds and, if the process is still there, ends it
with pytest's own exit status, so the test script goes on and writes its
reward. A process that exits in time takes the daemon thread with it.
"""

import os
import sys
import threading
import time

_STATUS = {"exit": None}

# Loaded through PYTEST_PLUGINS (set by termrl's sitecustomize for this process only).
_names = [p for p in os.environ.get("PYTEST_PLUGINS", "").split(",") if p]
if "termrl_exit_grace" in _names:
    _names.remove("termrl_exit_grace")
    if _names:
        os.environ["PYTEST_PLUGINS"] = ",".join(_names)
    else:
        del os.environ["PYTEST_PLUGINS"]


def pytest_sessionfinish(session, exitstatus):
    _STATUS["exit"] = int(exitstatus)


def _end_after(grace: float, status: int) -> None:
    time.sleep(grace)
    alive = [t.name for t in threading.enumerate() if not t.daemon and t.is_alive()]
    sys.stdout.flush()
    sys.stderr.write(
        f"termrl: pytest finished {grace:g}s ago but threads its tests left running keep it "
        f"alive ({', '.join(alive) or 'none named'}); ending it with pytest's exit status "
        f"{status}\n"
    )
    sys.stderr.flush()
    os._exit(status)


def pytest_unconfigure(config):
    try:
        grace = float(os.environ.get("TERMRL_EXIT_GRACE_SEC", ""))
    except ValueError:
        return
    if grace > 0 and _STATUS["exit"] is not None:
        threading.Thread(
            target=_end_after, args=(grace, _STATUS["exit"]), name="termrl-exit-grace", daemon=True
        ).start()
