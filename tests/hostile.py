"""Hostile enqueue arguments (hypothesis strategies) and the property every store must keep
with them: a ValidationError that writes nothing and leaves the caller's transaction
usable, or a job that reads back as enqueued and can be claimed when due.

Imported as ``tests.hostile`` by the core, engine and PostgreSQL tests (issue 9).
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import attrs
from hypothesis import strategies as st

from skiplock.core import ClaimRequest, JobFilter, JobState, Page, ValidationError, encode_payload
from skiplock.core._validation import (
    INT4_RANGE,
    INT8_RANGE,
    MAX_PAYLOAD_DEPTH,
    MAX_SHOWN_LENGTH,
    PRIORITY_RANGE,
)

if TYPE_CHECKING:
    from skiplock import Engine, EnqueueResult, Job
    from skiplock.ports import JobStore

#: The longest error message a hostile value may produce (no 10,000-character echo).
MAX_MESSAGE_LENGTH = 4 * MAX_SHOWN_LENGTH + 200

#: Zones with the widest and oddest UTC offsets (LMT before 1900 included).
ZONES = ("UTC", "America/New_York", "Asia/Tokyo", "Pacific/Kiritimati", "Etc/GMT+12")

_BIG = 2**70
_EDGES = [
    0,
    1,
    -1,
    *PRIORITY_RANGE,
    PRIORITY_RANGE[0] - 1,
    PRIORITY_RANGE[1] + 1,
    *INT4_RANGE,
    INT4_RANGE[1] + 1,
    *INT8_RANGE,
    INT8_RANGE[1] + 1,
]
ints = st.one_of(st.sampled_from(_EDGES), st.integers(-_BIG, _BIG))
odd_numbers = st.one_of(st.booleans(), st.floats(), st.decimals(allow_nan=False))

#: Text with NUL, lone surrogates and control characters, sometimes 10,000 characters.
texts = st.one_of(
    st.text(max_size=12),
    st.text(st.characters(exclude_categories=()), max_size=12),  # surrogates too
    st.sampled_from(["a\x00b", "\ud800", "x\udfffy", "\n", "\x7f", "ok"]),
    st.integers(0, 3).map(lambda n: "k" * (200 * n + 55)),
    st.just("k" * 10_000),
)

# Every offset Python allows: a few microseconds to nearly a day, either way.
_offsets = st.timedeltas(
    min_value=-timedelta(hours=24) + timedelta(microseconds=1),
    max_value=timedelta(hours=24) - timedelta(microseconds=1),
).map(timezone)
_edge_days = st.sampled_from(
    [
        datetime.min,
        datetime(1, 1, 2, 23),
        datetime(1, 1, 3),
        datetime(9999, 12, 28, 23),
        datetime(9999, 12, 29),
        datetime(9999, 12, 29, 0, 0, 1),
        datetime.max,
    ]
)
datetimes = st.one_of(
    st.builds(lambda d, tz: d.replace(tzinfo=tz), _edge_days, st.one_of(_offsets, st.just(UTC))),
    st.datetimes(timezones=st.one_of(_offsets, st.timezones())),
    st.datetimes(),  # naive
)
delays = st.one_of(
    st.timedeltas(),
    st.sampled_from([timedelta.max, timedelta.min, timedelta(days=36_500), timedelta(0)]),
    st.floats(),
    st.integers(-_BIG, _BIG),
    st.sampled_from([1e13, -1.0, 0.5]),
)


def _nested(depth: int) -> Any:
    value: Any = "deep"
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


_json_leaves = st.one_of(
    st.none(), st.booleans(), ints, st.floats(), texts, st.integers(10**4000, 10**4400)
)
payloads = st.one_of(
    st.recursive(
        _json_leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(st.one_of(texts, ints), inner, max_size=4)
        ),
        max_leaves=12,
    ),
    st.integers(MAX_PAYLOAD_DEPTH - 2, MAX_PAYLOAD_DEPTH + 2).map(_nested),
    st.sets(st.integers(), max_size=2),  # not JSON
)


_tame_text = st.text(st.characters(exclude_categories=("Cc", "Cs")), min_size=1, max_size=20)
_json_tame = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        _tame_text,
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(_tame_text, inner, max_size=4)
    ),
    max_leaves=12,
)
_near_edges = st.sampled_from([datetime(1, 1, 4), datetime(9999, 12, 28), datetime(2024, 2, 29)])
#: Values every store must take, the edges included.
TAME: dict[str, st.SearchStrategy[Any]] = {
    "kind": st.from_regex(r"[A-Za-z_][A-Za-z0-9_.:\-]{0,199}", fullmatch=True),
    "payload": _json_tame,
    "priority": st.integers(*PRIORITY_RANGE),
    "tenant": st.one_of(st.none(), _tame_text),
    "idempotency_key": st.one_of(st.none(), _tame_text, st.just("k" * 255)),
    "max_attempts": st.one_of(st.none(), st.integers(1, INT4_RANGE[1])),
    "available_at": st.one_of(
        st.datetimes(
            min_value=datetime(1, 1, 4),
            max_value=datetime(9999, 12, 28),
            timezones=st.one_of(_offsets, st.timezones()),
        ),
        st.builds(lambda d, tz: d.replace(tzinfo=tz), _near_edges, _offsets),
    ),
    "delay": st.one_of(
        st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=36_500)),
        st.floats(0, 3e9),
    ),
}
#: Values across the whole range of Python values (mostly invalid).
HOSTILE: dict[str, st.SearchStrategy[Any]] = {
    "kind": st.one_of(texts, ints, st.from_regex(r"[A-Za-z_][\w.:-]{0,210}", fullmatch=True)),
    "payload": payloads,
    "priority": st.one_of(ints, odd_numbers),
    "tenant": st.one_of(texts, ints),
    "idempotency_key": texts,
    "max_attempts": st.one_of(ints, odd_numbers),
    "available_at": datetimes,
    "delay": delays,
}


@attrs.frozen
class Args:
    """One ``engine.enqueue`` call's arguments."""

    kind: Any
    payload: Any
    fields: dict[str, Any]


@st.composite
def enqueue_args(draw: st.DrawFn) -> Args:
    """Arguments that are valid but for at most one field drawn from :data:`HOSTILE`
    (an optional field may be left out); ``available_at`` and ``delay`` are exclusive."""
    hostile = draw(st.sampled_from([None, *HOSTILE]))
    schedule = draw(st.sampled_from([None, "available_at", "delay"]))
    values: dict[str, Any] = {}
    for name in TAME:
        if name in ("available_at", "delay") and name not in (schedule, hostile):
            continue
        if name not in ("kind", "payload") and name != hostile and draw(st.booleans()):
            continue  # left out: the default
        values[name] = draw((HOSTILE if name == hostile else TAME)[name])
    kind = values.pop("kind", "hostile.job")
    return Args(kind=kind, payload=values.pop("payload", None), fields=values)


def same_json(expected: Any, actual: Any) -> bool:
    """JSON equality as PostgreSQL keeps it: a float may come back as the equal int
    (jsonb prints 1e16 as 10000000000000000)."""
    if isinstance(expected, float):
        return isinstance(actual, int | float) and math.isclose(float(actual), expected, rel_tol=0)
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(actual) == len(expected)
            and all(same_json(e, a) for e, a in zip(expected, actual, strict=True))
        )
    if isinstance(expected, dict):
        return (
            isinstance(actual, dict)
            and actual.keys() == expected.keys()
            and all(same_json(v, actual[k]) for k, v in expected.items())
        )
    return type(actual) is type(expected) and actual == expected


def check_enqueue(engine: Engine, reader: JobStore, args: Args) -> Job | None:
    """Enqueue ``args`` in a transaction of ``engine.store`` and check the outcome.

    Rejected: a ValidationError with a short message, the transaction still usable, and
    nothing written once it commits. Accepted: the job reads back through ``reader`` (a
    store on the same jobs, perhaps in another session time zone) as enqueued, and a due
    job is claimed. Returns the job (None when rejected).
    """
    store = engine.store
    result: EnqueueResult | None = None
    error: ValidationError | None = None
    with store.transaction() as tx:
        try:
            result = engine.enqueue(args.kind, args.payload, connection=tx, **args.fields)
        except ValidationError as exc:
            error = exc
            assert store.get(1, connection=tx) is None  # the transaction still works
    if result is None:
        assert error is not None
        assert len(str(error)) <= MAX_MESSAGE_LENGTH, str(error)
        assert reader.list_jobs(JobFilter(), Page(limit=1)) == []
        return None
    before = reader.now()
    job = engine.get_job(result.id)
    assert reader.get(result.id) == job
    assert job.kind == args.kind
    assert job.state is JobState.PENDING
    assert same_json(json.loads(encode_payload(args.payload)), job.payload)
    fields = args.fields
    assert job.priority == fields.get("priority", 0)
    assert job.tenant == fields.get("tenant")
    assert job.idempotency_key == fields.get("idempotency_key")
    if fields.get("max_attempts") is not None:
        assert job.max_attempts == fields["max_attempts"]
    if fields.get("available_at") is not None:
        # In UTC: an ambiguous wall time (the repeated hour when daylight saving ends)
        # never compares equal across zones (PEP 495), although it names this instant.
        assert job.available_at == fields["available_at"].astimezone(UTC)
    if job.available_at <= before:
        claimed = reader.claim(
            ClaimRequest(worker_id="hostile", limit=1, kinds=frozenset({args.kind}))
        )
        assert [j.id for j in claimed] == [job.id]
    else:
        assert reader.list_jobs(JobFilter(states=frozenset({JobState.PENDING})), Page(limit=5))
    return job
