"""Parameters of the upkeep role (``skiplock.ports.UpkeepRole``): the counts' fold,
the maintenance lease and the retention view (a read of what upkeep purges). See
``_rows.py`` for the shared rules."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from skiplock.core import QueueStats, store

from ._rows import duration_us, utc
from ._sql import quote_identifier

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence


def roll_up_params(key: int) -> dict[str, Any]:
    """The ``roll_up_counts`` query's arguments: the fold's lock and the sampling rule's
    bounds (``skiplock.core.store``)."""
    return {
        "key": key,
        "bound": QueueStats.SPLIT_BOUND,
        "pickups": store.PICKUP_SAMPLE,
        "keep": store.SAMPLE_RETENTION,
    }


def maintenance_params(name: str, every: timedelta) -> dict[str, Any]:
    return {"name": name, "every_us": duration_us(every), "always": every <= timedelta(0)}


def retention_params(
    schema: str, jobs: timedelta | None, audit: timedelta | None
) -> dict[str, Any]:
    """The ``retention`` query's arguments (a NULL window: that purge is off)."""
    return {
        "jobs_us": None if jobs is None else duration_us(jobs),
        "audit_us": None if audit is None else duration_us(audit),
        "bound": store.DUE_COUNT_BOUND,
        "audit_table": f"{quote_identifier(schema)}.audit",
    }


def retention_from_rows(
    row: Mapping[str, Any],
    runs: Sequence[Mapping[str, Any]],
    jobs: timedelta | None,
    audit: timedelta | None,
) -> store.Retention:
    """The view from the ``retention`` row and the ``purge_runs`` rows."""
    last = {
        str(r["name"]): store.PurgeRun(
            utc(r["finished_at"]), float(r["seconds"]), int(r["removed"])
        )
        for r in runs
    }
    return store.Retention(
        now=utc(row["now"]),
        windows=(
            store.RetentionWindow(
                store.JOBS_PURGE, jobs, _count(row["jobs_due"]), False, last.get(store.JOBS_PURGE)
            ),
            store.RetentionWindow(
                store.AUDIT_PURGE,
                audit,
                _count(row["audit_due"]),
                bool(row["audit_estimated"]),
                last.get(store.AUDIT_PURGE),
            ),
        ),
    )


def _count(value: Any) -> int | None:
    return None if value is None else int(value)
