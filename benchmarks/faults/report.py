"""The fault suite's report: one Markdown table row per scenario, then the details."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from benchmarks.faults.ledger import percentile

if TYPE_CHECKING:
    from benchmarks.faults.ledger import Verdict
    from benchmarks.faults.scenarios import Scenario


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One scenario's run: its verdict and how long it took."""

    scenario: Scenario
    verdict: Verdict
    seconds: float
    #: The queue it ran on: skiplock, or a peer of ``--competitors``.
    system: str = "skiplock"


def _s(value: float | None) -> str:
    if value is None:
        return "-"
    return "never" if value == float("inf") else f"{value:.2f}"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


HEADER = (
    "| scenario | jobs | lost | re-runs explained | unexplained | effects twice | stuck | "
    "died unplanned | recovery p50 / p99 s | jobs/s before / after | check |\n"
    "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
)


def _lost(v: Verdict) -> str:
    """Lost jobs; those PostgreSQL's asynchronous failover window lost, apart."""
    window = f" (+{len(v.lost_in_window)} in the async window)" if v.lost_in_window else ""
    return f"{len(v.lost)}{window}"


def row(outcome: Outcome) -> str:
    """The scenario's table row."""
    v = outcome.verdict
    explained = ", ".join(f"{n} {why}" for why, n in v.explained.items()) or "0"
    p50, p99 = percentile(v.recovery, 0.5), percentile(v.recovery, 0.99)
    before, after = v.throughput
    return (
        f"| {outcome.scenario.name} | {v.acked:,} | {_lost(v)} | {explained} | "
        f"{len(v.unexplained)} | {len(v.effects_twice)} | {len(v.stuck)} | "
        f"{len(v.unplanned_deaths)} | {_s(p50)} / {_s(p99)} | {_rate(before)} / "
        f"{_rate(after)} | {'pass' if v.ok else '**FAIL**'} |"
    )


def _compared(ours: list[Outcome], theirs: list[Outcome], absent: list[str]) -> list[str]:
    """The peers' table: each scenario's rows, skiplock's first, then what did not run."""
    if not theirs and not absent:
        return []
    lines = [
        "## The same scenarios on other queues (`--competitors`)",
        "",
        "Same harness, load, faults and ledger; the peers' processors are of the plain "
        "kind (neither commits a processor's writes with the job's completion: effects "
        "twice does not apply, a repeated effect is the at-least-once case); setup in "
        "benchmarks/faults/peers.py.",
        "",
        HEADER.replace("| scenario |", "| scenario | system |", 1).replace(
            "| --- |", "| --- | --- |", 1
        ),
    ]
    names = list(dict.fromkeys(t.scenario.name for t in theirs))
    for name in names:
        for o in [o for o in ours if o.scenario.name == name] + [
            t for t in theirs if t.scenario.name == name
        ]:
            first, rest = row(o).split(" | ", 1)
            lines.append(f"{first} | {o.system} | {rest}")
    lines.append("")
    for o in theirs:
        v = o.verdict
        problems = "; ".join(v.problems()) or "kept every promise of the check"
        extra = (
            f"; {v.repeated_plain} effects repeated by a re-run (at-least-once)"
            if v.repeated_plain
            else ""
        )
        lines.append(f"- **{o.scenario.name}** on {o.system} ({o.seconds:.0f} s): {problems}"
                     f"{extra}.")  # fmt: skip
    lines += [f"- {line}." for line in absent]
    return [*lines, ""]


def markdown(
    outcomes: list[Outcome],
    preamble: str,
    compared: list[Outcome] | None = None,
    absent: list[str] | None = None,
) -> str:
    """The whole report (``compared``: the peers' outcomes; ``absent``: why some did not
    run)."""
    lines = [preamble, "", HEADER, *(row(o) for o in outcomes), ""]
    for o in outcomes:
        v = o.verdict
        lines.append(f"- **{o.scenario.name}** ({o.seconds:.0f} s): {o.scenario.method}.")
        notes = [f"{v.succeeded:,} rows succeeded"]
        if v.refused_late:
            notes.append(f"{v.refused_late} late returns of a frozen worker refused")
        if v.repeated_plain:
            notes.append(
                f"{v.repeated_plain} non-transactional effects repeated by a re-run "
                "(at-least-once, as documented)"
            )
        if v.lost_in_window:
            notes.append(
                f"{len(v.lost_in_window)} acknowledged enqueues missing on the new primary, "
                "every one acknowledged in PostgreSQL's asynchronous replication window"
            )
        notes += v.notes
        notes += v.problems()
        lines.append("  " + "; ".join(notes) + ".")
    lines += ["", *_compared(outcomes, compared or [], absent or [])]
    return "\n".join(lines) + "\n"
