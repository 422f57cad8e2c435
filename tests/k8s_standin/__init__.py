"""A local Kubernetes API stand-in for tests: the endpoints termrl's kubernetes backend uses, pods as podman pods.

    with StandIn() as api:                 # serves http://127.0.0.1:PORT in a thread
        api.kubeconfig                     # a kubeconfig file pointing at it (namespace termrl-sandboxes)
        KubernetesBackend(kubeconfig=api.kubeconfig)   # the backend and the official client, unchanged

or by hand: ``python -m tests.k8s_standin`` prints the kubeconfig's path and serves until
interrupted. What it serves: ``tests.k8s_standin.api``; how pods run: ``tests.k8s_standin.runtime``;
exec's websocket protocol: ``tests.k8s_standin.exec_stream``; what it refuses as the API server
does (unknown fields under strict validation, exceeded quota): ``tests.k8s_standin.admission``.

Not modelled (what a real cluster has): a scheduler (every pod lands on one "node" at once), image
pulls, kubelet restarts and container restarts (restartPolicy Never only), node loss and eviction
(ephemeral-storage limits, podPidsLimit), NetworkPolicy peers and ipBlocks (a CNI's part: a pod
gets no network or all egress), Pod Security admission, RBAC and authentication (any token
passes), watches, patch/update, server-side apply, and exec's v1-v3 subprotocols.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from pathlib import Path
from types import TracebackType

import yaml
from aiohttp import web

from tests.k8s_standin.api import STORE, build_app
from tests.k8s_standin.runtime import PodRuntime

__all__ = ["DEFAULT_NAMESPACE", "StandIn", "kubeconfig_text"]

DEFAULT_NAMESPACE = "termrl-sandboxes"


def kubeconfig_text(server: str, namespace: str = DEFAULT_NAMESPACE) -> str:
    """A kubeconfig with one context: ``server`` over plain HTTP, a token the stand-in accepts."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "standin", "cluster": {"server": server}}],
        "users": [{"name": "standin", "user": {"token": "standin"}}],
        "contexts": [
            {
                "name": "standin",
                "context": {"cluster": "standin", "user": "standin", "namespace": namespace},
            }
        ],
        "current-context": "standin",
    }
    return yaml.safe_dump(config, sort_keys=False)


class StandIn:
    """One stand-in API server on 127.0.0.1, in a thread of its own; ``close`` removes its podman pods.

    ``pause_base``: a local image the pause container is built from (it needs ``sleep``).
    """

    def __init__(
        self,
        workdir: Path,
        *,
        pause_base: str = "termrl/base:bookworm",
        port: int = 0,
        namespaces: tuple[str, ...] = (DEFAULT_NAMESPACE,),
    ):
        self.workdir = Path(workdir)
        self.runtime = PodRuntime(f"k8s-standin-{uuid.uuid4().hex[:6]}", pause_base)
        self.port = port
        self.namespaces = namespaces
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self.kubeconfig = self.workdir / "kubeconfig"

    @property
    def server(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> StandIn:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(timeout=300)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.kubeconfig.write_text(kubeconfig_text(self.server))
        return self

    async def _serve(self) -> None:
        await self.runtime.prepare()
        app = build_app(self.runtime)
        self.store = app[STORE]
        for name in self.namespaces:  # what `termrl cluster manifests` would have created
            app[STORE].objects[("api/v1", "namespaces", "", name)] = {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": name, "uid": str(uuid.uuid4())},
                "status": {"phase": "Active"},
            }
        # The API server (Go's net/http) reads request lines and headers up to 1 MiB; exec's command
        # travels in the query string, and uploads put up to 64 KiB of base64 there.
        limits = {"max_line_size": 1 << 20, "max_field_size": 1 << 20}
        self._runner = web.AppRunner(app, handle_signals=False, **limits)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(timeout=120)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _shutdown(self) -> None:
        await self.runtime.remove_all()  # first: open exec streams may hold the server's cleanup up
        if self._runner is not None:
            await self._runner.cleanup()

    def __enter__(self) -> StandIn:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
