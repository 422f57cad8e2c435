"""Shared values of the tbcompat tests (the base-image fixture is in tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

TB_FIXTURES = Path(__file__).parents[1] / "fixtures" / "terminal-bench"
CORPUS_FIXTURES = Path(__file__).parents[1] / "fixtures" / "tb-corpus"
"""Tasks in the shapes of public tasks that broke offline: build-time installers, ``python``, man pages."""
