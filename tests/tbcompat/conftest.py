"""Shared values of the tbcompat tests (the base-image fixture is in tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

TB_FIXTURES = Path(__file__).parents[1] / "fixtures" / "terminal-bench"
