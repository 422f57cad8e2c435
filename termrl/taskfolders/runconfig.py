"""The Harbor 1.4 fields that change how a task runs, read from ``task.toml`` into ``Task`` fields.

``run_config`` pops them from the parsed table (what is left becomes the task's
metadata) and checks each, so a bad or unsupported value stops the import
with a message naming the field:

- ``[environment]``: ``docker_image``, ``workdir``, ``env``; ``network_mode``
  ``public`` / ``no-network`` (the same as ``allow_internet`` true / false; a
  contradicting ``allow_internet`` is refused, as Harbor refuses it);
- ``[solution].env``, ``[verifier].env``, ``[agent].user``, ``[verifier].user``;
- ``[verifier].environment_mode = "separate"`` with ``collect`` and the
  top-level ``artifacts``; ``[verifier.environment].network_mode``, the
  separate verifier's own network (no other key of that table: it runs the
  task's image);
- per-phase ``[agent].network_mode`` / ``[verifier].network_mode``: a termrl
  sandbox keeps one network for its life, so a phase may only restate the
  environment's; ``allowlist`` anywhere is refused (no host filtering here);
- ``[[steps]]`` with ``multi_step_reward_strategy``: each step's
  ``name``, ``min_reward`` (a number or a table of reward keys),
  ``[steps.agent].timeout_sec``, ``[steps.verifier]`` ``timeout_sec`` / ``env`` /
  ``user``; a step's files are ``steps/<name>/`` (``instruction.md``, ``tests/``,
  ``solution/``), kept as ``Task.step_files``. Two keys some task sets add to a step are run as
  they mean: ``inherit_prior_session = true`` (the step goes on in the previous step's session:
  termrl runs every step so; ``false`` is refused) and ``dependencies`` / ``depends_on`` (names of
  earlier steps: steps run in order, so they have run; a later or unknown name is refused). Any
  other key in a step that is not Harbor's, as Harbor ignores keys it does not know, is kept
  (the step's ``extra``, exported back) with a warning that termrl does not act on it; Harbor's
  own settings that termrl does not run in a step (``healthcheck``, ``agent.user``, ...) are
  refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from termrl.errors import TaskFormatError

__all__ = ["NETWORK_MODES", "REWARD_STRATEGIES", "pop_field", "run_config"]

NETWORK_MODES = ("public", "no-network")
"""Harbor's network modes termrl runs (``allowlist`` needs host filtering it does not have)."""
REWARD_STRATEGIES = ("mean", "final")
_STEP_KEYS = {"name", "min_reward", "agent", "verifier"}
_STEP_AGENT_KEYS = {"timeout_sec"}
_STEP_VERIFIER_KEYS = {"timeout_sec", "env", "user"}
_STEP_ENTRIES = {"instruction.md", "tests", "solution"}
_STEP_HARBOR_TABLES = {"environment", "solution", "healthcheck", "artifacts", "tests"}
"""Harbor settings a step could carry that termrl does not run in a step (refused, named)."""
_STEP_ORDER_KEYS = ("dependencies", "depends_on")
"""Step keys naming the steps that must run before this one."""


def pop_field(table: dict[str, Any], section: str, key: str) -> Any:
    """``table[section][key]``, removed (and the section when it empties); None when absent."""
    inner = table.get(section)
    if not isinstance(inner, dict):
        return None
    value = inner.pop(key, None)
    if not inner:
        del table[section]
    return value


def _fail(folder: Path, message: str) -> TaskFormatError:
    return TaskFormatError(str(folder), f"task.toml: {message}")


def _string_map(folder: Path, where: str, value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise _fail(folder, f"{where} must be a table of strings, got {value!r}")
    return dict(value)


def _user(folder: Path, where: str, value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int) or value == "":
        raise _fail(folder, f"{where} must be a user name or uid, got {value!r}")
    return str(value)


def _timeout(folder: Path, where: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise _fail(folder, f"{where} must be a positive number, got {value!r}")
    return float(value)


def _network(folder: Path, rest: dict[str, Any]) -> tuple[bool | None, str | None]:
    """(allow_internet, the environment's network mode) after reconciling the two fields."""
    allow = pop_field(rest, "environment", "allow_internet")
    mode = pop_field(rest, "environment", "network_mode")
    hosts = pop_field(rest, "environment", "allowed_hosts")
    if hosts:
        raise _fail(
            folder,
            f"[environment].allowed_hosts = {hosts!r} (an allowlist of hosts) is not supported: "
            "termrl's sandboxes have no network or full egress",
        )
    if mode is None:
        return allow, None
    if mode not in NETWORK_MODES:
        raise _fail(
            folder,
            f"[environment].network_mode = {mode!r} is not supported (only {', '.join(NETWORK_MODES)})",
        )
    if allow is not None and bool(allow) != (mode == "public"):
        raise _fail(
            folder,
            f"[environment].network_mode = {mode!r} conflicts with allow_internet = {allow!r}",
        )
    return mode == "public", mode


def _phase_network(folder: Path, rest: dict[str, Any], phase: str, baseline: str) -> None:
    """A per-phase override may only restate ``baseline`` (one network per sandbox, for its life)."""
    mode = pop_field(rest, phase, "network_mode")
    hosts = pop_field(rest, phase, "allowed_hosts")
    if hosts:
        raise _fail(
            folder, f"[{phase}].allowed_hosts = {hosts!r} (an allowlist of hosts) is not supported"
        )
    if mode is not None and mode != baseline:
        raise _fail(
            folder,
            f"[{phase}].network_mode = {mode!r} differs from the environment's {baseline!r} and is "
            "not supported: a termrl sandbox keeps one network for its life (a separate verifier takes its own from "
            "[verifier.environment].network_mode)",
        )


def _verifier_network(folder: Path, rest: dict[str, Any], mode: str | None) -> str | None:
    table = pop_field(rest, "verifier", "environment")
    if table is None:
        return None
    if not isinstance(table, dict):
        raise _fail(folder, f"[verifier.environment] must be a table, got {table!r}")
    others = sorted(set(table) - {"network_mode"})
    if others:
        raise _fail(
            folder,
            f"[verifier.environment] keys {others} (a verifier environment of its own) are not "
            "supported: termrl's separate verifier runs the task's image; only network_mode",
        )
    if mode != "separate":
        raise _fail(folder, "[verifier.environment] needs [verifier].environment_mode = 'separate'")
    network = table.get("network_mode")
    if network not in NETWORK_MODES:
        raise _fail(
            folder,
            f"[verifier.environment].network_mode = {network!r} is not supported "
            f"(only {', '.join(NETWORK_MODES)})",
        )
    return network


def _collect(folder: Path, rest: dict[str, Any]) -> list[dict[str, Any]]:
    collect = pop_field(rest, "verifier", "collect") or []
    if not isinstance(collect, list):
        raise _fail(folder, f"[[verifier.collect]] must be a list of tables, got {collect!r}")
    for entry in collect:
        if not isinstance(entry, dict) or not isinstance(entry.get("command"), str):
            raise _fail(folder, f"a [[verifier.collect]] entry needs a command: {entry!r}")
        if entry.get("service", "main") != "main":
            raise _fail(
                folder,
                f"[[verifier.collect]] in service {entry['service']!r} "
                "(compose services are not supported; only main)",
            )
        _user(folder, "[[verifier.collect]].user", entry.get("user"))
        _timeout(folder, "[[verifier.collect]].timeout_sec", entry.get("timeout_sec"))
    return [dict(e) for e in collect]


def _artifacts(folder: Path, rest: dict[str, Any]) -> list[dict[str, Any]]:
    artifacts = rest.pop("artifacts", None) or []
    if not isinstance(artifacts, list):
        raise _fail(folder, f"artifacts must be a list, got {artifacts!r}")
    entries = []
    for entry in artifacts:
        entry = {"source": entry} if isinstance(entry, str) else entry
        source = entry.get("source") if isinstance(entry, dict) else None
        if not isinstance(source, str) or not source.startswith("/") or ".." in source.split("/"):
            raise _fail(
                folder, f"an artifact needs an absolute source path without '..': {entry!r}"
            )
        if entry.get("service", "main") != "main":
            raise _fail(
                folder,
                f"artifact {source} from service {entry['service']!r} "
                "(compose services are not supported; only main)",
            )
        entries.append(dict(entry))
    return entries


def _min_reward(folder: Path, where: str, value: Any) -> float | dict[str, float] | None:
    if value is None:
        return None
    if isinstance(value, dict):
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in value.values()):
            raise _fail(folder, f"{where} must be a number or a table of numbers, got {value!r}")
        if set(value) - {"reward"}:
            raise _fail(
                folder,
                f"{where} gates reward keys {sorted(set(value) - {'reward'})}: termrl reads one "
                "reward (reward.txt), so only 'reward' can be gated",
            )
        return {k: float(v) for k, v in value.items()}
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(folder, f"{where} must be a number or a table of numbers, got {value!r}")
    return float(value)


def _step_order_keys(
    folder: Path, name: str, index: int, step: dict[str, Any], earlier: list[str]
) -> None:
    """Check the ordering keys of a step: what they ask is what termrl does, else refuse them."""
    inherit = step.get("inherit_prior_session")
    if inherit is not None and not isinstance(inherit, bool):
        raise _fail(folder, f"step {name!r}: inherit_prior_session must be true or false")
    if inherit is False and index > 0:
        raise _fail(
            folder,
            f"step {name!r}: inherit_prior_session = false (a fresh session for this step) is "
            "not supported: termrl runs every step in the one session and sandbox of the task",
        )
    for key in _STEP_ORDER_KEYS:
        names = step.get(key)
        if names is None:
            continue
        if isinstance(names, str):
            names = [names]
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise _fail(folder, f"step {name!r}: {key} must be a list of step names")
        later = [n for n in names if n not in earlier]
        if later:
            raise _fail(
                folder,
                f"step {name!r}: {key} names {later}, which are not earlier steps (termrl runs "
                "steps in the order they are listed)",
            )


def _step_extra(
    folder: Path, name: str, step: dict[str, Any], warnings: list[str]
) -> dict[str, Any]:
    """The keys of a step that are not Harbor's: kept as they are, each named in a warning.

    Harbor's own settings in a step that termrl does not run (a step's healthcheck,
    ``agent.user``, ...) change how the step runs: they are refused, naming them.
    """
    agent, verifier = step.get("agent") or {}, step.get("verifier") or {}
    refused = (
        sorted(k for k in step if k in _STEP_HARBOR_TABLES)
        + [f"agent.{k}" for k in sorted(set(agent) - _STEP_AGENT_KEYS)]
        + [f"verifier.{k}" for k in sorted(set(verifier) - _STEP_VERIFIER_KEYS)]
    )
    if refused:
        raise _fail(folder, f"step {name!r}: {', '.join(refused)} are not supported in a step")
    known = {*_STEP_KEYS, "inherit_prior_session", *_STEP_ORDER_KEYS}
    extra = {k: v for k, v in step.items() if k not in known}
    warnings += [
        f"step {name!r}: {key} is not a key termrl knows: kept in the task, not acted on"
        for key in sorted(extra)
    ]
    return extra


def _steps(
    folder: Path, rest: dict[str, Any], mode: str | None, warnings: list[str]
) -> tuple[list[dict[str, Any]], str | None]:
    """The ``[[steps]]`` configs and the strategy (each step's instruction checked, kept in ``step_files``)."""
    strategy = rest.pop("multi_step_reward_strategy", None)
    steps = rest.pop("steps", None)
    if steps is None:
        if strategy is not None:
            raise _fail(folder, "multi_step_reward_strategy without [[steps]]")
        return [], None
    if strategy not in (None, *REWARD_STRATEGIES):
        raise _fail(
            folder,
            f"multi_step_reward_strategy must be one of {REWARD_STRATEGIES}, got {strategy!r}",
        )
    if not isinstance(steps, list) or not steps:
        raise _fail(folder, "[[steps]] must be a non-empty list of tables")
    if mode == "separate":
        raise _fail(
            folder,
            "[verifier].environment_mode = 'separate' in a multi-step task is not supported "
            "(the agent's sandbox must outlive each step's verification)",
        )
    out: list[dict[str, Any]] = []
    names: set[str] = set()
    for index, step in enumerate(steps):
        name = _step_name(folder, index, step, names)
        names.add(name)
        _step_order_keys(folder, name, index, step, [done["name"] for done in out])
        kept = _step_extra(folder, name, step, warnings)
        _check_step_folder(folder, name)
        out.append(_step_config(folder, name, step, kept))
    on_disk = (
        sorted(p.name for p in (folder / "steps").iterdir()) if (folder / "steps").is_dir() else []
    )
    stray = sorted(set(on_disk) - names)
    if stray:
        raise TaskFormatError(
            str(folder), f"steps/ holds folders no [[steps]] entry names: {stray}"
        )
    return out, strategy


def _step_name(folder: Path, index: int, step: Any, taken: set[str]) -> str:
    """The step's name: a folder name under ``steps/``, unique in the task."""
    name = step.get("name") if isinstance(step, dict) else None
    if not isinstance(name, str) or not name or "/" in name or name in (".", "..") or name in taken:
        raise _fail(
            folder,
            f"[[steps]] #{index + 1} needs a unique name that is a folder name, got {name!r}",
        )
    return name


def _check_step_folder(folder: Path, name: str) -> None:
    """``steps/<name>/`` holds a readable, non-empty instruction, tests (its own or the
    task's), and nothing termrl would not run."""
    instruction = folder / "steps" / name / "instruction.md"
    try:
        text = instruction.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskFormatError(
            str(folder), f"step {name!r}: cannot read steps/{name}/instruction.md: {exc}"
        ) from exc
    if not text.strip():
        raise TaskFormatError(str(folder), f"step {name!r}: steps/{name}/instruction.md is empty")
    if (
        not (folder / "tests" / "test.sh").is_file()
        and not (folder / "steps" / name / "tests" / "test.sh").is_file()
    ):
        raise TaskFormatError(
            str(folder),
            f"step {name!r}: no tests (steps/{name}/tests/test.sh or tests/test.sh)",
        )
    extra = sorted(
        p.name for p in (folder / "steps" / name).iterdir() if p.name not in _STEP_ENTRIES
    )
    if extra:
        raise TaskFormatError(
            str(folder),
            f"step {name!r}: steps/{name}/ holds {extra}, which termrl does not run "
            "(a step has instruction.md, tests/ and solution/ only)",
        )


def _step_config(
    folder: Path, name: str, step: dict[str, Any], kept: dict[str, Any]
) -> dict[str, Any]:
    """One step's config as the task row keeps it; ``kept``: its non-Harbor keys."""
    agent, verifier = step.get("agent") or {}, step.get("verifier") or {}
    return {
        "name": name,
        "min_reward": _min_reward(folder, f"step {name!r}: min_reward", step.get("min_reward")),
        "agent_timeout_sec": _timeout(
            folder, f"step {name!r}: agent.timeout_sec", agent.get("timeout_sec")
        ),
        "verifier_timeout_sec": _timeout(
            folder, f"step {name!r}: verifier.timeout_sec", verifier.get("timeout_sec")
        ),
        "verifier_env": _string_map(folder, f"step {name!r}: verifier.env", verifier.get("env")),
        "verifier_user": _user(folder, f"step {name!r}: verifier.user", verifier.get("user")),
        # The ordering keys and the unknown ones are kept: export writes them back.
        **{k: step[k] for k in ("inherit_prior_session", *_STEP_ORDER_KEYS) if k in step},
        **({"extra": kept} if kept else {}),
    }


def run_config(folder: Path, rest: dict[str, Any], warnings: list[str]) -> dict[str, Any]:
    """The ``Task`` fields of the run configuration, popped from ``rest`` (see the module docstring).

    What is kept but not acted on is appended to ``warnings``.
    """
    mode = pop_field(rest, "verifier", "environment_mode")
    if mode not in (None, "shared", "separate"):
        raise _fail(
            folder, f"[verifier].environment_mode must be 'shared' or 'separate', got {mode!r}"
        )
    verifier_network = _verifier_network(folder, rest, mode)
    allow_internet, _ = _network(folder, rest)
    baseline = "public" if allow_internet else "no-network"
    _phase_network(folder, rest, "agent", baseline)
    if (
        mode == "separate"
        and isinstance(rest.get("verifier"), dict)
        and "network_mode" in rest["verifier"]
    ):
        raise _fail(
            folder,
            "[verifier].network_mode is a shared verifier's phase override; a separate verifier "
            "takes [verifier.environment].network_mode",
        )
    _phase_network(folder, rest, "verifier", baseline)
    image = pop_field(rest, "environment", "docker_image")
    workdir = pop_field(rest, "environment", "workdir")
    for name, value in (("[environment].docker_image", image), ("[environment].workdir", workdir)):
        if value is not None and (not isinstance(value, str) or not value):
            raise _fail(folder, f"{name} must be a non-empty string, got {value!r}")
    if workdir is not None and not workdir.startswith("/"):
        raise _fail(folder, f"[environment].workdir must be an absolute path, got {workdir!r}")
    steps, strategy = _steps(folder, rest, mode, warnings)
    return {
        "allow_internet": allow_internet,
        "docker_image": image,
        "workdir": workdir,
        "env": _string_map(folder, "[environment].env", pop_field(rest, "environment", "env")),
        "solution_env": _string_map(folder, "[solution].env", pop_field(rest, "solution", "env")),
        "verifier_env": _string_map(folder, "[verifier].env", pop_field(rest, "verifier", "env")),
        "agent_user": _user(folder, "[agent].user", pop_field(rest, "agent", "user")),
        "verifier_user": _user(folder, "[verifier].user", pop_field(rest, "verifier", "user")),
        "verifier_mode": mode,
        "verifier_collect": _collect(folder, rest),
        "artifacts": _artifacts(folder, rest),
        "verifier_network": verifier_network,
        "steps": steps,
        "reward_strategy": strategy,
    }
