"""Parameters of the upkeep role (``skiplock.ports.UpkeepRole``): the counts' fold and
the maintenance lease. See ``_rows.py`` for the shared rules."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from skiplock.core import (
    QueueStats,
)
from skiplock.core.store import (
    PICKUP_SAMPLE,
    SAMPLE_RETENTION,
)

from ._rows import (
    duration_us,
)


def roll_up_params(key: int) -> dict[str, Any]:
    """The ``roll_up_counts`` query's arguments: the fold's lock and the sampling rule's
    bounds (``skiplock.core.store``)."""
    return {
        "key": key,
        "bound": QueueStats.SPLIT_BOUND,
        "pickups": PICKUP_SAMPLE,
        "keep": SAMPLE_RETENTION,
    }


def maintenance_params(name: str, every: timedelta) -> dict[str, Any]:
    return {"name": name, "every_us": duration_us(every), "always": every <= timedelta(0)}
