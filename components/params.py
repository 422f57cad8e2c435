"""What the stages' KFP components share: parameters left unset, described from the config.

A component parameter that sets a config field defaults to None ("unset"): the stage's
config dataclass is the one place its default lives (``build_config`` drops the None).
``described`` writes the ``Args:`` entry of every parameter the component's own docstring
leaves out, from the config field's docstring (the flat sandbox parameters from
``SandboxSettings``), so the Kubeflow UI describes each one; a parameter described
nowhere fails at import.

    @dsl.component(...)
    @described(RolloutConfig)
    def rollout(..., groups: Optional[int] = None, sandbox_backend: Optional[str] = None): ...
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any, TypeVar

from termrl.sandbox.settings import SandboxSettings
from termrl.settings import field_defaults, field_docs

__all__ = ["SANDBOX_PARAMETERS", "UNDESCRIBED", "described"]

F = TypeVar("F", bound=Callable[..., Any])

SANDBOX_PARAMETERS = tuple(SandboxSettings.flat_types())
"""The flat sandbox parameters every sandbox stage's component takes, in this order."""

UNDESCRIBED = ("code_version",)
"""Parameters no UI user sets: ``code_version`` only feeds the cache key."""

_ENTRY = re.compile(r"^    (\w+)( \([^)]*\))?:", re.MULTILINE)


def _described_names(doc: str) -> set[str]:
    """The names with an entry in the ``Args:`` section of a cleaned docstring."""
    if "Args:" not in doc:
        return set()
    section = doc.split("Args:", 1)[1].split("Returns:", 1)[0]
    return {m.group(1) for m in _ENTRY.finditer(section)}


def described(config_class: type, *more: type, **field_of: str) -> Callable[[F], F]:
    """Add an ``Args:`` entry, from ``config_class``'s field docs, for each parameter of the
    decorated function that its docstring does not describe. ``more``: further config classes,
    for a component that runs several stages (the first class that has a field describes it).
    ``field_of``: parameter -> field, where the names differ."""
    docs: dict[str, str] = {}
    defaults: dict[str, Any] = {}
    for cls in reversed((config_class, *more)):
        docs.update(field_docs(cls))
        defaults.update(field_defaults(cls))

    def decorate(func: F) -> F:
        doc = inspect.cleandoc(func.__doc__ or "")
        have = _described_names(doc)
        added, missing = [], []
        for name in inspect.signature(func).parameters:
            if name in have or name in UNDESCRIBED:
                continue
            key = field_of.get(name, name)
            if key not in docs:
                missing.append(name)
                continue
            added.append(f"    {name}: {docs[key]} Unset: the config's {defaults[key]!r}.")
        if missing:
            raise TypeError(f"{func.__name__}: no description for {', '.join(missing)}")
        func.__doc__ = _with_entries(doc, added)
        return func

    return decorate


def _with_entries(doc: str, entries: list[str]) -> str:
    if not entries:
        return doc
    head, returns = (doc.split("\nReturns:", 1) + [""])[:2]
    if "Args:" not in head:
        head = head.rstrip() + "\n\nArgs:"
    text = head.rstrip() + "\n" + "\n".join(entries)
    return text + ("\n\nReturns:" + returns if returns else "")
