"""``Settings.env_names()``: exactly the variables ``Settings.from_env`` reads."""

from __future__ import annotations

import pytest

from skiplock import Settings, ValidationError


def test_every_listed_variable_is_read() -> None:
    names = Settings.env_names()
    assert {"SKIPLOCK_CONCURRENCY", "SKIPLOCK_TIMEOUTS", "SKIPLOCK_CAPS"} <= names
    for name in sorted(names):
        # Read: a value no setting accepts (a control character) is refused, naming it.
        with pytest.raises(ValidationError, match=name):
            Settings.from_env({name: "\x01§"})


def test_other_variables_are_not_read() -> None:
    assert "SKIPLOCK_DSN" not in Settings.env_names()
    assert Settings.from_env({"SKIPLOCK_DSN": "§", "SKIPLOCK_NOPE": "§"}) == Settings()
