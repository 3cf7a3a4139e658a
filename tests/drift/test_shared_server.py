"""No test or benchmark stops, starts or restarts the machine's shared PostgreSQL server:
anything else running against it would fail meanwhile. A test that needs a server going
down uses a throw-away cluster of its own (benchmarks/pgcluster.py, the one module allowed
to run PostgreSQL's server-control programs)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The one module that runs pg_ctl: on the throw-away cluster it made itself.
ALLOWED = {ROOT / "benchmarks" / "pgcluster.py"}
#: PostgreSQL's server-control programs and the service manager that wraps them.
SERVER_CONTROL = re.compile(r"\b(pg_ctlcluster|pg_ctl|systemctl|service\s+postgresql)\b")


def test_only_the_throwaway_cluster_controls_a_postgresql_server() -> None:
    sources = [
        path
        for folder in ("tests", "benchmarks", "examples", "tools")
        for path in sorted((ROOT / folder).rglob("*.py"))
    ]
    assert ROOT / "benchmarks" / "pgcluster.py" in sources
    offenders = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in sources
        if path not in ALLOWED and path != Path(__file__).resolve()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if SERVER_CONTROL.search(line)
    ]
    assert not offenders, (
        "these control a PostgreSQL server; use benchmarks/pgcluster.py's throw-away cluster: "
        + "; ".join(offenders)
    )
