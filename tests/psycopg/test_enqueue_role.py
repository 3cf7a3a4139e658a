"""An enqueue-only role (docs/deployment.md, "An enqueue-only database role"): every kind
of enqueue works as a role with exactly the grants the page lists, read from the page."""

from __future__ import annotations

import re
import uuid
from typing import TYPE_CHECKING

import psycopg
import pytest

from skiplock import Engine, Enqueue, Settings
from skiplock.adapters.psycopg import PsycopgJobStore
from tests import pgfixtures
from tests.docs.examples import ROOT

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

pytestmark = pytest.mark.postgres

PAGE = ROOT / "docs" / "deployment.md"
DOC_ROLE = "web_enqueuer"


def page_grants(marker: str) -> list[str]:
    """The statements of the ``sql`` block right after ``<!-- marker -->`` on the page."""
    text = PAGE.read_text(encoding="utf-8")
    match = re.search(rf"<!-- {re.escape(marker)} -->\s*```sql\n(.*?)```", text, re.S)
    assert match, f"{PAGE.name} has no block after <!-- {marker} -->"
    code = "\n".join(line for line in match[1].splitlines() if not line.startswith("--"))
    return [statement.strip() for statement in code.split(";") if statement.strip()]


@pytest.fixture
def role_dsn(make_database: Callable[[], str]) -> Iterator[tuple[str, str]]:
    """A scratch database with the schema, and the DSN of a fresh role (unique on the
    server) given the page's grants; the role is dropped after the database."""
    dsn = make_database()
    pgfixtures.apply_schema(dsn)
    role = f"enqueuer_{uuid.uuid4().hex[:12]}"
    grants = page_grants("enqueue-only role grants")
    grants += page_grants("enqueue-only role grants: options")
    statements = [f"CREATE ROLE {role} LOGIN"]
    statements += [re.sub(rf"\b{DOC_ROLE}\b", role, grant) for grant in grants]
    try:
        pgfixtures.execute(dsn, statements)
        yield dsn, dsn.replace("://postgres@", f"://{role}@", 1)
    finally:
        name = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
        pgfixtures.drop_database(str(name))
        pgfixtures.execute(pgfixtures.base_dsn(), [f"DROP ROLE IF EXISTS {role}"])


def test_the_page_grants_what_an_enqueue_needs_and_no_more_than_it_says() -> None:
    grants = page_grants("enqueue-only role grants")
    assert all(g.startswith("GRANT ") and g.endswith(DOC_ROLE) for g in grants), grants
    # Nothing that claims, changes or deletes jobs in the base set.
    assert not [g for g in grants if re.search(r"\b(UPDATE|DELETE|TRUNCATE|ALL)\b", g)]


@pytest.mark.parametrize("audit", [False, True])
def test_every_enqueue_works_as_the_enqueue_only_role(
    role_dsn: tuple[str, str], audit: bool
) -> None:
    owner_dsn, dsn = role_dsn
    store = PsycopgJobStore(dsn)
    engine = Engine(store, Settings(audit=audit))
    engine.declare_kind("email.send")
    try:
        assert store.check_schema().up_to_date
        one = engine.enqueue("email.send", {"to": "a"})
        engine.enqueue("email.send", {"to": "b"}, tenant="acme", delay=60)
        keyed = engine.enqueue("email.send", {"to": "c"}, idempotency_key="k")
        assert engine.enqueue("email.send", {}, idempotency_key="k").id == keyed.id
        scoped = {"tenant": "acme", "idempotency_key": "t", "idempotency_scope": "tenant"}
        first = engine.enqueue("email.send", {"to": "d"}, **scoped)  # type: ignore[arg-type]
        again = engine.enqueue("email.send", {"to": "d"}, **scoped)  # type: ignore[arg-type]
        assert (first.created, again.created, again.id) == (True, False, first.id)
        batch = engine.enqueue_many(
            [Enqueue("email.send", {"n": n}, idempotency_key=f"b{n % 2}") for n in range(3)]
        )
        assert [r.created for r in batch] == [True, True, False]
        assert len(engine.enqueue_many([Enqueue("email.send", {"n": n}) for n in range(50)])) == 50
        replaced = engine.enqueue(
            "email.send", {"to": "c2"}, idempotency_key="k", idempotency_conflict="replace_pending"
        )
        assert replaced.replaced
        engine.operator("web").enqueue("email.send", {"to": "e"})
        with psycopg.connect(dsn) as conn:  # the application's transaction
            engine.enqueue("email.send", {"to": "f"}, connection=conn)
    finally:
        store.close()
    # What the role wrote, as the owner reads it.
    [(jobs,)] = pgfixtures.fetch(owner_dsn, "SELECT count(*) FROM skiplock.jobs")
    assert jobs == 4 + 2 + 50 + 1 + 1
    assert one.id > 0
    [(events,)] = pgfixtures.fetch(owner_dsn, "SELECT count(*) FROM skiplock.audit")
    assert (events > 0) is audit
