"""The physical limit: pgbench with a one-row UPDATE per transaction."""

from __future__ import annotations

import asyncio
import re
import shutil
import tempfile
from pathlib import Path

from benchmarks import _pg
from benchmarks._results import PGBENCH, Measurement, failed

PGBENCH_PATH = "/usr/bin/pgbench"
_ROWS = 100_000
_TPS_RE = re.compile(r"^tps = ([0-9.]+) \(without initial connection time\)", re.MULTILINE)
# Rows are picked at random so clients rarely wait on each other's row locks: the run
# measures the commit path (WAL flush), as a queue's one-transaction-per-job does.
_SCRIPT = "\\set id random(1, {rows})\nUPDATE bench_pgbench SET n = n + 1 WHERE id = :id;\n"


def find_pgbench() -> str | None:
    """pgbench's path, or None."""
    if Path(PGBENCH_PATH).exists():
        return PGBENCH_PATH
    return shutil.which("pgbench")


def parse_tps(output: str) -> float:
    """The tps pgbench reports (excluding connection time)."""
    match = _TPS_RE.search(output)
    if match is None:
        raise ValueError(f"no tps line in pgbench output: {output[-300:]!r}")
    return float(match.group(1))


async def run_pgbench(
    conninfo: str, clients: list[int], seconds: float
) -> tuple[list[Measurement], dict[int, float]]:
    """pgbench at each client count on ``conninfo``'s database; returns tps per count."""
    exe = find_pgbench()
    label = "one-row UPDATE per transaction"
    if exe is None:
        return [failed("pgbench", PGBENCH, label, c, "pgbench not found") for c in clients], {}
    await _pg.execute(
        conninfo,
        "CREATE TABLE bench_pgbench (id int PRIMARY KEY, n bigint NOT NULL DEFAULT 0)",
    )
    await _pg.execute(
        conninfo, "INSERT INTO bench_pgbench (id) SELECT g FROM generate_series(1, %s) g", [_ROWS]
    )
    await _pg.settle(conninfo)
    results: list[Measurement] = []
    rates: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="skiplock_pgbench_") as tmp:
        script = Path(tmp) / "update.sql"
        script.write_text(_SCRIPT.format(rows=_ROWS), encoding="utf-8")
        for c in clients:
            secs = max(1, round(seconds))
            argv = [exe, "-n", "-f", str(script), "-T", str(secs), "-c", str(c), "-j", str(c)]
            proc = await asyncio.create_subprocess_exec(
                *argv,
                conninfo,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
            )
            out, _ = await proc.communicate()
            text = out.decode(errors="replace")
            try:
                if proc.returncode != 0:
                    raise ValueError(f"exit {proc.returncode}: {text.strip()[-200:]}")
                tps = parse_tps(text)
            except ValueError as exc:
                results.append(failed("pgbench", PGBENCH, label, c, str(exc)))
                continue
            rates[c] = tps
            results.append(
                Measurement(
                    "pgbench",
                    PGBENCH,
                    label,
                    c,
                    tps,
                    "tps",
                    seconds=float(secs),
                    extra={"note": "the commit-rate ceiling"},
                )
            )
    return results, rates
