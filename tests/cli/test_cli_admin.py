"""The admin commands (R13) against PostgreSQL: ``skiplock jobs list|show|why|retry|cancel|fail|
delete``, ``dlq``, ``counts``, ``workers``; tables for people, ``--json`` for scripts,
confirmations for bulk destructive actions, one report line per id."""

from __future__ import annotations

from importlib.util import find_spec
from typing import TYPE_CHECKING, Any

import pytest

from skiplock import cli
from skiplock.core import JobPage
from tests.cli.admin_helpers import (
    Terminal,
    add_worker,
    bury,
    closed_port,
    engine_on,
    enqueue,
    job_states,
    parse,
    run_cli,
)
from tests.pgfixtures import execute, fetch

if TYPE_CHECKING:
    from collections.abc import Callable

HAS_PSYCOPG = find_spec("psycopg") is not None
needs_psycopg = pytest.mark.skipif(not HAS_PSYCOPG, reason="needs the psycopg extra")
HINT = "pip install 'skiplock[psycopg]'"


class Run:
    """The CLI in this process against one database."""

    def __init__(self, dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
        self.dsn = dsn
        self.capsys = capsys
        self.out = ""
        self.err = ""

    def __call__(self, *argv: str) -> int:
        status = cli.main([*argv, "--dsn", self.dsn])
        self.out, self.err = self.capsys.readouterr()
        return status

    def json(self, *argv: str) -> Any:
        status = self(*argv, "--json")
        assert status == 0, self.err
        return parse(self.out)

    @property
    def lines(self) -> list[str]:
        return self.out.splitlines()


@pytest.fixture
def run(admin_dsn: str, capsys: pytest.CaptureFixture[str]) -> Run:
    return Run(admin_dsn, capsys)


JOB_KEYS = {
    "id",
    "kind",
    "state",
    "tenant",
    "priority",
    "payload",
    "attempts",
    "max_attempts",
    "claims",
    "available_at",
    "created_at",
    "started_at",
    "claimed_at",
    "claimed_by",
    "completed_at",
    "last_error",
    "result",
    "errors",
    "worker_ids",
    "idempotency_key",
    "trace_context",
    "concurrency_key",
    "concurrency_limit",
}


# ---- jobs list / show / dlq ---------------------------------------------------------------


@needs_psycopg
@pytest.mark.postgres
def test_jobs_list_table_and_pages(run: Run) -> None:
    ids = enqueue(run.dsn, "email", 3, tenant="acme") + enqueue(run.dsn, "sms", 2)
    assert run("jobs", "list", "--limit", "2") == 0
    header, *rows, more = run.lines
    assert header.split() == [
        "ID",
        "STATE",
        "KIND",
        "TENANT",
        "PRIO",
        "ATTEMPTS",
        "DUE",
        "LAST",
        "ERROR",
    ]
    assert [row.split()[:4] for row in rows] == [
        [str(ids[0]), "pending", "email", "acme"],
        [str(ids[1]), "pending", "email", "acme"],
    ]
    assert more == f"next: --after {ids[1]}"
    # Columns line up: each column starts where its header does.
    assert all(row.index("pending") == header.index("STATE") for row in rows)

    seen: list[int] = []
    after: list[str] = []
    while True:
        page = run.json("jobs", "list", "--limit", "2", *after)
        seen += [job["id"] for job in page["jobs"]]
        if page["next_after"] is None:
            break
        assert page["next_after"] == seen[-1]
        after = ["--after", str(page["next_after"])]
    assert seen == ids
    assert run("jobs", "list", "--after", str(ids[-1])) == 0
    assert run.lines == ["no jobs"]


@needs_psycopg
@pytest.mark.postgres
def test_jobs_list_filters(run: Run) -> None:
    email = enqueue(run.dsn, "email", 2, tenant="acme")
    other = enqueue(run.dsn, "email", tenant="globex")
    sms = enqueue(run.dsn, "sms")
    bury(run.dsn, email[0])

    def ids(*argv: str) -> list[int]:
        return [job["id"] for job in run.json("jobs", "list", *argv)["jobs"]]

    assert ids() == email + other + sms
    assert ids("--kind", "sms") == sms
    assert ids("--kind", "email", "--tenant", "acme") == email
    assert ids("--tenant", "acme,globex") == email + other
    assert ids("--tenant", "acme", "--tenant", "globex") == email + other
    assert ids("--state", "dead") == email[:1]
    assert ids("--state", "dead,pending", "--kind", "email", "--tenant", "globex") == other
    page = run.json("jobs", "list", "--kind", "email", "--limit", "1")
    [job] = page["jobs"]
    assert set(job) == JOB_KEYS
    assert (job["state"], job["last_error"], job["payload"]) == ("dead", "boom", {"n": 0})


@needs_psycopg
@pytest.mark.postgres
def test_jobs_list_says_when_a_search_stopped_early(run: Run) -> None:
    enqueue(run.dsn, "common", 2 * JobPage.READ_FACTOR + 5)
    [rare] = enqueue(run.dsn, "rare")
    assert run("jobs", "list", "--kind", "rare", "--limit", "1") == 0
    searched, more = run.lines
    assert searched.startswith("searched up to job ")
    stop = searched.split()[4]
    assert more == f"next: --after {stop}"
    page = run.json("jobs", "list", "--kind", "rare", "--limit", "1", "--after", stop)
    assert ([j["id"] for j in page["jobs"]], page["partial"]) == ([rare], False)
    assert page["next_after"] is None


@needs_psycopg
@pytest.mark.postgres
def test_jobs_show_one_job_in_full(run: Run) -> None:
    [job_id] = enqueue(run.dsn, "email", tenant="acme", priority=5, idempotency_key="k-1")
    execute(
        run.dsn, [f"UPDATE skiplock.jobs SET last_error = E'first\\nsecond' WHERE id = {job_id}"]
    )
    assert run("jobs", "show", str(job_id)) == 0
    fields = {line.split(":", 1)[0]: line.split(":", 1)[1].strip() for line in run.lines[:6]}
    assert fields == {
        "id": str(job_id),
        "kind": "email",
        "state": "pending",
        "tenant": "acme",
        "priority": "5",
        "payload": "{",
    }
    assert "first" in run.out
    assert "second" in run.out
    job = run.json("jobs", "show", str(job_id))
    assert set(job) == JOB_KEYS
    assert job["idempotency_key"] == "k-1"
    assert job["last_error"] == "first\nsecond"
    assert run("jobs", "show", "99999") == 1
    assert run.err == "skiplock: error: no job with id 99999\n"


@needs_psycopg
@pytest.mark.postgres
def test_jobs_why_says_why_a_job_waits(run: Run) -> None:
    [later] = enqueue(run.dsn, "email", tenant="acme", delay=3600)
    [ready] = enqueue(run.dsn, "report")
    with engine_on(run.dsn) as engine:
        engine.operator("alice").pause(tenant="acme", reason="dispute")
    add_worker(run.dsn, "w-1", "report")
    assert run("jobs", "why", str(later)) == 0
    assert run.lines[0].startswith(f"job {later} (pending) as of ")
    codes = [line.split(":", 1)[0].strip() for line in run.lines[1:]]
    assert codes == ["due_later", "paused", "no_worker"]
    assert "paused by alice since" in run.out
    assert "dispute" in run.out
    answer = run.json("jobs", "why", str(later))
    assert (answer["job_id"], answer["state"]) == (later, "pending")
    assert [r["code"] for r in answer["reasons"]] == codes
    assert answer["reasons"][1]["details"]["actor"] == "alice"
    assert [r["code"] for r in run.json("jobs", "why", str(ready))["reasons"]] == ["ready"]
    assert run("jobs", "why", "99999") == 1
    assert run.err == "skiplock: error: no job with id 99999\n"


@needs_psycopg
@pytest.mark.postgres
def test_jobs_show_a_jobs_result_and_failed_attempts(run: Run) -> None:
    [job_id] = enqueue(run.dsn, "report")
    # What a worker leaves after a failed attempt and a success with a result (X5).
    entry = (
        '{"attempt": 1, "worker_id": "w-1", "claimed_at": "2024-05-01T09:00:00+00:00", '
        '"failed_at": "2024-05-01T09:00:05+00:00", '
        '"error": "RuntimeError: database busy\\n\\nTraceback (most recent call last): ..."}'
    )
    execute(
        run.dsn,
        [
            "UPDATE skiplock.jobs SET status = 'succeeded', attempts = 2, claims = 2, "
            "claimed_by = 'w-2', claimed_at = '2024-05-01T09:00:10Z', "
            "started_at = '2024-05-01T09:00:00Z', completed_at = '2024-05-01T09:00:12Z', "
            f"""result = '{{"rows": 3, "pages": [1, 2]}}', errors = '[{entry}]' """
            f"WHERE id = {job_id}"
        ],
    )
    job = run.json("jobs", "show", str(job_id))
    assert set(job) == JOB_KEYS
    assert job["result"] == {"rows": 3, "pages": [1, 2]}
    assert job["started_at"] == "2024-05-01T09:00:00+00:00"
    assert job["errors"] == [
        {
            "attempt": 1,
            "worker_id": "w-1",
            "claimed_at": "2024-05-01T09:00:00+00:00",
            "failed_at": "2024-05-01T09:00:05+00:00",
            "error": "RuntimeError: database busy\n\nTraceback (most recent call last): ...",
        }
    ]
    assert job["worker_ids"] == ["w-1", "w-2"]
    assert run("jobs", "show", str(job_id)) == 0
    # A field's line starts with its name; continuation lines are indented.
    fields = [line.split(":", 1) for line in run.lines if not line.startswith(" ")]
    shown = {name: value.strip() for name, value in fields}
    assert shown["errors"] == "#1 w-1 2024-05-01 09:00:05Z: RuntimeError: database busy"
    assert shown["started_at"] == "2024-05-01T09:00:00+00:00"
    assert "Traceback" not in run.out  # the summary line only; --json has the whole text
    assert shown["worker_ids"] == "w-1, w-2"
    assert '  "rows": 3,' in run.out


@needs_psycopg
@pytest.mark.postgres
def test_dlq_lists_dead_jobs_with_their_last_error(run: Run) -> None:
    dead = enqueue(run.dsn, "email", 2) + enqueue(run.dsn, "sms")
    enqueue(run.dsn, "email")
    bury(run.dsn, *dead, error="smtp 550 mailbox unavailable")
    assert run("dlq") == 0
    header, *rows = run.lines
    assert header.split() == ["ID", "KIND", "TENANT", "ATTEMPTS", "DIED", "LAST", "ERROR"]
    assert [int(row.split()[0]) for row in rows] == dead
    assert all(row.endswith("smtp 550 mailbox unavailable") for row in rows)
    page = run.json("dlq", "--kind", "email", "--limit", "1")
    assert [job["id"] for job in page["jobs"]] == dead[:1]
    assert page["next_after"] == dead[0]
    assert page["jobs"][0]["last_error"] == "smtp 550 mailbox unavailable"
    assert run.json("dlq", "--tenant", "nobody") == {
        "jobs": [],
        "next_after": None,
        "partial": False,
    }
    assert run("dlq", "--tenant", "nobody") == 0
    assert run.lines == ["no dead jobs"]


@needs_psycopg
@pytest.mark.postgres
def test_tables_show_the_first_line_of_the_last_error(run: Run) -> None:
    [job_id] = enqueue(run.dsn, "email")
    bury(run.dsn, job_id)
    text = "RuntimeError: smtp down\\n\\nTraceback (most recent call last):\\n  File x"
    execute(run.dsn, [f"UPDATE skiplock.jobs SET last_error = E'{text}' WHERE id = {job_id}"])
    for command in (["dlq"], ["jobs", "list"]):
        assert run(*command) == 0
        [row] = run.lines[1:]
        assert row.endswith("RuntimeError: smtp down"), row
        assert "Traceback" not in run.out


# ---- changing jobs ------------------------------------------------------------------------


@needs_psycopg
@pytest.mark.postgres
def test_jobs_retry_by_id_reports_each_id(run: Run) -> None:
    dead, pending = enqueue(run.dsn, "email", 2)
    bury(run.dsn, dead)
    assert run("jobs", "retry", str(dead), "99999", str(pending)) == 1
    assert run.lines == [f"job {dead}: retried"]
    assert run.err.splitlines() == [
        "skiplock: job 99999: no job with id 99999",
        f"skiplock: job {pending}: job {pending} is pending: only failed, dead or "
        "cancelled jobs can be retried",
    ]
    assert job_states(run.dsn) == {dead: "pending", pending: "pending"}
    with engine_on(run.dsn) as engine:
        assert engine.get_job(dead).attempts == 0  # starts over


@needs_psycopg
@pytest.mark.postgres
def test_jobs_retry_json_and_keep_attempts(run: Run) -> None:
    [dead] = enqueue(run.dsn, "email")
    bury(run.dsn, dead)
    assert run("jobs", "retry", str(dead), "4242", "--keep-attempts", "--json") == 1
    assert parse(run.out) == {
        "results": [
            {"id": dead, "ok": True, "state": "pending"},
            {
                "id": 4242,
                "ok": False,
                "error": "not_found",
                "message": "no job with id 4242",
            },
        ]
    }
    assert run.err == ""
    with engine_on(run.dsn) as engine:
        assert engine.get_job(dead).attempts == 5  # kept


@needs_psycopg
@pytest.mark.postgres
def test_jobs_retry_dead_in_bulk_needs_yes_without_a_terminal(run: Run) -> None:
    email = enqueue(run.dsn, "email", 2)
    sms = enqueue(run.dsn, "sms")
    bury(run.dsn, *email, *sms)
    assert run("jobs", "retry", "--dead") == 2
    assert run.err == "skiplock: error: retry --dead needs --yes when stdin is not a terminal\n"
    assert set(job_states(run.dsn).values()) == {"dead"}

    replayed = run.json("jobs", "retry", "--dead", "--kind", "email", "--yes")
    assert replayed == {"retried": email, "skipped": []}
    assert job_states(run.dsn) == {email[0]: "pending", email[1]: "pending", sms[0]: "dead"}
    assert run("jobs", "retry", "--dead", "-y") == 0
    assert run.lines == ["retried 1 dead job(s): now pending"]
    assert run("jobs", "retry", "--dead", "-y") == 0
    assert run.lines == ["no dead jobs match"]


@needs_psycopg
@pytest.mark.postgres
@pytest.mark.parametrize(("answer", "status"), [("y\n", 0), ("yes\n", 0), ("n\n", 1), ("", 1)])
def test_jobs_retry_dead_asks_on_a_terminal(
    run: Run, monkeypatch: pytest.MonkeyPatch, answer: str, status: int
) -> None:
    email = enqueue(run.dsn, "email", 2, tenant="acme")
    bury(run.dsn, *email)
    monkeypatch.setattr("sys.stdin", Terminal(answer))
    assert run("jobs", "retry", "--dead", "--kind", "email", "--tenant", "acme") == status
    assert run.err.startswith("Replay 2 dead job(s) of kind email of tenant acme? [y/N] ")
    expected = "pending" if status == 0 else "dead"
    assert set(job_states(run.dsn).values()) == {expected}
    if status:
        assert run.err.endswith("aborted: nothing changed\n")


class _Racing:
    """A terminal whose operator answers yes while another one buries ``job``."""

    def __init__(self, dsn: str, job: int) -> None:
        self.dsn, self.job = dsn, job

    def isatty(self) -> bool:
        return True

    def readline(self) -> str:
        bury(self.dsn, self.job)
        return "y\n"


@needs_psycopg
@pytest.mark.postgres
def test_jobs_retry_dead_on_a_terminal_replays_only_what_it_counted(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 41, item 1: "Replay 2 dead job(s)?"; an older job dies while the operator
    # answers: 3 would match, so nothing is replayed and the command says why.
    older, *email = enqueue(run.dsn, "email", 3)
    bury(run.dsn, *email)
    monkeypatch.setattr("sys.stdin", _Racing(run.dsn, older))
    assert run("jobs", "retry", "--dead") == 1
    assert run.err.startswith("Replay 2 dead job(s)? [y/N] ")
    assert run.err.endswith(
        "skiplock: error: the dead jobs changed since they were counted: 3 match now, not 2; "
        "nothing changed (run the command again)\n"
    )
    assert set(job_states(run.dsn).values()) == {"dead"}
    # A job that dies after the count with a larger id is not part of it.
    [newer] = enqueue(run.dsn, "email")
    monkeypatch.setattr("sys.stdin", _Racing(run.dsn, newer))
    assert run("jobs", "retry", "--dead", "--json") == 0
    assert parse(run.out) == {"retried": [older, *email], "skipped": []}
    assert job_states(run.dsn)[newer] == "dead"


@needs_psycopg
@pytest.mark.postgres
def test_jobs_cancel_and_fail(run: Run) -> None:
    first, second = enqueue(run.dsn, "email", 2)
    assert run("jobs", "cancel", str(first)) == 0
    assert run.lines == [f"job {first}: cancelled"]
    assert run("jobs", "fail", str(first), str(second)) == 0
    assert run.lines == [f"job {first}: marked failed", f"job {second}: marked failed"]
    assert job_states(run.dsn) == {first: "failed", second: "failed"}
    assert run("jobs", "cancel", str(first), "--json") == 1
    [result] = parse(run.out)["results"]
    assert (result["id"], result["ok"], result["error"]) == (first, False, "invalid_transition")


@needs_psycopg
@pytest.mark.postgres
def test_jobs_delete(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b, c, running = enqueue(run.dsn, "email", 4)
    execute(run.dsn, [f"UPDATE skiplock.jobs SET status = 'running' WHERE id = {running}"])
    assert run("jobs", "delete", str(a)) == 0  # one job: no confirmation
    assert run.lines == [f"job {a}: deleted"]
    assert run("jobs", "delete", str(b), str(c)) == 2
    assert "needs --yes when stdin is not a terminal" in run.err
    assert run("jobs", "delete", str(b), str(b)) == 0  # the same id twice is one job
    assert run("jobs", "delete", str(c), str(running), "777", "--yes", "--json") == 1
    assert [(r["id"], r["ok"], r.get("error")) for r in parse(run.out)["results"]] == [
        (c, True, None),
        (running, False, "invalid_transition"),
        (777, False, "not_found"),
    ]
    assert job_states(run.dsn) == {running: "running"}

    [d, e] = enqueue(run.dsn, "email", 2)
    monkeypatch.setattr("sys.stdin", Terminal("y\n"))
    assert run("jobs", "delete", str(d), str(e)) == 0
    assert run.err.startswith(f"Delete 2 jobs ({d}, {e})? [y/N] ")
    assert job_states(run.dsn) == {running: "running"}


@needs_psycopg
@pytest.mark.postgres
def test_every_changing_action_acts_as_its_actor(run: Run) -> None:
    # The commands act through engine.operator(--actor): fail and a bulk replay too.
    first, second = enqueue(run.dsn, "email", 2)
    assert run("jobs", "fail", str(first), "--actor", "carol") == 0
    bury(run.dsn, second)
    assert run("jobs", "retry", "--dead", "--yes", "--actor", "dave") == 0
    rows = fetch(run.dsn, "SELECT job_id, action, actor FROM skiplock.audit ORDER BY id")
    assert [tuple(row) for row in rows] == [
        (first, "job_failed_manually", "carol"),
        (second, "job_replay", "dave"),
    ]


@needs_psycopg
@pytest.mark.postgres
def test_admin_commands_record_their_changes_in_the_audit_trail(run: Run) -> None:
    first, second = enqueue(run.dsn, "email", 2)
    assert run("jobs", "cancel", str(first), "--actor", "alice") == 0
    assert run("jobs", "retry", str(first), "--actor", "alice") == 0
    assert run("jobs", "delete", str(second)) == 0
    rows = fetch(run.dsn, "SELECT job_id, action, actor FROM skiplock.audit ORDER BY id")
    assert [tuple(row) for row in rows] == [
        (first, "job_cancelled", "alice"),
        (first, "job_replay", "alice"),
        (second, "job_discard", None),
    ]
    assert run("jobs", "fail", str(first), "--actor", "bad\nname") == 2
    assert "actor" in run.err


# ---- counts and workers -------------------------------------------------------------------


@needs_psycopg
@pytest.mark.postgres
def test_counts(run: Run) -> None:
    email = enqueue(run.dsn, "email", 3, tenant="acme")
    enqueue(run.dsn, "sms")
    bury(run.dsn, email[0])
    assert run("counts") == 0
    header, acme, sms = run.lines
    assert header.split() == [
        "KIND",
        "TENANT",
        "PENDING",
        "RUNNING",
        "SUCCEEDED",
        "FAILED",
        "DEAD",
        "CANCELLED",
        "TOTAL",
    ]
    assert acme.split() == ["email", "acme", "2", "0", "0", "0", "1", "0", "3"]
    assert sms.split() == ["sms", "-", "1", "0", "0", "0", "0", "0", "1"]
    assert header.index("TOTAL") + len("TOTAL") == len(acme)  # numbers right-aligned
    assert run.json("counts") == {
        "counts": [
            {"kind": "email", "tenant": "acme", "state": "dead", "count": 1},
            {"kind": "email", "tenant": "acme", "state": "pending", "count": 2},
            {"kind": "sms", "tenant": None, "state": "pending", "count": 1},
        ]
    }
    execute(run.dsn, ["DELETE FROM skiplock.jobs"])
    assert run("counts") == 0
    assert run.lines == ["no jobs"]


@needs_psycopg
@pytest.mark.postgres
def test_workers(run: Run) -> None:
    assert run("workers") == 0
    assert run.lines == ["no workers registered"]
    add_worker(run.dsn, "host-1/1/live", "email", "sms", tenants=("acme",))
    add_worker(run.dsn, "host-1/2/gone", silent_for=3600)
    [job_id] = enqueue(run.dsn, "email", tenant="acme")
    execute(
        run.dsn,
        [
            "UPDATE skiplock.jobs SET status = 'running', claimed_by = 'host-1/1/live' "
            f"WHERE id = {job_id}"
        ],
    )
    assert run("workers") == 0
    header, live, gone, runs = run.lines
    assert header.split() == [
        "ID",
        "STATUS",
        "KINDS",
        "TENANTS",
        "RUNNING",
        "SLOTS",
        "HEARTBEAT",
        "STARTED",
        "VERSION",
        "ASKED",
    ]
    # What each worker runs now (issue 45): the job, its kind, since when.
    assert runs.startswith(f"  host-1/1/live runs job {job_id} (email) since ")
    assert gone.split()[:5] == ["host-1/2/gone", "silent", "*", "*", "0"]
    assert "1h ago" in gone
    assert live.split()[:5] == ["host-1/1/live", "live", "email,sms", "acme", "1"]
    data = run.json("workers")
    assert set(data) == {"checked_at", "workers"}
    assert [(w["id"], w["live"], w["running"], w["kinds"]) for w in data["workers"]] == [
        ("host-1/1/live", True, 1, ["email", "sms"]),
        ("host-1/2/gone", False, 0, None),
    ]
    assert [j["id"] for j in data["workers"][0]["jobs"]] == [job_id]
    assert data["workers"][1]["jobs"] == []
    assert (data["workers"][0]["slots"], data["workers"][0]["request"]) == (None, None)
    assert run("workers", "--worker-timeout", "2h") == 0
    assert "silent" not in run.out


@needs_psycopg
@pytest.mark.postgres
def test_workers_of_one_host_exit_1_unless_one_is_live(run: Run) -> None:
    add_worker(run.dsn, "pod-a/1/old", silent_for=600)
    assert run("workers", "--host", "host-1") == 1
    assert run.lines[1].split()[:2] == ["pod-a/1/old", "silent"]  # add_worker's host
    assert run.err == "skiplock: no live worker on host 'host-1'\n"
    assert run("workers", "--host", "elsewhere", "--json") == 1
    assert parse(run.out)["workers"] == []
    add_worker(run.dsn, "pod-a/2/new")
    assert run("workers", "--host", "host-1") == 0
    assert run.err == ""
    assert run("workers", "--host", "elsewhere") == 1
    assert run.lines == ["no workers on this host"]


# ---- failures and usage -------------------------------------------------------------------


@needs_psycopg
@pytest.mark.postgres
@pytest.mark.parametrize(
    "argv",
    [["jobs", "list"], ["jobs", "show", "1"], ["jobs", "cancel", "1"], ["dlq"], ["counts"]],
)
def test_admin_commands_without_the_schema_say_to_apply_it(
    make_database: Callable[[], str], capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    assert cli.main([*argv, "--dsn", make_database(), "--schema", "nope"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "skiplock: error: skiplock schema 'nope' is not installed in this database; "
        "run `skiplock schema apply --dsn ... --schema nope` first\n"
    )


@needs_psycopg
@pytest.mark.parametrize("argv", [["jobs", "list"], ["workers"], ["jobs", "retry", "1"]])
def test_admin_commands_on_a_database_that_is_down(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    dsn = f"postgresql://postgres@127.0.0.1:{closed_port()}/postgres"
    assert cli.main([*argv, "--dsn", dsn]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    [line] = err.splitlines()
    assert line.startswith("skiplock: error: cannot connect to PostgreSQL: connection failed:")
    assert "Connection refused" in line


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["jobs", "retry"], "give job ids, or --dead to replay every dead job"),
        (["jobs", "retry", "1", "--dead"], "give job ids or --dead, not both"),
        (["jobs", "retry", "1", "--kind", "a"], "--kind and --tenant select dead jobs"),
        (["jobs", "show", "abc"], "argument ID: expected an integer, got 'abc'"),
        (["jobs", "cancel", "0"], "argument ID: expected 1 to"),
        (["jobs", "list", "--state", "done"], "unknown state 'done': one of pending, running"),
        (["jobs", "list", "--kind", "a b"], "invalid kind 'a b'"),
        (["jobs", "list", "--limit", "0"], "argument --limit: expected 1 to 10000"),
        (["dlq", "--timeout", "0s"], "argument --timeout: expected a duration > 0"),
        (["counts", "--schema", "Bad"], "invalid identifier"),
        (["jobs", "cancel", "1", "--actor", " "], "argument --actor: expected a name"),
    ],
)
def test_admin_usage_errors_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert cli.main([*argv, "--dsn", "postgresql://nowhere/db"]) == 2
    assert message in capsys.readouterr().err


def test_jobs_needs_an_action(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["jobs"]) == 2
    assert "the following arguments are required: ACTION" in capsys.readouterr().err


def test_admin_commands_need_a_dsn(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SKIPLOCK_DSN", raising=False)
    assert cli.main(["counts"]) == 2
    err = capsys.readouterr().err
    assert err == "skiplock: error: no database given: pass --dsn or set SKIPLOCK_DSN\n"


@pytest.mark.usefixtures("no_psycopg")
@pytest.mark.parametrize("argv", [["health"], ["jobs", "list"], ["workers"]])
def test_admin_commands_without_the_extra_name_it(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    assert cli.main([*argv, "--dsn", "postgresql://nowhere/db"]) == 2
    assert HINT in capsys.readouterr().err


@needs_psycopg
@pytest.mark.postgres
def test_admin_commands_in_a_subprocess(admin_dsn: str) -> None:
    ids = enqueue(admin_dsn, "email", 2)
    bury(admin_dsn, ids[0])
    env = {"SKIPLOCK_DSN": admin_dsn}
    listed = run_cli("jobs", "list", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert [job["id"] for job in parse(listed.stdout)["jobs"]] == ids
    refused = run_cli("jobs", "retry", "--dead", env=env)  # stdin is not a terminal
    assert (refused.returncode, refused.stdout) == (2, "")
    assert "needs --yes" in refused.stderr
    retried = run_cli("jobs", "retry", "--dead", "--yes", "--json", env=env)
    assert retried.returncode == 0, retried.stderr
    assert parse(retried.stdout) == {"retried": ids[:1], "skipped": []}
