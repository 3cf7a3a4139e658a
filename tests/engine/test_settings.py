"""Settings: defaults, validation, per-kind resolution and SKIPLOCK_* environment parsing."""

from __future__ import annotations

from datetime import timedelta

import pytest

from skiplock import PolicyOverrides, RateLimit, Settings, ValidationError


def test_settings_defaults_match_the_seed() -> None:
    s = Settings()
    assert (s.concurrency, s.batch_size, s.poll_interval) == (4, None, 1.0)
    assert s.claim_batch_size(4) == 20  # concurrency plus the default prefetch (4 per slot)
    assert s.completion_batch_size == 100
    assert s.shutdown_timeout == 30.0
    assert s.heartbeat_interval == 10.0
    assert s.stale_ttl == timedelta(minutes=15)
    assert s.maintenance_interval == 300.0
    assert s.max_attempts == 5
    assert s.backoff_base == timedelta(seconds=30)
    assert s.backoff_factor == 2
    assert s.backoff_cap == timedelta(hours=24)
    assert s.backoff_jitter == 0.1
    assert s.timeout is None
    assert s.retention == timedelta(days=7)
    assert s.retention_archive is False
    assert s.max_payload_bytes == 1024 * 1024
    assert s.strict_kinds is True
    assert dict(s.kinds) == {}
    assert dict(s.caps) == {}


def test_settings_accepts_seconds_for_durations_and_dicts_for_overrides() -> None:
    s = Settings(
        stale_ttl=60,
        backoff_base=1.5,
        retention=None,
        kinds={"email.send": {"max_attempts": 9, "stale_ttl": 30, "rate_limit": (5, 10)}},
        caps={"smtp": (2, 4)},
        batch_size=10,
    )
    assert s.stale_ttl == timedelta(seconds=60)
    assert s.backoff_base == timedelta(seconds=1.5)
    assert s.retention is None
    assert s.kinds["email.send"] == PolicyOverrides(
        max_attempts=9, stale_ttl=timedelta(seconds=30), rate_limit=RateLimit(rps=5, burst=10)
    )
    assert s.caps["smtp"] == RateLimit(rps=2, burst=4)
    assert s.claim_batch_size(4) == 10


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"concurrency": 0}, "concurrency"),
        ({"concurrency": True}, "concurrency"),
        ({"completion_batch_size": 0}, "completion_batch_size"),
        ({"batch_size": 0}, "batch_size"),
        ({"poll_interval": 0}, "poll_interval"),
        ({"shutdown_timeout": -1}, "shutdown_timeout"),
        ({"heartbeat_interval": 1000, "stale_ttl": 60}, "heartbeat_interval"),
        ({"heartbeat_interval": 31, "stale_ttl": 60}, "heartbeat_interval"),
        (
            {"heartbeat_interval": 10, "kinds": {"report": {"stale_ttl": 15}}},
            r"kinds\['report'\].*15\.0 s.*10(\.0)? s",
        ),
        ({"stale_ttl": 0}, "stale_ttl"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"backoff_base": timedelta(hours=2), "backoff_cap": timedelta(hours=1)}, "backoff"),
        ({"backoff_factor": 0.5}, "backoff"),
        ({"backoff_jitter": 2.0}, "backoff"),
        ({"timeout": 0}, "timeout"),
        ({"retention": 0}, "retention"),
        ({"max_payload_bytes": 0}, "max_payload_bytes"),
        ({"strict_kinds": "yes"}, "strict_kinds"),
        ({"kinds": {"bad kind": {}}}, "kinds"),
        ({"kinds": {"a": {"nope": 1}}}, "unknown policy field"),
        ({"kinds": {"a": {"node_limit": 0}}}, "node_limit"),
        ({"kinds": {"a": {"transactional": True, "autocommit": True}}}, "mutually exclusive"),
        ({"caps": {"": (1, 1)}}, "provider"),
        ({"caps": {"smtp": (0, 1)}}, "rps"),
    ],
)
def test_settings_rejects_invalid_values(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        Settings(**kwargs)  # type: ignore[arg-type]


def test_settings_policy_for_resolves_explicit_over_processor_over_global() -> None:
    s = Settings(max_attempts=3, timeout=9.0, kinds={"a": PolicyOverrides(max_attempts=7)})
    processor = PolicyOverrides(max_attempts=5, timeout=2.0)
    a = s.policy_for("a", processor)
    assert a.retry.max_attempts == 7  # explicit configuration wins
    assert a.timeout == 2.0  # then the processor's default
    assert a.stale_ttl == s.stale_ttl  # then the global value
    b = s.policy_for("b", None)
    assert (b.retry.max_attempts, b.timeout) == (3, 9.0)


def test_settings_from_env_reads_scalars_with_units() -> None:
    env = {
        "SKIPLOCK_CONCURRENCY": "8",
        "SKIPLOCK_BATCH_SIZE": "16",
        "SKIPLOCK_COMPLETION_BATCH_SIZE": "7",
        "SKIPLOCK_POLL_INTERVAL": "250ms",
        "SKIPLOCK_SHUTDOWN_TIMEOUT": "1m",
        "SKIPLOCK_STALE_TTL": "2h",
        "SKIPLOCK_BACKOFF_BASE": "5",
        "SKIPLOCK_BACKOFF_FACTOR": "3",
        "SKIPLOCK_TIMEOUT": "none",
        "SKIPLOCK_RETENTION": "off",
        "SKIPLOCK_RETENTION_ARCHIVE": "yes",
        "SKIPLOCK_STRICT_KINDS": "false",
        "SKIPLOCK_MAX_PAYLOAD_BYTES": "2048",
        "SKIPLOCK_DSN": "postgresql://ignored",  # other tools' variables are ignored
        "OTHER": "x",
    }
    s = Settings.from_env(env)
    assert (s.concurrency, s.batch_size, s.poll_interval) == (8, 16, 0.25)
    assert s.completion_batch_size == 7
    assert s.shutdown_timeout == 60.0
    assert s.stale_ttl == timedelta(hours=2)
    assert s.backoff_base == timedelta(seconds=5)
    assert s.backoff_factor == 3.0
    assert s.timeout is None
    assert s.retention is None
    assert s.retention_archive is True
    assert s.strict_kinds is False
    assert s.max_payload_bytes == 2048


def test_settings_from_env_reads_per_kind_lists_and_caps() -> None:
    env = {
        "SKIPLOCK_NODE_LIMITS": "email.send=2, report=1",
        "SKIPLOCK_CLUSTER_LIMITS": "report=3",
        "SKIPLOCK_TIMEOUTS": "report=5m",
        "SKIPLOCK_STALE_TTLS": "report=1h",
        "SKIPLOCK_KIND_MAX_ATTEMPTS": "email.send=10",
        "SKIPLOCK_RATE_LIMITS": "email.send=5/10",
        "SKIPLOCK_KIND_TRANSACTIONAL": "email.send=false,report=yes",
        "SKIPLOCK_KIND_AUTOCOMMIT": "index.build=true",
        "SKIPLOCK_CAPS": "smtp=20/40",
    }
    s = Settings.from_env(env)
    assert s.kinds["email.send"] == PolicyOverrides(
        node_limit=2,
        max_attempts=10,
        rate_limit=RateLimit(rps=5, burst=10),
        transactional=False,
    )
    assert s.kinds["report"] == PolicyOverrides(
        node_limit=1,
        cluster_limit=3,
        timeout=300.0,
        stale_ttl=timedelta(hours=1),
        transactional=True,
    )
    assert s.kinds["index.build"] == PolicyOverrides(autocommit=True)
    assert s.policy_for("index.build", None).autocommit is True
    assert s.caps == {"smtp": RateLimit(rps=20, burst=40)}


def test_settings_from_env_keyword_overrides_win() -> None:
    s = Settings.from_env({"SKIPLOCK_CONCURRENCY": "0"}, concurrency=2)
    assert s.concurrency == 2


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"SKIPLOCK_CONCURRENCY": "many"}, "SKIPLOCK_CONCURRENCY"),
        ({"SKIPLOCK_CONCURRENCY": "0"}, "SKIPLOCK_CONCURRENCY"),
        ({"SKIPLOCK_POLL_INTERVAL": "5 weeks"}, "SKIPLOCK_POLL_INTERVAL"),
        ({"SKIPLOCK_STRICT_KINDS": "maybe"}, "SKIPLOCK_STRICT_KINDS"),
        ({"SKIPLOCK_NODE_LIMITS": "email.send"}, "SKIPLOCK_NODE_LIMITS"),
        ({"SKIPLOCK_NODE_LIMITS": "email.send=0"}, "SKIPLOCK_NODE_LIMITS"),
        ({"SKIPLOCK_NODE_LIMITS": "a=1,a=2"}, "SKIPLOCK_NODE_LIMITS"),
        ({"SKIPLOCK_RATE_LIMITS": "a=5"}, "SKIPLOCK_RATE_LIMITS"),
        ({"SKIPLOCK_KIND_AUTOCOMMIT": "a=maybe"}, "SKIPLOCK_KIND_AUTOCOMMIT"),
        ({"SKIPLOCK_CAPS": "smtp=0/1"}, "SKIPLOCK_CAPS"),
    ],
)
def test_settings_from_env_errors_name_the_variable(env: dict[str, str], variable: str) -> None:
    with pytest.raises(ValidationError, match=variable):
        Settings.from_env(env)


def test_settings_from_env_reads_os_environ_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKIPLOCK_CONCURRENCY", "3")
    assert Settings.from_env().concurrency == 3
