"""The docs examples' summary: how many blocks ran and which were skipped."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from .examples import Outcome

if TYPE_CHECKING:
    from pathlib import Path

OUTCOMES = pytest.StashKey[dict["Path", Outcome]]()


@pytest.fixture
def record_outcome(request: pytest.FixtureRequest) -> dict[Path, Outcome]:
    """Where a docs test leaves its file's outcome for the summary."""
    return request.config.stash.setdefault(OUTCOMES, {})


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    outcomes = terminalreporter.config.stash.get(OUTCOMES, {})
    if not outcomes:
        return
    python = sum(o.python_run for o in outcomes.values())
    commands = sum(o.commands_run for o in outcomes.values())
    skipped = [block for o in outcomes.values() for block in o.skipped]
    terminalreporter.write_sep("-", "docs examples")
    terminalreporter.write_line(
        f"{len(outcomes)} files: {python} python blocks and {commands} skiplock commands run, "
        f"{len(skipped)} blocks skipped (<!-- docs: skip -->)"
    )
    for block in skipped:
        terminalreporter.write_line(f"  skipped {block.where}")
