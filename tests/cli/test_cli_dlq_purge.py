"""``skiplock dlq purge``: dead jobs deleted in bulk by kind, tenant, age and error text,
after a count and a confirmation, bound to what was counted, audited (issue 41)."""

from __future__ import annotations

import pytest

from tests.cli.admin_helpers import Terminal, bury, enqueue, job_states, parse
from tests.cli.test_cli_admin import Run, needs_psycopg
from tests.pgfixtures import execute, fetch

# The command reaches PostgreSQL through psycopg: the psycopg env runs these tests.
pytestmark = [pytest.mark.postgres, needs_psycopg]


@pytest.fixture
def run(admin_dsn: str, capsys: pytest.CaptureFixture[str]) -> Run:
    return Run(admin_dsn, capsys)


def test_purge_needs_yes_without_a_terminal_and_changes_nothing(run: Run) -> None:
    dead = enqueue(run.dsn, "email", 2)
    bury(run.dsn, *dead)
    assert run("dlq", "purge") == 2
    assert run.err == "skiplock: error: dlq purge needs --yes when stdin is not a terminal\n"
    assert set(job_states(run.dsn).values()) == {"dead"}


def test_purge_counts_first_then_deletes_what_matches(run: Run) -> None:
    email = enqueue(run.dsn, "email", 2, tenant="acme")
    other_tenant = enqueue(run.dsn, "email", tenant="globex")
    sms = enqueue(run.dsn, "sms")
    pending = enqueue(run.dsn, "email", tenant="acme")
    bury(run.dsn, *email, *other_tenant, *sms)
    assert run("dlq", "purge", "--kind", "email", "--tenant", "acme", "--dry-run") == 0
    assert run.lines == ["2 dead job(s) of kind email of tenant acme would be deleted (dry run)"]
    assert run.json("dlq", "purge", "--kind", "email", "--dry-run") == {
        "matched": 3,
        "deleted": 0,
        "dry_run": True,
    }
    assert len(job_states(run.dsn)) == 5

    assert run("dlq", "purge", "--kind", "email", "--tenant", "acme", "--yes") == 0
    assert run.lines == [
        "2 dead job(s) of kind email of tenant acme match",
        "deleted 2 dead job(s)",
    ]
    assert job_states(run.dsn) == {
        other_tenant[0]: "dead",
        sms[0]: "dead",
        pending[0]: "pending",
    }
    assert run.json("dlq", "purge", "--yes") == {"matched": 2, "deleted": 2, "dry_run": False}
    assert job_states(run.dsn) == {pending[0]: "pending"}  # never a job that is not dead
    assert run("dlq", "purge", "--yes") == 0
    assert run.lines == ["no dead jobs"]


def test_purge_by_error_text_and_age(run: Run) -> None:
    smtp_old, smtp_new, dns_old = enqueue(run.dsn, "email", 3)
    bury(run.dsn, smtp_old, smtp_new, error="SMTPServerDisconnected: closed")
    bury(run.dsn, dns_old, error="gaierror: name not known")
    execute(
        run.dsn,
        [
            "UPDATE skiplock.jobs SET completed_at = now() - interval '3 days' "
            f"WHERE id IN ({smtp_old}, {dns_old})"
        ],
    )
    assert run.json("dlq", "purge", "--error", "smtp", "--older-than", "2d", "--dry-run") == {
        "matched": 1,
        "deleted": 0,
        "dry_run": True,
    }
    assert run("dlq", "purge", "--error", "smtp", "--older-than", "2d", "-y") == 0
    assert run.lines[0] == (
        "1 dead job(s) with 'smtp' in the last error that died more than 2d ago match"
    )
    assert job_states(run.dsn) == {smtp_new: "dead", dns_old: "dead"}
    assert run("dlq", "purge", "--error", " ", "-y") == 2
    assert run("dlq", "purge", "--older-than", "-1d", "-y") == 2
    assert job_states(run.dsn) == {smtp_new: "dead", dns_old: "dead"}


@pytest.mark.parametrize(("answer", "status"), [("y\n", 0), ("n\n", 1), ("", 1)])
def test_purge_asks_on_a_terminal(
    run: Run, monkeypatch: pytest.MonkeyPatch, answer: str, status: int
) -> None:
    dead = enqueue(run.dsn, "email", 2)
    bury(run.dsn, *dead)
    monkeypatch.setattr("sys.stdin", Terminal(answer))
    assert run("dlq", "purge", "--kind", "email", "--actor", "carol") == status
    assert run.lines[0] == "2 dead job(s) of kind email match"
    assert run.err.startswith("Delete 2 dead job(s) of kind email? [y/N] ")
    if status:
        assert run.err.endswith("aborted: nothing changed\n")
        assert set(job_states(run.dsn).values()) == {"dead"}
        return
    assert job_states(run.dsn) == {}
    rows = fetch(run.dsn, "SELECT job_id, action, actor FROM skiplock.audit ORDER BY job_id")
    assert [tuple(row) for row in rows] == [(j, "job_discard", "carol") for j in dead]


class Meanwhile:
    """A terminal whose operator takes a while to answer yes: meanwhile another job dies
    and one of the counted jobs is replayed."""

    def __init__(self, dsn: str, dies: int, replayed: int) -> None:
        self.dsn, self.dies, self.replayed = dsn, dies, replayed

    def isatty(self) -> bool:
        return True

    def readline(self) -> str:
        bury(self.dsn, self.dies)
        replay = f"UPDATE skiplock.jobs SET status = 'pending' WHERE id = {self.replayed}"
        execute(self.dsn, [replay])
        return "y\n"


def test_purge_deletes_only_what_was_counted(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second, later = enqueue(run.dsn, "email", 3)
    bury(run.dsn, first, second)
    monkeypatch.setattr("sys.stdin", Meanwhile(run.dsn, dies=later, replayed=second))
    assert run("dlq", "purge") == 0
    assert run.err.startswith("Delete 2 dead job(s)? [y/N] ")
    assert run.lines == [
        "2 dead job(s) match",
        "deleted 1 dead job(s)",
        "1 counted job(s) were no longer dead: not deleted",
    ]
    # The job that died after the count, and the one replayed since, stay.
    assert job_states(run.dsn) == {second: "pending", later: "dead"}


def test_dlq_without_an_action_still_lists(run: Run) -> None:
    [dead] = enqueue(run.dsn, "email")
    bury(run.dsn, dead)
    listed = run.json("dlq", "--kind", "email")
    assert [job["id"] for job in listed["jobs"]] == [dead]
    assert parse(run.out)["partial"] is False
