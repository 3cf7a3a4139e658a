"""docs/configuration.md lists exactly the declared settings with their defaults.

Run this file (``python tests/drift/test_config_docs.py``) to rewrite the tables from the
declarations.
"""

from __future__ import annotations

import re
import sys
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from skiplock.core._fields import POLICY_FIELDS
from skiplock.engine.settings._settings import ENGINE_FIELDS

if TYPE_CHECKING:
    from collections.abc import Callable

    from skiplock.core._fields import Setting

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
_UNITS = (("d", 86400), ("h", 3600), ("m", 60))


def _text(value: object) -> str:
    """A default as the environment would spell it."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
        for unit, size in _UNITS:
            if seconds >= size and seconds % size == 0:
                return f"{seconds / size:g}{unit}"
        return f"{seconds:g}s"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _policy_row(field: Setting) -> str:
    return (
        f"| `{field.name}` | `{_text(field.default)}` | {field.type.text} "
        f"| `{field.kind_env}` | {field.doc} |"
    )


def _engine_row(field: Setting) -> str:
    return f"| `{field.name}` | `{_text(field.default)}` | {field.type.text} | {field.doc} |"


TABLES: dict[str, tuple[tuple[Setting, ...], tuple[str, ...], Callable[[Setting], str]]] = {
    "policy-fields": (
        POLICY_FIELDS,
        ("field", "default", "value", "per-kind variable", "meaning"),
        _policy_row,
    ),
    "engine-fields": (ENGINE_FIELDS, ("field", "default", "value", "meaning"), _engine_row),
}


def _block(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- BEGIN {name}[^\n]*-->\n)(.*?)(<!-- END {name} -->)", re.DOTALL)


def render(name: str) -> str:
    """The table ``name`` as the declaration says it."""
    fields, columns, row = TABLES[name]
    header = f"| {' | '.join(columns)} |\n|{' --- |' * len(columns)}"
    return "\n".join([header, *(row(field) for field in fields)]) + "\n"


def test_config_tables_list_exactly_the_declared_fields_and_defaults() -> None:
    text = DOC.read_text(encoding="utf-8")
    for name in TABLES:
        match = _block(name).search(text)
        assert match is not None, f"{DOC.name} has no {name} block"
        assert match.group(2) == render(name), (
            f"{DOC.name}'s {name} table differs from the declaration; run "
            f"`python tests/drift/test_config_docs.py`. Expected:\n{render(name)}"
        )


def test_defaults_render_as_environment_values() -> None:
    assert _text(timedelta(hours=24)) == "1d"
    assert _text(timedelta(minutes=15)) == "15m"
    assert _text(timedelta(seconds=1.5)) == "1.5s"
    assert (_text(None), _text(False), _text(2.0), _text(0.1)) == ("none", "false", "2", "0.1")


def main() -> int:
    """Rewrite the tables in docs/configuration.md."""
    text = DOC.read_text(encoding="utf-8")
    for name in TABLES:
        match = _block(name).search(text)
        if match is None:
            print(f"{DOC}: no {name} block", file=sys.stderr)
            return 1
        text = text[: match.start(2)] + render(name) + text[match.end(2) :]
    DOC.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
