"""The command tree's one mapping from errors to exit statuses (every door shares it).

0 success; 1 the command could not do its work (:class:`Failure`, or a
:class:`~skiplock.SkiplockError`: database unreachable, schema missing or older, an id not
found or in a state that does not allow the action); 2 a usage error (:class:`UsageError`,
argparse's own errors, or a :class:`~skiplock.ValidationError`: a value the engine
refused); 130 interrupted.
"""

from __future__ import annotations

import asyncio
import sys
from typing import TYPE_CHECKING

from skiplock.core import SkiplockError, ValidationError

from ._output import one_line

if TYPE_CHECKING:
    from argparse import Namespace
    from collections.abc import Callable

#: Exit statuses.
OK, FAILED, USAGE, INTERRUPTED = 0, 1, 2, 130


class UsageError(Exception):
    """A usage problem found after parsing: ``skiplock: error: ...``, exit status 2."""


class Failure(Exception):
    """The command cannot do its work (database, schema): one line, exit status 1."""


def error(message: str) -> None:
    """Print ``message`` as the tree prints every error: ``skiplock: error: ...``."""
    print(f"skiplock: error: {one_line(message)}", file=sys.stderr)


def guarded(handler: Callable[[Namespace], int], args: Namespace) -> int:
    """Run ``handler(args)``: its exit status, or the one its error maps to (the error
    printed on one line)."""
    try:
        return handler(args)
    except (UsageError, ValidationError) as exc:
        error(str(exc))
        return USAGE
    except (Failure, SkiplockError) as exc:
        error(str(exc))
        return FAILED
    except (KeyboardInterrupt, asyncio.CancelledError):
        # Interrupted outside the worker's own stop handling (before its handlers are in
        # place, or giving up on its cleanup).
        return INTERRUPTED
