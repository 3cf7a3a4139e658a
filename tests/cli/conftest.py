"""Fixtures for the command-line tests: throwaway app modules and a scratch database."""

from __future__ import annotations

import os
import sys
import textwrap
import uuid
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path


@pytest.fixture
def make_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], str]]:
    """Write a module with the given source into a fresh directory; returns its name.

    The directory becomes the working directory (not on sys.path: the CLI must add it).
    """
    monkeypatch.chdir(tmp_path)
    cwd = os.fspath(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", cwd)])
    names: list[str] = []

    def make(source: str) -> str:
        name = f"skiplock_cli_app_{uuid.uuid4().hex[:12]}"
        with open(os.path.join(cwd, f"{name}.py"), "w", encoding="utf-8") as f:
            f.write(textwrap.dedent(source))
        names.append(name)
        return name

    yield make
    for name in names:
        sys.modules.pop(name, None)


@pytest.fixture
def no_psycopg(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``import psycopg`` fail as if the extra were not installed (and ``import
    asyncpg``, which the admin commands fall back to)."""
    for name in list(sys.modules):
        if name.partition(".")[0] in {"psycopg", "psycopg_pool", "asyncpg"} or name.startswith(
            ("skiplock.adapters.psycopg", "skiplock.adapters.asyncpg")
        ):
            monkeypatch.delitem(sys.modules, name)
    for name in ("psycopg", "psycopg_pool", "asyncpg"):
        monkeypatch.setitem(sys.modules, name, None)


@pytest.fixture
def pg_dsn(make_database: Callable[[], str]) -> str:
    """A fresh database without schema (the CLI applies it); fails if unreachable."""
    return make_database()


@pytest.fixture
def admin_dsn(pg_session_dsn: str) -> str:
    """The session database with skiplock's schema, its tables emptied for this test (for
    the admin and health commands); fails if PostgreSQL is unreachable."""
    from tests.pgfixtures import empty_statements, execute

    execute(pg_session_dsn, empty_statements())
    return pg_session_dsn
