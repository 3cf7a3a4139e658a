"""``concurrency`` (list, set, clear): concurrency limits set at run time (issue 45) through
the operator API, acting as ``--actor``: a kind's per node or cluster-wide, a concurrency
key's. Every worker picks a change up within ``Settings.controls_refresh``
(docs/controls.md, "Concurrency at run time")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _options
from ._controls import add_actor_option, add_unknown_kind_option, finish_actions, report
from ._errors import OK, UsageError
from ._options import act_of, add_act
from ._output import cell, print_json, table, time

if TYPE_CHECKING:
    import argparse

    from skiplock.core.store import ConcurrencyLimit
    from skiplock.engine import Operator, Reader

    from ._database import Reached
    from ._options import Leaf


def _target_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kind", metavar="K", help="the kind whose limit this is")
    parser.add_argument(
        "--key", metavar="KEY", help="a concurrency key (instead of --kind; cluster-wide)"
    )
    parser.add_argument(
        "--scope",
        choices=("cluster", "node"),
        metavar="SCOPE",
        default="cluster",
        help="a kind's limit across the cluster (default) or per worker process (node)",
    )


def add_options(parser: argparse.ArgumentParser, leaf: Leaf) -> None:
    """The actions of ``concurrency`` and their options; ``leaf`` adds the door's own
    options to each action."""
    actions = parser.add_subparsers(title="actions", metavar="ACTION", dest="action", required=True)
    add_act(actions, "list", _list, "the concurrency limits set at run time")
    setting = add_act(
        actions,
        "set",
        _set,
        "set a kind's concurrency limit (per node or cluster-wide) or a key's",
        description=(
            "At most --limit jobs of --kind run at once, across the cluster (--scope "
            "cluster, over the kind's cluster_limit) or per worker process (--scope node, "
            "over its node_limit); or at most --limit jobs of concurrency --key "
            "(cluster-wide, over the jobs' concurrency_limit). Every worker applies it "
            "within controls_refresh; running jobs above a lowered limit finish."
        ),
    )
    clearing = add_act(
        actions,
        "clear",
        _clear,
        "remove a concurrency limit set at run time (the declared applies)",
    )
    for parser in (setting, clearing):
        _target_options(parser)
        add_actor_option(parser)
    setting.add_argument(
        "--limit", type=_options.positive_int, required=True, help="most jobs at once (>= 1)"
    )
    add_unknown_kind_option(setting)
    finish_actions(actions, leaf)


def check(args: argparse.Namespace) -> None:
    """The usage checks of ``concurrency set`` and ``clear`` (before any connection)."""
    if args.action == "list":
        return
    if (args.kind is None) == (args.key is None):
        raise UsageError("give --kind or --key (one of them)")
    if args.key is not None and args.scope != "cluster":
        raise UsageError("a concurrency key's limit is cluster-wide (no --scope node)")


def run(reached: Reached, args: argparse.Namespace) -> int:
    if args.action == "list":  # a read: from the read replica if there is one
        return _list(reached.reads(), args)
    operator = reached.checked().operator(getattr(args, "actor", None))
    return act_of(args)(operator, args)


def _list(operator: Operator | Reader, args: argparse.Namespace) -> int:
    limits = operator.concurrency_limits()
    if args.json:
        print_json({"concurrency": [x.to_json() for x in limits]})
        return OK
    if not limits:
        print("no concurrency limits set at run time")
        return OK
    rows = [
        [cell(x.kind or "-"), cell(x.key or "-"), x.scope, str(x.limit), time(x.updated_at)]
        for x in limits
    ]
    for row, x in zip(rows, limits, strict=True):
        row.append(cell(x.actor))
    print(table(["KIND", "KEY", "SCOPE", "LIMIT", "SET", "BY"], rows, right={3}))
    return OK


def _target(args: argparse.Namespace) -> str:
    if args.key is not None:
        return f"key={args.key}"
    return f"kind={args.kind} ({args.scope})"


def _set(operator: Operator, args: argparse.Namespace) -> int:
    stored = operator.set_concurrency(
        kind=args.kind,
        key=args.key,
        limit=args.limit,
        scope=args.scope,
        allow_unknown_kind=args.allow_unknown_kind,
    )
    target = _target(args)

    def done(x: ConcurrencyLimit) -> str:
        return f"concurrency limit of {target}: {x.limit}"

    return report(args, "concurrency", stored, done)


def _clear(operator: Operator, args: argparse.Namespace) -> int:
    cleared = operator.clear_concurrency(kind=args.kind, key=args.key, scope=args.scope)
    target = _target(args)
    done = f"cleared the concurrency limit of {target}"
    missing = f"no concurrency limit of {target} was set"
    return report(args, "cleared", cleared, lambda _: done, missing)
