"""What the door tests compare: the options a command's ``--help`` offers (read from its
usage line) and the words of its error, through the ``skiplock`` command itself."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parents[1]
#: The options only the ``skiplock`` command has: how it finds the database (and the hot
#: standby of its reads: a door's commands read where its engine's ``reads=`` points).
STANDALONE_ONLY = frozenset({"--dsn", "--read-dsn", "--schema", "--timeout"})
#: The commands whose options every door offers, and arguments each door refuses alike
#: (argparse's error, then one of the tree's own after parsing).
MOUNTED = ("worker", "schema", "health", "dlq", "counts", "metrics", "workers")
PARSE_ERROR = ("worker", "--concurrency", "0")
USAGE_ERROR = ("schema", "status", "--from", "3")


@attrs.frozen
class Outcome:
    """A command's exit status and its error: the last line of stderr, and that line
    after "error: " (argparse names the program before it)."""

    status: int
    stdout: str
    stderr: str

    @property
    def last_line(self) -> str:
        return self.stderr.strip().splitlines()[-1]

    @property
    def error(self) -> str:
        return self.last_line.partition("error: ")[2]


def usage_options(help_text: str) -> frozenset[str]:
    """The options of a ``--help`` text's usage lines (``[--concurrency N]``: --concurrency)."""
    usage = help_text.split("\n\n", 1)[0]
    assert usage.startswith("usage:"), help_text
    return frozenset(re.findall(r"\[(-[-\w]+)", usage))


def skiplock(*arguments: str, dsn: str = "postgresql://nowhere/db") -> Outcome:
    """``python -m skiplock <arguments>`` (with ``SKIPLOCK_DSN`` set to ``dsn``)."""
    done = subprocess.run(
        [sys.executable, "-m", "skiplock", *arguments],
        cwd=ROOT,
        env={**os.environ, "SKIPLOCK_DSN": dsn},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return Outcome(done.returncode, done.stdout, done.stderr)


def standalone_options(command: str) -> frozenset[str]:
    """The options of ``skiplock <command>`` that every door offers."""
    helped = skiplock(command, "--help")
    assert helped.status == 0, helped.stderr
    return usage_options(helped.stdout) - STANDALONE_ONLY


def assert_refused_alike(arguments: tuple[str, ...], mounted: Outcome) -> None:
    """``mounted`` (a door's run of ``arguments``) refuses them as ``skiplock`` does: the
    same exit status 2 and message (the whole line when the tree's own words)."""
    plain = skiplock(*arguments)
    assert plain.status == mounted.status == 2
    assert plain.error == mounted.error != ""
    if arguments == USAGE_ERROR:
        assert (
            plain.last_line
            == mounted.last_line
            == ("skiplock: error: --from is an option of 'schema sql', not of 'schema status'")
        )
