"""``manage.py skiplock_metrics``: ``skiplock metrics`` on a backend's store (the queue's
Prometheus metrics without a worker: ``print`` one scrape, or ``serve`` them)."""

from __future__ import annotations

from ._mount import MountedCommand


class Command(MountedCommand):
    name = "metrics"
    help = (
        "The queue's Prometheus metrics of a skiplock backend, with no worker needed: queue "
        "depths per kind and tenant, the age of the oldest due job, running and dead jobs, "
        "registered workers, skiplock_up and skiplock_healthy. 'print' writes one scrape to "
        "stdout; 'serve' answers scrapes on --addr:--port until SIGTERM/SIGINT. Needs the "
        "prometheus extra."
    )
