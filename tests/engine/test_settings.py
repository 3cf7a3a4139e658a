"""Settings: defaults, validation, per-kind resolution and SKIPLOCK_* environment parsing."""

from __future__ import annotations

import inspect
import typing
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import attrs
import pytest

from skiplock import (
    AsyncEngine,
    Engine,
    JobContext,
    PolicyOverrides,
    Processor,
    RateLimit,
    Settings,
    TaskOptions,
    ValidationError,
    declare,
)
from skiplock.adapters.memory import InMemoryJobStore
from skiplock.core._fields import (
    NON_NEGATIVE_DURATION,
    POLICY_FIELD_NAMES,
    POLICY_FIELDS,
    POSITIVE_DURATION,
    SecondsView,
    Setting,
)
from skiplock.engine._declaration import TASK_OPTION_NAMES
from skiplock.engine._registry import make_overrides
from skiplock.engine.settings._settings import ENGINE_FIELDS, SETTING_FIELDS

if TYPE_CHECKING:
    from skiplock.testing import FakeClock


def test_settings_defaults_match_the_seed() -> None:
    s = Settings()
    assert (s.concurrency, s.batch_size, s.poll_interval) == (4, None, 1.0)
    # The default prefetch buffer: 4 per slot, growing up to 256 (or 4 per slot, if more).
    assert (s.claim_prefetch(4), s.prefetch_ceiling(4)) == (16, 256)
    assert (s.claim_prefetch(100), s.prefetch_ceiling(100)) == (400, 400)
    assert s.claim_batch_size(4) == 4 + 256  # concurrency plus the most it prefetches
    assert s.completion_batch_size == 100
    # Backpressure: slots, the most prefetched and two completion batches of unwritten
    # outcomes.
    assert s.unwritten_limit(4) == 4 + 256 + 2 * 100
    # A prefetch that is set is the buffer, floor and ceiling alike.
    fixed = Settings(prefetch=0, completion_batch_size=3)
    assert (fixed.claim_prefetch(2), fixed.prefetch_ceiling(2)) == (0, 0)
    assert fixed.unwritten_limit(2) == 2 + 0 + 6
    assert Settings(prefetch=7).claim_batch_size(2) == 9
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
    assert s.unknown_kinds == "error"
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
        ({"unknown_kinds": "yes"}, "unknown_kinds"),
        ({"unknown_kinds": True}, "unknown_kinds"),
        ({"processor_exits": "ignore"}, "processor_exits"),
        ({"event_loop": "uvloop"}, "event_loop"),
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
        "SKIPLOCK_UNKNOWN_KINDS": " Warn ",
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
    assert s.unknown_kinds == "warn"
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
        ({"SKIPLOCK_UNKNOWN_KINDS": "maybe"}, "SKIPLOCK_UNKNOWN_KINDS"),
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


# ---- the declaration: every field from code, the environment, and a processor ---------

# field -> (text in an environment variable, the value it stands for), for every field.
ENV_SAMPLES: dict[str, tuple[str, Any]] = {
    "concurrency": ("8", 8),
    "batch_size": ("16", 16),
    "prefetch": ("0", 0),
    "rate_limit_scope": ("process", "process"),
    "completion_batch_size": ("7", 7),
    "poll_interval": ("250ms", timedelta(milliseconds=250)),
    "controls_refresh": ("500ms", timedelta(milliseconds=500)),
    "shutdown_timeout": ("1m", timedelta(minutes=1)),
    "request_timeout": ("500ms", timedelta(milliseconds=500)),
    "request_concurrency": ("4", 4),
    "heartbeat_interval": ("20s", timedelta(seconds=20)),
    "maintenance_interval": ("1h", timedelta(hours=1)),
    "retention": ("3d", timedelta(days=3)),
    "retention_archive": ("yes", True),
    "audit_retention": ("400d", timedelta(days=400)),
    "max_payload_bytes": ("2048", 2048),
    "max_result_bytes": ("4096", 4096),
    "unknown_kinds": ("allow", "allow"),
    "processor_exits": ("fail", "fail"),
    "event_loop": ("AsyncIO", "asyncio"),
    "audit": ("on", True),
    "audit_actor": (" billing-api ", "billing-api"),
    "idempotency_retention": ("30d", timedelta(days=30)),
    "max_attempts": ("9", 9),
    "backoff_base": ("2s", timedelta(seconds=2)),
    "backoff_factor": ("3", 3.0),
    "backoff_cap": ("2h", timedelta(hours=2)),
    "backoff_jitter": ("0.5", 0.5),
    "timeout": ("90", timedelta(seconds=90)),
    "stale_ttl": ("2h", timedelta(hours=2)),
    "node_limit": ("2", 2),
    "cluster_limit": ("3", 3),
    "rate_limit": ("5/10", RateLimit(rps=5, burst=10)),
    "prefetch_limit": ("0", 0),
    "transactional": ("true", True),
    "autocommit": ("1", True),
    "idempotency_scope": ("Tenant", "tenant"),
    "idempotency_conflict": ("replace_pending", "replace_pending"),
}
POLICY_SAMPLES = {name: ENV_SAMPLES[name] for name in POLICY_FIELD_NAMES}
# A second value per policy field, for the explicit level.
EXPLICIT: dict[str, Any] = {
    "max_attempts": 2,
    "backoff_base": timedelta(seconds=1),
    "backoff_factor": 1.5,
    "backoff_cap": timedelta(hours=3),
    "backoff_jitter": 0.0,
    "timeout": timedelta(seconds=30),
    "stale_ttl": timedelta(hours=1),
    "node_limit": 1,
    "cluster_limit": 1,
    "rate_limit": RateLimit(rps=1, burst=1),
    "prefetch_limit": 2,
    "transactional": False,
    "autocommit": False,
    "idempotency_scope": "global",
    "idempotency_conflict": "ignore",
}
DURATION_FIELDS = [
    f.name for f in SETTING_FIELDS if f.type in (POSITIVE_DURATION, NON_NEGATIVE_DURATION)
]


def _init_names(cls: type) -> set[str]:
    return {a.alias for a in attrs.fields(cls)}


def test_settings_spells_exactly_the_declared_fields_with_their_defaults() -> None:
    assert list(ENV_SAMPLES) == [f.name for f in SETTING_FIELDS]
    assert list(EXPLICIT) == list(POLICY_FIELD_NAMES)
    assert _init_names(Settings) == {f.name for f in SETTING_FIELDS} | {"kinds", "caps"}
    s = Settings()
    for field in SETTING_FIELDS:
        assert field.stored(s) == field.default, field.name
    assert {f.name for f in ENGINE_FIELDS}.isdisjoint(POLICY_FIELD_NAMES)


@pytest.mark.parametrize("field", SETTING_FIELDS, ids=[f.name for f in SETTING_FIELDS])
def test_every_field_is_read_from_its_environment_variable(field: Setting) -> None:
    text, value = ENV_SAMPLES[field.name]
    s = Settings.from_env({field.env: text})
    assert field.stored(s) == value
    if field.name in POLICY_FIELD_NAMES:
        assert s.default_policy().value(field.name) == value
        assert s.policy_for("any.kind", None).value(field.name) == value


@pytest.mark.parametrize("name", POLICY_FIELD_NAMES)
def test_every_policy_field_is_read_per_kind(name: str) -> None:
    field = next(f for f in POLICY_FIELDS if f.name == name)
    assert field.kind_env is not None
    text, value = POLICY_SAMPLES[name]
    s = Settings.from_env({field.kind_env: f"a={text}, b={text}"})
    assert s.kinds["a"] == s.kinds["b"] == PolicyOverrides(**{name: value})
    assert s.policy_for("a", None).value(name) == value
    assert s.policy_for("c", None).value(name) == field.default
    with pytest.raises(ValidationError, match=field.kind_env):
        Settings.from_env({field.kind_env: "a=nonsense"})


@pytest.mark.parametrize("name", POLICY_FIELD_NAMES)
def test_every_policy_field_is_a_processor_option(name: str, clock: FakeClock) -> None:
    _, value = POLICY_SAMPLES[name]
    engine = Engine(InMemoryJobStore(clock=clock), clock=clock)

    @engine.processor("decorated", **{name: value})
    def decorated(payload: object) -> None:
        pass

    class ClassStyle(Processor):
        kind = "class.style"

        def process(self, payload: Any, ctx: JobContext) -> None:
            pass

    setattr(ClassStyle, name, value)
    engine.register(ClassStyle)
    assert engine.policy("decorated").value(name) == value
    assert engine.policy("class.style").value(name) == value
    # Explicit configuration still wins over the processor's value.
    explicit = Settings(kinds={"decorated": {name: EXPLICIT[name]}})
    engine = Engine(InMemoryJobStore(clock=clock), explicit, clock=clock)
    engine.processor("decorated", **{name: value})(decorated)
    assert engine.policy("decorated").value(name) == EXPLICIT[name]


def test_processor_options_are_exactly_the_declared_fields() -> None:
    # One keyword list (TaskOptions) for declare(), engine.task() and engine.processor().
    options = typing.get_type_hints(TaskOptions)
    assert set(options) == {
        *POLICY_FIELD_NAMES,
        "provider",
        "priority",
        "concurrency_key",
        "concurrency_limit",
    }
    assert set(options) == set(TASK_OPTION_NAMES)
    assert TaskOptions.__required_keys__ == frozenset()
    for method in (AsyncEngine.processor, Engine.processor, declare):
        kwargs = inspect.signature(method).parameters["options"]
        assert kwargs.kind is inspect.Parameter.VAR_KEYWORD, method.__qualname__
    for name in (*POLICY_FIELD_NAMES, "provider", "priority"):
        assert getattr(Processor, name) is None, name
    with pytest.raises(ValidationError, match="unknown policy field"):
        make_overrides(max_attempt=3)


# ---- one duration type ----------------------------------------------------------------


@pytest.mark.parametrize("name", DURATION_FIELDS)
@pytest.mark.parametrize("seconds", [90, 120.5])
def test_settings_durations_accept_seconds_or_timedelta(name: str, seconds: float) -> None:
    as_seconds: dict[str, Any] = {name: seconds}
    as_delta: dict[str, Any] = {name: timedelta(seconds=seconds)}
    by_seconds = Settings(**as_seconds)
    assert by_seconds == Settings(**as_delta)
    field = next(f for f in SETTING_FIELDS if f.name == name)
    assert field.stored(by_seconds) == timedelta(seconds=seconds)  # stored as a timedelta
    if field.name in POLICY_FIELD_NAMES:
        per_kind = Settings(kinds={"a": as_seconds})
        assert per_kind.policy_for("a", None).value(name) == timedelta(seconds=seconds)
        assert make_overrides(**as_seconds) == PolicyOverrides(**as_delta)


def test_every_seconds_view_field_reads_back_as_seconds() -> None:
    s = Settings()
    for field in SETTING_FIELDS:
        if field.seconds_view:
            assert isinstance(getattr(Settings, field.name), SecondsView), field.name
            seconds = None if field.default is None else field.default.total_seconds()
            assert getattr(s, field.name) == seconds, field.name
        else:
            assert getattr(s, field.name) is field.stored(s), field.name


def test_seconds_views_read_back_as_float_seconds() -> None:
    s = Settings(
        poll_interval=timedelta(milliseconds=500),
        shutdown_timeout=timedelta(minutes=1),
        heartbeat_interval=timedelta(seconds=5),
        maintenance_interval=timedelta(minutes=2),
        timeout=timedelta(seconds=1.5),
    )
    assert (s.poll_interval, s.shutdown_timeout, s.heartbeat_interval) == (0.5, 60.0, 5.0)
    assert (s.maintenance_interval, s.timeout) == (120.0, 1.5)
    assert s.policy_for("a", None).timeout == 1.5
    assert s.default_policy().value("timeout") == timedelta(seconds=1.5)
    assert attrs.evolve(s, poll_interval=2).poll_interval == 2.0


# ---- global policy values and their errors ----------------------------------------------


def test_global_policy_values_apply_to_every_kind_unless_overridden() -> None:
    s = Settings(node_limit=2, rate_limit=(5, 10), kinds={"a": {"node_limit": 1}})
    assert s.policy_for("b", None).node_limit == 2
    assert s.policy_for("b", None).rate_limit == RateLimit(rps=5, burst=10)
    assert s.policy_for("a", None).node_limit == 1
    assert s.policy_for("c", PolicyOverrides(node_limit=4)).node_limit == 4


def test_nullable_fields_read_none_from_the_environment() -> None:
    s = Settings.from_env({"SKIPLOCK_NODE_LIMIT": "none", "SKIPLOCK_RETENTION": "off"})
    assert (s.node_limit, s.retention) == (None, None)
    with pytest.raises(ValidationError, match="SKIPLOCK_MAX_ATTEMPTS"):
        Settings.from_env({"SKIPLOCK_MAX_ATTEMPTS": "none"})
    # Per kind, "none" would mean "not set": it is rejected rather than ignored.
    with pytest.raises(ValidationError, match="SKIPLOCK_TIMEOUTS"):
        Settings.from_env({"SKIPLOCK_TIMEOUTS": "a=none"})


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"transactional": True, "autocommit": True}, "mutually exclusive"),
        ({"node_limit": 0}, "node_limit must be >= 1"),
        ({"rate_limit": 5}, "rate_limit must be a RateLimit"),
        ({"poll_interval": "1s"}, "poll_interval must be a timedelta or a finite number"),
        ({"shutdown_timeout": timedelta(seconds=-1)}, "shutdown_timeout must be >= 0"),
        ({"prefetch": -1}, "prefetch must be >= 0"),
    ],
)
def test_settings_rejects_invalid_unified_fields(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        Settings(**kwargs)


def test_settings_from_env_names_every_per_kind_variable_of_a_conflict() -> None:
    env = {"SKIPLOCK_KIND_TRANSACTIONAL": "a=1", "SKIPLOCK_KIND_AUTOCOMMIT": "a=1"}
    with pytest.raises(ValidationError, match=r"SKIPLOCK_KIND_TRANSACTIONAL.*mutually") as info:
        Settings.from_env(env)
    assert "SKIPLOCK_KIND_AUTOCOMMIT" in str(info.value)
    with pytest.raises(ValidationError, match=r"SKIPLOCK_TRANSACTIONAL.*mutually"):
        Settings.from_env({"SKIPLOCK_TRANSACTIONAL": "1"}, autocommit=True)
