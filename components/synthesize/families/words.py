"""Name pools and small random helpers every family draws from.

Paths, project names, users and versions are randomised per task (the seed's
environment diversity), so an agent cannot learn one fixed layout.
"""

from __future__ import annotations

import random
import string

__all__ = [
    "NOUNS",
    "PEOPLE",
    "WORDS",
    "base_dir",
    "ident",
    "name",
    "names",
    "token",
    "version",
]

NOUNS = [
    "atlas",
    "beacon",
    "cobalt",
    "delta",
    "ember",
    "falcon",
    "garnet",
    "harbor",
    "indigo",
    "juniper",
    "kestrel",
    "lumen",
    "meadow",
    "nimbus",
    "orchid",
    "pioneer",
    "quartz",
    "raven",
    "sierra",
    "tundra",
    "umber",
    "vertex",
    "willow",
    "xenon",
    "yarrow",
    "zephyr",
    "aurora",
    "basalt",
    "cedar",
    "dynamo",
    "echo",
    "fjord",
    "glacier",
    "helix",
    "iris",
    "jasper",
    "krypton",
    "lagoon",
    "mosaic",
    "nova",
    "onyx",
    "prism",
    "quill",
    "ridge",
    "summit",
    "tango",
    "ultra",
    "vortex",
    "wharf",
    "yonder",
]

WORDS = [
    "apple",
    "river",
    "stone",
    "cloud",
    "light",
    "paper",
    "glass",
    "storm",
    "field",
    "music",
    "green",
    "silver",
    "window",
    "garden",
    "bridge",
    "forest",
    "ocean",
    "market",
    "candle",
    "planet",
    "rocket",
    "winter",
    "summer",
    "thunder",
    "valley",
    "harvest",
    "lantern",
    "mirror",
    "orange",
    "pencil",
    "shadow",
    "tiger",
    "violet",
    "yellow",
    "anchor",
    "button",
]

PEOPLE = [
    "alice",
    "bruno",
    "carla",
    "dmitri",
    "elena",
    "farid",
    "grace",
    "hiro",
    "ines",
    "jonas",
    "kiara",
    "liam",
    "maya",
    "nadia",
    "omar",
    "priya",
    "quinn",
    "rosa",
    "sven",
    "tara",
    "umar",
    "vera",
    "wei",
    "ximena",
    "yusuf",
    "zoe",
]


def name(rng: random.Random, pool: list[str] = NOUNS) -> str:
    """One name from ``pool``."""
    return rng.choice(pool)


def names(rng: random.Random, k: int, pool: list[str] = NOUNS) -> list[str]:
    """``k`` distinct names from ``pool``."""
    return rng.sample(pool, k)


def ident(rng: random.Random, pool: list[str] = NOUNS) -> str:
    """A name with a short random suffix, e.g. ``cobalt7`` (more variety than the pool)."""
    return rng.choice(pool) + str(rng.randint(2, 99))


def version(rng: random.Random) -> str:
    """A random semantic version like ``2.14.3``."""
    return f"{rng.randint(0, 4)}.{rng.randint(0, 19)}.{rng.randint(0, 9)}"


def base_dir(rng: random.Random) -> str:
    """A random top-level place for a task's files (diverse layouts)."""
    return rng.choice(["/app", "/srv", "/opt", "/home/user", "/data", "/var/lib"])


def token(rng: random.Random, n: int = 8) -> str:
    """Random lowercase letters and digits (markers a check can look for)."""
    return "".join(rng.choice(string.ascii_lowercase + string.digits) for _ in range(n))
