"""The shared SQL layer without a server: loading, placeholders, keys, packaging."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skiplock.adapters._pg import _sql
from skiplock.adapters._pg._migrate import Step, migrations, schema_sql
from skiplock.adapters._pg._ops import claim_steps
from skiplock.adapters._pg._rows import job_from_row
from skiplock.adapters._pg._rows_jobs import COMPLETION_FIELDS, copy_rows
from skiplock.core import (
    MAX_AVAILABLE_AT,
    MIN_AVAILABLE_AT,
    ClaimRequest,
    EnqueueBatch,
    EnqueueRequest,
    UndecodableRowError,
    ValidationError,
)
from skiplock.core._failure import UNDECODABLE_MARK
from skiplock.core.store import ClaimedJobs


def test_convert_pyformat_keeps_casts_and_escapes_percent() -> None:
    query = _sql.convert("SELECT :a::int, x::text, '100%', :b, :a", "pyformat")
    assert query.text == "SELECT %(a)s::int, x::text, '100%%', %(b)s, %(a)s"
    assert query.params == ("a", "b")


def test_convert_numeric_numbers_each_name_once() -> None:
    query = _sql.convert("SELECT :a::int[], :b, :a, now()::date", "numeric")
    assert query.text == "SELECT $1::int[], $2, $1, now()::date"
    assert query.args({"a": 1, "b": 2}) == [1, 2]
    with pytest.raises(KeyError, match="needs parameters"):
        query.args({"a": 1})


def test_parse_blocks_splits_names_and_drops_comments() -> None:
    blocks = _sql.parse_blocks(
        "-- header\n-- name: one\n-- about one\nSELECT 1;\n\n-- name: two\nSELECT {_f}\n"
        "-- name: _f\n2\n"
    )
    assert blocks == {"one": "SELECT 1", "two": "SELECT {_f}", "_f": "2"}
    assert _sql.expand_fragments(blocks) == {"one": "SELECT 1", "two": "SELECT 2"}
    with pytest.raises(ValueError, match="duplicate"):
        _sql.parse_blocks("-- name: a\nSELECT 1\n-- name: a\nSELECT 2\n")


def test_every_query_renders_for_both_styles() -> None:
    for style in ("pyformat", "numeric"):
        queries = _sql.queries("skiplock", style)
        assert set(queries) == set(_sql.query_names())
        for query in queries.values():
            assert "{" not in query.text.replace("'{}'", ""), query.name
            assert '"skiplock".' in query.text or "{schema}" not in query.text


def test_queries_quote_the_schema() -> None:
    text = _sql.queries("other_schema", "pyformat")["claim"].text
    assert '"other_schema".jobs' in text


@pytest.mark.parametrize("name", ['a"b', "A", "a b", "", "x" * 64])
def test_invalid_schema_names_never_reach_sql(name: str) -> None:
    with pytest.raises(ValidationError):
        _sql.queries(name, "pyformat")
    with pytest.raises(ValidationError):
        schema_sql(name)
    with pytest.raises(ValidationError):
        _sql.channel_name(name)


def test_channel_name_fits_postgres_limit() -> None:
    assert _sql.channel_name("skiplock") == "skiplock_jobs"
    long = _sql.channel_name("s" * 63)
    assert len(long) <= 63
    assert long.endswith("_jobs")
    assert long != _sql.channel_name("s" * 62 + "t")


def test_lock_keys_are_stable_signed_64_bit_and_distinct() -> None:
    keys = {
        _sql.lock_key("skiplock", "migrate"),
        _sql.lock_key("skiplock", "cluster", "a"),
        _sql.lock_key("skiplock", "cluster", "b"),
        _sql.lock_key("other", "cluster", "a"),
    }
    assert len(keys) == 4
    assert all(-(2**63) <= k < 2**63 for k in keys)
    assert _sql.lock_key("skiplock", "migrate") == _sql.lock_key("skiplock", "migrate")


def test_migrations_are_numbered_without_gaps() -> None:
    found = migrations()
    assert [m.version for m in found] == list(range(1, len(found) + 1))
    assert found[0].name == "0001_initial"


def test_sql_files_are_package_resources() -> None:
    folder = resources.files("skiplock.adapters._pg").joinpath("sql")
    names = {entry.name for entry in folder.iterdir()}
    assert {"schema.sql", "bootstrap.sql", "queries.sql", "migrations"} <= names


def _claim_step(**fields: Any) -> Step:
    return next(claim_steps("skiplock", ClaimRequest(worker_id="w", limit=5, **fields)))


def test_a_pair_limit_that_cannot_bind_keeps_the_plain_claim() -> None:
    plain = _sql.neutral_query("claim", "skiplock")
    capped = _sql.neutral_query("claim_capped", "skiplock")
    assert _claim_step(pair_limits={("k", "a"): 5}).sql == plain
    assert _claim_step(pair_limits={("k", "a"): 3}, kind_limits={"k": 3}).sql == capped
    assert _claim_step(pair_limits={("k", "a"): 3}, kinds=frozenset({"other"})).sql == plain
    assert _claim_step(pair_limits={("k", "a"): 3}, tenants=frozenset({"b"})).sql == plain
    step = _claim_step(pair_limits={("k", "a"): 4})
    assert step.sql == capped
    assert step.params is not None
    assert (step.params["pair_kinds"], step.params["pair_tenants"]) == (["k"], ["a"])
    # An empty bucket: the pair is only excluded, the claim stays plain.
    step = _claim_step(pair_limits={("k", None): 0}, excluded=frozenset({("j", "b")}))
    assert step.sql == plain
    assert step.params is not None
    assert step.params["excluded_pair_kinds"] == ["j", "k"]
    assert step.params["excluded_pair_tenants"] == ["b", None]


# ---- rows that cannot become a job (issue 9) ------------------------------------------

_WHEN = datetime(2030, 1, 1, tzinfo=UTC)


def _entry(**fields: Any) -> dict[str, Any]:
    """One recorded attempt as the ``errors`` column holds it (``fields`` override)."""
    entry = {
        "attempt": 1,
        "worker_id": "w",
        "claimed_at": _WHEN.isoformat(),
        "failed_at": _WHEN.isoformat(),
        "error": "boom",
    }
    return entry | fields


def _entries(**fields: Any) -> str:
    """An ``errors`` column of one recorded attempt."""
    return json.dumps([_entry(**fields)])


def _row(job_id: int, **fields: Any) -> dict[str, Any]:
    """A claimed row as ``_job_fields`` (plus the claim's flags) returns it."""
    row: dict[str, Any] = {
        "id": job_id,
        "kind": "k",
        "tenant_id": None,
        "payload": "null",
        "status": "running",
        "priority": 0,
        "available_at": _WHEN,
        "created_at": _WHEN,
        "claimed_at": _WHEN,
        "claimed_by": "w",
        "attempts": 1,
        "max_attempts": 5,
        "last_error": None,
        "completed_at": None,
        "idempotency_key": None,
        "trace_context": None,
        "claims": 1,
        "explicit_max_attempts": False,
        "recovered": False,
        "started_at": _WHEN,
        "unreadable": None,
        "suspect": False,
        "charged": True,
    }
    return row | fields


def test_the_cores_bounds_are_the_ones_in_the_queries_and_the_schema() -> None:
    query = _sql.neutral_query("get_job", "skiplock")
    assert f"BETWEEN {_sql.CONSTANTS['min_time']} AND {_sql.CONSTANTS['max_time']}" in query
    low, high = (
        f"'{t.isoformat(sep=' ').removesuffix(':00')}'"
        for t in (MIN_AVAILABLE_AT, MAX_AVAILABLE_AT)
    )
    check = f"available_at BETWEEN {low} AND {high}"
    assert check in resources.files("skiplock.adapters._pg").joinpath("sql/schema.sql").read_text()
    assert check in migrations()[4].template


@pytest.mark.parametrize(
    ("fields", "column", "problem"),
    [
        ({"trace_context": "[1, 2]"}, "trace_context", "not a JSON object: '[1, 2]'"),
        ({"trace_context": '"t"'}, "trace_context", "not a JSON object"),
        ({"payload": "1" * 4301}, "payload", "Exceeds the limit (4300 digits)"),
        ({"payload": "[" * 5000 + "]" * 5000}, "payload", "nested too deeply"),
        ({"payload": "{"}, "payload", "cannot be decoded"),
        ({"status": "lost"}, "status", "'lost' is not a valid JobState"),
        (
            {"created_at": None, "unreadable": "created_at -infinity; completed_at infinity"},
            "created_at",
            "-infinity is outside the timestamps Python reads back",
        ),
        ({"created_at": None}, "row", "AttributeError"),
        ({"result": "[" * 5000 + "]" * 5000}, "result", "nested too deeply"),
        ({"errors": '{"attempt": 1}'}, "errors", "not a JSON array"),
        ({"errors": "[1]"}, "errors", "an entry is not an object with"),
        ({"errors": '[{"attempt": 1}]'}, "errors", "an entry is not an object with"),
        ({"errors": _entries(attempt="1")}, "errors", "an entry has a value of the wrong type"),
        ({"errors": _entries(failed_at="yesterday")}, "errors", "Invalid isoformat"),
        ({"errors": _entries(failed_at=None)}, "errors", "not a timestamp: None"),
    ],
)
def test_a_row_that_cannot_become_a_job_names_its_column(
    fields: dict[str, Any], column: str, problem: str
) -> None:
    with pytest.raises(UndecodableRowError) as info:
        job_from_row(_row(7, **fields))
    assert (info.value.job_id, info.value.column) == (7, column)
    assert problem in info.value.problem


def test_results_and_recorded_errors_read_back() -> None:
    """X5: the admin columns; a claim's row has neither (the job then has none)."""
    plain = job_from_row(_row(1))
    assert (plain.result, plain.errors, plain.started_at) == (None, (), _WHEN)
    entries = [
        _entry(extra="newer code may add keys", claimed_at=None),
        _entry(attempt=2, failed_at="2030-01-01T05:30:00.5+05:30"),
    ]
    job = job_from_row(_row(2, result='{"n": [1, 2]}', errors=json.dumps(entries)))
    assert job.result == {"n": [1, 2]}
    assert [(e.attempt, e.worker_id, e.claimed_at, e.error) for e in job.errors] == [
        (1, "w", None, "boom"),
        (2, "w", _WHEN, "boom"),
    ]
    assert [e.failed_at for e in job.errors] == [_WHEN, _WHEN + timedelta(seconds=0.5)]
    assert all(e.failed_at.tzinfo is UTC for e in job.errors)


def test_a_trace_context_with_odd_values_reads_as_text() -> None:
    job = job_from_row(_row(1, trace_context='{"a": [1, [2]], "b": null, "c": "x"}'))
    assert job.trace_context == {"a": "[1, [2]]", "b": "None", "c": "x"}


@settings(max_examples=200)
@given(
    payload=st.text() | st.recursive(st.just("0"), lambda s: s.map(lambda t: f"[{t}]")),
    trace=st.none() | st.text(),
    status=st.sampled_from(["running", "pending", "?"]),
)
def test_decoding_a_row_returns_a_job_or_names_the_column(
    payload: str, trace: str | None, status: str
) -> None:
    column = None
    try:
        job_from_row(_row(1, payload=payload, trace_context=trace, status=status))
    except UndecodableRowError as exc:  # nothing else may escape
        column = exc.column
    assert column in {None, "payload", "trace_context", "status"}


def test_a_claim_buries_bad_rows_and_reports_what_it_charged() -> None:
    """Sans I/O: the bad row is buried with a fenced complete; the kept jobs keep the
    charge the statement gave them, and the claim says which those are."""
    steps = claim_steps("skiplock", ClaimRequest(worker_id="w", limit=5, start_now=2))
    assert next(steps).sql == _sql.neutral_query("claim", "skiplock")
    rows = [
        _row(1, priority=3),
        _row(2, priority=2, trace_context="[]", attempts=4, claims=9),
        _row(3, priority=1, attempts=0, charged=False),
        _row(4, priority=0, attempts=0, claims=2**31 - 1, charged=False),
    ]
    bury = steps.send(rows)
    assert bury.sql == _sql.neutral_query("complete", "skiplock")
    assert bury.params is not None
    buried = [
        dict(zip(COMPLETION_FIELDS, row, strict=True)) for row in json.loads(bury.params["batch"])
    ]
    assert [(b["id"], b["claim"]) for b in buried] == [(2, 9), (4, 2**31 - 1)]
    assert [(b["worker"], b["status"]) for b in buried] == [("w", "dead"), ("w", "dead")]
    assert buried[0]["error"] == f"{UNDECODABLE_MARK} trace_context: not a JSON object: '[]'"
    assert buried[1]["error"].startswith(f"{UNDECODABLE_MARK} claims: 2147483647")
    with pytest.raises(StopIteration) as done:
        steps.send([{"ord": 1}, {"ord": 2}])  # nothing more is written
    jobs = done.value.value
    assert isinstance(jobs, ClaimedJobs)
    assert [(job.id, job.attempts) for job in jobs] == [(1, 1), (3, 0)]
    assert jobs.charged == {1}
    assert [job.id for job in jobs.held()] == [3]


def test_a_claim_reports_the_charges_a_row_it_did_not_update_shifted() -> None:
    """Sans I/O: the statement charged the first three rows it locked, but one of them (a
    job committed after its snapshot) was not updated, so the job it returned third was
    held: the claim says so, and writes nothing more."""
    steps = claim_steps("skiplock", ClaimRequest(worker_id="w", limit=5, start_now=3))
    next(steps)
    rows = [_row(1, priority=3), _row(2, priority=2), _row(4, attempts=0, charged=False)]
    with pytest.raises(StopIteration) as done:
        steps.send(rows)
    jobs = done.value.value
    assert [(job.id, job.attempts) for job in jobs] == [(1, 1), (2, 1), (4, 0)]
    assert jobs.charged == {1, 2}


def test_a_claim_without_bad_rows_is_one_statement() -> None:
    steps = claim_steps("skiplock", ClaimRequest(worker_id="w", limit=5, start_now=1))
    next(steps)
    with pytest.raises(StopIteration) as done:
        steps.send([_row(2, priority=0, charged=False), _row(1, priority=1)])
    assert [job.id for job in done.value.value] == [1, 2]
    assert done.value.value.charged == {1}


def test_copy_rows_leave_out_the_columns_every_job_has_the_default_of() -> None:
    now = datetime(2030, 1, 2, tzinfo=UTC)
    plain = EnqueueBatch.of([EnqueueRequest("a", {"i": 1}), EnqueueRequest("b", max_attempts=3)])
    columns, rows = copy_rows([11, 12], plain, now)
    assert columns == ("id", "kind", "payload", "priority", "max_attempts")
    assert list(rows) == [(11, "a", '{"i":1}', 0, 5), (12, "b", "null", 0, 3)]

    trace = {"traceparent": "00-1-2-01"}
    full = EnqueueBatch.of(
        [
            EnqueueRequest("a", available_at=now, tenant="t", trace_context=trace),
            EnqueueRequest("b", delay=timedelta(hours=1), explicit_max_attempts=True),
            EnqueueRequest("c", payload_json='{"pre":"encoded"}', trace_context=trace),
        ]
    )
    columns, rows = copy_rows([1, 2, 3], full, now)
    assert columns == (
        "id",
        "kind",
        "payload",
        "priority",
        "max_attempts",
        "available_at",
        "tenant_id",
        "explicit_max_attempts",
        "trace_context",
    )
    text = json.dumps(trace)
    assert list(rows) == [
        (1, "a", "null", 0, 5, now, "t", False, text),
        (2, "b", "null", 0, 5, now + timedelta(hours=1), None, True, None),
        (3, "c", '{"pre":"encoded"}', 0, 5, now, None, False, text),
    ]
