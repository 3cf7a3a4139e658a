"""The fault suite's rolling deploy: workers of the previous version (the repository at
the newest earlier commit whose migrations the current ones extend, exported with
``git archive``) run on
its schema and take jobs a producer of that version enqueues; ``skiplock schema apply``
of the current code migrates the schema under them; workers and a producer of the
current version start beside them; then the old workers are stopped one by one
(SIGTERM: a graceful stop, as a deploy does), and the new ones finish the work.

No fault is recorded: every re-run is unexplained, so the scenario passes only when the
migration and the two versions side by side cost no re-run, no loss, nothing stuck.

``python -m benchmarks.faults.rolling DSN RATE`` is the old producer (run with the old
version first on ``PYTHONPATH``): it enqueues at ``RATE`` jobs/s until its standard input
ends, and prints ``E <id> <kind> <t>`` for each acknowledged enqueue
(``time.monotonic()``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks._procs import ROOT
from benchmarks.faults.harness import sleep

if TYPE_CHECKING:
    from benchmarks.faults.harness import Harness

#: The latest migration's folder in the repository (the version it adds is the new one).
MIGRATIONS = "src/skiplock/adapters/_pg/sql/migrations"
#: Seconds of each phase: old alone, both side by side, new alone.
PHASE = 5.0


def previous_version(folder: Path) -> tuple[str, str]:
    """Export the source of the previous version into ``folder``; its commit and its
    ``src`` path. The previous version is the newest commit of main's first-parent line
    whose migrations are a proper prefix of the current ones: a tree the current
    migrations upgrade. (The commit that added the latest file is not enough: a merge
    that renumbered a branch's migration has a first parent whose numbers differ.)"""

    def git(*args: str) -> str:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True)
        return out.stdout.strip()

    def migrations(commit: str) -> list[str]:
        return sorted(
            Path(n).name for n in git("ls-tree", "--name-only", commit, f"{MIGRATIONS}/").split()
        )

    current = migrations("HEAD")
    # The first-parent line's commits that changed the migrations, newest first, with
    # their first parents: the newest commit before each change holds the migrations
    # of every commit back to the change before it, so only those are looked at.
    changes = git("log", "--first-parent", "--format=%H %P", "HEAD", "--", MIGRATIONS)
    for line in changes.splitlines():
        _, *parents = line.split()
        if not parents:  # the root commit: nothing before it
            continue
        commit = parents[0]
        names = migrations(commit)
        if len(names) < len(current) and names == current[: len(names)]:
            break
    else:
        raise RuntimeError(f"no earlier commit whose migrations {MIGRATIONS} upgrades")
    old = git("rev-parse", "--short", commit)
    archive = folder / "old.tar"
    subprocess.run(["git", "archive", "-o", str(archive), old, "src"], cwd=ROOT, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(folder / "old", filter="data")
    return old, str(folder / "old" / "src")


def _env(src: str) -> dict[str, str]:
    return os.environ | {"PYTHONPATH": src}


def _schema_version(h: Harness) -> int:
    return int(h.sql("SELECT coalesce(max(version), 0) FROM skiplock.schema_migrations")[0][0])


def rolling_deploy(h: Harness, quick: bool) -> None:
    """See the module."""
    commit, old_src = previous_version(h.folder)
    apply = [sys.executable, "-m", "skiplock", "schema", "apply", "--dsn", h.dsn]
    subprocess.run(apply, cwd=ROOT, env=_env(old_src), check=True, capture_output=True)
    before = _schema_version(h)
    old = [h.spawn(PYTHONPATH=old_src) for _ in range(h.load.workers)]
    producer = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.faults.rolling", h.dsn, f"{h.load.rate:g}"],
        cwd=ROOT, env=_env(old_src), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip
    sleep(PHASE)
    began = time.monotonic()
    # The current code's own command, as an operator runs it during the deploy.
    done = subprocess.run(apply, cwd=ROOT, capture_output=True, text=True, check=False)
    migrated = time.monotonic()
    if done.returncode != 0:
        h.ledger.failed.append(f"skiplock schema apply failed: {done.stdout}{done.stderr}")
    after = _schema_version(h)
    for _ in range(h.load.workers):
        h.spawn()
    h.start_load()
    sleep(PHASE)
    for worker in old:  # one by one, as a deploy replaces them
        worker.proc.terminate()
        worker.proc.wait(30)
        sleep(1.0)
    # The old producer goes last, as the application servers of a deploy do.
    out, _ = producer.communicate(b"", timeout=60)
    if producer.returncode != 0:
        h.ledger.failed.append(f"the old producer failed (exit {producer.returncode})")
    for line in out.decode().splitlines():
        _, job, kind, at = line.split()
        h.ledger.acked[int(job)] = kind
        h.ledger.enqueued[int(job)] = float(at)
        h.events.append(("old-job", float(job), float(at)))
    sleep(PHASE)
    h.events.append(("migration", began, migrated))
    steps = [line for line in done.stdout.splitlines() if line.startswith("applied ")]
    h.ledger.notes.append(
        f"old version: commit `{commit}` (schema version {before}); `skiplock schema "
        f"apply` of the current code took it to version {after} while the old workers "
        f"ran ({'; '.join(steps) or 'no step'}; {migrated - began:.1f} s for the whole "
        "command, its interpreter's start on the loaded machine included)"
    )
    codes = [w.proc.returncode for w in old]
    if any(code != 0 for code in codes):
        h.ledger.failed.append(f"an old worker did not stop cleanly: exit codes {codes}")
    if after <= before:
        h.ledger.failed.append(f"no migration ran: schema version {before} -> {after}")


def side_by_side(h: Harness) -> None:
    """Who ran what, once the ledger is complete: the old workers took jobs after the
    migration, the new ones took jobs the old producer enqueued (else the scenario did
    not show two versions side by side)."""
    [(began, migrated)] = [(a, b) for what, a, b in h.events if what == "migration"]
    # The old workers were started first.
    old = {w.pid for w in h.workers[: h.load.workers]}
    new = {w.pid for w in h.workers[h.load.workers :]}
    old_after = sum(1 for r in h.ledger.runs if r.pid in old and r.at > migrated)
    old_during = sum(1 for r in h.ledger.runs if r.pid in old and began <= r.at <= migrated)
    enqueued_old = {int(job) for what, job, _ in h.events if what == "old-job"}
    new_of_old = sum(1 for r in h.ledger.runs if r.pid in new and r.job in enqueued_old)
    h.ledger.notes.append(
        f"old workers started {old_during} runs during the migration and {old_after} "
        f"after it (on the new schema); new workers ran {new_of_old} of the "
        f"{len(enqueued_old)} jobs the old producer enqueued"
    )
    if not old_after:
        h.ledger.failed.append("the old workers took no job on the migrated schema")
    if not new_of_old:
        h.ledger.failed.append("the new workers ran no job of the old producer")


def _produce(dsn: str, rate: float) -> None:
    """The old producer (see the module)."""
    import threading

    from benchmarks.faults.worker import PLAIN, TX
    from skiplock.adapters.psycopg import PsycopgJobStore
    from skiplock.core import EnqueueRequest

    ended = threading.Event()

    def watch() -> None:
        sys.stdin.read()
        ended.set()

    threading.Thread(target=watch, daemon=True).start()
    sent, started = 0, time.monotonic()
    with PsycopgJobStore(dsn, max_size=1) as store:
        while not ended.is_set():
            now = time.monotonic()
            owed = int((now - started) * rate) - sent
            batch = [
                EnqueueRequest(kind=PLAIN if (sent + i) % 5 == 0 else TX, payload={"ms": 100.0})
                for i in range(max(owed, 0))
            ]
            if batch:
                results = store.enqueue(batch)
                acked = time.monotonic()
                for request, result in zip(batch, results, strict=True):
                    print(f"E {result.id} {request.kind} {acked}", flush=True)
                sent += len(batch)
            time.sleep(0.05)


if __name__ == "__main__":
    _produce(sys.argv[1], float(sys.argv[2]))
