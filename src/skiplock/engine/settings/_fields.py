"""The declared fields of :class:`~._settings.Settings`: the engine's own
(:data:`ENGINE_FIELDS`) and, with the per-kind policy's
(:data:`~skiplock.core.rules.POLICY_FIELDS`), every scalar field (:data:`SETTING_FIELDS`).

Each is a :class:`~skiplock.core.rules.Setting`: name, default, type and check, docs, and its
``SKIPLOCK_*`` variable. Validation, :meth:`Settings.from_env` and docs/configuration.md
derive from them.
"""

from __future__ import annotations

import typing
from datetime import timedelta
from typing import Literal

from skiplock.core.rules import (
    ACTOR,
    FLAG,
    MAX_PAYLOAD_BYTES,
    MAX_RESULT_BYTES,
    NON_NEGATIVE_DURATION,
    NON_NEGATIVE_INT,
    POLICY_FIELDS,
    POSITIVE_DURATION,
    POSITIVE_INT,
    Setting,
    choice,
)

#: Default prefetch per slot: a worker holds up to this many claimed jobs per slot
#: waiting, beside the running ones, and more while its jobs finish fast (see
#: :data:`PREFETCH_CEILING`).
PREFETCH_FACTOR = 4

#: With the default prefetch a worker whose jobs finish fast holds up to this many (or
#: :data:`PREFETCH_FACTOR` per slot, if more): what finishes in a few dozen claim round
#: trips at the rate its jobs finish (``engine/worker/_planner.ClaimPace``). Fewer claims, each
#: a round trip, a commit and an index walk, then serve the same jobs; ceilings of 512
#: and 1,024 drained no faster (docs/performance.md), and this one also bounds what a
#: worker holds and what waits to be written (:meth:`Settings.unwritten_limit`).
PREFETCH_CEILING = 256

#: Completion batches of finished jobs a worker may hold beyond its slots and prefetch
#: before it claims nothing more: one being written while the next one fills, so a slow
#: store still gets full batches (see :meth:`Settings.unwritten_limit`).
UNWRITTEN_BATCHES = 2

#: What ``Settings.unknown_kinds`` may say.
UnknownKinds = Literal["error", "warn", "allow"]
UNKNOWN_KINDS = choice(*typing.get_args(UnknownKinds))

#: Where rate limits are counted (``Settings.rate_limit_scope``).
RateLimitScope = Literal["cluster", "process"]
RATE_LIMIT_SCOPES = choice(*typing.get_args(RateLimitScope))

#: What ``Settings.processor_exits`` may say.
ProcessorExits = Literal["stop", "fail"]
PROCESSOR_EXITS = choice(*typing.get_args(ProcessorExits))

#: What ``Settings.event_loop`` may say.
EventLoop = Literal["auto", "asyncio"]
EVENT_LOOPS = choice(*typing.get_args(EventLoop))

#: The engine's own settings (the global policy values are :data:`POLICY_FIELDS`).
ENGINE_FIELDS: tuple[Setting, ...] = (
    Setting("concurrency", 4, POSITIVE_INT, "Job slots per worker."),
    Setting(
        "batch_size",
        None,
        POSITIVE_INT,
        "Most jobs one claim takes (none: concurrency plus the most it prefetches).",
        nullable=True,
    ),
    Setting(
        "prefetch",
        None,
        NON_NEGATIVE_INT,
        f"Claimed jobs a worker keeps waiting beside its running ones (none: "
        f"{PREFETCH_FACTOR} per slot, growing up to {PREFETCH_CEILING} while jobs finish "
        f"fast; 0 for long jobs).",
        nullable=True,
    ),
    Setting(
        "rate_limit_scope",
        "cluster",
        RATE_LIMIT_SCOPES,
        "Where `rate_limit` and `caps` buckets live: `cluster` (in the store, shared by "
        "every worker process and node: a rate holds cluster-wide) or `process` (per worker "
        "process, as J6 describes: divide a cluster-wide rate by the processes).",
    ),
    Setting(
        "completion_batch_size",
        100,
        POSITIVE_INT,
        "Most outcomes of jobs that ran outside their transaction one store call writes. "
        "A worker holds at most concurrency + the most it prefetches + twice this many jobs "
        "whose outcome is not written; at that bound it claims nothing until the store has "
        "taken some.",
    ),
    Setting(
        "poll_interval",
        timedelta(seconds=1),
        POSITIVE_DURATION,
        "How often an idle worker looks for due jobs; a job enqueued for later or a retry "
        "starts at its due time, not at the next poll (the next-due timer). Reads back as "
        "float seconds.",
        seconds_view=True,
    ),
    Setting(
        "controls_refresh",
        timedelta(seconds=1),
        POSITIVE_DURATION,
        "How often a worker reads the pauses and limits set at run time (`skiplock pause`, "
        "`skiplock limits set`): a change reaches every worker within this time. Reads "
        "back as float seconds.",
        seconds_view=True,
    ),
    Setting(
        "shutdown_timeout",
        timedelta(seconds=30),
        NON_NEGATIVE_DURATION,
        "How long a stopping worker lets running jobs finish. Reads back as float seconds.",
        seconds_view=True,
    ),
    Setting(
        "request_timeout",
        timedelta(seconds=2),
        POSITIVE_DURATION,
        "How long a web request (REST API, dashboard, `/readyz`) waits for the database, "
        "from its turn (`request_concurrency`): a pooled connection, the schema check and "
        "every statement. A "
        "database that does not answer in time gets 503 with `Retry-After` (the probe: "
        "503 `unavailable`), however many requests wait.",
    ),
    Setting(
        "request_concurrency",
        4,
        POSITIVE_INT,
        "How many web requests of one door (the REST API, the dashboard) work at once; "
        "the others wait their turn, in order of arrival, while the database answers "
        "(their `request_timeout` starts with their turn). A request that waited "
        "`request_timeout` with no other request answered meanwhile gets its 503.",
    ),
    Setting(
        "heartbeat_interval",
        timedelta(seconds=10),
        POSITIVE_DURATION,
        "How often a worker reports it is alive; at most half of every `stale_ttl`. "
        "Reads back as float seconds.",
        seconds_view=True,
    ),
    Setting(
        "maintenance_interval",
        timedelta(minutes=5),
        POSITIVE_DURATION,
        "How often stale jobs are recovered and old ones purged (one node at a time). "
        "Reads back as float seconds.",
        seconds_view=True,
    ),
    Setting(
        "retention",
        timedelta(days=7),
        POSITIVE_DURATION,
        "Succeeded jobs older than this are purged (none: never); the audit trail has "
        "its own, `audit_retention`.",
        nullable=True,
    ),
    Setting("retention_archive", False, FLAG, "Purged jobs are archived instead of deleted."),
    Setting(
        "audit_retention",
        timedelta(days=90),
        POSITIVE_DURATION,
        "Audit events older than this are purged, whatever `retention` says (none: never).",
        nullable=True,
    ),
    Setting(
        "max_payload_bytes",
        MAX_PAYLOAD_BYTES,
        POSITIVE_INT,
        "Largest encoded payload (UTF-8 bytes) enqueue accepts.",
    ),
    Setting(
        "max_result_bytes",
        MAX_RESULT_BYTES,
        POSITIVE_INT,
        "Largest encoded processor return value (UTF-8 bytes) stored as the job's result; "
        "a larger one fails the job (dead, no retry).",
    ),
    Setting(
        "unknown_kinds",
        "error",
        UNKNOWN_KINDS,
        "What enqueue does with a kind the engine neither processes nor declared, once it "
        "knows any: `error` raises `UnknownKindError`, `warn` logs a warning (once per "
        "kind) and writes the job, `allow` writes it. An engine that knows no kind "
        "accepts any. Pauses and limits of a kind follow the same rule (an engine that "
        "knows no kind checks the kinds its database knows).",
    ),
    Setting(
        "processor_exits",
        "stop",
        PROCESSOR_EXITS,
        "What a processor raising `SystemExit` or `KeyboardInterrupt` does besides failing "
        "its attempt: `stop` stops the worker gracefully, then its `run()` raises the "
        "exception (the process exits as the processor asked); `fail` keeps the worker "
        "serving, as for any exception (the Django integration's default). A real SIGTERM "
        "or SIGINT stops the worker either way.",
    ),
    Setting(
        "event_loop",
        "auto",
        EVENT_LOOPS,
        "The event loop `skiplock worker` runs an async engine's worker on: `auto` takes "
        "uvloop when it is installed (`pip install 'skiplock[uvloop]'`), else asyncio's "
        "own; `asyncio` always asyncio's own. A sync worker has no loop; an embedded "
        "worker runs on its host's loop.",
    ),
    Setting(
        "audit",
        False,
        FLAG,
        "Record an audit trail of job lifecycle changes in the store's audit table (or "
        "the engine's `audit_sink`, which turns it on by itself); see docs/audit.md.",
    ),
    Setting(
        "audit_actor",
        None,
        ACTOR,
        "Who the audit trail names for enqueues and the engine's own admin calls (an "
        "operator handle, `engine.operator(actor)`, names its actor) and for stale-claim "
        "recovery (none: no one); workers name themselves by their id.",
        nullable=True,
    ),
    Setting(
        "idempotency_retention",
        None,
        POSITIVE_DURATION,
        "How long the idempotency key of a job that retention purged is remembered: an "
        "enqueue with it within this time creates nothing and returns the purged job's id "
        "(`purged=True`); remembered keys are purged after it (none: a key goes with its "
        "job).",
        nullable=True,
    ),
)

#: Every scalar field of :class:`Settings`, each read from ``SKIPLOCK_<NAME>``.
SETTING_FIELDS: tuple[Setting, ...] = ENGINE_FIELDS + POLICY_FIELDS
