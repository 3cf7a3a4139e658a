"""The integration on an unsupported Python or Django: an ImportError naming what is
needed, raised before Django is imported."""

from __future__ import annotations

import pytest

from skiplock.integrations.django import _requires


def test_supported_versions_pass() -> None:
    assert _requires.problem((3, 12, 1), (6, 0, 0)) is None
    assert _requires.problem((3, 13, 0), (6, 1, 3)) is None
    _requires.require()  # this interpreter runs the tests


@pytest.mark.parametrize(
    ("python", "django", "needed"),
    [
        ((3, 11, 7), None, "needs Django 6, which needs Python 3.12 or later; this is Python 3.11"),
        ((3, 12, 0), None, "needs Django 6, which is not installed"),
        ((3, 12, 0), (5, 2, 1), "needs Django 6.0 or later (django.tasks); Django 5.2.1"),
    ],
)
def test_each_unsupported_setup_is_named(
    python: tuple[int, ...], django: tuple[int, ...] | None, needed: str
) -> None:
    message = _requires.problem(python, django)
    assert message is not None
    assert needed in message
    assert "pip install 'skiplock[django]'" in message


def test_require_raises_an_import_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_requires, "PYTHON", (99, 0))
    with pytest.raises(ImportError, match=r"Python 99\.0 or later"):
        _requires.require()
