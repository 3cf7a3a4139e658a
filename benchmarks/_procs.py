"""Harness side of the worker subprocesses: spawn, barrier, reports, SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

    from benchmarks._system import WorkerArgs

#: The repository root: worker processes run ``-m benchmarks.worker_proc`` from here.
ROOT = Path(__file__).resolve().parent.parent
_STDERR_KEEP = 4000


class WorkerError(RuntimeError):
    """A worker process failed (its stderr tail is in the message)."""


class WorkerProcess:
    """One ``benchmarks.worker_proc`` subprocess."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.ready = asyncio.Event()
        #: ``time.monotonic()`` of the first job its processors saw.
        self.first: float | None = None
        #: latency mode: job number → processor start time.
        self.starts: asyncio.Queue[tuple[int, float]] = asyncio.Queue()
        self._stderr = b""
        self._tasks = [
            asyncio.ensure_future(self._read_stdout()),
            asyncio.ensure_future(self._read_stderr()),
        ]

    async def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        async for raw in self.proc.stdout:
            parts = raw.decode(errors="replace").split()
            if not parts:
                continue
            if parts[0] == "ready":
                self.ready.set()
            elif parts[0] == "first" and self.first is None:
                self.first = float(parts[1])
            elif parts[0] == "start":
                self.starts.put_nowait((int(parts[1]), float(parts[2])))

    async def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        async for raw in self.proc.stderr:
            self._stderr = (self._stderr + raw)[-_STDERR_KEEP:]

    @property
    def alive(self) -> bool:
        """Still running."""
        return self.proc.returncode is None

    def failure(self) -> str:
        """A short description of why the process is gone."""
        tail = self._stderr.decode(errors="replace").strip().splitlines()[-3:]
        return f"worker exited with {self.proc.returncode}: " + " | ".join(tail)

    async def wait_ready(self, timeout: float) -> None:
        """Wait for ``ready``; raise WorkerError if the process dies or is too slow."""
        done = asyncio.ensure_future(self.proc.wait())
        ready = asyncio.ensure_future(self.ready.wait())
        try:
            await asyncio.wait({done, ready}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ready.cancel()
            if not done.done():
                done.cancel()
        if not self.ready.is_set():
            if not self.alive:
                await asyncio.gather(*self._tasks, return_exceptions=True)
                raise WorkerError(self.failure())
            raise WorkerError(f"worker not ready after {timeout:.0f} s")

    def go(self) -> None:
        """Release the start barrier."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"go\n")

    async def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout``; the exit code."""
        if self.alive:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), timeout)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
                await self.proc.wait()
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        return self.proc.returncode


@asynccontextmanager
async def workers(
    args: Sequence[WorkerArgs], ready_timeout: float = 60.0
) -> AsyncIterator[list[WorkerProcess]]:
    """Start one process per ``args`` and wait until each is ready (not yet released)."""
    procs: list[WorkerProcess] = []
    try:
        for a in args:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "benchmarks.worker_proc",
                *a.to_argv(),
                cwd=str(ROOT),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            procs.append(WorkerProcess(proc))
        for p in procs:
            await p.wait_ready(ready_timeout)
        yield procs
    finally:
        await asyncio.gather(*(p.stop() for p in procs), return_exceptions=True)


def release(procs: Sequence[WorkerProcess]) -> None:
    """Release every process's start barrier at once."""
    for p in procs:
        p.go()
