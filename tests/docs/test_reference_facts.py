"""Facts the reference pages state about the code, checked against it (issue 41, item
15): the keys of ``skiplock health --json``, the admin commands' default ``--timeout``,
and requirement R9's account of the health endpoints."""

from __future__ import annotations

import re
from typing import Any

from skiplock import Engine
from skiplock.adapters.memory import InMemoryJobStore
from skiplock.cli._database import DEFAULT_TIMEOUT

from .examples import ROOT

HEALTH = ROOT / "docs" / "health.md"


def _health_table() -> dict[str, str]:
    """The rows of the ``health --json`` key table: key -> what the value column says."""
    text = HEALTH.read_text(encoding="utf-8")
    start = text.index("`--json` prints `report.to_dict()`:")
    rows: dict[str, str] = {}
    for line in text[start:].splitlines()[1:]:
        if rows and not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        key = re.fullmatch(r"`(\w+)`", cells[0])
        if key:
            rows[key[1]] = cells[1]
    return rows


def _object_keys(described: str) -> set[str]:
    """The keys of the first JSON object a value column spells (``{"a", "b" (..)}``)."""
    match = re.search(r"\{(.*?)\}", described)
    assert match, described
    return set(re.findall(r'"(\w+)"', match[1]))


def _report() -> dict[str, Any]:
    """A health report with a kind, a pause and a held-back job."""
    engine = Engine(InMemoryJobStore())
    engine.processor("email.send")(lambda payload: None)
    engine.enqueue("email.send", {"to": "a@b.c"})
    engine.operator("ops").pause(kind="email.send", reason="outage")
    return engine.health().to_dict()


def test_the_health_json_table_lists_every_key_of_the_report() -> None:
    report, table = _report(), _health_table()
    assert set(table) == set(report)
    for key, value in report.items():
        sample = value[0] if isinstance(value, list) and value else value
        if isinstance(sample, dict):
            assert _object_keys(table[key]) == set(sample), key


def test_the_docs_give_the_admin_commands_default_timeout() -> None:
    default = DEFAULT_TIMEOUT.total_seconds()
    stated: list[tuple[str, float]] = []
    for path in sorted((ROOT / "docs").rglob("*.md")):
        text = " ".join(path.read_text(encoding="utf-8").split())
        for pattern in (
            r"(\d+(?:\.\d+)?) ?s\b[^.]{0,40}?admin commands' default `--timeout`",
            r"`--timeout` (?:\(default|defaults to) `?(\d+(?:\.\d+)?) ?s",
        ):
            stated += [(path.name, float(m)) for m in re.findall(pattern, text)]
    assert stated, "the docs state the default"
    assert [(name, s) for name, s in stated if s != default] == []


def test_r9_does_not_call_the_framework_health_endpoints_unbuilt() -> None:
    text = (ROOT / "docs" / "requirements.md").read_text(encoding="utf-8")
    r9 = text.split("### R9", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    assert "not built yet" not in r9.lower()
    for name in ("create_probes_router", "create_probes_blueprint", "/readyz"):
        assert name in r9
