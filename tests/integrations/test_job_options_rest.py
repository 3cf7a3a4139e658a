"""The REST API's ``POST /jobs`` body offers every job option
(:class:`skiplock.core.EnqueueFields`; tests/job_options.py lists the doors)."""

from __future__ import annotations

from typing import Literal, get_args, get_type_hints

from skiplock.core import EnqueueFields
from skiplock.integrations.rest import models
from tests.job_options import OPTIONS


def test_job_create_offers_every_option_and_nothing_else() -> None:
    fields = models.JobCreate.model_fields
    assert set(fields) == OPTIONS | {"kind", "payload"}
    for name in OPTIONS:
        assert fields[name].default is None, name  # left out: the kind's default


def _choices(hint: object) -> set[object]:
    """The words of a ``Literal[...] | None`` hint."""
    return {
        word
        for arg in get_args(hint)
        if getattr(arg, "__origin__", None) is Literal
        for word in get_args(arg)
    }


def test_the_words_of_an_option_are_the_declared_ones() -> None:
    declared = get_type_hints(EnqueueFields)
    for name in ("idempotency_scope", "idempotency_conflict"):
        body = models.JobCreate.model_fields[name].annotation
        assert _choices(body) == _choices(declared[name]) != set(), name
