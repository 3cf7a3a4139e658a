"""A throw-away primary with a streaming hot standby, for the tests of reads from a replica
(tests/replica; docs/replicas.md).

The primary is :func:`tests.pgcluster.cluster`'s server (initdb's defaults already allow
streaming replication: ``wal_level=replica``, wal senders, and ``pg_hba.conf`` trusting
replication connections from 127.0.0.1). The standby is a ``pg_basebackup -R`` copy of it
(``standby.signal`` and ``primary_conninfo`` written by ``-R``) started on another free
port, ``hot_standby`` on (the default): it answers reads and refuses writes. Both are
stopped by :class:`tests.pgcluster.Cluster` (the postmaster's PID from its data folder)
and removed afterwards.
Imports no database driver.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from tests.pgcluster import Cluster, cluster, free_port, wait_until

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
    """A new primary and a hot standby streaming from it, both started; stopped and
    removed afterwards."""
    with cluster() as primary:
        folder = Path(tempfile.mkdtemp(prefix="skiplock-standby-"))
        if primary.as_user:  # as root: the servers run as postgres
            shutil.chown(folder, "postgres", "postgres")
        standby = Cluster(folder=folder, port=free_port(), bin=primary.bin, as_user=primary.as_user)
        try:
            primary._run(
                str(primary.bin / "pg_basebackup"),
                "-D",
                str(folder / "data"),
                "-R",
                "-X",
                "stream",
                "--checkpoint=fast",
                "--no-sync",
                "-h",
                "127.0.0.1",
                "-p",
                str(primary.port),
                "-U",
                "postgres",
            )
            if os.geteuid() == 0:
                os.chmod(folder / "data", 0o700)
            standby.start()
            pair = Pair(primary, standby)
            wait_until(
                lambda: pair.sql(standby, "SELECT pg_is_in_recovery()") == "t",
                30,
                "the standby to be in recovery",
            )
            wait_until(
                lambda: pair.sql(primary, "SELECT count(*) FROM pg_stat_replication") == "1",
                30,
                "the standby to stream from the primary",
            )
            yield pair
        finally:
            with contextlib.suppress(subprocess.SubprocessError):
                if (folder / "data" / "postmaster.pid").exists():
                    standby.stop()
            shutil.rmtree(folder, ignore_errors=True)
