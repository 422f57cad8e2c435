"""The ``code_version`` every stage receives: a hash of the code the stages run.

KFP's cache key covers a component's own function text, its image and its
inputs, but not the library the function calls into. ``code_version`` is an
input of every stage, so passing this hash makes a change to that library
invalidate the cache of every stage, and an unchanged tree reuse it. Only the
code that runs inside stages counts: editing the local runner or the command
line must not throw away a finished 40-minute run.
"""

import hashlib
from pathlib import Path

__all__ = ["STAGE_SOURCES", "source_version"]

STAGE_SOURCES = ("termrl", "components", "pipelines/glue.py", "pipelines/colocated.py")
"""What runs inside the stages (relative to the repository root): folders or files."""


def source_version(root: Path | None = None) -> str:
    """``src-`` and 12 hex digits of SHA-256 over every ``.py`` file (path and bytes) of ``STAGE_SOURCES``."""
    root = root or Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for source in STAGE_SOURCES:
        base = root / source
        files = [base] if base.is_file() else sorted(base.rglob("*.py"))
        for path in files:
            if "__pycache__" in path.parts:
                continue
            digest.update(path.relative_to(root).as_posix().encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return "src-" + digest.hexdigest()[:12]
