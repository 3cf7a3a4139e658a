"""What the demo did: the report and the summary printed at the end."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import attrs

from skiplock.core import Job, JobState

from ._live import cut, table
from ._showcase import FINAL_STATES, KINDS

if TYPE_CHECKING:
    from typing import TextIO


@attrs.frozen
class DemoReport:
    """What the demo did: the final state of every job it enqueued."""

    jobs: tuple[Job, ...]
    elapsed: float
    complete: bool
    duplicates: int

    def of_kind(self, kind: str) -> list[Job]:
        """The jobs of one kind, by id."""
        return [job for job in self.jobs if job.kind == kind]

    @property
    def dead(self) -> list[Job]:
        """The dead letter queue."""
        return [job for job in self.jobs if job.state is JobState.DEAD]


def print_summary(report: DemoReport, out: TextIO, *, store_label: str, try_next: str) -> None:
    """The per-kind table, the dead letter queue and what to try next."""
    rows = []
    kinds = list(KINDS) + sorted({job.kind for job in report.jobs} - set(KINDS))
    for kind in kinds:
        jobs = report.of_kind(kind)
        states = Counter(job.state for job in jobs)
        rows.append(
            [
                kind,
                str(len(jobs)),
                str(states[JobState.SUCCEEDED]),
                str(states[JobState.DEAD]),
                str(sum(job.attempts for job in jobs)),
                KINDS.get(kind, ""),
            ]
        )
    out.write(f"\nSummary ({report.elapsed:.1f}s on the {store_label})\n")
    headers = ["kind", "jobs", "succeeded", "dead", "attempts", "what it shows"]
    out.writelines(line + "\n" for line in table(headers, rows, "lrrrrl"))

    dead = report.dead
    out.write(f"\nDead letter queue ({len(dead)} job{'' if len(dead) == 1 else 's'})\n")
    if dead:
        dlq = [
            [
                str(job.id),
                job.kind,
                job.tenant or "-",
                str(job.attempts),
                _short_error(job.last_error),
            ]
            for job in dead
        ]
        out.writelines(
            line + "\n"
            for line in table(["id", "kind", "tenant", "attempts", "last error"], dlq, "rllrl")
        )
    else:
        out.write("  (empty)\n")

    if not report.complete:
        left = sum(1 for job in report.jobs if job.state not in FINAL_STATES)
        out.write(f"\nStopped before the end: {left} job(s) not in a final state.\n")
    out.write(
        "\nNext: read README.md (processors, enqueueing inside your own transaction),\n"
        f"      {try_next}\n"
        "      then run your own processors: skiplock worker yourapp.jobs:engine\n"
    )
    out.flush()


def _short_error(error: str | None, limit: int = 60) -> str:
    lines = [line.strip() for line in (error or "").splitlines() if line.strip()]
    if not lines:
        return ""
    return cut(lines[-1] if lines[0].startswith("Traceback") else lines[0], limit)
