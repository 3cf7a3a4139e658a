"""A throw-away PgBouncer for tests (tests/contract/test_pgbouncer*.py, tests/pooler): the
one of :mod:`benchmarks.pgbouncer` (re-exported here: ``PgBouncer``, ``binary``), in front
of the test server (``SKIPLOCK_TEST_DSN``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from benchmarks import pgbouncer as _bouncer
from benchmarks.pgbouncer import DEBIAN_BINARY, PgBouncer, binary

from tests.pgfixtures import base_dsn

if TYPE_CHECKING:
    import contextlib

__all__ = ["DEBIAN_BINARY", "PgBouncer", "binary", "pgbouncer"]


def pgbouncer(mode: str = "transaction") -> contextlib.AbstractContextManager[PgBouncer]:
    """A new PgBouncer in ``mode`` in front of the test server, started; stopped by PID
    and its folder removed afterwards."""
    return _bouncer.pgbouncer(base_dsn(), mode)
