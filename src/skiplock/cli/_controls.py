"""``pause``, ``resume``, ``paused`` and ``limits`` (list, set, clear): the run-time
controls (issue 30) through the operator API, acting as ``--actor``. Every worker picks a
change up within ``Settings.controls_refresh`` (docs/controls.md, "Tenants, limits and
pause")."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, TypeVar

from skiplock.core.rules import describe

from . import _options
from ._errors import FAILED, OK, UsageError
from ._health import add_json
from ._options import act_of, add_act
from ._output import cell, print_json, table, time

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Sequence

    from skiplock.core.store import ConcurrencyLimit, Limit, Pause
    from skiplock.engine import Operator, Reader

    from ._database import Reached
    from ._options import Leaf

C = TypeVar("C", "Pause", "Limit", "ConcurrencyLimit")


def add_actor_option(parser: argparse.ArgumentParser) -> None:
    """``--actor``: who acts (every change's option)."""
    parser.add_argument(
        "--actor",
        type=_options.actor,
        metavar="NAME",
        help="who is acting, recorded with the change and in the audit trail",
    )


def _scope_options(parser: argparse.ArgumentParser, *, provider: bool = False) -> None:
    parser.add_argument("--kind", metavar="K", help="the kind (omitted: every kind)")
    parser.add_argument("--tenant", metavar="T", help="the tenant (omitted: every tenant)")
    if provider:
        parser.add_argument(
            "--provider", metavar="P", help="a provider's cap across its kinds (alone)"
        )


def add_unknown_kind_option(parser: argparse.ArgumentParser) -> None:
    """``--allow-unknown-kind`` (a change that names a kind)."""
    parser.add_argument(
        "--allow-unknown-kind",
        action="store_true",
        help="accept a --kind the application (or, with --dsn alone, the database) does "
        "not know: one another service declares (without it: an error naming the known "
        "kinds)",
    )


def add_pause_options(parser: argparse.ArgumentParser) -> None:
    """The options of ``pause`` in every door."""
    _scope_options(parser)
    parser.add_argument("--reason", metavar="TEXT", help="why (shown with the pause)")
    add_unknown_kind_option(parser)
    add_actor_option(parser)
    add_json(parser)


def add_resume_options(parser: argparse.ArgumentParser) -> None:
    """The options of ``resume`` in every door."""
    _scope_options(parser)
    add_actor_option(parser)
    add_json(parser)


def check_scope(args: argparse.Namespace) -> None:
    """``pause`` and ``resume`` name a kind, a tenant or both (before any connection)."""
    if args.kind is None and args.tenant is None:
        raise UsageError("give --kind, --tenant or both")


def _operator(reached: Reached, args: argparse.Namespace) -> Operator:
    return reached.checked().operator(getattr(args, "actor", None))


def report(
    args: argparse.Namespace,
    key: str,
    control: C | None,
    done: Callable[[C], str],
    missing: str = "",
) -> int:
    """Print what a change of a control did: as JSON under ``key``, else the line
    ``done`` makes of it. A removal that found nothing (``control`` None) says
    ``missing`` on stderr (in JSON: ``key`` is null) and fails."""
    if args.json:
        print_json({key: None if control is None else control.to_json()})
    elif control is None:
        print(f"skiplock: {missing}", file=sys.stderr)
    else:
        print(done(control))
    return OK if control is not None else FAILED


def _scope(control: Pause | Limit) -> str:
    return describe(control.kind, control.tenant)


def run_pause(reached: Reached, args: argparse.Namespace) -> int:
    pause = _operator(reached, args).pause(
        kind=args.kind,
        tenant=args.tenant,
        reason=args.reason,
        allow_unknown_kind=args.allow_unknown_kind,
    )
    return report(args, "paused", pause, lambda p: f"paused {_scope(p)}")


def run_resume(reached: Reached, args: argparse.Namespace) -> int:
    lifted = _operator(reached, args).resume(kind=args.kind, tenant=args.tenant)
    missing = f"no pause of {describe(args.kind, args.tenant)}"
    return report(args, "resumed", lifted, lambda p: f"resumed {_scope(p)}", missing)


def run_paused(reached: Reached, args: argparse.Namespace) -> int:
    pauses = reached.reads().paused()
    if args.json:
        print_json({"paused": [p.to_json() for p in pauses]})
    else:
        print_pauses(pauses)
    return OK


def print_pauses(pauses: Sequence[Pause]) -> None:
    """The pauses as a table ("nothing paused" when there is none)."""
    if not pauses:
        print("nothing paused")
        return
    rows = [
        [cell(p.kind or "*"), cell(p.tenant or "*"), time(p.since), cell(p.actor), cell(p.reason)]
        for p in pauses
    ]
    print(table(["KIND", "TENANT", "SINCE", "BY", "REASON"], rows, right=set()))


# ---- limits -----------------------------------------------------------------------------


def add_limits_options(parser: argparse.ArgumentParser, leaf: Leaf) -> None:
    """The actions of ``limits`` and their options; ``leaf`` adds the door's own options
    to each action."""
    actions = parser.add_subparsers(title="actions", metavar="ACTION", dest="action", required=True)
    add_act(actions, "list", _list, "the limits set at run time")
    setting = add_act(
        actions,
        "set",
        _set,
        "set a kind's rate limit (per tenant, or its default) or a provider's cap",
        description=(
            "Set a rate limit of RPS tokens per second, at most BURST stored: of --kind for "
            "--tenant, or without --tenant the kind's default for every tenant without its "
            "own; or with --provider alone a cap across the provider's kinds. It wins over "
            "the code's and the settings' limits; every worker applies it within "
            "controls_refresh."
        ),
    )
    _scope_options(setting, provider=True)
    setting.add_argument("--rps", type=float, required=True, help="tokens per second (> 0)")
    setting.add_argument(
        "--burst", type=_options.positive_int, required=True, help="most tokens stored (>= 1)"
    )
    add_unknown_kind_option(setting)
    add_actor_option(setting)
    clearing = add_act(
        actions,
        "clear",
        _clear,
        "remove a limit set at run time (the code's or settings' applies again)",
    )
    _scope_options(clearing, provider=True)
    add_actor_option(clearing)
    finish_actions(actions, leaf)


def finish_actions(actions: Any, leaf: Leaf) -> None:
    """Every action of a command: ``--json`` and the door's own options (``leaf``)."""
    for action in actions.choices.values():
        add_json(action)
        leaf(action)


def check_limits(args: argparse.Namespace) -> None:
    """The usage checks of ``limits set`` and ``clear`` (before any connection)."""
    if args.action == "list":
        return
    if args.provider is not None and (args.kind is not None or args.tenant is not None):
        raise UsageError("--provider stands alone (no --kind or --tenant)")
    if args.provider is None and args.kind is None:
        raise UsageError("give --kind (and maybe --tenant), or --provider")


def run_limits(reached: Reached, args: argparse.Namespace) -> int:
    if args.action == "list":  # a read: from the read replica if there is one
        return _list(reached.reads(), args)
    return act_of(args)(_operator(reached, args), args)


def _list(operator: Operator | Reader, args: argparse.Namespace) -> int:
    limits = operator.limits()
    if args.json:
        print_json({"limits": [x.to_json() for x in limits]})
        return OK
    if not limits:
        print("no limits set at run time")
        return OK
    rows = [_limit_row(x) for x in limits]
    headers = ["KIND", "TENANT", "PROVIDER", "RPS", "BURST", "SET", "BY"]
    print(table(headers, rows, right={3, 4}))
    return OK


def _limit_row(limit: Limit) -> list[str]:
    kind_side = limit.provider is None
    return [
        cell(limit.kind if kind_side else "-"),
        cell((limit.tenant or "*") if kind_side else "-"),
        cell(limit.provider),
        f"{limit.limit.rps:g}",
        str(limit.limit.burst),
        time(limit.updated_at),
        cell(limit.actor),
    ]


def _target(args: argparse.Namespace) -> str:
    if args.provider is not None:
        return f"provider={args.provider}"
    return describe(args.kind, args.tenant)


def _set(operator: Operator, args: argparse.Namespace) -> int:
    limit = operator.set_limit(
        kind=args.kind,
        tenant=args.tenant,
        provider=args.provider,
        rps=args.rps,
        burst=args.burst,
        allow_unknown_kind=args.allow_unknown_kind,
    )
    target = _target(args)
    return report(
        args,
        "limit",
        limit,
        lambda x: f"limit of {target}: {x.limit.rps:g}/s, burst {x.limit.burst}",
    )


def _clear(operator: Operator, args: argparse.Namespace) -> int:
    cleared = operator.clear_limit(kind=args.kind, tenant=args.tenant, provider=args.provider)
    target = _target(args)
    done = f"cleared the limit of {target}"
    return report(args, "cleared", cleared, lambda _: done, f"no limit of {target} was set")
