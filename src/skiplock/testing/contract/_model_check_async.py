"""Contract test: random sequences of port calls checked against the core's model (async
source; ``_model_check.py`` is its generated twin).

The state machine of ``_machine.py`` drives the store and a model built from the core's
rules side by side (see :func:`~._machine.check_store_against_model`). Mixed into
:class:`~.store_async.AsyncJobStoreContract`.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, ClassVar, cast

from . import _support_async as kit

if TYPE_CHECKING:
    from skiplock.ports import AsyncJobStore, JobStore
    from skiplock.testing import FakeClock


if True:  # ASYNC
    # An async store's methods as blocking calls on its loop: the state machine runs in
    # a worker thread and calls them.
    from skiplock.adapters._blocking import BlockingStore


class AsyncModelCheckContract(kit.AsyncContractBase):
    """Random operations on the store, each compared with the core's model."""

    #: The state machine's budget: how many random sequences it runs (the same ones every
    #: run), each of at most ``model_steps`` port calls. Raise them to search longer.
    model_examples: ClassVar[int] = 25
    model_steps: ClassVar[int] = 30

    async def test_random_operations_match_the_core_model(
        self, store: AsyncJobStore, clock: FakeClock
    ) -> None:
        from ._machine import check_store_against_model  # needs Hypothesis

        controlled = clock if self.capabilities.controllable_clock else None
        if True:  # ASYNC
            blocking = cast("JobStore", BlockingStore(store, asyncio.get_running_loop()))
            await asyncio.to_thread(
                check_store_against_model,
                blocking,
                clock=controlled,
                max_examples=self.model_examples,
                steps=self.model_steps,
            )
        else:
            check_store_against_model(
                store, clock=controlled, max_examples=self.model_examples, steps=self.model_steps
            )
