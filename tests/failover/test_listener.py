"""A worker's LISTEN connection leaves a primary demoted in place (issue 43, point 2).

A primary demoted in place (``default_transaction_read_only`` on and reloaded: the old
primary coming back read-only) keeps its sessions, so a notifier listening there is never
cut off, and nothing NOTIFYs there any more: the worker would poll until that connection
dropped. The notifier's periodic ping asks whether its server answers read-only and, if
so, reconnects through its multi-host DSN (``target_session_attrs=read-write``) to the
promoted standby. Both drivers' notifiers, on a primary and a standby of the test's own
(tests/pgcluster.py).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import pytest

from skiplock.adapters.asyncpg import AsyncpgNotifier
from skiplock.adapters.asyncpg._driver import Connector
from skiplock.adapters.psycopg import AsyncPsycopgNotifier
from tests.pgcluster import cluster, standby_of, wait_until

if TYPE_CHECKING:
    from skiplock.adapters._pg._notify_async import AsyncPgNotifierBase
    from tests.pgcluster import Cluster

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.anyio]

CHANNEL = "skiplock_failover"
#: The notifiers' ping interval here (seconds; 30 by default).
PING = 0.2


def _listens_on(server: Cluster, notifier: AsyncPgNotifierBase) -> bool:
    """Whether ``notifier``'s connection is up and its backend is one of ``server``'s."""
    pid = notifier.backend_pid  # type: ignore[attr-defined]
    if pid is None or not notifier.connected:
        return False
    query = (
        f"SELECT count(*) FROM pg_stat_activity WHERE pid = {int(pid)} "
        "AND backend_type = 'client backend'"
    )
    return server.query(query) == ["1"]


async def _wait_listening(server: Cluster, notifiers: list[AsyncPgNotifierBase]) -> None:
    """Keep the notifiers waiting (their pings run only in :meth:`wait`) until every one
    listens on ``server``; AssertionError after 20 s."""
    deadline = time.monotonic() + 20
    while not all(_listens_on(server, n) for n in notifiers):
        assert time.monotonic() < deadline, "a listener stayed on the old primary"
        await asyncio.gather(*(n.wait(PING) for n in notifiers))


async def test_a_listener_leaves_a_primary_demoted_in_place() -> None:
    with cluster() as primary, standby_of(primary) as standby:
        dsn = (
            f"postgresql://postgres@127.0.0.1:{primary.port},127.0.0.1:{standby.port}"
            "/postgres?target_session_attrs=read-write"
        )
        notifiers: list[AsyncPgNotifierBase] = [
            AsyncPsycopgNotifier(dsn, channel=CHANNEL, ping_interval=PING),
            AsyncpgNotifier(
                Connector(dsn=dsn, pool=None, connect_kwargs={}),
                channel=CHANNEL,
                ping_interval=PING,
            ),
        ]
        try:
            for notifier in notifiers:
                await notifier.start()
            await _wait_listening(primary, notifiers)
            primary.query("ALTER SYSTEM SET default_transaction_read_only = on")
            primary.query("SELECT pg_reload_conf()")
            wait_until(
                lambda: primary.query("SHOW default_transaction_read_only") == ["on"],
                10,
                "the old primary to answer read-only",
            )
            standby.promote()
            await _wait_listening(standby, notifiers)
            # The old primary still answers (read-only): the move was the ping's doing.
            assert primary.accepts()
            # Drain the reconnects' catch-up wakeups, then a NOTIFY on the new primary
            # wakes every notifier.
            for notifier in notifiers:
                while await notifier.wait(0.05):
                    pass
            standby.query(f"NOTIFY {CHANNEL}")
            woken = await asyncio.gather(*(n.wait(5.0) for n in notifiers))
            assert woken == [True, True]
        finally:
            for notifier in notifiers:
                await notifier.close()
