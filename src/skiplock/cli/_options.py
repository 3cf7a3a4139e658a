"""The types of the commands' option values: each refuses a bad value with argparse's
usage error (exit status 2) and a message naming what it expected."""

from __future__ import annotations

import argparse
import logging
import re
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeAlias

from skiplock.core import JobState, ValidationError, validate_identifier
from skiplock.core.rules import (
    INT8_RANGE,
    KIND_RE,
    check_actor,
    check_search_text,
    parse_duration,
    payload_filter,
)
from skiplock.engine.admin._purge import MAX_ERROR_TEXT

if TYPE_CHECKING:
    from skiplock.engine import Operator

#: Adds a door's own options to a parser that ends a command line (the command's own, or
#: each of its actions').
Leaf: TypeAlias = Callable[[argparse.ArgumentParser], None]
#: Runs an action of a command with actions (``jobs``, ``limits``) with the operator and
#: the parsed arguments; returns the exit status.
Act: TypeAlias = Callable[["Operator", argparse.Namespace], int]
#: Most rows ``--limit`` may ask for.
MAX_LIMIT = 10_000
#: What argparse takes for a value rather than an option: "-" then a digit (``-1s``,
#: ``-5``, ``-.5``), as newer Pythons do; older ones take only plain numbers.
_NEGATIVE = re.compile(r"^-\.?\d")


def integer(text: str, minimum: int, maximum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not minimum <= value <= maximum:
        raise argparse.ArgumentTypeError(f"expected {minimum} to {maximum}, got {value}")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def port(text: str) -> int:
    value = positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"expected a port number up to 65535, got {value}")
    return value


def job_id(text: str) -> int:
    return integer(text, 1, INT8_RANGE[1])


def limit(text: str) -> int:
    return integer(text, 1, MAX_LIMIT)


def non_negative_int(text: str) -> int:
    return integer(text, 0, INT8_RANGE[1])


def duration(text: str) -> timedelta:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc}, got {text!r}") from None


def positive_duration(text: str) -> timedelta:
    value = duration(text)
    if value <= timedelta(0):
        raise argparse.ArgumentTypeError(f"expected a duration > 0, got {text!r}")
    return value


def add_duration(
    parser: argparse._ActionsContainer,
    flag: str,
    help: str,
    *,
    positive: bool = True,
    default: timedelta | None = None,
) -> argparse.Action:
    """Add option ``flag``, a DURATION (30s, 5m, 1h, 7d, or seconds): above zero
    (:func:`positive_duration`) unless not ``positive`` (:func:`duration`)."""
    return parser.add_argument(
        flag,
        type=positive_duration if positive else duration,
        default=default,
        metavar="DURATION",
        help=help,
    )


def split(text: str) -> list[str]:
    """``text``'s comma-separated items, stripped; an empty item is an argparse error."""
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
    return items


def kinds(text: str) -> list[str]:
    items = split(text)
    for item in items:
        if KIND_RE.fullmatch(item) is None:
            raise argparse.ArgumentTypeError(f"invalid kind {item!r}")
    return items


def states(text: str) -> list[str]:
    known = [s.value for s in JobState]
    items = split(text)
    for item in items:
        if item not in known:
            raise argparse.ArgumentTypeError(f"unknown state {item!r}: one of {', '.join(known)}")
    return items


def error_text(text: str) -> str:
    """Text to search for in jobs' last errors."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected some text")
    if len(text) > MAX_ERROR_TEXT:
        raise argparse.ArgumentTypeError(f"expected at most {MAX_ERROR_TEXT} characters")
    return text


def payload_term(text: str) -> str:
    """A ``PATH=VALUE`` term (or a JSON object) of ``--payload``."""
    try:
        payload_filter([text])
        return check_search_text("--payload", text) or text
    except ValidationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def search_text(text: str) -> str:
    """An ``--error`` text or ``--idempotency-key`` of a search."""
    try:
        return check_search_text("search", text) or text
    except ValidationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_search(parser: argparse.ArgumentParser) -> None:
    """The search options of ``jobs list`` (docs/search.md, "The search filters")."""
    parser.add_argument(
        "--payload",
        type=payload_term,
        action="append",
        metavar="PATH=VALUE",
        help="jobs whose payload contains this: user_id=42 (VALUE as JSON where it is"
        " JSON, else a string: user_id='\"42\"' for the string), user.id=7 (nested), or"
        " a JSON object; repeat for more (every one)",
    )
    parser.add_argument(
        "--error",
        type=search_text,
        metavar="TEXT",
        help="jobs whose last error or any recorded attempt's error holds TEXT (ignoring case)",
    )
    parser.add_argument(
        "--idempotency-key",
        type=search_text,
        metavar="KEY",
        help="the jobs with this idempotency key (global or tenant-scoped)",
    )


def search_of(args: argparse.Namespace) -> dict[str, Any]:
    """The ``list_jobs`` arguments of :func:`add_search`'s options."""
    return {
        "payload": payload_filter(args.payload) if args.payload else None,
        "error": args.error,
        "idempotency_key": args.idempotency_key,
    }


def log_level(text: str) -> int:
    level = logging.getLevelNamesMapping().get(text.upper())
    if level is None:
        raise argparse.ArgumentTypeError(f"unknown log level {text!r}")
    return level


def identifier(text: str) -> str:
    try:
        return validate_identifier(text)
    except ValidationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def actor(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a name")
    try:
        return check_actor("the actor", text)  # what the audit trail accepts (J10)
    except ValidationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_act(
    actions: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    act: Act,
    help: str,
    description: str | None = None,
) -> argparse.ArgumentParser:
    """Add the action ``name`` to a command's ``actions``, run by ``act``
    (:func:`act_of`); returns its parser, for its options."""
    parser = actions.add_parser(name, help=help, description=description)
    parser.set_defaults(act=act)
    return parser


def act_of(args: argparse.Namespace) -> Act:
    """What runs the action ``args`` were parsed for (given by :func:`add_act`)."""
    act: Act = args.act
    return act


def with_value(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``parser`` taking a value that starts with "-" (``--worker-timeout -1s``) as the
    option's value, so its type refuses it with its own message, not argparse's
    "expected one argument"."""
    # argparse reads "-1s" as an option unless it looks like a negative number (and no
    # option of the parser does): this parser's "negative numbers" include "-1s".
    parser._negative_number_matcher = _NEGATIVE
    return parser


#: An option that only some of a command's actions take: the actions, on the option's
#: argparse action (see :func:`for_actions`).
_ONLY_FOR = "skiplock_only_for"


def for_actions(option: argparse.Action, *actions: str) -> argparse.Action:
    """Mark ``option`` (what ``add_argument`` returned) as taken only by ``actions``:
    the help of another action leaves it out."""
    setattr(option, _ONLY_FOR, frozenset(actions))
    return option


def add_action(parser: argparse.ArgumentParser, actions: dict[str, str], summary: str) -> None:
    """Give ``parser`` its first positional, ``action``: one of ``actions`` (name:
    description), listed as ``summary`` in the command's help, each with a help of its
    own (:func:`action_help`)."""
    parser.add_argument("action", choices=list(actions), help=summary)
    action_help(parser, actions)


def action_help(parser: argparse.ArgumentParser, actions: dict[str, str]) -> None:
    """Give ``parser``, a command whose first positional ``action`` is one of ``actions``
    (name: description), a ``-h/--help`` that after the action (``schema apply --help``)
    prints that action's own help: its usage, description and options. Before it, the
    command's help, as usual. The command line parses as with a plain positional, in
    every door (a framework's own options may still follow the action, which subparsers
    would refuse)."""
    setattr(parser, _ACTIONS, actions)
    # Take -h/--help over from argparse's (a door's parser, e.g. Django's, has it already).
    # (A group checks conflicts with its own handler, copied from the parser.)
    group = parser._optionals
    handler = group.conflict_handler
    group.conflict_handler = "resolve"
    try:
        helps = group.add_argument(
            "-h", "--help", action=_ActionHelp, help="show this help message and exit"
        )
    finally:
        group.conflict_handler = handler
    # First, where argparse puts its own (usage line and option list).
    for actions_list in (parser._actions, group._group_actions):
        actions_list.remove(helps)
        actions_list.insert(0, helps)


_ACTIONS = "skiplock_actions"


class _ActionHelp(argparse.Action):
    """The ``-h/--help`` of :func:`action_help`."""

    def __init__(self, option_strings: list[str], dest: str, help: str | None = None) -> None:
        super().__init__(
            option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0, help=help
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        # argparse has read the positionals before this option: the action, if given.
        chosen = getattr(namespace, "action", None)
        actions: dict[str, str] = getattr(parser, _ACTIONS)
        if chosen in actions:
            _action_parser(parser, chosen, actions[chosen]).print_help()
        else:
            parser.print_help()
        parser.exit()


def _action_parser(
    parser: argparse.ArgumentParser, action: str, description: str
) -> argparse.ArgumentParser:
    """A parser for the help of ``action`` of ``parser``: the options that action takes,
    in the groups of ``parser``."""
    helper = argparse.ArgumentParser(
        prog=f"{parser.prog} {action}",
        description=description,
        formatter_class=parser.formatter_class,
        add_help=False,
    )
    defaults = {
        id(parser._positionals): helper._positionals,
        id(parser._optionals): helper._optionals,
    }
    for group in parser._action_groups:
        taken = [
            option
            for option in group._group_actions
            if option.dest != "action" and action in getattr(option, _ONLY_FOR, {action})
        ]
        if not taken:
            continue
        target = defaults.get(id(group)) or helper.add_argument_group(
            group.title, group.description
        )
        for option in taken:
            target._add_action(option)
    return helper
