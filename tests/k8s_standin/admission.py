"""What the API server checks before it stores an object: strict field validation, quota, selectors.

Field validation walks the manifest along the ``kubernetes`` client's generated models (the
same OpenAPI schema the API server serves), so an unknown field anywhere is found and named as
the API server names it (``spec.containers[0].foo``). Under ``fieldValidation=Strict`` that is
a 400; otherwise the field is dropped and named in a ``Warning`` header, as the server does.
"""

from __future__ import annotations

import re
from typing import Any

from kubernetes import client
from kubernetes.utils import parse_quantity

__all__ = [
    "ApiError",
    "matches_selector",
    "model_of",
    "pod_requests",
    "quota_refusal",
    "unknown_fields",
]

_CONTAINER = re.compile(r"(list|dict)\[(.*)\]|dict\((\w+), (.*)\)")


class ApiError(Exception):
    """An error the API answers with a ``Status`` object."""

    def __init__(self, code: int, reason: str, message: str):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message

    def status(self) -> dict[str, Any]:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }


def model_of(api_version: str, kind: str) -> type | None:
    """The client's model class of ``kind`` in ``api_version`` (``networking.k8s.io/v1`` → V1...)."""
    version = api_version.rsplit("/", 1)[-1]
    return getattr(client, f"{version[:1].upper()}{version[1:]}{kind}", None)


def unknown_fields(value: Any, model: type | str, path: str = "") -> list[str]:
    """Paths of the fields in ``value`` that ``model`` does not declare."""
    if isinstance(model, str):
        if model in ("str", "int", "bool", "float", "object", "datetime", "date"):
            return []
        nested = _CONTAINER.fullmatch(model)
        if nested and nested.group(1) == "list" and isinstance(value, list):
            return [
                found
                for i, item in enumerate(value)
                for found in unknown_fields(item, nested.group(2), f"{path}[{i}]")
            ]
        if nested and nested.group(3) and isinstance(value, dict):
            return [
                found
                for key, item in value.items()
                for found in unknown_fields(item, nested.group(4), f"{path}[{key}]")
            ]
        resolved = getattr(client, model, None)
        return [] if resolved is None else unknown_fields(value, resolved, path)
    if not isinstance(value, dict):
        return []
    by_json_key = {json_key: attr for attr, json_key in model.attribute_map.items()}
    found = []
    for key, item in value.items():
        where = f"{path}.{key}" if path else key
        if key not in by_json_key:
            found.append(where)
        else:
            found += unknown_fields(item, model.openapi_types[by_json_key[key]], where)
    return found


def matches_selector(labels: dict[str, str], selector: str) -> bool:
    """Equality-based label selectors: ``a=b``, ``a==b``, ``a!=b``, ``a``, ``!a``, comma-joined."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key.strip()) == value.strip():
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key.strip()) != value.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif " in " in term or " notin " in term:
            raise ApiError(400, "BadRequest", f"set-based selector {term!r} is not modelled")
        elif term not in labels:
            return False
    return True


def pod_requests(pod: dict[str, Any]) -> dict[str, float]:
    """What a pod counts against a ResourceQuota: pods, and its containers' requests and limits."""
    totals = {"pods": 1.0}
    for container in pod["spec"].get("containers", []):
        resources = container.get("resources") or {}
        for kind in ("requests", "limits"):
            for resource, quantity in (resources.get(kind) or {}).items():
                if resource in ("cpu", "memory"):
                    key = f"{kind}.{resource}"
                    totals[key] = totals.get(key, 0.0) + float(parse_quantity(quantity))
    return totals


def quota_refusal(
    pod: dict[str, Any], quotas: list[dict[str, Any]], running: list[dict[str, Any]]
) -> ApiError | None:
    """The 403 the API server answers when ``pod`` would exceed a quota (non-terminal pods count)."""
    wanted = pod_requests(pod)
    used: dict[str, float] = {}
    for other in running:
        for key, amount in pod_requests(other).items():
            used[key] = used.get(key, 0.0) + amount
    for quota in quotas:
        hard = quota.get("spec", {}).get("hard", {})
        over = [
            key
            for key, limit in hard.items()
            if key in wanted and used.get(key, 0.0) + wanted[key] > float(parse_quantity(limit))
        ]
        if over:
            name = pod["metadata"]["name"]
            return ApiError(
                403,
                "Forbidden",
                f'pods "{name}" is forbidden: exceeded quota: {quota["metadata"]["name"]}, '
                f"requested: {_amounts(wanted, over)}, used: {_amounts(used, over)}, "
                f"limited: {','.join(f'{k}={hard[k]}' for k in over)}",
            )
    return None


def _amounts(amounts: dict[str, float], keys: list[str]) -> str:
    return ",".join(f"{key}={amounts.get(key, 0.0):g}" for key in keys)
