"""Name → benchmarked system (skiplock through an adapter, and the competitors)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from benchmarks._sys_pgqueuer import PgqueuerSystem
from benchmarks._sys_procrastinate import ProcrastinateSystem
from benchmarks._sys_skiplock import SkiplockSystem

if TYPE_CHECKING:
    from collections.abc import Callable

    from benchmarks._system import System

#: Competitors compared on the same workloads when their package is installed.
COMPETITORS: dict[str, Callable[[], System]] = {
    "pgqueuer": PgqueuerSystem,
    "procrastinate": ProcrastinateSystem,
}


def make_system(name: str, adapter: str = "psycopg") -> System:
    """The system called ``name`` (``skiplock`` uses ``adapter``)."""
    if name == "skiplock":
        return SkiplockSystem(adapter)
    try:
        return COMPETITORS[name]()
    except KeyError:
        raise ValueError(f"unknown system {name!r}") from None
