"""``counts``: the number of jobs per kind, tenant and state."""

from __future__ import annotations

from typing import TYPE_CHECKING

from skiplock.core import JobState

from ._output import cell, print_json, table

if TYPE_CHECKING:
    import argparse

    from ._database import Reached


def run(reached: Reached, args: argparse.Namespace) -> int:
    counts = sorted(
        reached.reads().counts(),
        key=lambda c: (c.kind, c.tenant is not None, c.tenant or "", c.state),
    )
    if args.json:
        print_json(
            {
                "counts": [
                    {"kind": c.kind, "tenant": c.tenant, "state": c.state.value, "count": c.count}
                    for c in counts
                ]
            }
        )
        return 0
    if not counts:
        print("no jobs")
        return 0
    states = list(JobState)
    per_row: dict[tuple[str, str | None], dict[JobState, int]] = {}
    for c in counts:
        per_row.setdefault((c.kind, c.tenant), {})[c.state] = c.count
    rows = [
        [
            cell(kind),
            cell(tenant),
            *(str(per_state.get(s, 0)) for s in states),
            str(sum(per_state.values())),
        ]
        for (kind, tenant), per_state in per_row.items()
    ]
    headers = ["KIND", "TENANT", *(s.value.upper() for s in states), "TOTAL"]
    print(table(headers, rows, right=set(range(2, len(headers)))))
    return 0
