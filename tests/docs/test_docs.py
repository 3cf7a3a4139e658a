"""Every code block of README.md and docs/**/*.md runs against PostgreSQL.

The rules (which blocks run, the DSN, the skip marker, shell commands) are in
docs/contributing.md and tests/docs/examples.py. One test per file: its python blocks
share one namespace and run in order. The scratch database is made only for a file
that uses the docs' DSN or runs a ``skiplock`` command; the server must be reachable
then (the test fails, never skips).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests import pgfixtures

from .examples import ROOT, ExampleFailed, doc_files, run_file, wants_schema

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from .examples import Outcome


@pytest.mark.postgres
@pytest.mark.parametrize("path", doc_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_doc_examples_run(
    path: Path, request: pytest.FixtureRequest, record_outcome: dict[Path, Outcome]
) -> None:
    def scratch_database() -> str:
        make_database: Callable[[], str] = request.getfixturevalue("make_database")
        dsn = make_database()
        if wants_schema(path):
            pgfixtures.apply_schema(dsn)
        return dsn

    failure = None
    try:
        record_outcome[path] = run_file(path, scratch_database)
    except ExampleFailed as exc:
        failure = str(exc)
    if failure is not None:  # outside the except block: no chained traceback
        pytest.fail(failure, pytrace=False)
