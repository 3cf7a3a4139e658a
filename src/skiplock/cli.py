"""The ``skiplock`` command: run workers, try the demo, manage the PostgreSQL schema.

Exit status: 0 success (also a worker stopped gracefully by SIGTERM/SIGINT), 1 runtime
failure (e.g. database unreachable, schema missing or older than the code), 2 usage error
(bad arguments, bad import path, bad ``SKIPLOCK_*`` variable, missing optional
dependency), 130 interrupted: a forced
stop (a second signal: running jobs were released) or an abandoned cleanup (a third
signal, a KeyboardInterrupt).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.metadata
import inspect
import logging
import os
import sys
import threading
import traceback
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import skiplock
from skiplock import AsyncEngine, AsyncWorker, Engine, Settings, Worker, _cli_admin, demo
from skiplock.core import SkiplockError, StoreError, ValidationError, validate_identifier
from skiplock.core._validation import KIND_RE

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence
    from types import ModuleType
    from wsgiref.simple_server import WSGIServer

    from skiplock.adapters._pg import SchemaStatus
    from skiplock.contrib.prometheus import PrometheusMetrics
    from skiplock.ports import AsyncJobStore, JobStore

DSN_ENV = "SKIPLOCK_DSN"
PSYCOPG_HINT = "pip install 'skiplock[psycopg]'"
PROMETHEUS_HINT = "pip install 'skiplock[prometheus]'"
#: Seconds ``skiplock worker`` gives the store to connect and check the schema before it
#: gives up (a worker that was running retries store errors instead).
STARTUP_TIMEOUT = 3.0
#: psycopg's pool connects in the background and logs why an attempt failed here.
POOL_LOGGER = "psycopg.pool"


class CliError(Exception):
    """A usage problem: printed as ``skiplock: error: ...``, exit status 2."""


class StartupError(Exception):
    """The worker cannot start (database unreachable, schema missing or older): printed as
    one line, exit status 1."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    return run(build_parser(), argv)


def run(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` with ``parser`` and run the handler it selects, with :func:`main`'s
    error handling and exit statuses."""
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, argparse usage errors
        return exc.code if isinstance(exc.code, int) else 2
    handler: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return handler(args)
    except CliError as exc:
        print(f"skiplock: error: {exc}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, asyncio.CancelledError):
        # Interrupted outside the worker's own stop handling (before its handlers are in
        # place, or giving up on its cleanup).
        return 130


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``skiplock`` command."""
    parser = argparse.ArgumentParser(
        prog="skiplock",
        description="Transactional task engine on PostgreSQL.",
    )
    parser.add_argument("--version", action="version", version=f"skiplock {_version()}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")

    worker = commands.add_parser(
        "worker",
        help="run a worker for an application's engine",
        description=(
            "Run a worker for the engine named by APP until SIGTERM/SIGINT. The first "
            "signal stops claiming and lets running jobs finish; a second one releases "
            "running jobs and exits. Settings: the engine's own, then SKIPLOCK_* "
            "environment variables on top, then these options on top of both."
        ),
    )
    worker.add_argument(
        "app",
        metavar="APP",
        help="import path 'module:attribute' of an Engine/AsyncEngine or a zero-argument "
        "callable returning one (the current directory is importable)",
    )
    add_worker_options(worker)
    worker.set_defaults(handler=_cmd_worker)

    demo = commands.add_parser(
        "demo",
        help="see skiplock at work in a few seconds (in memory, or on PostgreSQL)",
        description=(
            "Enqueue a mix of jobs (typed payloads, retries, a dead letter, a rate limit, a "
            f"scheduled job) and process them with a live view. Uses PostgreSQL if --dsn or "
            f"{DSN_ENV} is given (in its own schema, reset on every run), memory otherwise."
        ),
    )
    demo.add_argument("--dsn", help=f"PostgreSQL connection string (default: ${DSN_ENV})")
    demo.add_argument(
        "--jobs",
        type=_demo_jobs,
        default=20,
        metavar="N",
        help="number of email jobs, besides the fixed showcase ones (default: 20)",
    )
    demo.add_argument(
        "--no-live", dest="live", action="store_false", help="no live progress display"
    )
    demo.set_defaults(handler=_cmd_demo)

    schema = commands.add_parser(
        "schema",
        help="apply, print or check the PostgreSQL schema",
        description="Manage skiplock's tables. apply and status need the psycopg extra: "
        + PSYCOPG_HINT,
    )
    _add_schema_action(schema)
    schema.add_argument("--dsn", help=f"PostgreSQL connection string (default: ${DSN_ENV})")
    schema.add_argument(
        "--schema",
        type=_identifier,
        default="skiplock",
        metavar="NAME",
        help="PostgreSQL schema holding skiplock's tables (default: skiplock)",
    )
    schema.set_defaults(handler=_cmd_schema)

    # health, jobs, dlq, counts, workers (skiplock/_cli_admin.py)
    _cli_admin.add_commands(commands)
    return parser


def add_worker_options(parser: argparse.ArgumentParser) -> None:
    """The options of ``skiplock worker`` (all but APP), for :func:`run_worker`."""
    parser.add_argument(
        "--concurrency",
        type=_positive_int,
        metavar="N",
        help="job slots of this worker (default: SKIPLOCK_CONCURRENCY, else the engine's settings)",
    )
    parser.add_argument(
        "--kinds",
        type=_kind_list,
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
        type=_tenant_list,
        metavar="T1,T2",
        help="claim only jobs of these tenants (default: any tenant)",
    )
    parser.add_argument(
        "--log-level",
        type=_log_level,
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
        type=_port,
        metavar="N",
        help="serve Prometheus metrics on http://0.0.0.0:N/metrics (the engine's metrics "
        "must be a skiplock.contrib.prometheus.PrometheusMetrics; needs "
        f"{PROMETHEUS_HINT})",
    )


def _add_schema_action(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action",
        choices=["apply", "sql", "status"],
        help="apply: run pending migrations; sql: print standalone DDL (no database "
        "needed); status: show migrations, exit 1 unless up to date",
    )
    parser.add_argument(
        "--from",
        dest="from_version",
        type=int,
        metavar="N",
        help="with sql: print the upgrade script from schema version N to the current one "
        "(the migrations after N, each recorded in the version table; 0: the fresh-install "
        "DDL, the default)",
    )


# ---- option types -----------------------------------------------------------------------


def _version() -> str:
    try:
        return importlib.metadata.version("skiplock")
    except importlib.metadata.PackageNotFoundError:  # running from a source tree
        return skiplock.__version__


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _port(text: str) -> int:
    value = _positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"expected a port number up to 65535, got {value}")
    return value


def _demo_jobs(text: str) -> int:
    value = _positive_int(text)
    if value > 10_000:
        raise argparse.ArgumentTypeError(f"at most 10000 jobs, got {value}")
    return value


def _split(text: str) -> list[str]:
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
    return items


def _kind_list(text: str) -> frozenset[str]:
    kinds = _split(text)
    for kind in kinds:
        if KIND_RE.fullmatch(kind) is None:
            raise argparse.ArgumentTypeError(f"invalid kind {kind!r}")
    return frozenset(kinds)


def _tenant_list(text: str) -> frozenset[str]:
    return frozenset(_split(text))


def _log_level(text: str) -> int:
    level = logging.getLevelNamesMapping().get(text.upper())
    if level is None:
        raise argparse.ArgumentTypeError(f"unknown log level {text!r}")
    return level


def _identifier(text: str) -> str:
    try:
        return validate_identifier(text)
    except ValidationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# ---- skiplock worker --------------------------------------------------------------------


def resolve_app(spec: str) -> AsyncEngine | Engine:
    """The engine named by ``spec`` = ``module:attribute`` (attribute may be dotted).

    The attribute may be an engine or a zero-argument callable returning one. The current
    directory is put on ``sys.path`` first, as ``python -m`` does. Raises CliError.
    """
    module_name, sep, attr_path = spec.partition(":")
    if not sep or not module_name or not attr_path:
        raise CliError(f"APP must look like 'module:attribute', got {spec!r}")
    _ensure_cwd_importable()
    module = _import(module_name)
    target: Any = module
    for part in attr_path.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise CliError(f"module {module_name!r} has no attribute {attr_path!r}") from None
    if isinstance(target, AsyncEngine | Engine):
        return target
    if callable(target) and not inspect.isclass(target):
        try:
            inspect.signature(target).bind()
        except TypeError:
            raise CliError(f"{spec!r} is a callable that needs arguments, not an engine") from None
        except ValueError:  # no signature available (builtins): just try to call it
            pass
        made = target()
        if isinstance(made, AsyncEngine | Engine):
            return made
        raise CliError(f"{spec!r} returned {type(made).__name__}, not an Engine or AsyncEngine")
    raise CliError(f"{spec!r} is {type(target).__name__}, not an Engine or AsyncEngine")


def apply_env(engine: AsyncEngine | Engine, environ: Mapping[str, str] | None = None) -> None:
    """Apply ``SKIPLOCK_*`` variables on top of the engine's own settings (its processors'
    policies included); command-line options, applied after, win over both. Raises
    CliError naming the variable if one is invalid."""
    try:
        settings = Settings.from_env(environ, base=engine.settings)
    except ValidationError as exc:
        raise CliError(f"invalid environment: {_one_line(str(exc))}") from None
    if settings != engine.settings:
        try:
            engine.configure(settings)
        except ValidationError as exc:  # a processor's own value clashes with the variables
            raise CliError(f"invalid environment: {_one_line(str(exc))}") from None


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
            raise CliError(
                f"cannot import {module_name!r}: no module named {missing!r} "
                f"(current directory: {os.getcwd()})"
            ) from None
        raise


def _cmd_worker(args: argparse.Namespace) -> int:
    _setup_logging(args)
    return run_worker(resolve_app(args.app), args, label=args.app)


def _setup_logging(args: argparse.Namespace) -> None:
    if args.log_format == "json":
        from skiplock.contrib.logging import json_handler

        logging.basicConfig(level=args.log_level, handlers=[json_handler()])
    else:
        logging.basicConfig(
            level=args.log_level, format="%(asctime)s %(levelname)-7s %(name)s: %(message)s"
        )
    logging.getLogger("skiplock").setLevel(args.log_level)


def run_worker(engine: AsyncEngine | Engine, args: argparse.Namespace, *, label: str) -> int:
    """Run a worker of ``engine`` as ``skiplock worker`` does, with the options of
    :func:`add_worker_options` (``label`` names the engine in errors): logging set up,
    ``SKIPLOCK_*`` applied over its settings, the store opened and checked first,
    signals handled."""
    _setup_logging(args)
    apply_env(engine)
    metrics = _prometheus_metrics(engine) if args.metrics_port is not None else None
    missing = sorted(args.kinds - engine.kinds) if args.kinds else []
    if missing and not args.all_kinds:
        raise CliError(
            f"{label} has no processor for kind(s) {', '.join(missing)}; "
            "register them, or pass --all-kinds to claim and bury them"
        )
    try:
        worker = engine.worker(
            concurrency=args.concurrency,
            kinds=args.kinds,
            tenants=args.tenants,
            all_kinds=args.all_kinds,
            # The worker's stop policy is the command's: SIGTERM/SIGINT stops gracefully,
            # a second signal forces the stop, a third abandons the cleanup.
            install_signal_handlers=True,
        )
    except ValidationError as exc:
        raise CliError(str(exc)) from None
    debug = args.log_level <= logging.DEBUG
    try:
        server = None if metrics is None else _serve_metrics(metrics, args.metrics_port)
    except StartupError as exc:
        print(f"skiplock: error: cannot start the worker: {exc}", file=sys.stderr)
        return 1
    try:
        if isinstance(engine, AsyncEngine):
            assert isinstance(worker, AsyncWorker)
            asyncio.run(_serve_async(engine, worker, debug=debug))
        else:
            assert isinstance(worker, Worker)
            try:
                _open_sync(engine.store, debug=debug)
                worker.run()
            finally:
                engine.store.close()
    except StartupError as exc:
        if debug:
            traceback.print_exception(exc)
        print(f"skiplock: error: cannot start the worker: {exc}", file=sys.stderr)
        return 1
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
    # An interrupted run() (KeyboardInterrupt, cancellation) propagates: main() makes it 130.
    return 130 if worker.forced else 0


def _prometheus_metrics(engine: AsyncEngine | Engine) -> PrometheusMetrics:
    """The engine's PrometheusMetrics, or CliError saying how to get one."""
    try:
        from skiplock.contrib.prometheus import PrometheusMetrics
    except ImportError as exc:
        if (exc.name or "").partition(".")[0] == "prometheus_client":
            raise CliError(
                f"--metrics-port needs prometheus-client, which is not installed; run: "
                f"{PROMETHEUS_HINT}"
            ) from None
        raise
    if not isinstance(engine.metrics, PrometheusMetrics):
        raise CliError(
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
        raise StartupError(f"cannot serve metrics on port {port}: {_describe(exc)}") from exc
    logging.getLogger("skiplock.metrics").info(
        "serving Prometheus metrics on http://0.0.0.0:%d/metrics", port
    )
    return server


async def _serve_async(engine: AsyncEngine, worker: AsyncWorker, *, debug: bool) -> None:
    try:
        await _open_async(engine.store, debug=debug)
        await worker.run()
    finally:
        await engine.store.close()


# The start-up check: the worker itself retries store errors with backoff (a database
# restart must not stop a running worker), so the command first opens the store, which
# connects and checks the schema version, and fails fast with the cause in one line: at
# the first failed connection attempt, or after STARTUP_TIMEOUT without an answer.


async def _open_async(store: AsyncJobStore, *, debug: bool) -> None:
    """Open ``store`` (a store without ``open()`` needs none); StartupError if it fails."""
    opener = getattr(store, "open", None)
    if opener is None:
        return
    loop = asyncio.get_running_loop()
    failures = _PoolFailures()
    with _pool_failures(failures, show=debug):
        try:
            async with asyncio.timeout(STARTUP_TIMEOUT) as deadline:

                def give_up() -> None:  # psycopg's async pool logs in tasks of this loop
                    if not deadline.expired():
                        deadline.reschedule(loop.time())

                failures.notify = give_up
                await opener()
        except (TimeoutError, SkiplockError) as exc:
            failures.listening = False
            await store.close()  # while the pool's retries are still muted
            raise _startup_error(exc, failures) from exc
        finally:
            failures.listening = False


def _open_sync(store: JobStore, *, debug: bool) -> None:
    """The sync twin of :func:`_open_async`: the blocking open runs in a daemon thread, so
    giving up on it does not wait for the store's own (longer) timeout."""
    opener = getattr(store, "open", None)
    if opener is None:
        return
    outcome: list[BaseException | None] = []
    settled = threading.Event()

    def run() -> None:
        try:
            opener()
        except BaseException as exc:  # handed to the waiting thread
            outcome.append(exc)
        else:
            outcome.append(None)
        settled.set()

    failures = _PoolFailures()
    failures.notify = settled.set
    with _pool_failures(failures, show=debug):
        threading.Thread(target=run, name="skiplock-startup-check", daemon=True).start()
        settled.wait(STARTUP_TIMEOUT)
        failures.listening = False
        error = outcome[0] if outcome else TimeoutError()
        if error is None:
            return
        store.close()  # while the pool's retries are still muted
    if not isinstance(error, TimeoutError | SkiplockError):
        raise error
    raise _startup_error(error, failures) from error


class _PoolFailures(logging.Handler):
    """Keeps the first failed connection attempt psycopg's pool reports while
    ``listening`` (it retries in the background, so the opener would only see a timeout)
    and calls ``notify``."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.message: str | None = None
        self.notify: Callable[[], None] = lambda: None
        self.listening = True

    def emit(self, record: logging.LogRecord) -> None:
        # "error connecting in %r: %s" with the exception last: keep what the server or
        # the operating system said. Other warnings (e.g. about stopping) carry none, and
        # an attempt cancelled by closing the pool carries a CancelledError.
        last = record.args[-1] if isinstance(record.args, tuple) and record.args else None
        if self.listening and self.message is None and isinstance(last, Exception):
            self.message = _describe(last)
            self.notify()


@contextmanager
def _pool_failures(handler: _PoolFailures, *, show: bool) -> Iterator[None]:
    """Collect the pool's warnings in ``handler`` while the block runs; print them only
    if ``show`` (--log-level DEBUG)."""
    logger = logging.getLogger(POOL_LOGGER)
    propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = show
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


def _startup_error(exc: BaseException, failures: _PoolFailures) -> StartupError:
    if failures.message is not None:
        return StartupError(f"cannot connect to PostgreSQL: {_one_line(failures.message)}")
    if isinstance(exc, TimeoutError):
        return StartupError(f"no answer from PostgreSQL within {STARTUP_TIMEOUT:g} s")
    return StartupError(_describe(exc))


def _describe(exc: BaseException) -> str:
    """``exc`` as one line, with the operating system's word for a failed connection
    (e.g. "Connection refused") when the message only gives its number."""
    text = _one_line(str(exc))
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, OSError) and cause.errno:
            reason = os.strerror(cause.errno)
            if reason.lower() not in text.lower():
                text = f"{text} ({reason})"
            break
        cause = cause.__cause__
    return text


def _one_line(text: str) -> str:
    """``text`` with its line breaks and runs of blanks as single spaces."""
    return " ".join(text.split())


# ---- skiplock demo ----------------------------------------------------------------------


def _cmd_demo(args: argparse.Namespace) -> int:
    dsn: str | None = args.dsn or os.environ.get(DSN_ENV) or None
    try:
        store = _demo_store(dsn)
        report = asyncio.run(
            _run_demo(
                store,
                postgres_schema=None if dsn is None else demo.DEMO_SCHEMA,
                emails=args.jobs,
                live=args.live,
            )
        )
    except StoreError as exc:
        print(f"skiplock: demo failed: {exc}", file=sys.stderr)
        return 1
    return 0 if report.complete else 1


def _demo_store(dsn: str | None) -> AsyncJobStore:
    """The demo's store: in memory, or psycopg on a freshly reset demo schema."""
    if dsn is None:
        from skiplock.adapters.memory import AsyncInMemoryJobStore

        return AsyncInMemoryJobStore()
    pg = psycopg_adapter()
    import psycopg
    from psycopg import sql

    drop = sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(demo.DEMO_SCHEMA))
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(drop)
        pg.apply_schema(dsn, schema=demo.DEMO_SCHEMA)
    except psycopg.Error as exc:
        raise StoreError(f"cannot prepare PostgreSQL: {exc}") from exc
    store: AsyncJobStore = pg.AsyncPsycopgJobStore(dsn, schema=demo.DEMO_SCHEMA)
    return store


async def _run_demo(
    store: AsyncJobStore, *, postgres_schema: str | None, emails: int, live: bool
) -> demo.DemoReport:
    try:
        return await demo.run_demo(store, postgres_schema=postgres_schema, emails=emails, live=live)
    finally:
        await store.close()


# ---- skiplock schema --------------------------------------------------------------------


def psycopg_adapter() -> ModuleType:
    """``skiplock.adapters.psycopg``, or CliError naming the extra to install."""
    try:
        return importlib.import_module("skiplock.adapters.psycopg")
    except ImportError as exc:
        if (exc.name or "").partition(".")[0] in {"psycopg", "psycopg_pool"}:
            raise CliError(
                f"PostgreSQL support is not installed ({exc.name} is missing); run: {PSYCOPG_HINT}"
            ) from None
        raise


def _dsn(args: argparse.Namespace) -> str:
    dsn: str | None = args.dsn or os.environ.get(DSN_ENV)
    if not dsn:
        raise CliError(f"no database given: pass --dsn or set {DSN_ENV}")
    return dsn


def _cmd_schema(args: argparse.Namespace) -> int:
    if args.action == "sql":
        return _print_schema_sql(args.schema, args.from_version)
    if args.from_version is not None:
        raise CliError(f"--from is an option of 'schema sql', not of 'schema {args.action}'")
    pg = psycopg_adapter()
    dsn = _dsn(args)
    import psycopg

    return _schema_action(
        args.action,
        args.schema,
        apply=lambda: pg.apply_schema(dsn, schema=args.schema),
        status=lambda: pg.schema_status(dsn, schema=args.schema),
        errors=(psycopg.Error, SkiplockError),
    )


def _print_schema_sql(schema: str, from_version: int | None) -> int:
    # Driver-neutral: printing DDL needs neither a database nor the psycopg extra.
    from skiplock.adapters._pg import schema_sql

    try:
        script = schema_sql(schema, from_version or 0)
    except ValidationError as exc:
        raise CliError(f"--from: {exc}") from None
    sys.stdout.write(script)
    return 0


def _schema_action(
    action: str,
    schema: str,
    *,
    apply: Callable[[], list[str]],
    status: Callable[[], SchemaStatus],
    errors: tuple[type[BaseException], ...],
) -> int:
    """``schema apply`` or ``schema status`` through ``apply`` and ``status``; an error
    of ``errors`` is printed on one line, exit status 1."""
    try:
        if action == "apply":
            applied = apply()
            for name in applied:
                print(f"applied {name}")
            if not applied:
                print(f"schema {schema!r} is up to date")
            return 0
        result = status()
    except errors as exc:
        print(f"skiplock: error: {_describe(exc)}", file=sys.stderr)
        return 1
    print(f"schema:  {result.schema}")
    print(f"applied: {', '.join(result.applied) or '(none)'}")
    print(f"pending: {', '.join(result.pending) or '(none)'}")
    if result.unknown:
        print(f"unknown: {', '.join(result.unknown)} (the database is newer than this code)")
    if not result.installed:
        verdict = f"not installed: run `{result.apply_command}`"
    elif result.pending:
        verdict = f"out of date: run `{result.apply_command}`"
    else:
        verdict = "up to date"
    print(f"status:  {verdict}")
    return 0 if result.installed and result.up_to_date else 1


# ---- the commands of an application's engine (framework integrations) --------------------

#: The commands :func:`run_embedded` offers.
EMBEDDED_COMMANDS = ("worker", "schema", "health")


def run_embedded(
    engine: AsyncEngine | Engine, command: str, argv: Sequence[str], *, prog: str
) -> int:
    """Run ``skiplock`` ``command`` (one of :data:`EMBEDDED_COMMANDS`) on ``engine``, an
    application's own engine, with the arguments ``argv``: what a framework integration
    offers as its own commands (``flask skiplock worker``). The options, their parsing,
    the output and the exit statuses are those of the ``skiplock`` command, without
    APP, ``--dsn`` and ``--schema``: the engine's store is the database.

    ``worker`` takes either engine; ``schema`` (apply, sql, status) and ``health`` a sync
    :class:`~skiplock.Engine` on a PostgreSQL store.
    """
    parser = argparse.ArgumentParser(prog=prog)
    if command == "worker":
        parser.description = "Run a worker of the application's engine until SIGTERM/SIGINT."
        add_worker_options(parser)
        parser.set_defaults(handler=lambda args: run_worker(engine, args, label=prog))
    elif command == "schema":
        parser.description = "Apply, print or check the schema of the engine's store."
        _add_schema_action(parser)
        parser.set_defaults(handler=lambda args: _embedded_schema(engine, args))
    elif command == "health":
        parser.description = "Check the engine's database, schema, workers and queues."
        _cli_admin.add_health_options(parser, with_json=True)
        parser.set_defaults(
            handler=lambda args: _cli_admin.engine_health(_sync_pg_engine(engine, prog), args)
        )
    else:
        raise ValueError(f"command must be one of {', '.join(EMBEDDED_COMMANDS)}, got {command!r}")
    return run(parser, argv)


def _sync_pg_engine(engine: AsyncEngine | Engine, prog: str) -> Engine:
    if not isinstance(engine, Engine):
        raise CliError(f"{prog} needs a sync skiplock Engine, got {type(engine).__name__}")
    return engine


def _embedded_schema(engine: AsyncEngine | Engine, args: argparse.Namespace) -> int:
    store: Any = _sync_pg_engine(engine, "schema").store
    schema = getattr(store, "schema", None)
    if not isinstance(schema, str) or not hasattr(store, "schema_status"):
        raise CliError(f"the engine's store ({type(store).__name__}) has no PostgreSQL schema")
    if args.action == "sql":
        return _print_schema_sql(schema, args.from_version)
    if args.from_version is not None:
        raise CliError(f"--from is an option of 'schema sql', not of 'schema {args.action}'")
    return _schema_action(
        args.action,
        schema,
        apply=store.apply_schema,
        status=store.schema_status,
        errors=(Exception,),  # whatever the driver raises: one line, exit 1
    )
