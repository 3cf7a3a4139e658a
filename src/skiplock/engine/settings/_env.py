"""Settings from ``SKIPLOCK_*`` environment variables (:meth:`Settings.from_env`).

Every scalar field is read from its ``SKIPLOCK_<FIELD>``, the per-kind policy from one
``kind=value`` list per policy field, the provider caps from ``SKIPLOCK_CAPS``. A
``SKIPLOCK_*`` variable that is none of these is logged as a warning on the
``skiplock.settings`` logger and ignored: a misspelt or removed setting does not pass
unnoticed.
"""

from __future__ import annotations

import difflib
import functools
import logging
from typing import TYPE_CHECKING, Any

from skiplock.core import ValidationError
from skiplock.core.rules import POLICY_FIELDS, RATE, Setting

from ._fields import SETTING_FIELDS

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

logger = logging.getLogger("skiplock.settings")

PREFIX = "SKIPLOCK_"

#: The variable of ``Settings.caps`` (provider=rate pairs).
CAPS_ENV = "SKIPLOCK_CAPS"

#: ``SKIPLOCK_*`` variables skiplock reads that are no setting: the database of the
#: ``skiplock`` command (``cli.DSN_ENV``), the hot standby its reads go to, and the
#: PostgreSQL stores' notifier's (``adapters._pg._pgbouncer.LISTEN_DSN_ENV``; engine code
#: imports no adapter).
OTHER_NAMES = frozenset({"SKIPLOCK_DSN", "SKIPLOCK_LISTEN_DSN", "SKIPLOCK_READ_DSN"})

#: Settings variables that were removed, and what replaced them.
REMOVED = {
    "SKIPLOCK_STRICT_KINDS": (
        "SKIPLOCK_UNKNOWN_KINDS (error, warn or allow: SKIPLOCK_STRICT_KINDS=true was "
        "error, false was allow)"
    ),
}


def env_names() -> frozenset[str]:
    """Every variable :meth:`Settings.from_env` reads."""
    kind_names = {field.kind_env for field in POLICY_FIELDS if field.kind_env is not None}
    return frozenset({field.env for field in SETTING_FIELDS} | kind_names | {CAPS_ENV})


def ignored_message(name: str) -> str:
    """Why the ``SKIPLOCK_*`` variable ``name`` is ignored: removed (naming what replaced
    it), or no setting (naming the closest one, if one is close)."""
    if name in REMOVED:
        return f"{name} is ignored: it was removed, use {REMOVED[name]}"
    close = difflib.get_close_matches(name, sorted(env_names()), n=1, cutoff=0.85)
    hint = (
        f"did you mean {close[0]}?"
        if close
        else "the settings are the SKIPLOCK_* variables of docs/configuration.md"
    )
    return f"{name} is ignored: it is not a skiplock setting ({hint})"


def warn_unknown(env: Mapping[str, str]) -> None:
    """Log a warning for every ``SKIPLOCK_*`` variable in ``env`` that skiplock does not
    read (:func:`ignored_message`)."""
    known = env_names() | OTHER_NAMES
    # Names ending in _DSN are connection strings (of test suites, benchmarks, a host
    # application's own tools), never settings: no setting's name ends so.
    for name in sorted(
        name
        for name in env
        if name.startswith(PREFIX) and name not in known and not name.endswith("_DSN")
    ):
        logger.warning("%s", ignored_message(name))


def read_env(
    env: Mapping[str, str], values: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, str]]:
    """``values`` (constructor keywords of ``Settings``) with the variables of ``env``
    applied, and the variables each field it set came from (to name them in errors).

    A scalar variable replaces its field; a per-kind variable sets its field for the
    kinds it names, keeping the rest of ``values["kinds"]``; ``SKIPLOCK_CAPS`` replaces
    the caps of the providers it names. An invalid value raises
    :class:`~skiplock.core.ValidationError` naming the variable.
    """
    values = dict(values)
    sources: dict[str, str] = {}
    for field in SETTING_FIELDS:
        raw = env.get(field.env)
        if raw is not None and raw.strip():
            values[field.name] = _parse(field.env, raw, field.parse_env)
            sources[field.name] = field.env
    kinds: dict[str, dict[str, Any]] = {}
    for kind, kind_overrides in values.get("kinds", {}).items():
        kinds[kind] = {
            field.name: field.stored(kind_overrides)
            for field in POLICY_FIELDS
            if field.stored(kind_overrides) is not None
        }
    for field in POLICY_FIELDS:
        name = field.kind_env
        raw = env.get(name) if name is not None else None
        if name is None or raw is None or not raw.strip():
            continue
        parse = functools.partial(_per_kind_value, field)
        for kind, value in _parse(name, raw, functools.partial(_pairs, parse=parse)).items():
            kinds.setdefault(kind, {})[field.name] = value
        sources["kinds"] = f"{sources['kinds']}, {name}" if "kinds" in sources else name
    if kinds:
        values["kinds"] = kinds
    raw_caps = env.get(CAPS_ENV)
    if raw_caps is not None and raw_caps.strip():
        caps = _parse(CAPS_ENV, raw_caps, lambda r: _pairs(r, RATE.parse))
        values["caps"] = {**values.get("caps", {}), **caps}
        sources["caps"] = CAPS_ENV
    return values, sources


def _parse(name: str, raw: str, parse: Callable[[str], Any]) -> Any:
    try:
        return parse(raw)
    except (ValueError, ValidationError) as exc:
        raise ValidationError(f"{name}={raw!r}: {exc}") from None


def _per_kind_value(field: Setting, raw: str) -> Any:
    # A per-kind value always sets the field: "none" would mean "not set" there.
    value = field.type.parse(raw)
    field.check(value, none_ok=False)
    return value


def _pairs(raw: str, parse: Callable[[str], Any]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for item in raw.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"expected comma-separated name=value entries, got {item.strip()!r}")
        if key in result:
            raise ValueError(f"{key!r} is given twice")
        try:
            result[key] = parse(value)
        except (ValueError, ValidationError) as exc:
            raise ValueError(f"{key}: {exc}") from None
    return result
