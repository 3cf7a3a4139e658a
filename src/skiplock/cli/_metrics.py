"""``metrics print|serve``: the queue's Prometheus gauges without a worker (an exporter):
queue depths per kind and tenant, the oldest due job's age, running and dead jobs,
registered workers, whether the store answers and the health verdict, read from the
store at each scrape (:func:`skiplock.contrib.prometheus.exporter`)."""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

from skiplock._compat import ThreadSafeEvent, install_signal_handlers

from . import _options
from ._errors import Failure, UsageError
from ._output import describe
from ._worker import PROMETHEUS_HINT

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

    from skiplock.contrib.prometheus import PrometheusMetrics

    from ._database import Reached

#: Default of ``--port``: the exporter's own (the worker's metrics often use 9100).
DEFAULT_PORT = 9464

logger = logging.getLogger("skiplock.metrics")


#: What each action of ``metrics`` does (its own ``--help``).
ACTIONS = {
    "print": "Print one scrape of the queue's metrics on stdout (e.g. for node_exporter's "
    "textfile collector).",
    "serve": "Answer scrapes on http://ADDR:PORT/metrics until SIGTERM/SIGINT, reading the "
    "store at each scrape (cached 5 s).",
}


def add_options(parser: argparse.ArgumentParser) -> None:
    """The options of ``metrics`` in every door."""
    _options.add_action(
        parser,
        ACTIONS,
        "print: one scrape on stdout (e.g. for node_exporter's textfile collector); "
        "serve: answer scrapes on http://ADDR:PORT/metrics until SIGTERM/SIGINT",
    )
    port = parser.add_argument(
        "--port",
        type=_options.port,
        default=DEFAULT_PORT,
        metavar="N",
        help=f"with serve: the port (default: {DEFAULT_PORT})",
    )
    addr = parser.add_argument(
        "--addr",
        default="0.0.0.0",
        metavar="ADDRESS",
        help="with serve: the address to listen on (default: 0.0.0.0)",
    )
    for option in (port, addr):
        _options.for_actions(option, "serve")
    parser.add_argument(
        "--namespace",
        default="skiplock",
        metavar="NAME",
        help="prefix of every metric name (default: skiplock)",
    )
    parser.add_argument(
        "--max-series",
        type=_options.positive_int,
        default=100,
        metavar="N",
        help="(kind, tenant) pairs with series of their own; the rest are summed per kind "
        "under tenant __other__ (default: 100)",
    )


def _exporter() -> Callable[..., PrometheusMetrics]:
    """:func:`skiplock.contrib.prometheus.exporter`, or UsageError naming the extra."""
    try:
        from skiplock.contrib.prometheus import exporter
    except ImportError as exc:
        if (exc.name or "").partition(".")[0] == "prometheus_client":
            raise UsageError(
                f"metrics needs prometheus-client, which is not installed; run: {PROMETHEUS_HINT}"
            ) from None
        raise
    return exporter


def run(reached: Reached, args: argparse.Namespace) -> int:
    # A database that is down is what an exporter must report (skiplock_up 0), not a
    # reason to stop: the reads below answer for themselves.
    metrics = _exporter()(reached.engine, namespace=args.namespace, max_series=args.max_series)
    if args.action == "print":
        sys.stdout.write(metrics.exposition().decode())
        return 0
    try:
        server, _ = metrics.serve(args.port, args.addr)
    except OSError as exc:
        raise Failure(f"cannot serve metrics on {args.addr}:{args.port}: {describe(exc)}") from exc
    stop = ThreadSafeEvent()
    uninstall = install_signal_handlers(lambda signum: stop.set())
    print(f"serving Prometheus metrics on http://{args.addr}:{args.port}/metrics", file=sys.stderr)
    try:
        stop.wait()
    finally:
        uninstall()
        server.shutdown()
        server.server_close()
    return 0
