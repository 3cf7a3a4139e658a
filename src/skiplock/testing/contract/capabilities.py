"""What a store under test can do; the contract kit skips what it cannot. Also the
exception a store's injected statement fault raises (shared by both flavours)."""

from __future__ import annotations

import attrs


@attrs.frozen
class Capabilities:
    """Capabilities of a store under contract test. Defaults describe a PostgreSQL store.

    A contract test marked ``@pytest.mark.skiplock_requires("name")`` is skipped when
    ``name`` is False here; that is the only way the kit skips a test.
    """

    #: ``notifier()`` returns a notifier woken by enqueues and replays (LISTEN/NOTIFY).
    listen_notify: bool = True
    #: The store's clock is the ``clock`` fixture (a FakeClock), so tests may advance it.
    #: False: the store has its own clock (a database's ``now()``); tests use
    #: ``await store.now()`` and due times in the past or the future instead.
    controllable_clock: bool = False
    #: ``transaction()`` yields a handle whose writes commit or roll back together.
    transactions: bool = True
    #: The store may be called from concurrent tasks/threads (claims stay exclusive).
    concurrent: bool = True
    #: ``statement_timeout=`` of ``transaction()``/``autocommit()`` bounds each statement
    #: of the block (a SQL store; the contract class then overrides ``fetch_value``).
    #: False: the store accepts and ignores it (the in-memory store).
    statement_timeouts: bool = True
    #: The contract class overrides ``failing_key_lookup`` so the kit can make the second
    #: statement of a keyed enqueue fail (a SQL store) and check nothing was written.
    #: False: the store has no such statement (the in-memory store's enqueue is one step).
    fault_injection: bool = True

    def supports(self, name: str) -> bool:
        """Whether capability ``name`` is on; unknown names raise ValueError."""
        if name not in attrs.fields_dict(type(self)):
            known = ", ".join(attrs.fields_dict(type(self)))
            raise ValueError(f"unknown store capability {name!r} (known: {known})")
        return bool(getattr(self, name))


class InjectedFault(Exception):
    """Raised by a statement a contract test made fail (see ``fault_injection``)."""
