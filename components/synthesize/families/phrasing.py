"""Instruction phrasings: the same task asked the way different people write.

A template gives its request in three voices and ``say`` picks one per seed:

    request   a full sentence asking for the outcome ("Please ... and write ... to /x")
    report    a bug report: what is wrong or what someone noticed, then what is wanted
    ticket    a terse ticket: fragments, imperative, paths and values only

Every voice names the same absolute paths and values, so a check written for
one passes for the others; a policy trained on one voice meets the others.
The task keeps all three (``metadata["phrasings"]``): the demonstrate stage
replays its solution under each, so imitation sees the same work asked three ways.
"""

from __future__ import annotations

import random

__all__ = ["STYLES", "say"]

STYLES = ("request", "report", "ticket")


def say(
    rng: random.Random, *, request: str, report: str, ticket: str
) -> tuple[str, str, dict[str, str]]:
    """``(instruction, style, phrasings)``: one of the three voices, picked by ``rng``, and all three by style."""
    phrasings = {
        style: " ".join(text.split())
        for style, text in zip(STYLES, (request, report, ticket), strict=True)
    }
    style = rng.choice(STYLES)
    return phrasings[style], style, phrasings
