"""skiplock's log lines where the host process configured no logging.

An embedded worker (``in_background()``, the FastAPI lifespan) runs in someone else's
process: under uvicorn's default logging config only uvicorn's own loggers have handlers,
so the worker's INFO lines (started, stopped, released jobs) went nowhere (Python's
last-resort handler shows WARNING and above only). :func:`visible_logs` gives them the
``skiplock worker`` command's format on stderr for as long as nothing else would show
them, and never touches a logging setup the application made (docs/workers.md,
"Logging").
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from threading import Lock
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

#: The text format of skiplock's log lines (``skiplock worker --log-format text``).
TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"

_ROOT = "skiplock"


class FallbackHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stderr handler that writes a record only while no other handler would: once the
    application configures logging (a handler on the root logger, or on the record's
    logger or a parent it propagates to), it steps aside."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter(TEXT_FORMAT))

    def emit(self, record: logging.LogRecord) -> None:
        """Write ``record`` unless another handler sees it."""
        if not self._others_see(logging.getLogger(record.name)):
            super().emit(record)

    def _others_see(self, logger: logging.Logger | None) -> bool:
        while logger is not None:
            if any(handler is not self for handler in logger.handlers):
                return True
            if not logger.propagate:
                return False
            logger = logger.parent
        return False


_lock = Lock()
_users = 0
#: The handler installed, and the level it set on the ``skiplock`` logger (None: none).
_installed: tuple[FallbackHandler, int | None] | None = None


@contextmanager
def visible_logs(level: int = logging.INFO) -> Iterator[None]:
    """While the block runs, write the ``skiplock`` loggers' records at ``level`` and
    above to stderr if logging is not configured (no handler would see them: the root
    logger and the ``skiplock`` loggers have none). A level set on the ``skiplock``
    logger is kept; so is every handler the application adds, before or meanwhile (the
    fallback then writes nothing). Nested and concurrent blocks share one handler,
    removed (and the level put back) when the last one ends."""
    global _users, _installed
    with _lock:
        _users += 1
        if _users == 1 and _installed is None:
            logger = logging.getLogger(_ROOT)
            if not logger.hasHandlers():
                handler = FallbackHandler()
                leveled = level if logger.level == logging.NOTSET else None
                if leveled is not None:
                    logger.setLevel(leveled)
                logger.addHandler(handler)
                _installed = (handler, leveled)
    try:
        yield
    finally:
        with _lock:
            _users -= 1
            if _users == 0 and _installed is not None:
                handler, leveled = _installed
                _installed = None
                logger = logging.getLogger(_ROOT)
                logger.removeHandler(handler)
                if leveled is not None and logger.level == leveled:
                    logger.setLevel(logging.NOTSET)  # unless someone set it meanwhile
