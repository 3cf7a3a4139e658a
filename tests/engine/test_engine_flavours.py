"""Flavour rules that the generated sync tests cannot express (they have no async def)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from skiplock import Engine, JobContext
from skiplock.adapters.memory import InMemoryJobStore

if TYPE_CHECKING:
    from skiplock.testing import FakeClock


def test_engine_sync_rejects_async_processors(clock: FakeClock) -> None:
    engine = Engine(InMemoryJobStore(clock=clock), clock=clock)
    with pytest.raises(TypeError, match="async"):

        @engine.processor("coro", transactional=False)
        async def coro(payload: Any, ctx: JobContext) -> None: ...

    assert engine.kinds == frozenset()
