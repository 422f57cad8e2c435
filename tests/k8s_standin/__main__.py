"""``python -m tests.k8s_standin [--port N] [--dir D] [--bare]``: serve the stand-in, print its kubeconfig.

It starts with every object of ``termrl cluster manifests`` applied (namespaces, the sandboxes'
NetworkPolicies and quota), as a cluster is set up before a run; ``--bare``: the sandbox namespace only.

    python -m tests.k8s_standin --dir /tmp/standin &     # serves until interrupted
    export KUBECONFIG=/tmp/standin/kubeconfig
    termrl sandbox stats --backend kubernetes --probe 1
"""

from __future__ import annotations

import argparse
import signal
import tempfile
import threading
from pathlib import Path

from tests.k8s_standin import DEFAULT_NAMESPACE, StandIn
from tests.k8s_standin.manifests import apply_cluster_manifests


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.k8s_standin", description=__doc__)
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free one)")
    parser.add_argument("--dir", type=Path, default=None, help="where the kubeconfig is written")
    parser.add_argument(
        "--pause-base", default="termrl/base:bookworm", help="local image with sleep"
    )
    parser.add_argument(
        "--bare", action="store_true", help="apply no cluster manifests: the sandbox namespace only"
    )
    args = parser.parse_args()
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="k8s-standin-"))
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    namespaces = (DEFAULT_NAMESPACE,) if args.bare else ()
    with StandIn(
        workdir, port=args.port, pause_base=args.pause_base, namespaces=namespaces
    ) as standin:
        if not args.bare:
            apply_cluster_manifests(standin.kubeconfig)
        print(standin.kubeconfig, flush=True)
        print(standin.kubeconfig.read_text(), flush=True)
        stop.wait()


if __name__ == "__main__":
    main()
