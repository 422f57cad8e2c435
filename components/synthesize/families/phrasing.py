"""Instruction phrasings: the same task asked the way different people write.

A template gives its request in three voices and ``say`` picks one per seed:

    request   a full sentence asking for the outcome ("Please ... and write ... to /x")
    report    a bug report: what is wrong or what someone noticed, then what is wanted
    ticket    a terse ticket: fragments, imperative, paths and values only

Every voice names the same absolute paths and values, so a check written for
one passes for the others; a policy trained on one voice meets the others.
"""

from __future__ import annotations

import random

__all__ = ["STYLES", "say"]

STYLES = ("request", "report", "ticket")


def say(rng: random.Random, *, request: str, report: str, ticket: str) -> tuple[str, str]:
    """``(instruction, style)``: one of the three phrasings, picked by ``rng``."""
    style = rng.choice(STYLES)
    text = {"request": request, "report": report, "ticket": ticket}[style]
    return " ".join(text.split()), style
