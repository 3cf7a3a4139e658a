"""The types of the commands' option values: each refuses a bad value with argparse's
usage error (exit status 2) and a message naming what it expected."""

from __future__ import annotations

import argparse
import logging
import re
from collections.abc import Callable
from datetime import timedelta
from typing import TypeAlias

from skiplock.core import JobState, ValidationError, validate_identifier
from skiplock.core._fields import parse_duration
from skiplock.core._validation import INT8_RANGE, KIND_RE, check_actor
from skiplock.engine.admin._purge import MAX_ERROR_TEXT

#: Adds a door's own options to a parser that ends a command line (the command's own, or
#: each of its actions').
Leaf: TypeAlias = Callable[[argparse.ArgumentParser], None]
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


def split(text: str) -> list[str]:
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


def with_value(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``parser`` taking a value that starts with "-" (``--worker-timeout -1s``) as the
    option's value, so its type refuses it with its own message, not argparse's
    "expected one argument"."""
    # argparse reads "-1s" as an option unless it looks like a negative number (and no
    # option of the parser does): this parser's "negative numbers" include "-1s".
    parser._negative_number_matcher = _NEGATIVE
    return parser
