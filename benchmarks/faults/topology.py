"""The fault suite's scenarios that change the way to the database: a worker cut off from
it (:mod:`benchmarks.cutproxy`), a failover to a synchronous or an asynchronous standby
(:mod:`benchmarks.faults.failover`), a rolling deploy while the schema migrates
(:mod:`benchmarks.faults.rolling`)."""

from __future__ import annotations

import time

from benchmarks import cutproxy
from benchmarks.faults.harness import Harness, sleep, wait_until
from benchmarks.faults.ledger import Fault

#: Seconds of steady load before the first fault and after the last.
CALM = 5.0


def cut_off(h: Harness, quick: bool) -> None:
    """One worker's every connection goes through a proxy that is cut (every byte
    dropped, both ways; new connections never answered) while it runs jobs, for twice
    its lease, then restored (the connections open during the cut reset); the other
    worker goes straight to the server."""
    switch = h.resources.enter_context(cutproxy.running(("127.0.0.1", h.cluster.port)))
    victim = h.spawn(dsn=switch.dsn())
    for _ in range(h.load.workers - 1):
        h.spawn()
    h.start_load()
    sleep(CALM)
    for _ in range(1 if quick else 3):
        wait_until(lambda: h.running(victim) > 0, 30, "the cut-off worker to run a job")
        start = time.monotonic()
        switch.cut()
        sleep(2 * h.load.lease)
        switch.restore()
        h.fault(Fault("cut", start, time.monotonic(), start, (victim.pid,)))
        sleep(CALM)
    again = len(_runs_after_cut(h, victim.pid))
    h.ledger.notes.append(
        f"the proxy dropped {switch.dropped} chunks during the cuts and reset "
        f"{switch.reset} connections on restore; the cut-off worker started {again} "
        f"runs in the {CALM:g} s after its last restore"
    )
    if not again:
        h.ledger.failed.append("the cut-off worker took no job after it was reconnected")


def _runs_after_cut(h: Harness, pid: int) -> list[str]:
    """The cut-off worker's start lines after the last restore (it took work again)."""
    ends = [f.end for f in h.ledger.faults if pid in f.pids]
    last = max(ends, default=0.0)
    lines = h.path.read_text(encoding="utf-8").splitlines()
    return [
        line
        for line in lines
        if line.startswith("S ") and int(line.split()[3]) == pid and float(line.split()[4]) > last
    ]
