"""``python -m tests.k8s_standin [--port N] [--dir D]``: serve the stand-in, print its kubeconfig.

export KUBECONFIG=$(python -m tests.k8s_standin | head -1)    # in another shell: it serves on
termrl sandbox stats --backend kubernetes --probe 1
"""

from __future__ import annotations

import argparse
import signal
import tempfile
import threading
from pathlib import Path

from tests.k8s_standin import StandIn


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.k8s_standin", description=__doc__)
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free one)")
    parser.add_argument("--dir", type=Path, default=None, help="where the kubeconfig is written")
    parser.add_argument(
        "--pause-base", default="termrl/base:bookworm", help="local image with sleep"
    )
    args = parser.parse_args()
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="k8s-standin-"))
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with StandIn(workdir, port=args.port, pause_base=args.pause_base) as standin:
        print(standin.kubeconfig, flush=True)
        print(standin.kubeconfig.read_text(), flush=True)
        stop.wait()


if __name__ == "__main__":
    main()
