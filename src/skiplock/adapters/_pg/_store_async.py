"""The one PostgreSQL job store, over a driver object (async source; twin generated).

:class:`AsyncPgJobStore` implements every port method, the rules for the caller's
connection, the worker-bookkeeping connection, statement timeouts, migrations and the
schema check once, over an :class:`~._driver_async.AsyncPgDriver` that supplies
connections and the few calls that differ between drivers. The public psycopg, asyncpg
and SQLAlchemy stores only build their driver. Imports no driver.

It is composed of one mixin per role of the store port (``skiplock.ports``), each in its
own module with the contract kit's mixins that test it named in its docstring, over
:class:`~._store_base_async.AsyncPgStoreBase` (connections, audits, lifecycle, schema):

- ``_store_jobs_async``: :class:`AsyncPgJobsRole`, ``AsyncJobsRole``;
- ``_store_workers_async``: :class:`AsyncPgWorkersRole`, ``AsyncWorkersRole``;
- ``_store_controls_async``: :class:`AsyncPgControlsRole`, ``AsyncControlsRole``;
- ``_store_reads_async``: :class:`AsyncPgReadsRole`, ``AsyncReadsRole``;
- ``_store_admin_async``: :class:`AsyncPgAdminRole`, ``AsyncAdminRole``;
- ``_store_upkeep_async``: :class:`AsyncPgUpkeepRole`, ``AsyncUpkeepRole``.

Their rows and parameters are split the same way (``_rows.py``, ``_rows_<role>.py``). The
adapters import the store and its defaults (``READ_TIMEOUT``, ...) from here.
"""

from __future__ import annotations

from ._driver_async import TX, C
from ._store_admin_async import AsyncPgAdminRole
from ._store_base_async import CONNECT_TIMEOUT as CONNECT_TIMEOUT
from ._store_base_async import READ_TIMEOUT as READ_TIMEOUT
from ._store_base_async import statement_timeout_ms as statement_timeout_ms
from ._store_controls_async import AsyncPgControlsRole
from ._store_jobs_async import COPY_THRESHOLD as COPY_THRESHOLD
from ._store_jobs_async import AsyncPgJobsRole
from ._store_reads_async import AsyncPgReadsRole
from ._store_upkeep_async import AsyncPgUpkeepRole
from ._store_workers_async import AsyncPgWorkersRole


class AsyncPgJobStore(
    AsyncPgJobsRole[C, TX],
    AsyncPgWorkersRole[C, TX],
    AsyncPgControlsRole[C, TX],
    AsyncPgReadsRole[C, TX],
    AsyncPgAdminRole[C, TX],
    AsyncPgUpkeepRole[C, TX],
):
    """Port methods of a PostgreSQL job store, written once over a driver: every role.

    ``C`` is the driver's connection type, ``TX`` what :meth:`transaction` yields.
    """
