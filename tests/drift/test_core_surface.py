"""skiplock.core's public surface stays small and documented: what a store author needs
(docs/api/core.md lists it), the rest stays in the core's private modules."""

from __future__ import annotations

import re
from pathlib import Path

import skiplock
import skiplock.core

API_PAGE = Path(__file__).resolve().parents[2] / "docs" / "api" / "core.md"
# 81: EnqueueFields, the one declaration of the job options, joined the 80 a store author
# needs (applications and every door that enqueues read it: tests/drift/test_job_options.py).
# 83: JobWait and WaitReason, the answer of engine.why (issue 45), values every door shows
# as HealthReport's are.
MAX_NAMES = 83


def _listed() -> set[str]:
    # The names in the table of docs/api/core.md (the rows before the mkdocstrings block).
    table = API_PAGE.read_text(encoding="utf-8").split(":::", 1)[0]
    rows = [line.split("|")[2] for line in table.splitlines() if line.startswith("| ")]
    return {name for row in rows for name in re.findall(r"`(\w+)`", row)}


def test_core_exports_at_most_83_names() -> None:
    assert len(skiplock.core.__all__) <= MAX_NAMES, len(skiplock.core.__all__)
    assert len(set(skiplock.core.__all__)) == len(skiplock.core.__all__)


def test_every_core_export_is_listed_on_its_api_page() -> None:
    exported = set(skiplock.core.__all__)
    assert exported - _listed() == set(), "exported, not listed in docs/api/core.md"
    assert _listed() - exported == set(), "listed in docs/api/core.md, not exported"


def test_the_facade_reexports_only_public_core_names() -> None:
    # What skiplock re-exports from the core is part of the core's public surface too.
    from_core = {
        name
        for name in skiplock.__all__
        if getattr(getattr(skiplock, name), "__module__", "").startswith("skiplock.core")
    }
    assert from_core <= set(skiplock.core.__all__)
