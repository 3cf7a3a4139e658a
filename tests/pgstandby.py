"""A throw-away primary with a streaming hot standby, for the tests of reads from a replica
(tests/replica; docs/replicas.md).

The primary is :func:`tests.pgcluster.cluster`'s server, the standby
:func:`tests.pgcluster.standby_of`'s (``benchmarks/pgcluster.py``: a ``pg_basebackup -R``
copy started on another free port and streaming, ``hot_standby`` on: it answers reads
and refuses writes). Both are stopped by their postmaster's PID and removed afterwards.
Imports no database driver.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import attrs

from tests.pgcluster import Cluster, cluster, standby_of, wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator


@attrs.frozen
class Pair:
    """A primary and its hot standby."""

    primary: Cluster
    standby: Cluster

    def sql(self, server: Cluster, statement: str) -> str:
        """Run ``statement`` on ``server`` with psql; its output (unaligned, tuples only)."""
        done = server._run(
            str(server.bin / "psql"),
            "-X",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-d",
            server.dsn,
            "-c",
            statement,
            check=False,
        )
        if done.returncode != 0:
            log = (server.folder / "server.log").read_text(errors="replace")[-2000:]
            raise AssertionError(f"psql {statement!r}: {done.stderr.strip()}\n{log}")
        return done.stdout.strip()

    def wait_caught_up(self, timeout: float = 30.0) -> None:
        """Return once the standby has replayed what the primary wrote until now."""
        written = self.sql(self.primary, "SELECT pg_current_wal_lsn()")
        query = f"SELECT pg_last_wal_replay_lsn() >= '{written}'::pg_lsn"
        wait_until(lambda: self.sql(self.standby, query) == "t", timeout, "the standby's replay")

    def pause_replay(self) -> None:
        """Stop the standby applying WAL (it keeps receiving it): reads show the state
        as of now, and its lag grows."""
        self.sql(self.standby, "SELECT pg_wal_replay_pause()")
        wait_until(
            lambda: self.sql(self.standby, "SELECT pg_get_wal_replay_pause_state()") == "paused",
            30,
            "the standby's replay to pause",
        )

    def resume_replay(self) -> None:
        self.sql(self.standby, "SELECT pg_wal_replay_resume()")


@contextlib.contextmanager
def primary_and_standby() -> Iterator[Pair]:
    """A new primary and a hot standby streaming from it (:func:`standby_of`: the
    failover tests' standby), both started; stopped and removed afterwards."""
    with cluster() as primary, standby_of(primary) as standby:
        yield Pair(primary, standby)
