"""``worker``: run a worker of an engine until SIGTERM/SIGINT (or, with ``--until-idle``,
until nothing is due)."""

from __future__ import annotations

import asyncio
import importlib
import importlib.metadata
import logging
import os
import sys
import traceback
from typing import TYPE_CHECKING, Any

import attrs

from skiplock.core import ValidationError
from skiplock.engine import AsyncEngine, AsyncWorker, Engine, Settings, Worker
from skiplock.engine._logs import TEXT_FORMAT

from . import _options
from ._database import driver_errors
from ._errors import Failure, UsageError
from ._output import describe
from ._startup import StartupError, open_async, open_sync

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Mapping
    from types import ModuleType
    from wsgiref.simple_server import WSGIServer

    from skiplock.contrib.prometheus import PrometheusMetrics
    from skiplock.core import HealthSnapshot

PROMETHEUS_HINT = "pip install 'skiplock[prometheus]'"


@attrs.frozen
class AppEngine:
    """The engine a worker runs, and how errors name it (APP, or the door's command)."""

    engine: AsyncEngine | Engine
    label: str


def add_options(parser: argparse.ArgumentParser) -> None:
    """The options of ``worker`` in every door."""
    parser.add_argument(
        "--concurrency",
        type=_options.positive_int,
        metavar="N",
        help="job slots of this worker (default: SKIPLOCK_CONCURRENCY, else the engine's settings)",
    )
    parser.add_argument(
        "--kinds",
        type=_options.kinds,
        metavar="A,B",
        help="claim only these kinds (default: every kind with a processor)",
    )
    parser.add_argument(
        "--all-kinds",
        action="store_true",
        help="also claim kinds without a processor (they go to 'dead'); with --kinds: "
        "allow listing such kinds",
    )
    parser.add_argument(
        "--tenants",
        type=_options.split,
        metavar="T1,T2",
        help="claim only jobs of these tenants (default: any tenant; in Django a task's "
        "queue is its job's tenant)",
    )
    parser.add_argument(
        "--worker-id",
        metavar="ID",
        help="this worker's id in the workers table and its jobs' history "
        "(default: HOST/PID/RANDOM-HEX)",
    )
    parser.add_argument(
        "--until-idle",
        action="store_true",
        help="run the jobs that are due, then exit (no signal handling; for scripts and tests)",
    )
    parser.add_argument(
        "--log-level",
        type=_options.log_level,
        default=logging.INFO,
        metavar="LEVEL",
        help="DEBUG, INFO (default), WARNING or ERROR",
    )
    parser.add_argument(
        "--log-format",
        choices=["text", "json"],
        default="text",
        help="text (default), or json: one JSON object per line with the running job's "
        "fields (job_id, kind, tenant, attempt, worker_id, trace_id)",
    )
    parser.add_argument(
        "--metrics-port",
        type=_options.port,
        metavar="N",
        help="serve Prometheus metrics on http://0.0.0.0:N/metrics (the engine's metrics "
        "must be a skiplock.contrib.prometheus.PrometheusMetrics; needs "
        f"{PROMETHEUS_HINT})",
    )


def add_app(parser: argparse.ArgumentParser) -> None:
    """APP: how the ``skiplock`` command finds the engine."""
    parser.add_argument(
        "app",
        metavar="APP",
        help="import path 'module:attribute' of an Engine/AsyncEngine or a zero-argument "
        "callable returning one (the current directory is importable)",
    )


def app_engine(args: argparse.Namespace) -> AppEngine:
    return AppEngine(resolve_app(args.app), args.app)


# ---- APP --------------------------------------------------------------------------------


def resolve_app(spec: str) -> AsyncEngine | Engine:
    """The engine named by ``spec`` = ``module:attribute`` (attribute may be dotted).

    The attribute may be an engine or a zero-argument callable returning one. The current
    directory is put on ``sys.path`` first, as ``python -m`` does. Raises UsageError,
    also when loading the engine refuses a value (a bad ``SKIPLOCK_*`` variable read by
    ``Settings.from_env()`` in the module or its factory).
    """
    module_name, sep, attr_path = spec.partition(":")
    if not sep or not module_name or not attr_path:
        raise UsageError(f"APP must look like 'module:attribute', got {spec!r}")
    try:
        return _load(spec, module_name, attr_path)
    except ValidationError as exc:
        message = str(exc)
        # Settings.from_env() names the variable first: VARIABLE='value': why.
        if message.partition("=")[0] in Settings.env_names():
            raise UsageError(f"invalid environment: {message}") from None
        raise UsageError(f"cannot load {spec!r}: {message}") from None
    except driver_errors() as exc:
        # Making the engine reached a driver that said no: a store given a malformed DSN
        # (psycopg parses it in the constructor), a module that connects on import.
        raise Failure(f"cannot load {spec!r}: {describe(exc)}") from exc


def _load(spec: str, module_name: str, attr_path: str) -> AsyncEngine | Engine:
    _ensure_cwd_importable()
    target: Any = _import(module_name)
    for part in attr_path.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise UsageError(f"module {module_name!r} has no attribute {attr_path!r}") from None
    if isinstance(target, AsyncEngine | Engine):
        return target
    if not callable(target) or isinstance(target, type):
        raise UsageError(f"{spec!r} is {type(target).__name__}, not an Engine or AsyncEngine")
    try:
        made = target()
    except TypeError as exc:
        # Raised by the call itself (no frame of the callable's own): it takes arguments.
        # A TypeError from inside the factory is its bug, with its traceback.
        tb = exc.__traceback__
        if tb is not None and tb.tb_next is None:
            raise UsageError(
                f"{spec!r} is a callable that needs arguments, not an engine"
            ) from None
        raise
    if isinstance(made, AsyncEngine | Engine):
        return made
    raise UsageError(f"{spec!r} returned {type(made).__name__}, not an Engine or AsyncEngine")


def _ensure_cwd_importable() -> None:
    cwd = os.getcwd()
    if not any(os.path.abspath(entry or os.curdir) == cwd for entry in sys.path):
        sys.path.insert(0, cwd)


def _import(module_name: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        # Only a missing APP module (or its package) is a usage error; a module missing
        # inside the user's code is a real bug whose traceback they need.
        missing = exc.name or ""
        if missing and (module_name == missing or module_name.startswith(missing + ".")):
            raise UsageError(
                f"cannot import {module_name!r}: no module named {missing!r} "
                f"(current directory: {os.getcwd()})"
            ) from None
        raise


def apply_env(engine: AsyncEngine | Engine, environ: Mapping[str, str] | None = None) -> None:
    """Apply ``SKIPLOCK_*`` variables on top of the engine's own settings (its processors'
    policies included); command-line options, applied after, win over both. Raises
    UsageError naming the variable if one is invalid."""
    try:
        settings = Settings.from_env(environ, base=engine.settings)
        if settings != engine.settings:
            # A processor's own value may clash with the variables.
            engine.configure(settings)
    except ValidationError as exc:
        raise UsageError(f"invalid environment: {exc}") from None


# ---- the command ------------------------------------------------------------------------


def run(app: AppEngine, args: argparse.Namespace) -> int:
    """Run a worker of ``app.engine`` with the options of :func:`add_options`: logging set
    up, ``SKIPLOCK_*`` applied over its settings, the store opened and checked first
    (the start-up probe), signals handled (unless ``--until-idle``)."""
    engine = app.engine
    _setup_logging(args)
    apply_env(engine)
    metrics = _prometheus_metrics(engine) if args.metrics_port is not None else None
    missing = sorted(set(args.kinds) - engine.kinds) if args.kinds else []
    if missing and not args.all_kinds:
        raise UsageError(
            f"{app.label} has no processor for kind(s) {', '.join(missing)}; "
            "register them, or pass --all-kinds to claim and bury them"
        )
    worker = engine.worker(
        concurrency=args.concurrency,
        kinds=args.kinds,
        tenants=args.tenants,
        all_kinds=args.all_kinds,
        worker_id=args.worker_id,
        # The worker's stop policy is the command's: SIGTERM/SIGINT stops gracefully,
        # a second signal forces the stop, a third abandons the cleanup.
        install_signal_handlers=not args.until_idle,
    )
    debug = args.log_level <= logging.DEBUG
    server = None
    handled: int | None = None
    left: HealthSnapshot | None = None
    try:
        if metrics is not None:
            server = _serve_metrics(metrics, args.metrics_port)
        if isinstance(engine, AsyncEngine):
            assert isinstance(worker, AsyncWorker)
            factory, loop_name = event_loop(engine.settings.event_loop)
            logging.getLogger("skiplock.worker").info(
                "worker %s runs on the %s event loop", worker.id, loop_name
            )
            with asyncio.Runner(loop_factory=factory) as runner:
                handled, left = runner.run(
                    _serve_async(engine, worker, until_idle=args.until_idle, debug=debug)
                )
        else:
            assert isinstance(worker, Worker)
            try:
                open_sync(engine.store, debug=debug)
                if args.until_idle:
                    handled = worker.run_until_idle()
                    left = _snapshot(engine.store.health_snapshot)
                else:
                    worker.run()
            finally:
                engine.store.close()
    except StartupError as exc:
        if debug:
            traceback.print_exception(exc)
        raise Failure(f"cannot start the worker: {exc}") from None
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
    if args.until_idle:
        print(f"handled {handled} job(s)")
        if left is not None and (line := due_left(left, worker.kinds)):
            print(line)
    # An interrupted run() (KeyboardInterrupt, cancellation) propagates: exit status 130.
    return 130 if worker.forced else 0


def event_loop(setting: str) -> tuple[Callable[[], asyncio.AbstractEventLoop] | None, str]:
    """The factory of the loop an async worker runs on (None: asyncio's own) and its name
    for the start line: uvloop's where ``setting`` is ``auto`` and uvloop is installed."""
    if setting == "auto":
        try:
            import uvloop
        except ImportError as exc:
            # Only a missing uvloop means asyncio's loop; a broken one is the user's to see.
            if exc.name != "uvloop":
                raise
        else:
            return uvloop.new_event_loop, f"uvloop {importlib.metadata.version('uvloop')}"
    return None, "asyncio"


async def _serve_async(
    engine: AsyncEngine, worker: AsyncWorker, *, until_idle: bool, debug: bool
) -> tuple[int | None, HealthSnapshot | None]:
    """Run the worker on the opened store; with ``until_idle`` the number handled and
    what is due after it (None if it could not be read)."""
    try:
        await open_async(engine.store, debug=debug)
        if until_idle:
            handled = await worker.run_until_idle()
            try:
                return handled, await engine.store.health_snapshot()
            except Exception:  # only a hint is lost; the run itself succeeded
                _queue_unread()
                return handled, None
        await worker.run()
        return None, None
    finally:
        await engine.store.close()


def _snapshot(read: Callable[[], HealthSnapshot]) -> HealthSnapshot | None:
    try:
        return read()
    except Exception:  # only a hint is lost; the run itself succeeded
        _queue_unread()
        return None


def _queue_unread() -> None:
    logging.getLogger("skiplock.worker").debug("reading the due jobs failed", exc_info=True)


def due_left(snapshot: HealthSnapshot, claimed: frozenset[str] | None) -> str | None:
    """The line ``--until-idle`` prints after its count when due jobs are left (None:
    none): how many, per kind, and which kinds this worker does not claim (issue 41: a
    kind no worker serves used to wait in silence)."""
    due: dict[str, int] = {}
    bounded = False
    for stats in snapshot.queues:
        if stats.due:
            due[stats.kind] = due.get(stats.kind, 0) + stats.due
            bounded = bounded or stats.bounded
    if not due:
        return None
    kinds = ", ".join(
        f"{kind!r} {count}"
        + ("" if claimed is None or kind in claimed else " (not claimed by this worker)")
        for kind, count in sorted(due.items())
    )
    at_least = "at least " if bounded else ""
    return f"left {at_least}{sum(due.values())} due job(s): {kinds}"


def log_handler(args: argparse.Namespace) -> logging.Handler:
    """The handler of the worker's log lines (``--log-format``), on stderr."""
    if args.log_format == "json":
        from skiplock.contrib.logging import json_handler

        return json_handler()
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    return handler


def _setup_logging(args: argparse.Namespace) -> None:
    # A no-op where the root logger has handlers already (an embedding door's).
    logging.basicConfig(level=args.log_level, handlers=[log_handler(args)])
    logging.getLogger("skiplock").setLevel(args.log_level)


def _prometheus_metrics(engine: AsyncEngine | Engine) -> PrometheusMetrics:
    """The engine's PrometheusMetrics, or UsageError saying how to get one."""
    try:
        from skiplock.contrib.prometheus import PrometheusMetrics
    except ImportError as exc:
        if (exc.name or "").partition(".")[0] == "prometheus_client":
            raise UsageError(
                f"--metrics-port needs prometheus-client, which is not installed; run: "
                f"{PROMETHEUS_HINT}"
            ) from None
        raise
    if not isinstance(engine.metrics, PrometheusMetrics):
        raise UsageError(
            "--metrics-port: the engine's metrics are "
            f"{type(engine.metrics).__name__}, not skiplock.contrib.prometheus."
            "PrometheusMetrics; build the engine with metrics=PrometheusMetrics()"
        )
    return engine.metrics


def _serve_metrics(metrics: PrometheusMetrics, port: int) -> WSGIServer:
    """Serve ``metrics``' registry on ``port``; StartupError if the port is taken."""
    try:
        server, _ = metrics.serve(port)
    except OSError as exc:
        raise StartupError(f"cannot serve metrics on port {port}: {describe(exc)}") from exc
    logging.getLogger("skiplock.metrics").info(
        "serving Prometheus metrics on http://0.0.0.0:%d/metrics", port
    )
    return server
