"""The engine's enqueue checks (X2) give every call the outcome the checks always gave:
the same request, or the same error, first problem first, whether the kind was seen
before (its checks and defaults kept) or not, for one job or a batch.

The oracle below is the check sequence as it was written before the engine kept
anything per kind: build an EnqueueRequest from the item, then validate_request on it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skiplock import Engine, Enqueue, Settings, declare
from skiplock.core import EnqueueRequest, EnqueueResult, ValidationError, encode_payload
from skiplock.core._options import check_available_at, validate_request
from skiplock.engine._codec import encode
from skiplock.engine._inputs import as_delay
from tests.hostile import HOSTILE, TAME, Args

if TYPE_CHECKING:
    from collections.abc import Sequence

#: Kinds the engines below know: one declared with defaults, one bare.
KNOWN = ("known.typed", "known.bare")
MAX_PAYLOAD_BYTES = 4096


class _Spy:
    """A store that keeps what it is asked to write (the engine calls only enqueue)."""

    def __init__(self) -> None:
        self.requests: list[list[EnqueueRequest]] = []

    def enqueue(
        self, requests: Sequence[EnqueueRequest], *, connection: Any = None, audit: Any = None
    ) -> list[EnqueueResult]:
        self.requests.append(list(requests))
        return [EnqueueResult(id=i, created=True) for i in range(len(requests))]


def _engine(*, warm: bool, unknown_kinds: str = "error") -> tuple[Engine, _Spy]:
    spy = _Spy()
    engine = Engine(
        spy,  # type: ignore[arg-type]  # the engine only enqueues here
        Settings(max_payload_bytes=MAX_PAYLOAD_BYTES, unknown_kinds=unknown_kinds),  # type: ignore[arg-type]
    )
    engine.declare(declare("known.typed", priority=-3, max_attempts=7))
    engine.declare_kind("known.bare")
    if warm:  # every known kind checked once: later enqueues of it take the kept checks
        engine.enqueue_many([Enqueue(kind) for kind in KNOWN])
    return engine, spy


def _oracle(engine: Engine, item: Enqueue) -> EnqueueRequest:
    """The request for ``item``, checked as before (raises the first problem)."""
    kind: object = item.kind
    if isinstance(kind, str):
        declaration = engine.declarations.get(kind)
        priority = declaration.priority if declaration is not None else None
        defaults = (0 if priority is None else priority, engine.policy(kind).retry.max_attempts)
    else:
        defaults = (0, engine.settings.max_attempts)
    try:
        payload = encode(item.payload)
    except ValidationError:
        raise
    except Exception as exc:
        raise ValidationError(f"payload could not be encoded: {exc}") from None
    text = encode_payload(payload, max_bytes=MAX_PAYLOAD_BYTES)
    available_at = None if item.available_at is None else check_available_at(item.available_at)
    request = EnqueueRequest(
        kind=item.kind,
        payload=payload,
        payload_json=text,
        priority=defaults[0] if item.priority is None else item.priority,
        tenant=item.tenant,
        available_at=available_at,
        delay=as_delay(item.delay),
        max_attempts=defaults[1] if item.max_attempts is None else item.max_attempts,
        explicit_max_attempts=item.max_attempts is not None,
        idempotency_key=item.idempotency_key,
    )
    known = engine.known_kinds
    validate_request(request, known_kinds=known, max_payload_bytes=MAX_PAYLOAD_BYTES)
    return request


def _outcome(call: Any) -> list[EnqueueRequest] | tuple[type[Exception], str]:
    try:
        return call()  # type: ignore[no-any-return]
    except (ValidationError, TypeError) as exc:
        return type(exc), str(exc)


def _same_requests(expected: Sequence[EnqueueRequest], actual: Sequence[EnqueueRequest]) -> None:
    assert list(actual) == list(expected)
    assert [r.payload_json for r in actual] == [r.payload_json for r in expected]
    for r in actual:
        assert r.available_at is None or r.available_at.tzinfo is UTC


@st.composite
def _args(draw: st.DrawFn) -> Args:
    """Arguments with any number of hostile fields (so the first problem must come first),
    of a known kind most of the time."""
    values: dict[str, Any] = {}
    for name in TAME:
        if name not in ("kind", "payload") and draw(st.booleans()):
            continue  # left out: the default
        values[name] = draw(st.one_of(TAME[name], HOSTILE[name]))
    kind = draw(st.one_of(st.sampled_from(KNOWN), st.just(values.pop("kind", "known.bare"))))
    values.pop("kind", None)
    return Args(kind=kind, payload=values.pop("payload", None), fields=values)


def _item(args: Args) -> Enqueue:
    return Enqueue(args.kind, args.payload, **args.fields)


@pytest.mark.parametrize("warm", [False, True])
@settings(max_examples=300, deadline=None)
@given(args=_args())
def test_one_enqueue_has_the_outcome_it_always_had(warm: bool, args: Args) -> None:
    engine, spy = _engine(warm=warm)
    expected = _outcome(lambda: [_oracle(engine, _item(args))])

    def enqueue() -> list[EnqueueRequest]:
        engine.enqueue(args.kind, args.payload, **args.fields)
        return spy.requests[-1]

    actual = _outcome(enqueue)
    if isinstance(expected, tuple):
        assert actual == expected
    else:
        assert not isinstance(actual, tuple), actual
        _same_requests(expected, actual)


@pytest.mark.parametrize("warm", [False, True])
@settings(max_examples=200, deadline=None)
@given(batch=st.lists(_args(), min_size=1, max_size=4))
def test_a_batch_has_the_outcome_it_always_had(warm: bool, batch: list[Args]) -> None:
    engine, spy = _engine(warm=warm)
    items = [_item(args) for args in batch]

    def oracle() -> list[EnqueueRequest]:
        requests = []
        for index, item in enumerate(items):
            try:
                requests.append(_oracle(engine, item))
            except ValidationError as exc:
                if len(items) == 1:
                    raise
                raise type(exc)(f"item {index}: {exc}") from None
        return requests

    expected = _outcome(oracle)

    def enqueue_many() -> list[EnqueueRequest]:
        engine.enqueue_many(items)
        return spy.requests[-1]

    actual = _outcome(enqueue_many)
    if isinstance(expected, tuple):
        assert actual == expected
    else:
        assert not isinstance(actual, tuple), actual
        _same_requests(expected, actual)


def test_a_batch_refuses_what_is_not_an_enqueue_by_type() -> None:
    engine, _ = _engine(warm=True)
    with pytest.raises(TypeError, match=r"expected skiplock\.Enqueue, got dict"):
        engine.enqueue_many([Enqueue("known.bare"), {"kind": "known.bare"}])  # type: ignore[list-item]


def test_kept_checks_follow_the_kinds_and_settings_of_the_engine() -> None:
    engine, spy = _engine(warm=True)
    engine.enqueue("known.typed")
    assert (spy.requests[-1][0].priority, spy.requests[-1][0].max_attempts) == (-3, 7)
    with pytest.raises(ValidationError, match="unknown kind 'later'"):
        engine.enqueue("later")
    engine.declare_kind("later")  # a new kind: known from now on
    engine.enqueue("later")
    engine.declare(declare("later", priority=4))  # its defaults, after it was enqueued
    engine.enqueue("later")
    assert spy.requests[-1][0].priority == 4
    engine.configure(
        Settings(max_payload_bytes=MAX_PAYLOAD_BYTES, max_attempts=9, unknown_kinds="allow")
    )
    engine.enqueue("known.bare")
    engine.enqueue("elsewhere")  # allowed now
    assert [r[0].max_attempts for r in spy.requests[-2:]] == [9, 9]
    when = datetime(2030, 1, 1, tzinfo=UTC)
    engine.enqueue("known.typed", available_at=when, max_attempts=2, priority=1)
    request = spy.requests[-1][0]
    assert (request.priority, request.max_attempts, request.explicit_max_attempts) == (1, 2, True)
    assert request.available_at == when


@pytest.mark.parametrize("warm", [False, True])
def test_an_unknown_option_is_refused_whether_the_kind_was_seen_or_not(warm: bool) -> None:
    # A single enqueue of a kind seen before builds its request by keyword (no Enqueue):
    # a misspelt option still fails as Enqueue's own keywords would, and writes nothing.
    engine, spy = _engine(warm=warm)
    written = len(spy.requests)
    with pytest.raises(TypeError, match="unexpected keyword argument 'prority'"):
        engine.enqueue("known.bare", None, prority=3)  # type: ignore[call-arg]
    assert len(spy.requests) == written


def test_the_kept_builder_follows_new_kinds_and_settings() -> None:
    engine, spy = _engine(warm=True)
    engine.enqueue("known.bare")  # kept builder: one per kinds and settings
    engine.declare_kind("added")
    engine.enqueue("added")  # known through a new builder
    engine.configure(Settings(max_payload_bytes=8, unknown_kinds="error"))
    with pytest.raises(ValidationError, match="payload"):
        engine.enqueue("known.bare", {"much": "too long for eight bytes"})
    assert [r[0].kind for r in spy.requests[-2:]] == ["known.bare", "added"]
