"""Harbor's task.toml schema as termrl reads and writes it (schema 1.4).

Harbor's linter knows a fixed set of tables and keys; free-form data belongs
under ``[metadata]``. termrl therefore writes its own row fields as
``[metadata.termrl]`` and any top-level keys a task carries that are not
Harbor's (a generated family's parameters: generator, format, port, ...) as
``[metadata.termrl.extra]``; import reads both back (and the top-level
``[termrl]`` table older exports wrote), so import → export → import is exact.

Schema 1.4 fields termrl runs become ``Task`` fields (``termrl.taskfolders.runconfig``
reads and checks them).
Schema 1.4 fields termrl cannot honour yet stop the import with a message
naming the field (``unsupported_fields``): they change how a task runs or is
scored, and dropping one silently would score the task wrongly.
"""

from __future__ import annotations

from typing import Any

__all__ = ["HARBOR_TABLES", "TERMRL_TABLE", "split_extra", "unsupported_fields"]

HARBOR_TABLES = frozenset(
    {
        "version",
        "schema_version",
        "metadata",
        "agent",
        "verifier",
        "environment",
        "solution",
        "steps",
        "source",
        "task",
        "artifacts",
        "multi_step_reward_strategy",
    }
)
"""Top-level keys of Harbor's task.toml; anything else is kept under [metadata.termrl.extra]."""
TERMRL_TABLE = "termrl"
"""termrl's own table, under [metadata]."""

# (table, key) -> why termrl cannot run a task that sets it. ``None`` as the key: the whole table.
_UNSUPPORTED: dict[tuple[str, str | None], str] = {
    ("environment", "healthcheck"): "a healthcheck before the agent starts",
    ("environment", "mcp_servers"): "MCP servers for the agent",
    ("environment", "skills_dir"): "agent skills copied into the agent's configuration",
    ("environment", "os"): "a container OS other than linux",
    ("healthcheck", None): "a healthcheck before the agent starts",
}
"""What ``termrl.taskfolders.runconfig`` does not check itself: the rest of 1.4 it reads and runs, or refuses
with a reason of its own (per-phase networks, allowlists, a verifier image, steps' extras)."""
_DEFAULT_VALUES: dict[tuple[str, str], Any] = {
    ("environment", "mcp_servers"): [],
    ("environment", "os"): "linux",
}
"""Values that ask for nothing termrl does not already do."""


def unsupported_fields(config: dict[str, Any]) -> list[str]:
    """One line per schema field in ``config`` that termrl cannot honour (empty: all supported)."""
    problems = []
    for (table, key), why in _UNSUPPORTED.items():
        section = config.get(table)
        if section is None:
            continue
        if key is None:
            problems.append(f"[{table}] ({why}) is not supported")
        elif (
            isinstance(section, dict)
            and key in section
            and section[key] != _DEFAULT_VALUES.get((table, key))
        ):
            problems.append(f"[{table}].{key} = {section[key]!r} ({why}) is not supported")
    return problems


def split_extra(config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the Harbor tables of ``config``, its other top-level keys)."""
    harbor = {k: v for k, v in config.items() if k in HARBOR_TABLES}
    extra = {k: v for k, v in config.items() if k not in HARBOR_TABLES}
    return harbor, extra
