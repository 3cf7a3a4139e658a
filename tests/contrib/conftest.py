"""Fixtures of the contrib tests: the CLI tests' throwaway app modules and admin database."""

from __future__ import annotations

from tests.cli.conftest import admin_dsn, make_app

__all__ = ["admin_dsn", "make_app"]
