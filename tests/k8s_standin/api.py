"""The API server's routes: a small object store, pods realized by ``PodRuntime``, exec over websockets.

    /api/v1/namespaces[/NAME]                                   cluster-scoped namespaces
    /api/v1/namespaces/NS/pods[/NAME[/status|/log|/exec]]       pods (podman pods)
    /api/v1/namespaces/NS/PLURAL[/NAME]                         other core objects, stored
    /apis/GROUP/VERSION/namespaces/NS/PLURAL[/NAME]             group objects, stored

Objects are validated against the client's models (``fieldValidation``), get a uid, a
resourceVersion and a creationTimestamp, and are answered as the API server answers them,
errors as ``Status`` objects. The garbage collector's part for pods is here too: deleting a
pod deletes the pods that name it in ``ownerReferences``, and a pod whose owner reference names
no pod of its own namespace is deleted (cross-namespace owners count as absent).
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import time
import uuid
from typing import Any

from aiohttp import web

from tests.k8s_standin.admission import (
    ApiError,
    matches_selector,
    model_of,
    quota_refusal,
    unknown_fields,
)
from tests.k8s_standin.exec_stream import serve_exec
from tests.k8s_standin.runtime import PodRuntime, now

__all__ = ["STORE", "Store", "build_app"]

KINDS = {
    "pods": "Pod",
    "namespaces": "Namespace",
    "serviceaccounts": "ServiceAccount",
    "resourcequotas": "ResourceQuota",
    "configmaps": "ConfigMap",
    "secrets": "Secret",
    "persistentvolumeclaims": "PersistentVolumeClaim",
    "networkpolicies": "NetworkPolicy",
    "roles": "Role",
    "rolebindings": "RoleBinding",
}
TERMINAL = ("Succeeded", "Failed")
Key = tuple[str, str, str, str]  # (api prefix, plural, namespace, name)


class Store:
    """Every object by (api prefix, plural, namespace, name); pods carry their live status."""

    def __init__(self, runtime: PodRuntime):
        self.runtime = runtime
        self.objects: dict[Key, dict[str, Any]] = {}
        self.refused: list[str] = []
        """Every refusal of a pod for exceeded quota, in order (what tests watch a backend wait on)."""
        self.created: list[tuple[float, dict[str, Any]]] = []
        """Every pod admitted, in order, with the ``time.time()`` it came in; a deleted one keeps its
        object, ``deletionTimestamp`` set (what tests count a run's sandboxes by)."""
        self._versions = itertools.count(1)

    def get(self, key: Key) -> dict[str, Any]:
        if key not in self.objects:
            raise ApiError(404, "NotFound", f'{key[1]} "{key[3]}" not found')
        return self.objects[key]

    def listed(self, prefix: str, plural: str, namespace: str) -> list[dict[str, Any]]:
        return [
            obj
            for (p, kind, ns, _), obj in self.objects.items()
            if (p, kind, ns) == (prefix, plural, namespace)
        ]

    def admit(
        self, prefix: str, plural: str, namespace: str, body: dict[str, Any], strict: bool
    ) -> tuple[dict[str, Any], list[str]]:
        """``body`` checked and completed as the API server stores it; the warnings it answers with."""
        kind = KINDS.get(plural)
        if kind is None:
            raise ApiError(
                404, "NotFound", f"the server could not find the requested resource ({plural})"
            )
        if body.get("kind") != kind:
            raise ApiError(400, "BadRequest", f"the body is a {body.get('kind')}, not a {kind}")
        model = model_of(body.get("apiVersion", ""), kind)
        extra = unknown_fields(body, model) if model is not None else []
        if extra and strict:
            fields = ", ".join(f'unknown field "{path}"' for path in extra)
            raise ApiError(
                400,
                "BadRequest",
                f'{kind} in version "{body["apiVersion"].rsplit("/", 1)[-1]}" cannot be handled as '
                f"a {kind}: strict decoding error: {fields}",
            )
        body = _pruned(copy.deepcopy(body), extra)
        metadata = body.setdefault("metadata", {})
        if not metadata.get("name"):
            if not metadata.get("generateName"):
                raise ApiError(422, "Invalid", f"{kind} is invalid: metadata.name: Required value")
            metadata["name"] = metadata["generateName"] + uuid.uuid4().hex[:5]
        if namespace:
            if metadata.setdefault("namespace", namespace) != namespace:
                raise ApiError(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does not match the namespace sent on the request",
                )
            if ("api/v1", "namespaces", "", namespace) not in self.objects:
                raise ApiError(404, "NotFound", f'namespaces "{namespace}" not found')
        if (prefix, plural, namespace, metadata["name"]) in self.objects:
            raise ApiError(409, "AlreadyExists", f'{plural} "{metadata["name"]}" already exists')
        metadata.update(
            uid=str(uuid.uuid4()),
            resourceVersion=str(next(self._versions)),
            creationTimestamp=now(),
        )
        return body, [f'unknown field "{path}"' for path in extra]

    def pods(self, namespace: str) -> list[dict[str, Any]]:
        return self.listed("api/v1", "pods", namespace)

    def pod_network(self, pod: dict[str, Any]) -> str:
        """'none' when a NetworkPolicy selecting the pod allows no egress at all, else 'egress'.

        Rules with peers or ports (ipBlock, namespaceSelector) are not enforced: podman cannot
        filter by destination, so such a pod gets all egress (a CNI would restrict it).
        """
        labels = pod["metadata"].get("labels") or {}
        selecting = [
            policy["spec"]
            for policy in self.listed(
                "apis/networking.k8s.io/v1", "networkpolicies", pod["metadata"]["namespace"]
            )
            if "Egress" in policy["spec"].get("policyTypes", ["Ingress"])
            and _selects(policy["spec"].get("podSelector") or {}, labels)
        ]
        if selecting and not any(spec.get("egress") for spec in selecting):
            return "none"
        return "egress"


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if selector.get("matchExpressions"):
        raise ApiError(400, "BadRequest", "matchExpressions in a podSelector are not modelled")
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def _pruned(body: dict[str, Any], paths: list[str]) -> dict[str, Any]:
    """``body`` without the unknown fields (what the server does outside strict validation)."""
    for path in paths:
        node: Any = body
        parts = path.replace("[", ".[").split(".")
        for part in parts[:-1]:
            node = (
                node[int(part[1:-1])]
                if part.startswith("[") and part[1:-1].isdigit()
                else (node[part[1:-1]] if part.startswith("[") else node[part])
            )
        node.pop(parts[-1], None)
    return body


def _respond(obj: Any, status: int = 200, warnings: list[str] = ()) -> web.Response:  # type: ignore[assignment]
    headers = {"Warning": ", ".join(f'299 - "{w}"' for w in warnings)} if warnings else None
    return web.json_response(obj, status=status, headers=headers)


@web.middleware
async def status_errors(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as e:
        return web.json_response(e.status(), status=e.code)


STORE = web.AppKey("store", Store)


def build_app(runtime: PodRuntime) -> web.Application:
    """The aiohttp application of one stand-in."""
    store = Store(runtime)
    app = web.Application(middlewares=[status_errors], client_max_size=64 * 1024 * 1024)
    app[STORE] = store
    routes = Routes(store)
    ns_path = "/api/v1/namespaces/{ns}"
    app.router.add_get("/version", routes.version)
    app.router.add_post("/api/v1/namespaces", routes.create_namespace)
    app.router.add_get("/api/v1/namespaces", routes.list_namespaces)
    app.router.add_get(ns_path, routes.read_namespace)
    app.router.add_delete(ns_path, routes.delete_namespace)
    app.router.add_post(ns_path + "/pods", routes.create_pod)
    app.router.add_delete(ns_path + "/pods/{name}", routes.delete_pod)
    app.router.add_get(ns_path + "/pods/{name}/status", routes.read)
    app.router.add_get(ns_path + "/pods/{name}/log", routes.logs)
    app.router.add_route("*", ns_path + "/pods/{name}/exec", routes.exec)
    for prefix in ("/api/{version:v1}", "/apis/{group}/{version}"):
        collection = prefix + "/namespaces/{ns}/{plural}"
        app.router.add_post(collection, routes.create)
        app.router.add_get(collection, routes.list)
        app.router.add_get(collection + "/{name}", routes.read)
        app.router.add_delete(collection + "/{name}", routes.delete)
    return app


def _prefix(request: web.Request) -> str:
    group = request.match_info.get("group")
    version = request.match_info.get("version", "v1")
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _key(request: web.Request) -> Key:
    info = request.match_info
    return (_prefix(request), info.get("plural", "pods"), info["ns"], info["name"])


class Routes:
    def __init__(self, store: Store):
        self.store = store
        self.runtime = store.runtime

    async def version(self, request: web.Request) -> web.Response:
        return _respond({"major": "1", "minor": "31", "gitVersion": "v1.31.0-termrl-standin"})

    async def create_namespace(self, request: web.Request) -> web.Response:
        body, warnings = self.store.admit(
            "api/v1", "namespaces", "", await request.json(), _strict(request)
        )
        body["status"] = {"phase": "Active"}
        self.store.objects[("api/v1", "namespaces", "", body["metadata"]["name"])] = body
        return _respond(body, 201, warnings)

    async def list_namespaces(self, request: web.Request) -> web.Response:
        return _respond(_list("NamespaceList", self.store.listed("api/v1", "namespaces", "")))

    async def read_namespace(self, request: web.Request) -> web.Response:
        return _respond(self.store.get(("api/v1", "namespaces", "", request.match_info["ns"])))

    async def delete_namespace(self, request: web.Request) -> web.Response:
        name = request.match_info["ns"]
        namespace = self.store.objects.pop(("api/v1", "namespaces", "", name), None)
        if namespace is None:
            raise ApiError(404, "NotFound", f'namespaces "{name}" not found')
        for key in [k for k in self.store.objects if k[2] == name]:
            obj = self.store.objects.pop(key)
            if key[1] == "pods":
                await self.runtime.remove(obj)
        return _respond(namespace)

    async def create(self, request: web.Request) -> web.Response:
        prefix, plural, namespace = (
            _prefix(request),
            request.match_info["plural"],
            request.match_info["ns"],
        )
        body, warnings = self.store.admit(
            prefix, plural, namespace, await request.json(), _strict(request)
        )
        self.store.objects[(prefix, plural, namespace, body["metadata"]["name"])] = body
        return _respond(body, 201, warnings)

    async def list(self, request: web.Request) -> web.Response:
        plural = request.match_info["plural"]
        selector = request.query.get("labelSelector", "")
        items = [
            obj
            for obj in self.store.listed(_prefix(request), plural, request.match_info["ns"])
            if matches_selector(obj["metadata"].get("labels") or {}, selector)
        ]
        return _respond(_list(f"{KINDS.get(plural, 'Object')}List", items))

    async def read(self, request: web.Request) -> web.Response:
        return _respond(self.store.get(_key(request)))

    async def delete(self, request: web.Request) -> web.Response:
        key = _key(request)
        obj = self.store.get(key)
        del self.store.objects[key]
        return _respond(obj)

    async def create_pod(self, request: web.Request) -> web.Response:
        namespace = request.match_info["ns"]
        pod, warnings = self.store.admit(
            "api/v1", "pods", namespace, await request.json(), _strict(request)
        )
        quotas = self.store.listed("api/v1", "resourcequotas", namespace)
        live = [p for p in self.store.pods(namespace) if p["status"]["phase"] not in TERMINAL]
        refusal = quota_refusal(pod, quotas, live)
        if refusal is not None:
            self.store.refused.append(refusal.message)
            raise refusal
        pod["spec"].setdefault("nodeName", "standin")
        pod["status"] = {"phase": "Pending", "hostIP": "127.0.0.1", "qosClass": "Guaranteed"}
        self.store.objects[("api/v1", "pods", namespace, pod["metadata"]["name"])] = pod
        self.store.created.append((time.time(), pod))
        asyncio.ensure_future(self._start(pod))
        return _respond(pod, 201, warnings)

    async def _start(self, pod: dict[str, Any]) -> None:
        owners = {ref.get("uid") for ref in pod["metadata"].get("ownerReferences") or []}
        present = {p["metadata"]["uid"] for p in self.store.pods(pod["metadata"]["namespace"])}
        if owners and not owners & present:  # the garbage collector: every owner is absent
            await self._remove(pod)
            return
        try:
            await self.runtime.start(pod, self.store.pod_network(pod))
        except RuntimeError as e:
            pod["status"].update(phase="Failed", reason="StandInError", message=str(e)[-500:])

    async def delete_pod(self, request: web.Request) -> web.Response:
        pod = self.store.get(_key(request))
        await self._remove(pod)
        return _respond(pod)

    async def _remove(self, pod: dict[str, Any]) -> None:
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        if self.store.objects.pop(("api/v1", "pods", namespace, name), None) is None:
            return
        pod["metadata"]["deletionTimestamp"] = now()
        await self.runtime.remove(pod)
        uid = pod["metadata"]["uid"]
        for dependent in self.store.pods(namespace):  # background cascading deletion
            if any(
                ref.get("uid") == uid for ref in dependent["metadata"].get("ownerReferences") or []
            ):
                await self._remove(dependent)

    async def logs(self, request: web.Request) -> web.Response:
        pod = self.store.get(_key(request))
        container = _container(pod, request.query.get("container"))
        return web.Response(text=await self.runtime.logs(pod, container))

    async def exec(self, request: web.Request) -> web.StreamResponse:
        pod = self.store.get(_key(request))
        phase = pod["status"]["phase"]
        if phase in TERMINAL:
            raise ApiError(
                400,
                "BadRequest",
                f"cannot exec into a container in a completed pod; current phase is {phase}",
            )
        container = _container(pod, request.query.get("container"))
        state = next(
            (
                s["state"]
                for s in pod["status"].get("containerStatuses", [])
                if s["name"] == container
            ),
            {},
        )
        if "running" not in state:  # the kubelet has no running container of that name
            raise ApiError(
                400,
                "BadRequest",
                f'unable to upgrade connection: container not found ("{container}")',
            )
        command = request.query.getall("command", [])
        if not command:
            raise ApiError(400, "BadRequest", "you must specify at least 1 command")
        stdin = request.query.get("stdin", "false").lower() in ("true", "1")
        argv = self.runtime.exec_argv(pod, container, command, stdin)
        return await serve_exec(request, argv, command, stdin=stdin)


def _container(pod: dict[str, Any], asked: str | None) -> str:
    names = [c["name"] for c in pod["spec"]["containers"]]
    if asked is None:
        if len(names) == 1:
            return names[0]
        raise ApiError(
            400,
            "BadRequest",
            f"a container name must be specified for pod {pod['metadata']['name']}, "
            f"choose one of: [{' '.join(names)}]",
        )
    if asked not in names:
        raise ApiError(
            400, "BadRequest", f"container {asked} is not valid for pod {pod['metadata']['name']}"
        )
    return asked


def _strict(request: web.Request) -> bool:
    return request.query.get("fieldValidation") == "Strict"


def _list(kind: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"kind": kind, "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": items}
