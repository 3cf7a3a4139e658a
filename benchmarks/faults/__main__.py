"""``python -m benchmarks.faults [--quick] [--scenario NAME ...]``: run the fault suite on a
throw-away PostgreSQL server, print the report, write it to benchmarks/results/, and exit
1 when any scenario's ledger check fails."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._procs import ROOT
from benchmarks.faults import peers
from benchmarks.faults.harness import Harness, external_database
from benchmarks.faults.ledger import check
from benchmarks.faults.report import Outcome, markdown
from benchmarks.faults.scenarios import QUICK, SCENARIOS, Scenario
from benchmarks.pgcluster import cluster


def run(
    scenario: Scenario,
    *,
    quick: bool,
    broken: bool = False,
    dsn: str | None = None,
    peer: str | None = None,
) -> Outcome:
    """One scenario on a new throw-away server (or, with ``dsn``, in a new database on
    that server; with ``peer``, on that other queue); its ledger checked."""
    began = time.monotonic()
    if scenario.place is not None:
        place = scenario.place()
    else:
        place = cluster() if dsn is None else external_database(dsn)
    with place as server, tempfile.TemporaryDirectory(prefix="skiplock-faults-") as tmp:
        harness = Harness(
            server, Path(tmp), scenario.load, broken=broken, schema=scenario.schema, peer=peer
        )
        try:
            scenario.run(harness, quick)
        except Exception as exc:  # a fault the system did not survive: a failed check
            harness.ledger.failed.append(f"the scenario stopped: {type(exc).__name__}: {exc}")
        finally:
            ledger = harness.finish()
        if scenario.after is not None:
            scenario.after(harness)
    return Outcome(scenario, check(ledger), time.monotonic() - began, peer or "skiplock")


def _competitors(names: list[str], ns: argparse.Namespace) -> tuple[list[Outcome], list[str]]:
    """The peers' runs of ``names`` (each next to skiplock's in the report), and a line
    for each scenario that does not apply to them, each peer not installed, and (once
    per scenario) what the peers cannot express in a scenario they ran."""
    found, outcomes, absent = peers.installed(), [], []
    absent += [f"{name}: not installed" for name in ("pgqueuer", "procrastinate")
               if name not in found]  # fmt: skip
    for peer in found:
        absent += [f"{name} on {peer}: n/a, {why}" for name, why in peers.NOT_APPLICABLE.items()]
        for name in names:
            if name not in peers.SCENARIOS:
                continue
            print(f"[faults] {name} on {peer} ...", file=sys.stderr, flush=True)
            outcome = run(SCENARIOS[name], quick=ns.quick, dsn=ns.dsn, peer=peer)
            outcomes.append(outcome)
            print(f"[faults] {name} on {peer}: {'pass' if outcome.verdict.ok else 'fail'} "
                  f"({outcome.seconds:.0f} s)", file=sys.stderr, flush=True)  # fmt: skip
    ran = " and ".join(found)
    # Each caveat holds for every peer: said once per scenario they ran.
    absent += [f"{name} on {ran}: {peers.CAVEATS[name]}" for name in names
               if found and name in peers.SCENARIOS and name in peers.CAVEATS]  # fmt: skip
    return outcomes, absent


def _commit() -> str:
    out = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    )
    return out.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    """Run the suite (see the module)."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.faults", description=__doc__)
    p.add_argument("--quick", action="store_true", help=f"the CI subset: {', '.join(QUICK)}")
    p.add_argument("--scenario", action="append", choices=sorted(SCENARIOS), metavar="NAME")
    p.add_argument("--output", type=Path, help="the results file (default: dated, in "
                   "benchmarks/results/)")  # fmt: skip
    p.add_argument("--no-write", action="store_true", help="print the report only")
    p.add_argument(
        "--dsn",
        help="run in a new database on this server (your topology: a pooler, a proxy); "
        "the scenarios that stop the server are left out",
    )
    p.add_argument(
        "--competitors",
        action="store_true",
        help=f"also run {', '.join(peers.SCENARIOS)} on pgqueuer and procrastinate, when "
        "installed (the others say why they do not apply)",
    )
    ns = p.parse_args(argv)
    names = ns.scenario or (list(QUICK) if ns.quick else list(SCENARIOS))
    if ns.dsn is not None:
        names = [n for n in names if not SCENARIOS[n].controls_server]
    outcomes = []
    for name in names:
        print(f"[faults] {name} ...", file=sys.stderr, flush=True)
        outcome = run(SCENARIOS[name], quick=ns.quick, dsn=ns.dsn)
        outcomes.append(outcome)
        print(f"[faults] {name}: {'pass' if outcome.verdict.ok else 'FAIL'} "
              f"({outcome.seconds:.0f} s)", file=sys.stderr, flush=True)  # fmt: skip
    compared, absent = _competitors(names, ns) if ns.competitors else ([], [])
    today = dt.date.today().isoformat()
    load = dataclasses.asdict(outcomes[0].scenario.load) if outcomes else {}
    preamble = (
        f"# Fault suite{' (quick)' if ns.quick else ''}, {today}\n\n"
        f"`python -m benchmarks.faults{' --quick' if ns.quick else ''}"
        f"{''.join(f' --scenario {n}' for n in ns.scenario or [])}"
        f"{' --competitors' if ns.competitors else ''}"
        f"{' --dsn ...' if ns.dsn else ''}` (commit "
        f"`{_commit()}`), each scenario "
        + (
            "in a new database on the server of `--dsn`"
            if ns.dsn
            else "on its own throw-away PostgreSQL server (benchmarks/pgcluster.py)"
        )
        + f". Load: {load}. Recovery: from the fault (a kill, a "
        "freeze) or from the server answering again, to each interrupted job's next run "
        "(and, for the database, to the first run at all). Throughput: processor returns "
        "per second before the first fault and after the last one (the backlog included)."
    )
    report = markdown(outcomes, preamble, compared, absent)
    print(report)
    if not ns.no_write:
        suffix = "-quick" if ns.quick else ""
        path = ns.output or ROOT / "benchmarks" / "results" / f"{today}-faults{suffix}.md"
        path.write_text(report, encoding="utf-8")
        print(f"[faults] written to {path}", file=sys.stderr)
    return 0 if all(o.verdict.ok for o in outcomes) else 1


if __name__ == "__main__":
    raise SystemExit(main())
