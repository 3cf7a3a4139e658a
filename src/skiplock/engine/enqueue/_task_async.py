"""Typed task handles: one kind's enqueue API with its payload type (async source).

``_task.py`` is its generated sync twin (``Task``).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, Unpack

from skiplock.core import ValidationError
from skiplock.core.store import shown

from .._declaration import type_name
from .._inputs import Enqueue

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from datetime import datetime, timedelta

    from skiplock.core import EnqueueResult

    from .._declaration import TaskDef
    from .._inputs import EnqueueOptions, JobOptions
    from ..periodic._rules import ScheduleOptions

P = TypeVar("P")


class AsyncEnqueuer(Protocol):
    """What a handle enqueues through: an :class:`AsyncEngine`."""

    def periodic(
        self, kind: str, *, payload: Any = None, **options: Unpack[ScheduleOptions]
    ) -> Callable[[Any], Any]:
        """Declare a schedule for ``kind``."""
        ...

    async def enqueue_many(
        self, items: Iterable[Enqueue], *, connection: Any = None
    ) -> list[EnqueueResult]:
        """Create the jobs ``items`` in one store call."""
        ...


class AsyncTask(Generic[P]):
    """A handle on one kind of an :class:`AsyncEngine`, typed by its payload type ``P``.

    ``@engine.task(...)`` returns one bound to its processor, ``engine.declare(decl)`` an
    enqueue-only one. Its methods are the engine's enqueue methods with the kind filled
    in and the payload typed as ``P``, so a type checker rejects a payload of another
    type; unset ``priority`` and ``max_attempts`` take the kind's declared defaults.

    Calling the handle calls the processor function with the same arguments (to test
    or reuse it); the call is typed by its payload only (the result is ``Any``), and
    ``task.fn`` is the function itself. Calling an enqueue-only handle is a TypeError.
    """

    def __init__(
        self, engine: AsyncEnqueuer, declaration: TaskDef[P], fn: Callable[..., Any] | None
    ) -> None:
        self._engine = engine
        self._declaration = declaration
        self._fn = fn
        if fn is not None:
            # Name, docstring and __wrapped__ (so inspect.signature shows the function's);
            # not the function's __dict__, which could hold another handle's fields.
            functools.update_wrapper(self, fn, updated=())

    @property
    def kind(self) -> str:
        """The kind of the jobs this handle enqueues."""
        return self._declaration.kind

    @property
    def declaration(self) -> TaskDef[P]:
        """The kind's declaration: payload type and defaults."""
        return self._declaration

    @property
    def fn(self) -> Callable[..., Any] | None:
        """The processor function, or None for an enqueue-only handle."""
        return self._fn

    def __call__(self, payload: P, /, *args: Any, **kwargs: Any) -> Any:
        """Call the processor function with these arguments."""
        if self._fn is None:
            raise TypeError(
                f"task {self.kind!r} is enqueue-only here: no processor is bound to it in "
                "this engine (engine.task(declaration) binds one)"
            )
        return self._fn(payload, *args, **kwargs)

    def __repr__(self) -> str:
        bound = "" if self._fn is None else f" -> {getattr(self._fn, '__qualname__', self._fn)}"
        payload = type_name(self._declaration.payload_type)
        return f"<{type(self).__name__} {self.kind!r}[{payload}]{bound}>"

    # ---- enqueue ----------------------------------------------------------------------

    async def enqueue(
        self,
        payload: P,
        *,
        available_at: datetime | None = None,
        delay: timedelta | float | None = None,
        connection: Any = None,
        **options: Unpack[JobOptions],
    ) -> EnqueueResult:
        """Create one job of this kind (as :meth:`AsyncEngine.enqueue`; ``options``:
        :class:`~skiplock.JobOptions`)."""
        item = Enqueue(self.kind, payload, available_at=available_at, delay=delay, **options)
        return (await self._engine.enqueue_many([item], connection=connection))[0]

    async def enqueue_at(
        self, when: datetime, payload: P, **options: Unpack[EnqueueOptions]
    ) -> EnqueueResult:
        """Create one job not claimed before ``when`` (as :meth:`AsyncEngine.enqueue_at`)."""
        return await self.enqueue(payload, available_at=when, **options)

    async def enqueue_after(
        self, delay: timedelta | float, payload: P, **options: Unpack[EnqueueOptions]
    ) -> EnqueueResult:
        """Create one job due ``delay`` after the store's now (as
        :meth:`AsyncEngine.enqueue_after`)."""
        return await self.enqueue(payload, delay=delay, **options)

    def item(
        self,
        payload: P,
        *,
        available_at: datetime | None = None,
        delay: timedelta | float | None = None,
        **options: Unpack[JobOptions],
    ) -> Enqueue:
        """One job of this kind for :meth:`enqueue_many` (or the engine's, beside jobs of
        other kinds): a typed :class:`~skiplock.Enqueue` (``options``:
        :class:`~skiplock.JobOptions`)."""
        return Enqueue(self.kind, payload, available_at=available_at, delay=delay, **options)

    async def enqueue_many(
        self, items: Iterable[P | Enqueue], *, connection: Any = None
    ) -> list[EnqueueResult]:
        """Create many jobs of this kind in one store call, all or none (as
        :meth:`AsyncEngine.enqueue_many`); results in input order.

        Each item is a payload, or an :meth:`item` with its own options.
        """
        batch: list[Enqueue] = []
        for index, item in enumerate(items):
            if not isinstance(item, Enqueue):
                batch.append(Enqueue(self.kind, item))
            elif item.kind == self.kind:
                batch.append(item)
            else:
                raise ValidationError(
                    f"item {index}: kind {shown(item.kind)} is not this task's kind "
                    f"{self.kind!r} (build its items with task.item(...))"
                )
        return await self._engine.enqueue_many(batch, connection=connection)

    def periodic(self, payload: P, **options: Unpack[ScheduleOptions]) -> None:
        """Enqueue a job of this kind with ``payload`` at every tick of a schedule: the
        engine's :meth:`AsyncEngine.periodic` with the kind filled in and the payload
        typed (``options``: :class:`~skiplock.ScheduleOptions`; see docs/periodic.md)."""
        self._engine.periodic(self.kind, payload=payload, **options)
