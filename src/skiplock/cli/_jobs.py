"""``jobs`` (list, show, why, retry, cancel, fail, delete) and ``dlq``: read and change jobs
through the admin API (R13), acting as ``--actor``."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from skiplock.core import InvalidTransitionError, Job, JobNotFoundError, JobState, job_json
from skiplock.core.rules import format_duration
from skiplock.engine import SelectionChangedError
from skiplock.engine.admin._bulk import MAX_CONFIRMED

from . import _options
from ._errors import Failure, UsageError
from ._health import add_json
from ._options import act_of, add_act
from ._output import cell, first_line, print_json, table, time

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

    from skiplock.core import AttemptError, JobPage
    from skiplock.engine import Operator, Reader

    from ._database import Reached
    from ._options import Leaf

#: Widest a LAST ERROR cell of ``jobs list`` gets.
LIST_ERROR_WIDTH = 40


def add_options(parser: argparse.ArgumentParser, leaf: Leaf) -> None:
    """The actions of ``jobs`` and their options; ``leaf`` adds the door's own options
    to each action."""
    actions = parser.add_subparsers(title="actions", metavar="ACTION", dest="action", required=True)

    listing = add_act(actions, "list", _list, "list jobs, oldest id first, one page at a time")
    _filter_options(listing, states=True)
    _options.add_search(listing)
    _page_options(listing)

    for name, reader, help_text in (
        ("show", _show, "show one job in full"),
        ("why", _why, "say why a job has not started (due later, paused, a limit, no worker...)"),
    ):
        one = add_act(actions, name, reader, help_text)
        one.add_argument("id", type=_options.job_id, metavar="ID", help="job id")

    retry = add_act(
        actions,
        "retry",
        _retry,
        "replay dead, failed or cancelled jobs (by id, or every dead one with --dead)",
        description=(
            "Replay jobs: pending and due now, starting over with attempts 0 unless "
            "--keep-attempts. With --dead: every dead job (of --kind/--tenant), after a "
            "confirmation."
        ),
    )
    retry.add_argument("ids", type=_options.job_id, nargs="*", metavar="ID", help="job ids")
    retry.add_argument(
        "--dead", action="store_true", help="replay every dead job matching --kind/--tenant"
    )
    _filter_options(retry, states=False)
    retry.add_argument("--keep-attempts", action="store_true", help="keep the jobs' attempt counts")
    _mutation_options(retry, confirm=True)

    for name, help_text in (
        ("cancel", "cancel jobs (a running one is stopped at its worker's next heartbeat)"),
        ("fail", "mark jobs failed (the manual stop flag: never tried again unless replayed)"),
        ("delete", "delete jobs that are not running (more than one: after a confirmation)"),
    ):
        action = add_act(actions, name, _change, help_text)
        action.add_argument("ids", type=_options.job_id, nargs="+", metavar="ID", help="job ids")
        _mutation_options(action, confirm=name == "delete")

    for action in actions.choices.values():
        add_json(action)
        leaf(action)


def add_dlq_options(parser: argparse.ArgumentParser, leaf: Leaf) -> None:
    """The options of ``dlq`` (list the dead jobs) and of its action ``purge``; ``leaf``
    adds the door's own options to both."""
    leaf(_options.with_value(parser))
    _filter_options(parser, states=False)
    _page_options(parser)
    add_json(parser)
    # Optional: without an action, `dlq` lists the dead jobs.
    actions = parser.add_subparsers(title="actions", metavar="[ACTION]", dest="dlq_action")
    purge = actions.add_parser(
        "purge",
        help="delete dead jobs in bulk (after a count and a confirmation)",
        description=(
            "Delete the dead jobs matching every filter given (every dead job without "
            "one). Prints how many match first, then asks (--yes: does not ask; --dry-run: "
            "only counts). Deletes only jobs counted: none that dies after the count, "
            "none replayed meanwhile. Each deleted job is audited as job_discard, with "
            "its payload."
        ),
    )
    _filter_options(purge, states=False)
    _options.add_duration(
        purge,
        "--older-than",
        "only jobs that died longer ago than this (30m, 12h, 7d, or seconds)",
    )
    purge.add_argument(
        "--error",
        type=_options.error_text,
        metavar="TEXT",
        help="only jobs whose last error holds TEXT (ignoring case)",
    )
    purge.add_argument(
        "--dry-run", action="store_true", help="only count the jobs that would be deleted"
    )
    _mutation_options(purge, confirm=True)
    add_json(purge)
    leaf(_options.with_value(purge))


def run(reached: Reached, args: argparse.Namespace) -> int:
    """The ``jobs`` action of ``args`` (:func:`check` has passed)."""
    # The reads go to the read replica when there is one (--read-dsn); changes never.
    if args.action == "list":
        return _list(reached.reads(), args)
    if args.action in {"show", "why"}:
        return (_show if args.action == "show" else _why)(reached.reads(), args)
    actor = getattr(args, "actor", None)
    return act_of(args)(reached.checked().operator(actor), args)


def run_dlq(reached: Reached, args: argparse.Namespace) -> int:
    """``dlq``: a page of dead jobs, or ``dlq purge`` (:func:`check_dlq` has passed)."""
    if getattr(args, "dlq_action", None) == "purge":
        return _purge(reached.checked().operator(args.actor), args)
    read = reached.reads().dead_jobs(
        kind=args.kind, tenant=args.tenant, limit=args.limit + 1, after_id=args.after
    )
    _print_page(read, args, dead=True)
    return 0


# ---- options ----------------------------------------------------------------------------


#: The job filters: each takes a comma-separated list and may be repeated (``--kind a,b
#: --kind c``: kind a, b or c). The first, ``--state``, only where states can be chosen.
_FILTERS: tuple[tuple[str, Callable[[str], list[str]], str, str], ...] = (
    (
        "--state",
        _options.states,
        "S[,S]",
        "only jobs in these states: " + ", ".join(s.value for s in JobState),
    ),
    ("--kind", _options.kinds, "K[,K]", "only jobs of these kinds"),
    ("--tenant", _options.split, "T[,T]", "only jobs of these tenants"),
)


def _filter_options(parser: argparse.ArgumentParser, *, states: bool) -> None:
    for flag, parse, metavar, help in _FILTERS[0 if states else 1 :]:
        parser.add_argument(flag, type=parse, action="extend", metavar=metavar, help=help)


def _page_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--limit",
        type=_options.limit,
        default=50,
        metavar="N",
        help=f"at most N jobs (default: 50, at most {_options.MAX_LIMIT})",
    )
    parser.add_argument(
        "--after",
        type=_options.job_id,
        metavar="CURSOR",
        help="the page after this cursor (the 'next' id the previous page printed)",
    )


def _mutation_options(parser: argparse.ArgumentParser, *, confirm: bool) -> None:
    parser.add_argument(
        "--actor",
        type=_options.actor,
        metavar="NAME",
        help="who is acting, recorded in the audit trail",
    )
    if confirm:
        parser.add_argument(
            "--yes", "-y", action="store_true", help="do not ask for a confirmation"
        )


# ---- usage checks and confirmations -----------------------------------------------------


def check(args: argparse.Namespace) -> None:
    """The usage checks of the ``jobs`` actions (before any connection)."""
    if args.action == "retry":
        if args.dead and args.ids:
            raise UsageError("give job ids or --dead, not both")
        if not args.dead and not args.ids:
            raise UsageError("give job ids, or --dead to replay every dead job")
        if not args.dead and (args.kind or args.tenant):
            raise UsageError("--kind and --tenant select dead jobs: use them with --dead")
        if args.dead:
            _needs_yes(args, "retry --dead")
    elif args.action == "delete" and len(set(args.ids)) > 1:
        _needs_yes(args, "deleting more than one job")


def check_dlq(args: argparse.Namespace) -> None:
    """The usage checks of ``dlq`` (before any connection)."""
    if getattr(args, "dlq_action", None) == "purge" and not args.dry_run:
        _needs_yes(args, "dlq purge")


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


# ---- the actions ------------------------------------------------------------------------


def _list(operator: Operator | Reader, args: argparse.Namespace) -> int:
    where = {"state": args.state, "kind": args.kind, "tenant": args.tenant}
    where |= _options.search_of(args)
    read = operator.list_jobs(**where, limit=args.limit + 1, after_id=args.after)
    _print_page(read, args, dead=False)
    return 0


def _print_page(read: JobPage, args: argparse.Namespace, *, dead: bool) -> None:
    """A page read with ``args.limit + 1``: its jobs, then the cursor of the next page;
    a search the store stopped early says so (``partial``, "searched up to")."""
    jobs, next_after = read.shown(args.limit)
    partial = read.resume_after is not None
    if args.json:
        print_json(
            {"jobs": [job_json(j) for j in jobs], "next_after": next_after, "partial": partial}
        )
        return
    if partial:
        print(f"searched up to job {next_after} (a page reads a bounded number of jobs)")
    if not jobs:
        if not partial:
            print("no dead jobs" if dead else "no jobs")
        else:
            print(f"next: --after {next_after}")
        return
    # LAST ERROR: the error's first line (its summary); `jobs show` prints it whole.
    if dead:
        headers = ["ID", "KIND", "TENANT", "ATTEMPTS", "DIED", "LAST ERROR"]
        rows = [
            [
                str(j.id),
                cell(j.kind),
                cell(j.tenant),
                f"{j.attempts}/{j.max_attempts}",
                time(j.completed_at),
                _last_error(j),
            ]
            for j in jobs
        ]
    else:
        headers = ["ID", "STATE", "KIND", "TENANT", "PRIO", "ATTEMPTS", "DUE", "LAST ERROR"]
        rows = [
            [
                str(j.id),
                j.state.value,
                cell(j.kind),
                cell(j.tenant),
                str(j.priority),
                f"{j.attempts}/{j.max_attempts}",
                time(j.available_at),
                _last_error(j, LIST_ERROR_WIDTH),
            ]
            for j in jobs
        ]
    print(table(headers, rows, right={0, 4} if not dead else {0}))
    if next_after is not None:
        print(f"next: --after {next_after}")


def _last_error(job: Job, width: int | None = None) -> str:
    text = None if job.last_error is None else first_line(job.last_error)
    return cell(text) if width is None else cell(text, width)


def _show(operator: Operator | Reader, args: argparse.Namespace) -> int:
    try:
        job = operator.get_job(args.id)
    except JobNotFoundError as exc:
        raise Failure(str(exc)) from None
    data = job_json(job)
    if args.json:
        print_json(data)
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


def _why(operator: Operator | Reader, args: argparse.Namespace) -> int:
    """``jobs why ID``: one line per reason the job waits (``--json``: the whole answer)."""
    try:
        wait = operator.why(args.id)
    except JobNotFoundError as exc:
        raise Failure(str(exc)) from None
    if args.json:
        print_json(wait.to_json())
        return 0
    print(f"job {wait.job_id} ({wait.state.value}) as of {time(wait.checked_at)}:")
    for reason in wait.reasons:
        print(f"  {reason.code}: {reason.message}")
    return 0


def _error_line(entry: AttemptError) -> str:
    """A failed attempt on one line: number, worker, time, the error's first line."""
    return f"#{entry.attempt} {entry.worker_id} {time(entry.failed_at)}: {first_line(entry.error)}"


def _retry(operator: Operator, args: argparse.Namespace) -> int:
    if not args.dead:
        return _change(operator, args)
    matching = sum(
        c.count
        for c in operator.counts()
        if c.state is JobState.DEAD
        and (not args.kind or c.kind in args.kind)
        and (not args.tenant or c.tenant in args.tenant)
    )
    if matching == 0:
        if args.json:
            print_json({"retried": []})
        else:
            print("no dead jobs match")
        return 0
    # Asked on a terminal, the replay is held to what the question counted: the dead jobs
    # up to the newest one now, as many as counted (beyond MAX_CONFIRMED: unbound).
    through = None
    if not args.yes and matching <= MAX_CONFIRMED:
        newest = operator.list_jobs(
            state="dead", kind=args.kind, tenant=args.tenant, limit=1, descending=True
        )
        through = newest[0].id if newest else None
    if not _confirm(args, f"Replay {matching} dead job(s){_selection(args)}?"):
        return 1
    try:
        ids = operator.retry_dead(
            kind=args.kind,
            tenant=args.tenant,
            reset_attempts=not args.keep_attempts,
            through=through,
            expected=None if through is None else matching,
        )
    except SelectionChangedError as exc:
        raise Failure(
            f"the dead jobs changed since they were counted: {exc.count} match now, not "
            f"{exc.confirmed}; nothing changed (run the command again)"
        ) from None
    if args.json:
        print_json({"retried": ids, "skipped": [skip.to_json() for skip in ids.skipped]})
        return 0
    print(f"retried {len(ids)} dead job(s): now pending")
    for skip in ids.skipped:
        print(f"job {skip.id}: skipped, {skip.reason}")
    return 0


def _purge(operator: Operator, args: argparse.Namespace) -> int:
    """``dlq purge``: count the matching dead jobs, say how many, ask (unless --yes or
    --dry-run), then delete those counted: the same filters, the same time of death, ids
    up to the count's largest."""
    died_before = None if args.older_than is None else datetime.now(UTC) - args.older_than
    filters: dict[str, Any] = {
        "kind": args.kind,
        "tenant": args.tenant,
        "died_before": died_before,
        "error": args.error,
    }
    count = operator.purge_dead(**filters, dry_run=True)
    selection = _selection(args)
    if count.matched == 0 or args.dry_run:
        if args.json:
            print_json({"matched": count.matched, "deleted": 0, "dry_run": args.dry_run})
        elif count.matched == 0:
            print(f"no dead jobs{selection}")
        else:
            print(f"{count.matched} dead job(s){selection} would be deleted (dry run)")
        return 0
    if not args.json:
        print(f"{count.matched} dead job(s){selection} match")
    if not _confirm(args, f"Delete {count.matched} dead job(s){selection}?"):
        return 1
    done = operator.purge_dead(**filters, up_to_id=count.up_to_id)
    if args.json:
        print_json({"matched": count.matched, "deleted": done.deleted, "dry_run": False})
        return 0
    print(f"deleted {done.deleted} dead job(s)")
    if done.deleted < count.matched:
        # Replayed or deleted by someone else since the count: left alone.
        print(f"{count.matched - done.deleted} counted job(s) were no longer dead: not deleted")
    return 0


def _selection(args: argparse.Namespace) -> str:
    """The dead-job filters of ``args``, in words: " of kind a, b of tenant t ..."."""
    words = "".join(
        f" {label} {', '.join(values)}"
        for label, values in (("of kind", args.kind), ("of tenant", args.tenant))
        if values
    )
    error: str | None = getattr(args, "error", None)  # dlq purge's own filters
    if error is not None:
        words += f" with {error!r} in the last error"
    older_than: timedelta | None = getattr(args, "older_than", None)
    if older_than is not None:
        words += f" that died more than {format_duration(older_than)} ago"
    return words


def _changer(operator: Operator, args: argparse.Namespace) -> tuple[Callable[[int], Job], str]:
    """The operator's call for the action of ``args``, and the word for its result."""
    if args.action == "retry":
        keep = args.keep_attempts
        return (lambda job_id: operator.retry_job(job_id, reset_attempts=not keep)), "retried"
    if args.action == "cancel":
        return operator.cancel_job, "cancelled"
    if args.action == "fail":
        return operator.fail_job, "marked failed"
    return operator.delete_job, "deleted"


def _change(operator: Operator, args: argparse.Namespace) -> int:
    """retry/cancel/fail/delete by id: each id on its own; failures reported per id."""
    change, verb = _changer(operator, args)
    ids = list(dict.fromkeys(args.ids))  # each once, in the order given
    if args.action == "delete" and len(ids) > 1:
        shown = ", ".join(map(str, ids[:10])) + (", ..." if len(ids) > 10 else "")
        if not _confirm(args, f"Delete {len(ids)} jobs ({shown})?"):
            return 1
    results: list[dict[str, Any]] = []
    for job_id in ids:
        try:
            job = change(job_id)
        except JobNotFoundError as exc:
            results.append({"id": job_id, "ok": False, "error": "not_found", "message": str(exc)})
        except InvalidTransitionError as exc:
            results.append(
                {"id": job_id, "ok": False, "error": "invalid_transition", "message": str(exc)}
            )
        else:
            results.append({"id": job_id, "ok": True, "state": job.state.value})
    if args.json:
        print_json({"results": results})
    for result in [] if args.json else results:
        if result["ok"]:
            print(f"job {result['id']}: {verb}")
        else:
            print(f"skiplock: job {result['id']}: {result['message']}", file=sys.stderr)
    return 0 if all(r["ok"] for r in results) else 1
