"""``Settings.env_names()``: exactly the variables ``Settings.from_env`` reads; any other
``SKIPLOCK_*`` variable is ignored with a warning."""

from __future__ import annotations

import logging

import pytest

from skiplock import Settings, ValidationError, cli


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


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "skiplock.settings"]


def test_the_removed_strict_kinds_is_ignored_with_a_warning_naming_its_replacement(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="skiplock.settings")
    assert Settings.from_env({"SKIPLOCK_STRICT_KINDS": "false"}) == Settings()
    [message] = _warnings(caplog)
    assert message.startswith("SKIPLOCK_STRICT_KINDS is ignored: it was removed")
    assert "use SKIPLOCK_UNKNOWN_KINDS" in message
    assert "true was error, false was allow" in message


def test_an_unknown_variable_is_ignored_with_a_warning_suggesting_the_closest_setting(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="skiplock.settings")
    env = {"SKIPLOCK_CONCURENCY": "8", "SKIPLOCK_NOPE": "1", "SKIPLOCK_TIMEOUT": "5"}
    settings = Settings.from_env(env)
    assert settings == Settings(timeout=5)
    assert _warnings(caplog) == [
        "SKIPLOCK_CONCURENCY is ignored: it is not a skiplock setting "
        "(did you mean SKIPLOCK_CONCURRENCY?)",
        "SKIPLOCK_NOPE is ignored: it is not a skiplock setting "
        "(the settings are the SKIPLOCK_* variables of docs/configuration.md)",
    ]


def test_settings_the_cli_database_and_other_prefixes_are_not_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="skiplock.settings")
    env = {name: "" for name in Settings.env_names()}  # blank: read as unset
    env |= {cli.DSN_ENV: "postgresql://db/app", "PGHOST": "db", "SKIPLOCKX": "1"}
    env |= {"SKIPLOCK_TEST_DSN": "postgresql://db/test"}  # a tool's connection string
    assert Settings.from_env(env) == Settings()
    assert _warnings(caplog) == []
