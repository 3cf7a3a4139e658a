"""Concurrency primitives for the sync flavour (hand-written twin of ``_compat_async.py``)."""

from __future__ import annotations

import collections
import ctypes
import itertools
import signal
import threading
import time
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar

from skiplock.core import DatabaseUnavailableError

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable, Iterator

P = ParamSpec("P")
T = TypeVar("T")

#: The signals that stop a worker (shared by both flavours).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

Lock = threading.Lock
Event = threading.Event


# ---- the deadline of a web request's database work --------------------------------------
# A web door (REST API, dashboard) answers each request within ``Settings.request_timeout``
# (docs/health.md, "A database that does not answer"): it runs the request inside
# request_deadline(), and the PostgreSQL stores bound what they wait for on the request's
# behalf by remaining() -- a pooled connection, the schema check's lock, each statement's
# answer -- raising deadline_error() once it passed. Outside a request (workers, the CLI)
# no deadline is set and nothing changes. It is a context variable: a request's asyncio
# tasks inherit it; a thread does not, and a pool opened during a request must not
# either (no_deadline()).

#: The monotonic time the current request must be answered by, and its length (seconds).
_DEADLINE: ContextVar[tuple[float, float] | None] = ContextVar("skiplock_deadline", default=None)


@contextmanager
def request_deadline(
    seconds: float, *, margin: float = 0.0, since: float | None = None
) -> Iterator[float]:
    """Set the deadline ``seconds`` from now (or from ``since``, a ``time.monotonic()``
    time) for the block, ``margin`` seconds earlier for the stores (time to answer once
    they gave up); an earlier one set around it stays. Yields the deadline
    (``time.monotonic()`` clock)."""
    outer = _DEADLINE.get()
    at = (time.monotonic() if since is None else since) + seconds - margin
    if outer is not None and outer[0] <= at:
        yield outer[0]
        return
    token = _DEADLINE.set((at, seconds))
    try:
        yield at
    finally:
        _DEADLINE.reset(token)


@contextmanager
def no_deadline() -> Iterator[None]:
    """No deadline in the block: for work that outlives the request which happens to
    start it (a pool opened on first use, whose tasks would inherit the deadline)."""
    token = _DEADLINE.set(None)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def remaining() -> float | None:
    """Seconds left until the current deadline (0 once it passed), or None without one."""
    current = _DEADLINE.get()
    if current is None:
        return None
    return max(0.0, current[0] - time.monotonic())


def bounded(timeout: float | None) -> float | None:
    """``timeout`` (None: no limit) cut to what is left of the deadline."""
    left = remaining()
    if left is None:
        return timeout
    return left if timeout is None else min(timeout, left)


def deadline_error(why: str | None = None) -> DatabaseUnavailableError:
    """The error of a wait the deadline ended: the database did not answer in time."""
    current = _DEADLINE.get()
    seconds = f" ({current[1]:g} s)" if current is not None else ""
    extra = f": {' '.join(why.split())}" if why else ""
    return DatabaseUnavailableError(
        f"the database did not answer within the request's deadline{seconds}{extra}"
    )


def skip_sync(fn: Callable[P, T]) -> Callable[P, T]:
    """Mark a function that has no sync twin: tools/unasync.py drops its definition, so
    generated code never calls it (shared by both flavours)."""
    return fn


def sleep(seconds: float) -> None:
    """Sleep the current thread."""
    time.sleep(seconds)


def wait_event(event: threading.Event, timeout: float | None) -> bool:
    """Wait until ``event`` is set or ``timeout`` passes; True if it was set."""
    return event.wait(timeout)


@contextmanager
def held(lock: threading.Lock) -> Iterator[None]:
    """``with lock``, waiting no longer than the request's deadline
    (``skiplock._compat.request_deadline``): DatabaseUnavailableError once it passed."""
    left = remaining()
    if not lock.acquire(timeout=-1 if left is None else left):
        raise deadline_error("still waiting for another call's schema check")
    try:
        yield
    finally:
        lock.release()


class Turns:
    """At most ``size`` holders at once, the others waiting in their order of arrival (a
    fair semaphore whose waiters give up at a time that may move on while they wait).
    A web door runs a request's work in a turn (``rest._door``)."""

    def __init__(self, size: int) -> None:
        self._lock = threading.Lock()
        self._free = size
        self._waiting: collections.deque[threading.Event] = collections.deque()

    def take(self, until: Callable[[], float]) -> bool:
        """Wait for a turn: True once it is the caller's (it must :meth:`give` it back),
        False once ``until()`` (a ``time.monotonic()`` time, asked again on each wake-up)
        passed first."""
        with self._lock:
            if self._free > 0 and not self._waiting:
                self._free -= 1
                return True
            ticket = threading.Event()
            self._waiting.append(ticket)
        try:
            while True:
                left = until() - time.monotonic()
                if left > 0 and ticket.wait(left):
                    return True
                with self._lock:
                    if ticket.is_set():
                        return True
                    if until() <= time.monotonic():
                        self._waiting.remove(ticket)
                        return False
        except BaseException:
            with self._lock:
                handed = ticket.is_set()
                if not handed:
                    self._waiting.remove(ticket)
            if handed:
                self.give()
            raise

    def give(self) -> None:
        """Give a turn back: to the longest waiting caller, if any."""
        with self._lock:
            if self._waiting:
                self._waiting.popleft().set()
            else:
                self._free += 1


class _Flight:
    """One read of :class:`Flights`: when it started (an arrival number), its outcome."""

    def __init__(self, started: int) -> None:
        self.started = started
        self.landed = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None


class Flights:
    """Concurrent calls of one read share it: a caller joins the read of its key that
    started after it arrived; one that started before (it may miss a change the caller
    made just before) is waited out, then the caller starts the next read or joins it.
    Every answer comes from a read that started after its caller arrived; N callers at
    once cost one or two reads, not N. The read runs in the thread of the caller that
    started it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._flights: dict[Hashable, _Flight] = {}
        self._arrivals = itertools.count()

    def share(self, key: Hashable, read: Callable[[], T]) -> T:
        """``read()``'s result, shared with the concurrent calls of ``key``."""
        with self._lock:
            arrived = next(self._arrivals)
        while True:
            with self._lock:
                flight = self._flights.get(key)
                mine = flight is None
                if flight is None:
                    flight = self._flights[key] = _Flight(next(self._arrivals))
            if mine:
                return self._fly(key, flight, read)
            flight.landed.wait()
            if flight.started > arrived:
                if flight.error is not None:
                    raise flight.error
                return flight.value  # type: ignore[no-any-return]

    def _fly(self, key: Hashable, flight: _Flight, read: Callable[[], T]) -> T:
        try:
            flight.value = read()
        except BaseException as exc:
            flight.error = exc
            raise
        finally:
            with self._lock:
                if self._flights.get(key) is flight:
                    del self._flights[key]
            flight.landed.set()
        return flight.value  # type: ignore[no-any-return]


class Task(Generic[T]):
    """A thread running one function, with its result or exception kept for ``join``."""

    def __init__(self, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]):
        self._result: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn, args, kwargs), daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        try:
            self._result = fn(*args, **kwargs)
        except BaseException as exc:  # re-raised in join()
            self._error = exc

    def done(self) -> bool:
        return not self._thread.is_alive()

    def join(self, timeout: float | None = None) -> T:
        self._thread.join(timeout)
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[return-value]


def spawn(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> Task[T]:
    """Run ``fn(*args)`` in a thread; ``join()`` waits for it."""
    return Task(fn, args, kwargs)


def blocking_caller(fn: Callable[[], T]) -> Callable[[float], T]:
    """``fn`` with the async twin's signature: any thread may call it; the timeout is left
    to ``fn`` (a sync store bounds its own calls)."""

    def call(timeout: float) -> T:
        return fn()

    return call


def join(task: Task[T]) -> T:
    """Wait for a spawned thread and return its result."""
    return task.join()


def gather(*results: T) -> list[T]:
    """Sync calls already ran in order; keep the shape of the async API."""
    return list(results)


# ---- added for the engine's workers ----------------------------------------------------

#: Which flavour this is; a plain ``bool`` (not a literal) so checkers see both branches.
IS_ASYNC: bool = False

#: Longest single wait of the main thread on a :class:`ThreadSafeEvent` (seconds).
MAIN_THREAD_WAIT_SLICE = 0.1


class ThreadSafeEvent(threading.Event):
    """Used like ``asyncio.Event`` in the async twin; a ``threading.Event`` is already safe
    to set from any thread.

    In the main thread a long wait is cut into :data:`MAIN_THREAD_WAIT_SLICE` pieces:
    Python runs signal handlers only in the main thread, between bytecodes, and a signal
    the kernel delivers to another thread (say, the one that sent it with ``os.kill``)
    does not interrupt the main thread's wait. A worker draining in the main thread would
    otherwise see a second stop signal only when its drain timed out.
    """

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until set or ``timeout`` passes; True if it was set."""
        if threading.current_thread() is not threading.main_thread():
            return super().wait(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            piece = MAIN_THREAD_WAIT_SLICE
            if deadline is not None:
                piece = min(piece, deadline - time.monotonic())
                if piece <= 0:
                    return self.is_set()
            if super().wait(piece):
                return True


_set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc


def _raise_in_thread(thread_id: int, exc_type: type[BaseException] | None) -> None:
    # ``None`` clears a pending exception that was not delivered yet.
    target = None if exc_type is None else ctypes.py_object(exc_type)
    _set_async_exc(ctypes.c_ulong(thread_id), target)


class InterruptGuard:
    """What the sync and the async :class:`Interruptible` share: the first interrupt
    wins and records its error (under a lock); :meth:`_interrupted` delivers it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._error: BaseException | None = None

    @property
    def error(self) -> BaseException | None:
        """The error of the first :meth:`interrupt` (or timeout), else None."""
        return self._error

    def _current(self) -> BaseException | None:
        # A method call, so type checkers do not narrow across the yield.
        return self._error

    def interrupt(self, error: BaseException) -> bool:
        """Interrupt the region with ``error`` (thread-safe); False if already interrupted."""
        with self._lock:
            if self._error is not None:
                return False
            self._error = error
            deliver = self._interrupted(error)
        deliver()
        return True

    def _interrupted(self, error: BaseException) -> Callable[[], None]:
        """Called under the lock with the error just recorded: what delivers it to the
        region, run once the lock is released."""
        raise NotImplementedError


def _nothing() -> None:
    return None


class Interruptible(InterruptGuard):
    """A region of code (a job's processor call) that another thread may interrupt.

    :meth:`interrupt` records an error and raises its *type* inside the thread running
    :meth:`region` (``PyThreadState_SetAsyncExc``: delivered when that thread next runs
    Python bytecode, so a blocking C call delays it). The region then raises the recorded
    error instance, also when the body swallowed the injected one. Outside the region the
    error is only recorded; entering the region afterwards raises it at once. Nothing is
    ever raised into the thread after the region was left.
    """

    def __init__(self) -> None:
        super().__init__()
        self._thread: int | None = None

    def _interrupted(self, error: BaseException) -> Callable[[], None]:
        # Raised under the lock, so the region cannot be left in between.
        if self._thread is not None:
            _raise_in_thread(self._thread, type(error))
        return _nothing

    @contextmanager
    def region(
        self,
        timeout: float | None = None,
        timeout_error: Callable[[], BaseException] | None = None,
    ) -> Iterator[None]:
        """Run the body interruptibly; after ``timeout`` seconds interrupt it with
        ``timeout_error()`` (default: ``TimeoutError``)."""
        with self._lock:
            if self._error is not None:
                raise self._error
            self._thread = threading.get_ident()
        timer: threading.Timer | None = None
        if timeout is not None:
            make = timeout_error or (lambda: TimeoutError(f"timed out after {timeout} s"))
            timer = threading.Timer(timeout, lambda: self.interrupt(make()))
            timer.daemon = True
            timer.start()
        try:
            try:
                yield
            finally:
                if timer is not None:
                    timer.cancel()
                with self._lock:
                    self._thread = None
                    if self._current() is not None:
                        _raise_in_thread(threading.get_ident(), None)
        except BaseException as exc:
            error = self._current()
            if error is None or exc is error:
                raise
            raise error from exc
        error = self._current()
        if error is not None:
            raise error

    def call_blocking(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Call a blocking function (a plain call here; a thread in the async twin)."""
        return fn(*args, **kwargs)


def replace_signal_handlers(
    signums: tuple[int, ...], handler: Callable[[int, Any], object]
) -> Callable[[], None]:
    """Install ``handler`` for ``signums`` with ``signal.signal`` (main thread only);
    returns an idempotent uninstaller that puts back exactly the handlers found.

    A signal whose handler was set outside Python (``signal.getsignal`` is None) is left
    alone: that handler could not be put back. Shared by both flavours.
    """
    previous: dict[int, Any] = {}

    def uninstall() -> None:
        while previous:
            signum, before = previous.popitem()
            signal.signal(signum, before)

    try:
        for signum in signums:
            before = signal.getsignal(signum)
            if before is None:
                continue
            signal.signal(signum, handler)
            previous[signum] = before
    except BaseException:
        uninstall()
        raise
    return uninstall


def install_signal_handlers(
    callback: Callable[[int], object],
    signums: tuple[int, ...] = STOP_SIGNALS,
    *,
    give_up_after: int | None = None,
) -> Callable[[], None]:
    """Call ``callback(signum)`` (in a new thread) on these signals; returns an uninstaller
    that puts the previous handlers back exactly (:func:`replace_signal_handlers`).

    The ``give_up_after``-th signal does not call back: it raises ``KeyboardInterrupt`` in
    the main thread (cleanup that hangs can always be abandoned). Does nothing outside
    the main thread, where Python cannot install handlers. The callback runs in its own
    thread because a handler interrupting a thread that holds an ``Event``'s lock must not
    take that lock itself.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    received = itertools.count(1)

    def handler(signum: int, frame: object) -> None:
        if give_up_after is not None and next(received) >= give_up_after:
            raise KeyboardInterrupt
        threading.Thread(target=callback, args=(signum,), daemon=True).start()

    return replace_signal_handlers(signums, handler)


def cancel_and_join(task: Task[T]) -> None:
    """Stop a helper: threads cannot be cancelled, so wait for it to see its stop flag."""
    task.join()
