"""Parameters of the workers role (``skiplock.ports.WorkersRole``): registration,
heartbeats and stale-claim recovery. See ``_rows.py`` for the shared rules."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from skiplock.core import (
    MAX_ERROR_LENGTH,
    STALE_MARK,
    WorkerInfo,
)

from ._rows import (
    duration_us,
    sorted_or_none,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from datetime import timedelta


def worker_params(info: WorkerInfo) -> dict[str, Any]:
    return {
        "id": info.id,
        "host": info.host,
        "pid": info.pid,
        "kinds": sorted_or_none(info.kinds),
        "tenants": sorted_or_none(info.tenants),
        "slots": info.slots,
        "version": info.version,
    }


def recover_params(default_ttl: timedelta, ttls: Mapping[str, timedelta]) -> dict[str, Any]:
    kinds = sorted(ttls)
    return {
        "default_ttl_us": duration_us(default_ttl),
        "ttl_kinds": kinds,
        "ttls_us": [duration_us(ttls[k]) for k in kinds],
        "mark": STALE_MARK,
        "max_error": MAX_ERROR_LENGTH,
    }


def silent_workers_params(default_ttl: timedelta, ttls: Mapping[str, timedelta]) -> dict[str, Any]:
    """Parameters of ``delete_silent_workers``: silent for longer than every TTL."""
    return {"longest_us": duration_us(max([default_ttl, *ttls.values()]))}


def heartbeat_params(
    worker_id: str, running: Sequence[int], release_unheld: bool = False
) -> dict[str, Any]:
    return {
        "id": worker_id,
        "running": [int(job_id) for job_id in running],
        "release": release_unheld,
    }
