"""Concurrency primitives for the async flavour (hand-written twin of ``_compat.py``).

Generated sync code imports the same names from ``skiplock._compat``; keep both files'
names and signatures identical.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import functools
import itertools
import threading
import time
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from skiplock import _compat as _threads
from skiplock._compat import deadline_error, remaining

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Hashable
    from types import TracebackType

P = ParamSpec("P")
T = TypeVar("T")

STOP_SIGNALS = _threads.STOP_SIGNALS

Lock = asyncio.Lock
Event = asyncio.Event
Task = asyncio.Task

skip_sync = _threads.skip_sync


async def sleep(seconds: float) -> None:
    """Sleep without blocking other tasks."""
    await asyncio.sleep(seconds)


@contextlib.asynccontextmanager
async def held(lock: asyncio.Lock) -> AsyncIterator[None]:
    """``async with lock``, waiting no longer than the request's deadline
    (``skiplock._compat.request_deadline``): DatabaseUnavailableError once it passed."""
    left = remaining()
    if left is None:
        await lock.acquire()
    else:
        try:
            async with asyncio.timeout(left):
                await lock.acquire()
        except TimeoutError:
            raise deadline_error("still waiting for another call's schema check") from None
    try:
        yield
    finally:
        lock.release()


class Turns:
    """At most ``size`` holders at once, the others waiting in their order of arrival (a
    fair semaphore whose waiters give up at a time that may move on while they wait).
    A web door runs a request's work in a turn (``rest._door_async``)."""

    def __init__(self, size: int) -> None:
        self._free = size
        self._waiting: collections.deque[asyncio.Future[None]] = collections.deque()

    async def take(self, until: Callable[[], float]) -> bool:
        """Wait for a turn: True once it is the caller's (it must :meth:`give` it back),
        False once ``until()`` (a ``time.monotonic()`` time, asked again on each wake-up)
        passed first."""
        if self._free > 0 and not self._waiting:
            self._free -= 1
            return True
        ticket: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(ticket)
        try:
            while not ticket.done():
                left = until() - time.monotonic()
                if left <= 0:
                    self._waiting.remove(ticket)
                    return False
                # asyncio.wait leaves the ticket alone when it times out (wait_for would
                # cancel it).
                await asyncio.wait((ticket,), timeout=left)
        except BaseException:  # cancelled while waiting: the turn goes to the next one
            if ticket.done():
                self.give()
            else:
                self._waiting.remove(ticket)
            raise
        return True

    def give(self) -> None:
        """Give a turn back: to the longest waiting caller, if any. A ticket waiting is
        never done: only give() sets one (once it left the queue), and a caller that
        gives up (its time passed, cancelled) takes its own out."""
        if self._waiting:
            self._waiting.popleft().set_result(None)
        else:
            self._free += 1


class Flights:
    """Concurrent calls of one read share it: a caller joins the read of its key that
    started after it arrived; one that started before (it may miss a change the caller
    made just before) is waited out, then the caller starts the next read or joins it.
    Every answer comes from a read that started after its caller arrived; N callers at
    once cost one or two reads, not N. The read runs in a task of its own (with the
    context of the caller that started it), so no caller's cancellation stops it."""

    def __init__(self) -> None:
        self._flights: dict[Hashable, tuple[int, asyncio.Task[Any]]] = {}
        self._arrivals = itertools.count()

    async def share(self, key: Hashable, read: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """``read()``'s result, shared with the concurrent calls of ``key``."""
        arrived = next(self._arrivals)
        while True:
            flight = self._flights.get(key)
            if flight is None or flight[1].done():
                task = asyncio.get_running_loop().create_task(read())
                flight = (next(self._arrivals), task)
                self._flights[key] = flight
                task.add_done_callback(functools.partial(self._landed, key, flight))
            started, task = flight
            if started > arrived:
                return await asyncio.shield(task)
            await asyncio.wait((task,))

    def _landed(self, key: Hashable, flight: tuple[int, asyncio.Task[Any]], task: Any) -> None:
        if self._flights.get(key) is flight:
            del self._flights[key]
        if not task.cancelled():
            task.exception()  # retrieved: its callers (if any are left) raise it


async def wait_event(event: asyncio.Event, timeout: float | None) -> bool:
    """Wait until ``event`` is set or ``timeout`` passes; True if it was set."""
    if timeout is None:
        await event.wait()
        return True
    if event.is_set():
        return True
    # asyncio.timeout, not wait_for: on Python 3.11 wait_for runs the wait in a task of
    # its own, two more turns of the event loop before a woken waiter runs (a claim
    # after a NOTIFY, the completer after an outcome).
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return event.is_set()
    return True


def spawn(fn: Callable[P, Coroutine[Any, Any, T]], *args: P.args, **kwargs: P.kwargs) -> Task[T]:
    """Run ``fn(*args)`` concurrently; ``join()`` waits for it."""
    return asyncio.get_running_loop().create_task(fn(*args, **kwargs))


def blocking_caller(fn: Callable[[], Coroutine[Any, Any, T]]) -> Callable[[float], T]:
    """A function other threads call to run ``fn()`` on the running event loop and wait
    up to ``timeout`` seconds for its result (then TimeoutError, and the call is
    cancelled). Called from the loop's own thread it raises RuntimeError: waiting there
    would block the loop it waits for."""
    loop = asyncio.get_running_loop()

    def call(timeout: float) -> T:
        try:
            current: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            current = None
        if current is loop:
            raise RuntimeError("cannot wait for an event loop's call from inside that loop")
        coro = fn()
        try:
            future = asyncio.run_coroutine_threadsafe(coro, loop)
        except RuntimeError:  # the loop is closed
            coro.close()
            raise
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise

    return call


async def join(task: Task[T]) -> T:
    """Wait for a spawned task and return its result."""
    return await task


async def gather(*aws: Awaitable[T]) -> list[T]:
    """Wait for all, in order."""
    return list(await asyncio.gather(*aws))


# ---- added for the engine's workers ----------------------------------------------------

#: Which flavour this is; a plain ``bool`` (not a literal) so checkers see both branches.
IS_ASYNC: bool = True


class ThreadSafeEvent:
    """An ``asyncio.Event`` that may also be set from other threads.

    It belongs to the event loop that first clears or waits on it; before that, setting
    it only marks it set (nothing can be waiting yet).
    """

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: int | None = None
        self._event = asyncio.Event()

    def _bind(self) -> None:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._thread = threading.get_ident()

    def set(self) -> None:
        """Set the event (thread-safe); a no-op once the loop is closed."""
        loop = self._loop
        # The loop's own thread sets it directly. The thread is compared, not the running
        # loop: this runs several times per job, and asking for the running loop costs
        # more (a getpid() per call on Python 3.11).
        if loop is None or threading.get_ident() == self._thread:
            self._event.set()
            return
        with contextlib.suppress(RuntimeError):  # loop closed: nobody waits any more
            loop.call_soon_threadsafe(self._event.set)

    def clear(self) -> None:
        """Reset the event (call from the loop's thread)."""
        self._bind()
        self._event.clear()

    def is_set(self) -> bool:
        """True while set."""
        return self._event.is_set()

    async def wait(self, timeout: float | None = None) -> bool:
        """Wait until set or ``timeout`` passes; True if it was set."""
        self._bind()
        return await wait_event(self._event, timeout)


class Interruptible(_threads.InterruptGuard):
    """A region of code (a job's processor call) that another task or thread may interrupt.

    :meth:`interrupt` records an error and cancels the task running :meth:`region` (and
    raises the error's type in a thread started by :meth:`call_blocking`); the region then
    raises the recorded error instance, also when the body swallowed the cancellation.
    Outside the region the error is only recorded; entering the region afterwards raises
    it at once.
    """

    def __init__(self) -> None:
        super().__init__()
        self._task: asyncio.Task[Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._cancelled = False
        self._blocking: _threads.Interruptible | None = None

    def _interrupted(self, error: BaseException) -> Callable[[], None]:
        # Read under the lock, delivered after it is released.
        loop, blocking = self._loop, self._blocking

        def deliver() -> None:
            if blocking is not None:
                blocking.interrupt(error)
            if loop is not None:
                with contextlib.suppress(RuntimeError):  # loop closed
                    loop.call_soon_threadsafe(self._cancel_region)

        return deliver

    def _cancel_region(self) -> None:
        # Runs in the loop's thread, like region(); the task is suspended inside the region
        # or has left it (then _task is None).
        if self._task is not None and not self._cancelled:
            self._cancelled = True
            self._task.cancel()

    def region(
        self,
        timeout: float | None = None,
        timeout_error: Callable[[], BaseException] | None = None,
    ) -> _Region:
        """Run the body interruptibly (``async with guard.region():``); after ``timeout``
        seconds interrupt it with ``timeout_error()`` (default: ``TimeoutError``)."""
        return _Region(self, timeout, timeout_error)

    async def call_blocking(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Call a blocking function in a new thread; :meth:`interrupt` also raises into it.

        An interrupted call stops being awaited at once; the thread ends when the raised
        error reaches it (a thread blocked in C code runs on until that call returns).
        """
        loop = asyncio.get_running_loop()
        # The outcome travels as a result and is raised here: a future holding an error
        # that is no Exception (GeneratorExit, SystemExit, ...) is not raised faithfully.
        future: asyncio.Future[tuple[T | None, BaseException | None]] = loop.create_future()
        blocking = _threads.Interruptible()

        def deliver(outcome: tuple[T | None, BaseException | None]) -> None:
            if not future.done():
                future.set_result(outcome)

        def run() -> None:
            try:
                with blocking.region():
                    result = fn(*args, **kwargs)
            except BaseException as exc:
                outcome: tuple[T | None, BaseException | None] = (None, exc)
            else:
                outcome = (result, None)
            with contextlib.suppress(RuntimeError):  # loop closed: nobody waits for it
                loop.call_soon_threadsafe(deliver, outcome)

        with self._lock:
            if self._error is not None:
                raise self._error
            self._blocking = blocking
        try:
            # In a copy of this task's context: the processor sees the job's context
            # variables (skiplock's current_job(), a tracer's current span).
            context = contextvars.copy_context()
            threading.Thread(
                target=context.run, args=(run,), daemon=True, name=f"skiplock-{fn!r}"[:60]
            ).start()
            result, error = await future
            if error is not None:
                raise error
            return result  # type: ignore[return-value]
        finally:
            with self._lock:
                self._blocking = None


class _Region:
    """The body of :meth:`Interruptible.region`: a class, not a generator-based context
    manager, because it wraps every processor call (the worker's hot path)."""

    __slots__ = ("_guard", "_handle", "_make", "_task", "_timeout")

    def __init__(
        self,
        guard: Interruptible,
        timeout: float | None,
        timeout_error: Callable[[], BaseException] | None,
    ) -> None:
        self._guard = guard
        self._timeout = timeout
        self._make = timeout_error
        self._task: asyncio.Task[Any] | None = None
        self._handle: asyncio.TimerHandle | None = None

    async def __aenter__(self) -> None:
        guard = self._guard
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("Interruptible.region() needs a running task")
        loop = task.get_loop()
        with guard._lock:
            if guard._error is not None:
                raise guard._error
            guard._task, guard._loop = task, loop
        self._task = task
        timeout = self._timeout
        if timeout is not None:
            make = self._make or (lambda: TimeoutError(f"timed out after {timeout} s"))
            self._handle = loop.call_later(timeout, lambda: guard.interrupt(make()))

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        guard, task = self._guard, self._task
        assert task is not None
        if self._handle is not None:
            self._handle.cancel()
        with guard._lock:
            guard._task = None
        error = guard._current()
        if exc is not None:
            if error is None or exc is error:
                return False
            # Take back our own cancellation; a cancellation from elsewhere still counts.
            if guard._cancelled and task.uncancel() > 0:
                return False
            raise error from (None if isinstance(exc, asyncio.CancelledError) else exc)
        if error is not None:
            if guard._cancelled:
                task.uncancel()
            raise error
        return False


#: The same in both flavours: signal handlers are the main thread's, whatever runs there.
replace_signal_handlers = _threads.replace_signal_handlers


def install_signal_handlers(
    callback: Callable[[int], object],
    signums: tuple[int, ...] = STOP_SIGNALS,
    *,
    give_up_after: int | None = None,
) -> Callable[[], None]:
    """Call ``callback(signum)`` on these signals (in the running loop); returns an
    uninstaller that puts the previous handlers back exactly.

    The handlers are Python-level (``signal.signal``, see :func:`replace_signal_handlers`),
    so whatever was there before comes back as it was; the loop's own handlers
    (``loop.add_signal_handler``) are not touched and keep being called. The
    ``give_up_after``-th signal does not call back: it cancels the task that installed
    the handlers (cleanup that hangs can always be abandoned). Does nothing outside the
    main thread.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    received = itertools.count(1)

    def on_signal(signum: int) -> None:
        if give_up_after is not None and next(received) >= give_up_after and task is not None:
            task.cancel()
            return
        callback(signum)

    def handler(signum: int, frame: object) -> None:
        # Runs in the main thread between two bytecodes of whatever runs there; the
        # callback runs in the loop, which call_soon_threadsafe also wakes from its wait.
        with contextlib.suppress(RuntimeError):  # loop closed: nothing left to stop
            loop.call_soon_threadsafe(on_signal, signum)

    return replace_signal_handlers(signums, handler)


async def cancel_and_join(task: Task[T]) -> None:
    """Cancel a helper task and wait until it has finished."""
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        if (current := asyncio.current_task()) is not None and current.cancelling():
            raise
