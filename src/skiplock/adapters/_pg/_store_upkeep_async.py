"""The upkeep role of the PostgreSQL job store (async source; twin generated).

:class:`AsyncPgUpkeepRole` implements ``skiplock.ports.AsyncUpkeepRole``: the fold of the
running counts (and the queue samples it takes), the cluster-wide maintenance lease and
retention of jobs and audit events, in batches of one transaction each. Contract kit
(``skiplock.testing.contract``): the maintenance and retention tests of
``AsyncWorkersContract`` (a workers-role mixin otherwise), ``AsyncHistoryContract`` and
``AsyncRecountContract`` (which read what the fold keeps through the reads role), the
key-memory tests of ``AsyncIdempotencyContract`` and ``test_purge_audit_*`` of
``AsyncAuditContract``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from skiplock.core import ValidationError
from skiplock.core.store import AUDIT_PURGE, JOBS_PURGE

from ._driver_async import TX, C
from ._ops import purge_audit_batch_steps, purge_batch_steps
from ._rows_upkeep import maintenance_params, roll_up_params
from ._sql import lock_key
from ._store_base_async import AsyncPgStoreBase

if TYPE_CHECKING:
    from collections.abc import Callable, Generator
    from datetime import timedelta

    from ._migrate import Rows, Step


class AsyncPgUpkeepRole(AsyncPgStoreBase[C, TX]):
    """``AsyncUpkeepRole`` of the PostgreSQL store (see the module)."""

    async def roll_up_counts(self) -> int:
        """Fold the count deltas into the totals (one transaction under an advisory lock;
        0 while another session folds) and take this minute's queue samples unless taken
        (``sample_queues``, migration 0017)."""
        async with self._use(None) as conn:
            [row] = await self._execute(
                conn, "roll_up_counts", roll_up_params(lock_key(self._schema, "counts"))
            )
        return int(row["folded"] or 0)

    async def try_maintenance(self, name: str, every: timedelta) -> bool:
        """Take the right to run maintenance task ``name`` now, once per ``every`` across
        the cluster (one upsert on the ``maintenance`` table, database clock)."""
        async with self._use(None) as conn:
            rows = await self._execute(conn, "try_maintenance", maintenance_params(name, every))
        return bool(rows)

    async def purge(
        self,
        *,
        older_than: timedelta,
        archive: bool,
        batch_size: int,
        key_window: timedelta | None = None,
    ) -> int:
        """Delete (or archive) old succeeded jobs in batches of ``batch_size``, one
        transaction each; returns the number of jobs, 0 if another node is purging right
        now."""
        _check_batch(batch_size)
        schema = self._schema
        return await self._purge_batches(
            lambda: purge_batch_steps(
                schema,
                older_than=older_than,
                archive=archive,
                batch_size=batch_size,
                key_window=key_window,
            ),
            batch_size,
            JOBS_PURGE,
        )

    async def purge_audit(self, *, older_than: timedelta, batch_size: int) -> int:
        """Delete the audit events older than ``older_than`` (J10) in batches of
        ``batch_size``, one transaction each, through the ``at`` index; returns how many,
        0 if another node is purging right now."""
        _check_batch(batch_size)
        schema = self._schema
        return await self._purge_batches(
            lambda: purge_audit_batch_steps(schema, older_than=older_than, batch_size=batch_size),
            batch_size,
            AUDIT_PURGE,
        )

    async def _purge_batches(
        self, batch: Callable[[], Generator[Step, Rows, int | None]], batch_size: int, name: str
    ) -> int:
        """Run retention batches, one transaction each, until one comes back short (or
        another node holds the lock); returns how many rows they deleted. A run that did
        at least one batch is recorded as purge ``name``'s last (``purge_runs``, 0019)."""
        total, ran = 0, False
        started = time.monotonic()
        while True:
            async with self._use(None, atomic=True) as conn:
                count = await self._run(conn, batch())
            if count is None:
                break
            total += count
            ran = True
            if count < batch_size:
                break
        if ran:
            seconds = time.monotonic() - started
            params = {"name": name, "seconds": seconds, "removed": total}
            async with self._use(None) as conn:
                await self._execute(conn, "record_purge", params)
        return total


def _check_batch(batch_size: int) -> None:
    if batch_size < 1:
        raise ValidationError(f"batch_size must be >= 1, got {batch_size}")
