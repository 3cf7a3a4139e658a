"""Every door that enqueues offers the job options declared once
(:class:`skiplock.core.EnqueueFields`), or tests/job_options.py says why it does not:
the engine's and the operator's enqueue methods, the typed task handles, ``Enqueue``,
the ``JobOptions`` keywords, Django's enqueue call (read from its source: Django needs
its own env) and the CLI. The REST body and Django's ``Task.using()`` are checked in the
envs that have their frameworks."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_type_hints

import attrs
import pytest

from skiplock import AsyncEngine, AsyncTask, Engine, Enqueue, Task
from skiplock.cli import build_parser
from skiplock.core import EnqueueFields
from skiplock.engine import _inputs
from skiplock.engine._operator import Operator
from skiplock.engine._operator_async import AsyncOperator
from tests.job_options import (
    CLI_WITHOUT,
    DJANGO_OWN,
    DJANGO_USING,
    DJANGO_WITHOUT,
    DUE_TIME,
    OPTIONS,
)

if TYPE_CHECKING:
    from collections.abc import Callable

ROOT = Path(__file__).resolve().parents[2]
DJANGO_RUNTIME = ROOT / "src" / "skiplock" / "integrations" / "django" / "_runtime.py"


def _offered(fn: Callable[..., Any]) -> set[str]:
    """The job options ``fn`` takes by keyword: its keyword-only parameters and the keys
    of the TypedDict its ``**options`` unpacks (the caller's ``connection`` is none)."""
    names: set[str] = set()
    for parameter in inspect.signature(fn).parameters.values():
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY:
            names.add(parameter.name)
        elif parameter.kind is inspect.Parameter.VAR_KEYWORD:
            found = re.fullmatch(r"Unpack\[(\w+)\]", str(parameter.annotation))
            assert found, f"{fn.__qualname__}: **{parameter.name} is no Unpack[TypedDict]"
            names |= set(getattr(_inputs, found.group(1)).__annotations__)
    return names - {"connection"}


def test_the_declaration_names_its_options_in_order() -> None:
    fields = attrs.fields(EnqueueFields)
    assert EnqueueFields.names() == tuple(f.name for f in fields)
    assert set(EnqueueFields.names(due_time=False)) == OPTIONS - DUE_TIME
    assert {"available_at", "delay"} == DUE_TIME
    for field in fields:
        assert field.default is None, field.name
        assert field.kw_only, field.name
        assert field.metadata["doc"], field.name


def test_enqueue_is_the_options_with_a_kind_and_a_payload() -> None:
    assert issubclass(Enqueue, EnqueueFields)
    assert set(attrs.fields_dict(Enqueue)) == OPTIONS | {"kind", "payload"}
    assert Enqueue.__match_args__ == ("kind", "payload")


def test_the_job_options_keywords_are_the_declared_ones_with_their_types() -> None:
    declared = get_type_hints(EnqueueFields)
    keywords = get_type_hints(_inputs.JobOptions)
    assert keywords == {name: declared[name] for name in OPTIONS - DUE_TIME}
    assert set(get_type_hints(_inputs.EnqueueOptions)) == set(keywords) | {"connection"}


@pytest.mark.parametrize(
    "fn",
    [
        AsyncEngine.enqueue,
        Engine.enqueue,
        AsyncOperator.enqueue,
        Operator.enqueue,
        AsyncTask.enqueue,
        Task.enqueue,
        AsyncTask.item,
        Task.item,
    ],
    ids=lambda fn: fn.__qualname__,
)
def test_each_enqueue_method_offers_every_option(fn: Callable[..., Any]) -> None:
    assert _offered(fn) == OPTIONS


@pytest.mark.parametrize(
    "fn",
    [
        AsyncEngine.enqueue_at,
        Engine.enqueue_after,
        AsyncTask.enqueue_at,
        Task.enqueue_after,
    ],
    ids=lambda fn: fn.__qualname__,
)
def test_the_timed_enqueue_methods_offer_every_option_but_the_due_time(
    fn: Callable[..., Any],
) -> None:
    assert _offered(fn) == OPTIONS - DUE_TIME


def _django_enqueue_keywords() -> dict[str, str]:
    """The keywords of the engine.enqueue call in the Django runtime's ``write``, each
    with its value's source."""
    tree = ast.parse(DJANGO_RUNTIME.read_text(encoding="utf-8"))
    [write] = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and node.name == "write"
    ]
    calls = [
        node
        for node in ast.walk(write)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "enqueue"
    ]
    assert len(calls) == 1, "the Django runtime's write() enqueues in one call"
    return {k.arg: ast.unparse(k.value) for k in calls[0].keywords if k.arg is not None}


def test_the_django_door_sets_its_options_and_says_why_not_the_others() -> None:
    used = set(DJANGO_USING.values())
    accounted = [used, set(DJANGO_OWN), set(DJANGO_WITHOUT)]
    assert sum(len(part) for part in accounted) == len(OPTIONS), "an option listed twice"
    assert set().union(*accounted) == OPTIONS
    keywords = _django_enqueue_keywords()
    assert set(keywords) - {"connection"} == used | set(DJANGO_OWN)
    for parameter, option in DJANGO_USING.items():  # what Task.using() set, passed on
        assert f"task.{parameter}" in keywords[option], (option, keywords[option])


def test_no_cli_command_enqueues() -> None:
    # CLI_WITHOUT: were a command to enqueue, it would offer every option (and this test
    # would name it here, with the options it takes).
    assert CLI_WITHOUT
    parser = build_parser()
    names: list[str] = []
    stack = [parser]
    while stack:
        current = stack.pop()
        for action in current._actions:
            choices = getattr(action, "choices", None)
            if isinstance(choices, dict):
                names.extend(choices)
                stack.extend(choices.values())
    assert names, "the CLI's commands were not found"
    assert not [name for name in names if "enqueue" in name or name in {"add", "submit"}]
