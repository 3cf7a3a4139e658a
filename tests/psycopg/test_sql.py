"""The shared SQL layer without a server: loading, placeholders, keys, packaging."""

from __future__ import annotations

from importlib import resources
from typing import Any

import pytest

from skiplock.adapters._pg import _sql
from skiplock.adapters._pg._migrate import Step, migrations, schema_sql
from skiplock.adapters._pg._ops import claim_steps
from skiplock.core import ClaimRequest, ValidationError


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
