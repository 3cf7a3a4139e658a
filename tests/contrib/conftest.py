"""Fixtures of the contrib tests: the CLI tests' throwaway app modules."""

from __future__ import annotations

from tests.cli.conftest import make_app

__all__ = ["make_app"]
