"""``skiplock health`` and the admin commands (``jobs``, ``dlq``, ``counts``, ``workers``):
the engine's health report and admin API (R9, R13) on PostgreSQL through psycopg, with no
application to import. :mod:`skiplock.cli` registers them (:func:`add_commands`).

Every command takes ``--dsn`` (default ``$SKIPLOCK_DSN``), ``--schema``, ``--timeout`` and
``--json``. Exit status: 0 success (``health``: healthy), 1 failure (``health``:
unhealthy; database unreachable, schema missing or older than the code, an id not found or
in a state that does not allow the action, a declined confirmation), 2 usage error (bad
arguments, a bulk destructive action without ``--yes`` when stdin is not a terminal, the
psycopg extra missing).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import inspect
import json
import math
import os
import sys
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from skiplock.core import (
    HealthReport,
    InvalidTransitionError,
    Job,
    JobNotFoundError,
    JobState,
    SkiplockError,
    ValidationError,
    job_json,
    validate_identifier,
)
from skiplock.core._fields import parse_duration
from skiplock.core._health import format_duration, unreachable_report
from skiplock.core._validation import INT8_RANGE, KIND_RE, check_actor
from skiplock.engine import Engine, Settings

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from datetime import datetime

    from skiplock.core import AttemptError

DSN_ENV = "SKIPLOCK_DSN"
PSYCOPG_HINT = "pip install 'skiplock[psycopg]'"
#: Default of ``--timeout``: how long a command waits for PostgreSQL.
DEFAULT_TIMEOUT = timedelta(seconds=5)
#: Most rows ``--limit`` may ask for.
MAX_LIMIT = 10_000
#: Widest a table cell gets (longer text is cut with "…"; ``jobs show`` prints it whole).
MAX_CELL = 60

Subparsers = argparse._SubParsersAction  # the type ``add_subparsers()`` returns


class UsageError(Exception):
    """A usage problem found after parsing: ``skiplock: error: ...``, exit status 2."""


class Failure(Exception):
    """The command cannot do its work (database, schema): one line, exit status 1."""


# ---- registration -----------------------------------------------------------------------


def add_commands(commands: Subparsers[argparse.ArgumentParser]) -> None:
    """Add ``health``, ``jobs``, ``dlq``, ``counts`` and ``workers`` to ``commands``."""
    common = _common_options()

    health = commands.add_parser(
        "health",
        parents=[common],
        help="check the database, schema, workers and queues; exit 1 if unhealthy",
        description=(
            "Report the health of the queue (R9): database reachable, schema version, live "
            "workers by heartbeat, per kind the due and scheduled pending jobs, the age of "
            "the oldest due one, running and dead jobs. Exit 0 when healthy, 1 with one "
            "line per problem otherwise."
        ),
    )
    add_health_options(health)
    health.set_defaults(handler=_run(_cmd_health, health=True))

    jobs = commands.add_parser(
        "jobs",
        help="list, show, retry, cancel, fail or delete jobs",
        description="Read and change jobs through the admin API (R13).",
    )
    actions = jobs.add_subparsers(title="actions", metavar="ACTION", dest="action", required=True)

    listing = actions.add_parser(
        "list", parents=[common], help="list jobs, oldest id first, one page at a time"
    )
    _filter_options(listing, states=True)
    _page_options(listing)
    listing.set_defaults(handler=_run(_cmd_list))

    show = actions.add_parser("show", parents=[common], help="show one job in full")
    show.add_argument("id", type=_job_id, metavar="ID", help="job id")
    show.set_defaults(handler=_run(_cmd_show))

    retry = actions.add_parser(
        "retry",
        parents=[common],
        help="replay dead, failed or cancelled jobs (by id, or every dead one with --dead)",
        description=(
            "Replay jobs: pending and due now, starting over with attempts 0 unless "
            "--keep-attempts. With --dead: every dead job (of --kind/--tenant), after a "
            "confirmation."
        ),
    )
    retry.add_argument("ids", type=_job_id, nargs="*", metavar="ID", help="job ids")
    retry.add_argument(
        "--dead", action="store_true", help="replay every dead job matching --kind/--tenant"
    )
    _filter_options(retry, states=False)
    retry.add_argument("--keep-attempts", action="store_true", help="keep the jobs' attempt counts")
    _mutation_options(retry, confirm=True)
    retry.set_defaults(handler=_run(_cmd_retry, check=_check_retry))

    for name, help_text in (
        ("cancel", "cancel jobs (a running one is stopped at its worker's next heartbeat)"),
        ("fail", "mark jobs failed (the manual stop flag: never tried again unless replayed)"),
    ):
        action = actions.add_parser(name, parents=[common], help=help_text)
        action.add_argument("ids", type=_job_id, nargs="+", metavar="ID", help="job ids")
        _mutation_options(action, confirm=False)
        action.set_defaults(handler=_run(_cmd_change))

    delete = actions.add_parser(
        "delete",
        parents=[common],
        help="delete jobs that are not running (more than one: after a confirmation)",
    )
    delete.add_argument("ids", type=_job_id, nargs="+", metavar="ID", help="job ids")
    _mutation_options(delete, confirm=True)
    delete.set_defaults(handler=_run(_cmd_change, check=_check_delete))

    dlq = commands.add_parser(
        "dlq", parents=[common], help="list dead jobs with their last error (the DLQ)"
    )
    _filter_options(dlq, states=False)
    _page_options(dlq)
    dlq.set_defaults(handler=_run(_cmd_dlq))

    counts = commands.add_parser(
        "counts", parents=[common], help="number of jobs per kind, tenant and state"
    )
    counts.set_defaults(handler=_run(_cmd_counts))

    workers = commands.add_parser(
        "workers",
        parents=[common],
        help="registered workers, their heartbeats and jobs",
        description="List the registered workers. With --host: only that host's, and exit 1 "
        "unless one of them is live (a liveness check for the machine or pod running them).",
    )
    _worker_timeout_option(workers)
    workers.add_argument(
        "--host",
        metavar="HOST",
        help='only workers on HOST (e.g. "$(hostname)"); exit 1 unless one is live',
    )
    workers.set_defaults(handler=_run(_cmd_workers))


def add_health_options(parser: argparse.ArgumentParser, *, with_json: bool = False) -> None:
    """The options of ``health`` besides the connection: its thresholds, and ``--json``
    if ``with_json`` (``skiplock health`` has it among the connection options)."""
    parser.add_argument(
        "--max-age",
        type=_duration,
        metavar="DURATION",
        help="unhealthy if a kind's oldest due pending job has waited longer (30s, 5m, 1h, "
        "or seconds; default: no limit)",
    )
    parser.add_argument(
        "--max-dead",
        type=_non_negative_int,
        metavar="N",
        help="unhealthy if a kind has more than N dead jobs (default: no limit)",
    )
    _worker_timeout_option(parser)
    if with_json:
        parser.add_argument("--json", action="store_true", help="print the report as JSON")


def _common_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("connection and output")
    group.add_argument("--dsn", help=f"PostgreSQL connection string (default: ${DSN_ENV})")
    group.add_argument(
        "--schema",
        type=_identifier,
        default="skiplock",
        metavar="NAME",
        help="PostgreSQL schema holding skiplock's tables (default: skiplock)",
    )
    group.add_argument(
        "--timeout",
        type=_positive_duration,
        default=DEFAULT_TIMEOUT,
        metavar="DURATION",
        help="how long to wait for PostgreSQL (default: 5s)",
    )
    group.add_argument(
        "--json", action="store_true", help="print JSON (keys in docs/operations.md)"
    )
    return common


def _filter_options(parser: argparse.ArgumentParser, *, states: bool) -> None:
    if states:
        parser.add_argument(
            "--state",
            type=_states,
            action="extend",
            metavar="S[,S]",
            help="only jobs in these states: " + ", ".join(s.value for s in JobState),
        )
    parser.add_argument(
        "--kind", type=_kinds, action="extend", metavar="K[,K]", help="only jobs of these kinds"
    )
    parser.add_argument(
        "--tenant",
        type=_tenants,
        action="extend",
        metavar="T[,T]",
        help="only jobs of these tenants",
    )


def _page_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--limit",
        type=_limit,
        default=50,
        metavar="N",
        help=f"at most N jobs (default: 50, at most {MAX_LIMIT})",
    )
    parser.add_argument(
        "--after",
        type=_job_id,
        metavar="CURSOR",
        help="the page after this cursor (the 'next' id the previous page printed)",
    )


def _mutation_options(parser: argparse.ArgumentParser, *, confirm: bool) -> None:
    parser.add_argument(
        "--actor",
        type=_actor_name,
        metavar="NAME",
        help="who is acting, recorded in the audit trail",
    )
    if confirm:
        parser.add_argument(
            "--yes", "-y", action="store_true", help="do not ask for a confirmation"
        )


def _worker_timeout_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--worker-timeout",
        type=_positive_duration,
        metavar="DURATION",
        help="a worker is live while its last heartbeat is younger than this "
        "(default: 3 heartbeat intervals, 30s with default settings)",
    )


# ---- option types -----------------------------------------------------------------------


def _duration(text: str) -> timedelta:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc}, got {text!r}") from None


def _positive_duration(text: str) -> timedelta:
    value = _duration(text)
    if value <= timedelta(0):
        raise argparse.ArgumentTypeError(f"expected a duration > 0, got {text!r}")
    return value


def _integer(text: str, minimum: int, maximum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not minimum <= value <= maximum:
        raise argparse.ArgumentTypeError(f"expected {minimum} to {maximum}, got {value}")
    return value


def _job_id(text: str) -> int:
    return _integer(text, 1, INT8_RANGE[1])


def _limit(text: str) -> int:
    return _integer(text, 1, MAX_LIMIT)


def _non_negative_int(text: str) -> int:
    return _integer(text, 0, INT8_RANGE[1])


def _split(text: str) -> list[str]:
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
    return items


def _states(text: str) -> list[str]:
    known = {s.value for s in JobState}
    items = _split(text)
    for item in items:
        if item not in known:
            raise argparse.ArgumentTypeError(
                f"unknown state {item!r}: one of {', '.join(s.value for s in JobState)}"
            )
    return items


def _kinds(text: str) -> list[str]:
    items = _split(text)
    for item in items:
        if KIND_RE.fullmatch(item) is None:
            raise argparse.ArgumentTypeError(f"invalid kind {item!r}")
    return items


def _tenants(text: str) -> list[str]:
    return _split(text)


def _actor_name(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a name")
    try:
        return check_actor("the actor", text)  # what the audit trail accepts (J10)
    except ValidationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _identifier(text: str) -> str:
    try:
        return validate_identifier(text)
    except ValidationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# ---- running a command ------------------------------------------------------------------


def _run(
    command: Callable[[Engine, argparse.Namespace], int],
    *,
    check: Callable[[argparse.Namespace], None] | None = None,
    health: bool = False,
) -> Callable[[argparse.Namespace], int]:
    """The handler running ``command`` on an engine over the PostgreSQL of ``--dsn``.

    ``check`` runs first, before any connection (usage errors). PostgreSQL is reached
    with one plain connection before the store is made, so a database that is down fails
    at once with the server's or the operating system's words; a ``health`` command then
    prints an unhealthy report instead of an error.
    """

    @functools.wraps(command)
    def handler(args: argparse.Namespace) -> int:
        try:
            if check is not None:
                check(args)
            dsn = _dsn(args)
            store_module = _psycopg_adapter()
            engine = Engine(
                store_module.PsycopgJobStore(
                    dsn,
                    schema=args.schema,
                    min_size=1,
                    max_size=2,
                    timeout=args.timeout.total_seconds(),
                ),
                # An operator's changes are what an audit trail is for (J10): recorded in
                # the audit table with --actor, whatever the applications configured.
                Settings(audit=True),
            )
            try:
                problem = _reach(dsn, args.timeout)
                if problem is not None:
                    if not health:
                        raise Failure(f"cannot connect to PostgreSQL: {problem}")
                    return _print_unreachable(engine, args, problem)
                return command(engine, args)
            finally:
                engine.store.close()
        except UsageError as exc:
            print(f"skiplock: error: {exc}", file=sys.stderr)
            return 2
        except ValidationError as exc:  # an argument the admin API refused
            print(f"skiplock: error: {_one_line(str(exc))}", file=sys.stderr)
            return 2
        except (Failure, SkiplockError) as exc:
            print(f"skiplock: error: {_one_line(str(exc))}", file=sys.stderr)
            return 1

    return handler


def _dsn(args: argparse.Namespace) -> str:
    dsn: str | None = args.dsn or os.environ.get(DSN_ENV)
    if not dsn:
        raise UsageError(f"no database given: pass --dsn or set {DSN_ENV}")
    return dsn


def _psycopg_adapter() -> Any:
    """``skiplock.adapters.psycopg``, or UsageError naming the extra to install."""
    try:
        return importlib.import_module("skiplock.adapters.psycopg")
    except ImportError as exc:
        if (exc.name or "").partition(".")[0] in {"psycopg", "psycopg_pool"}:
            raise UsageError(
                f"PostgreSQL support is not installed ({exc.name} is missing); run: {PSYCOPG_HINT}"
            ) from None
        raise


def _reach(dsn: str, timeout: timedelta) -> str | None:
    """Connect once; None if PostgreSQL answered, else why not (one line)."""
    import psycopg

    try:
        # libpq counts connect_timeout in whole seconds, at least 2.
        seconds = max(2, math.ceil(timeout.total_seconds()))
        with psycopg.connect(dsn, connect_timeout=seconds, autocommit=True):
            return None
    except psycopg.Error as exc:
        return _one_line(str(exc))


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _print_json(data: object) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False))


# ---- --actor and confirmations ----------------------------------------------------------


def _with_actor(method: Callable[..., Any], actor: str | None) -> dict[str, Any]:
    """The keyword arguments passing ``--actor`` to an admin method.

    The one place ``--actor`` is wired (J10): it goes to the audit trail through the admin
    API's ``actor=`` keyword, passed only where the method's signature has it.
    """
    if actor is None:
        return {}
    if "actor" in inspect.signature(method).parameters:
        return {"actor": actor}
    print(
        "skiplock: note: --actor is not recorded: this skiplock has no audit trail yet",
        file=sys.stderr,
    )
    return {}


def _needs_yes(args: argparse.Namespace, what: str) -> None:
    """Refuse (exit 2) a bulk destructive action without --yes when nobody can answer."""
    if not args.yes and not sys.stdin.isatty():
        raise UsageError(f"{what} needs --yes when stdin is not a terminal")


def _confirm(args: argparse.Namespace, question: str) -> bool:
    """True with --yes, else ask ``question`` on the terminal (default: no)."""
    if args.yes:
        return True
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline().strip().lower()
    if answer in {"y", "yes"}:
        return True
    print("aborted: nothing changed", file=sys.stderr)
    return False


def _check_retry(args: argparse.Namespace) -> None:
    if args.dead and args.ids:
        raise UsageError("give job ids or --dead, not both")
    if not args.dead and not args.ids:
        raise UsageError("give job ids, or --dead to replay every dead job")
    if not args.dead and (args.kind or args.tenant):
        raise UsageError("--kind and --tenant select dead jobs: use them with --dead")
    if args.dead:
        _needs_yes(args, "retry --dead")


def _check_delete(args: argparse.Namespace) -> None:
    if len(set(args.ids)) > 1:
        _needs_yes(args, "deleting more than one job")


# ---- jobs as text and JSON --------------------------------------------------------------


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _time(value: datetime | None) -> str:
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M:%SZ")


def _cell(value: object, width: int = MAX_CELL) -> str:
    text = "-" if value is None else _one_line(str(value))
    return text if len(text) <= width else text[: width - 1] + "…"


def _table(headers: Sequence[str], rows: Iterable[Sequence[str]], right: set[int]) -> str:
    """Rows as aligned columns under ``headers`` (columns in ``right`` right-aligned)."""
    lines = [list(headers), *(list(row) for row in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(headers))]
    return "\n".join(
        "  ".join(
            cell.rjust(width) if i in right else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(line, widths, strict=True))
        ).rstrip()
        for line in lines
    )


def _print_jobs(jobs: Sequence[Job], next_after: int | None, *, dead: bool) -> None:
    if not jobs:
        print("no dead jobs" if dead else "no jobs")
        return
    if dead:
        headers = ["ID", "KIND", "TENANT", "ATTEMPTS", "DIED", "LAST ERROR"]
        rows = [
            [
                str(j.id),
                _cell(j.kind),
                _cell(j.tenant),
                f"{j.attempts}/{j.max_attempts}",
                _time(j.completed_at),
                _cell(j.last_error),
            ]
            for j in jobs
        ]
    else:
        headers = ["ID", "STATE", "KIND", "TENANT", "PRIO", "ATTEMPTS", "DUE", "LAST ERROR"]
        rows = [
            [
                str(j.id),
                j.state.value,
                _cell(j.kind),
                _cell(j.tenant),
                str(j.priority),
                f"{j.attempts}/{j.max_attempts}",
                _time(j.available_at),
                _cell(j.last_error, 40),
            ]
            for j in jobs
        ]
    print(_table(headers, rows, right={0, 4} if not dead else {0}))
    if next_after is not None:
        print(f"next: --after {next_after}")


def _page(jobs: list[Job], limit: int) -> tuple[list[Job], int | None]:
    """A page from ``limit + 1`` jobs: the first ``limit``, and the cursor of the next
    page if there is one."""
    if len(jobs) > limit:
        return jobs[:limit], jobs[limit - 1].id
    return jobs, None


# ---- the commands -----------------------------------------------------------------------


def _cmd_list(engine: Engine, args: argparse.Namespace) -> int:
    jobs, next_after = _page(
        engine.list_jobs(
            state=args.state,
            kind=args.kind,
            tenant=args.tenant,
            limit=args.limit + 1,
            after_id=args.after,
        ),
        args.limit,
    )
    if args.json:
        _print_json({"jobs": [job_json(j) for j in jobs], "next_after": next_after})
    else:
        _print_jobs(jobs, next_after, dead=False)
    return 0


def _cmd_dlq(engine: Engine, args: argparse.Namespace) -> int:
    jobs, next_after = _page(
        engine.dead_jobs(
            kind=args.kind, tenant=args.tenant, limit=args.limit + 1, after_id=args.after
        ),
        args.limit,
    )
    if args.json:
        _print_json({"jobs": [job_json(j) for j in jobs], "next_after": next_after})
    else:
        _print_jobs(jobs, next_after, dead=True)
    return 0


def _cmd_show(engine: Engine, args: argparse.Namespace) -> int:
    try:
        job = engine.get_job(args.id)
    except JobNotFoundError as exc:
        raise Failure(str(exc)) from None
    data = job_json(job)
    if args.json:
        _print_json(data)
        return 0
    width = max(len(key) for key in data)
    indent = "\n" + " " * (width + 2)
    for key, value in data.items():
        if key in {"payload", "result", "trace_context"}:
            shown = "-" if value is None else json.dumps(value, indent=2, ensure_ascii=False)
            shown = shown.replace("\n", indent)
        elif key == "last_error" and value is not None:
            shown = str(value).replace("\n", indent)
        elif key == "errors":
            # One line per failed attempt: its summary line (the whole text is in --json).
            shown = indent.join(_error_line(entry) for entry in job.errors) or "-"
        elif key == "worker_ids":
            shown = ", ".join(value) or "-"
        else:
            shown = "-" if value is None else str(value)
        print(f"{key + ':':<{width + 1}} {shown}")
    return 0


def _error_line(entry: AttemptError) -> str:
    """A failed attempt on one line: number, worker, time, the error's first line."""
    first = entry.error.partition("\n")[0]
    return f"#{entry.attempt} {entry.worker_id} {_time(entry.failed_at)}: {first}"


#: What each per-id action calls, and the word for its result.
_ACTIONS: dict[str, tuple[str, str]] = {
    "retry": ("retry_job", "retried"),
    "cancel": ("cancel_job", "cancelled"),
    "fail": ("fail_job", "marked failed"),
    "delete": ("delete_job", "deleted"),
}


def _cmd_retry(engine: Engine, args: argparse.Namespace) -> int:
    if not args.dead:
        return _cmd_change(engine, args)
    matching = sum(
        c.count
        for c in engine.counts()
        if c.state is JobState.DEAD
        and (not args.kind or c.kind in args.kind)
        and (not args.tenant or c.tenant in args.tenant)
    )
    if matching == 0:
        if args.json:
            _print_json({"retried": []})
        else:
            print("no dead jobs match")
        return 0
    selection = "".join(
        f" {label} {', '.join(values)}"
        for label, values in (("of kind", args.kind), ("of tenant", args.tenant))
        if values
    )
    if not _confirm(args, f"Replay {matching} dead job(s){selection}?"):
        return 1
    ids = engine.retry_dead(
        kind=args.kind,
        tenant=args.tenant,
        reset_attempts=not args.keep_attempts,
        **_with_actor(engine.retry_dead, args.actor),
    )
    if args.json:
        _print_json({"retried": ids})
    else:
        print(f"retried {len(ids)} dead job(s): now pending")
    return 0


def _cmd_change(engine: Engine, args: argparse.Namespace) -> int:
    """retry/cancel/fail/delete by id: each id on its own; failures reported per id."""
    method_name, verb = _ACTIONS[args.action]
    method: Callable[..., Job] = getattr(engine, method_name)
    ids = list(dict.fromkeys(args.ids))  # each once, in the order given
    if args.action == "delete" and len(ids) > 1:
        shown = ", ".join(map(str, ids[:10])) + (", ..." if len(ids) > 10 else "")
        if not _confirm(args, f"Delete {len(ids)} jobs ({shown})?"):
            return 1
    options = _with_actor(method, args.actor)
    if args.action == "retry":
        options["reset_attempts"] = not args.keep_attempts
    results: list[dict[str, Any]] = []
    for job_id in ids:
        try:
            job = method(job_id, **options)
        except JobNotFoundError as exc:
            results.append({"id": job_id, "ok": False, "error": "not_found", "message": str(exc)})
        except InvalidTransitionError as exc:
            results.append(
                {"id": job_id, "ok": False, "error": "invalid_transition", "message": str(exc)}
            )
        else:
            results.append({"id": job_id, "ok": True, "state": job.state.value})
    if args.json:
        _print_json({"results": results})
    for result in [] if args.json else results:
        if result["ok"]:
            print(f"job {result['id']}: {verb}")
        else:
            print(f"skiplock: job {result['id']}: {result['message']}", file=sys.stderr)
    return 0 if all(r["ok"] for r in results) else 1


def _cmd_counts(engine: Engine, args: argparse.Namespace) -> int:
    counts = sorted(
        engine.counts(), key=lambda c: (c.kind, c.tenant is not None, c.tenant or "", c.state)
    )
    if args.json:
        _print_json(
            {
                "counts": [
                    {"kind": c.kind, "tenant": c.tenant, "state": c.state.value, "count": c.count}
                    for c in counts
                ]
            }
        )
        return 0
    if not counts:
        print("no jobs")
        return 0
    states = list(JobState)
    table: dict[tuple[str, str | None], dict[JobState, int]] = {}
    for c in counts:
        table.setdefault((c.kind, c.tenant), {})[c.state] = c.count
    rows = [
        [
            _cell(kind),
            _cell(tenant),
            *(str(per_state.get(s, 0)) for s in states),
            str(sum(per_state.values())),
        ]
        for (kind, tenant), per_state in table.items()
    ]
    headers = ["KIND", "TENANT", *(s.value.upper() for s in states), "TOTAL"]
    print(_table(headers, rows, right=set(range(2, len(headers)))))
    return 0


def _health(engine: Engine, args: argparse.Namespace) -> HealthReport:
    return engine.health(
        max_pending_age=getattr(args, "max_age", None),
        worker_timeout=args.worker_timeout,
        max_dead=getattr(args, "max_dead", None),
    )


def _print_unreachable(engine: Engine, args: argparse.Namespace, problem: str) -> int:
    thresholds = engine.health_thresholds(
        max_pending_age=getattr(args, "max_age", None),
        worker_timeout=args.worker_timeout,
        max_dead=getattr(args, "max_dead", None),
    )
    _print_health(unreachable_report(problem, thresholds), as_json=args.json)
    return 1


def engine_health(engine: Engine, args: argparse.Namespace) -> int:
    """``health`` on an application's engine (its store, however it connects), with the
    options of :func:`add_health_options`: print the report, exit 1 if unhealthy."""
    try:
        return _cmd_health(engine, args)
    except ValidationError as exc:
        print(f"skiplock: error: {_one_line(str(exc))}", file=sys.stderr)
        return 2


def _cmd_health(engine: Engine, args: argparse.Namespace) -> int:
    report = _health(engine, args)
    _print_health(report, as_json=args.json)
    return 0 if report.healthy else 1


def _print_health(report: HealthReport, *, as_json: bool) -> None:
    if as_json:
        _print_json(report.to_dict())
        return
    print(f"status:   {'healthy' if report.healthy else 'unhealthy'}")
    for problem in report.problems:
        print(f"problem:  {problem}")
    if not report.reachable:
        return
    schema = report.schema
    if schema is not None:
        if schema.installed:
            state = "up to date" if schema.up_to_date else "out of date"
            print(
                f"schema:   {schema.name!r} version {schema.version} "
                f"(this code expects {schema.expected}): {state}"
            )
        else:
            print(f"schema:   {schema.name!r} not installed")
            return
    live = sum(w.live for w in report.workers)
    silent = len(report.workers) - live
    timeout = format_duration(report.thresholds.worker_timeout)
    print(f"workers:  {live} live, {silent} silent (live: a heartbeat within {timeout})")
    if report.kinds:
        print()
        rows = [
            [
                _cell(k.kind),
                str(k.pending_due),
                str(k.scheduled),
                "-" if k.oldest_due_age is None else format_duration(k.oldest_due_age),
                str(k.running),
                str(k.dead),
                "yes" if k.covered else f"NO ({k.uncovered})",
            ]
            for k in report.kinds
        ]
        headers = ["KIND", "DUE", "SCHEDULED", "OLDEST DUE", "RUNNING", "DEAD", "COVERED"]
        print(_table(headers, rows, right={1, 2, 3, 4, 5}))


def _cmd_workers(engine: Engine, args: argparse.Namespace) -> int:
    report = _health(engine, args)
    if not report.reachable or (report.schema is not None and not report.schema.installed):
        raise Failure(report.problems[0])
    workers = [w for w in report.workers if args.host is None or w.host == args.host]
    status = 0
    if args.host is not None and not any(w.live for w in workers):
        status = 1
        print(f"skiplock: no live worker on host {args.host!r}", file=sys.stderr)
    if args.json:
        _print_json(
            {"checked_at": _iso(report.checked_at), "workers": [w.to_dict() for w in workers]}
        )
        return status
    if not workers:
        print("no workers registered" if args.host is None else "no workers on this host")
        return status
    rows = [
        [
            _cell(w.id),
            "live" if w.live else "silent",
            _cell("*" if w.kinds is None else ",".join(sorted(w.kinds)), 40),
            _cell("*" if w.tenants is None else ",".join(sorted(w.tenants)), 30),
            str(w.running),
            f"{format_duration(w.heartbeat_age)} ago",
            _time(w.started_at),
        ]
        for w in workers
    ]
    headers = ["ID", "STATUS", "KINDS", "TENANTS", "RUNNING", "HEARTBEAT", "STARTED"]
    print(_table(headers, rows, right={4, 5}))
    return status
