"""Reading the code blocks of README.md and docs/**/*.md, and running them.

The convention (also in docs/contributing.md, which is the reference for doc writers):

- Every fenced block of a file is numbered from 1 in the order it appears; a failure
  names the file, the block number and the line of the file.
- ```` ```python ```` (or ```` ```py ````) blocks of one file run in order in one shared
  namespace, in one event loop kept for the whole file. A block with a top-level
  ``await`` (or ``async with``/``async for``) runs as a coroutine in that loop; other
  blocks run as plain code, outside it.
- ``postgresql://postgres@127.0.0.1/app`` (also with a driver, e.g.
  ``postgresql+asyncpg://...``) stands for a scratch database made for the file, with
  skiplock's schema applied (schema ``skiplock``). A file with the line
  ``<!-- docs: no-schema -->`` gets its scratch database without the schema.
- A block right after the line ``<!-- docs: skip -->`` (blank lines between are allowed)
  is not run, whatever its language.
- Shell blocks (``sh``, ``bash``, ``shell``, ``console``): each command line whose first
  word is ``skiplock`` (after an optional ``$ `` prompt) runs as ``python -m skiplock``
  with ``SKIPLOCK_DSN`` set to the scratch database and must exit 0. Commands that are
  not finite by nature are not run: ``skiplock worker`` (runs until a signal). Every
  other line (pip, python, tox, psql, ...) is not run. A command ends at the first
  shell operator (``|``, ``>``, ``&&``, ``;`` ...): what follows is not run. ``$SKIPLOCK_DSN``
  and ``${SKIPLOCK_DSN}`` are expanded; ``\\`` continues a command on the next line.
- Blocks in other languages (toml, sql, ini, text, yaml, ...) are not run.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import linecache
import os
import re
import shlex
import subprocess
import sys
import traceback
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

ROOT = Path(__file__).resolve().parents[2]

#: The DSN docs spell, and what it becomes.
DOC_DSN_RE = re.compile(r"postgresql(\+[a-z0-9_]+)?://postgres@127\.0\.0\.1/app(?![\w-])")
SKIP_MARKER = "<!-- docs: skip -->"
NO_SCHEMA_MARKER = "<!-- docs: no-schema -->"
PYTHON = frozenset({"python", "py"})
SHELL = frozenset({"sh", "bash", "shell", "console"})
#: ``skiplock`` subcommands a shell block may show but that are not run.
NOT_RUN_COMMANDS = frozenset({"worker"})
COMMAND_TIMEOUT = 120.0

_FENCE_RE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\s`]*)")
_SHELL_OPERATORS = ("|", "||", "&", "&&", ";", ">", ">>", "<", "<<", "(", ")")


def doc_files() -> list[Path]:
    """README.md and every docs/**/*.md, in a stable order."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


@attrs.frozen
class Block:
    """One fenced code block of a Markdown file."""

    path: Path
    number: int  # 1-based among the file's fenced blocks
    language: str
    line: int  # the file's line of the block's first code line (1-based)
    code: str  # dedented by the fence's indentation
    skip: bool

    @property
    def where(self) -> str:
        return f"{self.name}, block {self.number} ({self.language or 'plain'}, line {self.line})"

    @property
    def name(self) -> str:
        """The file's path relative to the repository (absolute if outside it)."""
        if self.path.is_relative_to(ROOT):
            return self.path.relative_to(ROOT).as_posix()
        return self.path.as_posix()


def parse_blocks(path: Path) -> list[Block]:
    """The fenced code blocks of the Markdown file at ``path``."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE_RE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            stripped = lines[j].strip()
            if stripped.startswith(fence) and set(stripped) <= set(fence[0]):
                break
            line = lines[j]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            j += 1
        else:
            raise ValueError(f"{path}: the code block opened at line {i + 1} is not closed")
        previous = next((text.strip() for text in reversed(lines[:i]) if text.strip()), "")
        blocks.append(
            Block(
                path=path,
                number=len(blocks) + 1,
                language=opening["info"].lower(),
                line=i + 2,
                code="\n".join(body) + "\n",
                skip=previous == SKIP_MARKER,
            )
        )
        i = j + 1
    return blocks


def wants_schema(path: Path) -> bool:
    """False if the file asks for a scratch database without skiplock's schema."""
    return NO_SCHEMA_MARKER not in path.read_text(encoding="utf-8").splitlines()


def substitute_dsn(text: str, dsn: str) -> str:
    """``text`` with the docs' DSN replaced by ``dsn`` (a URL), keeping a driver suffix."""
    scheme, sep, rest = dsn.partition("://")
    if not sep:
        raise ValueError(f"the scratch DSN must be a URL to stand in for the docs' DSN: {dsn}")
    return DOC_DSN_RE.sub(lambda m: f"{scheme}{m[1] or ''}://{rest}", text)


@attrs.frozen
class Command:
    """A ``skiplock`` command of a shell block."""

    line: int
    argv: tuple[str, ...]  # after ``skiplock``


def shell_commands(block: Block) -> Iterator[Command]:
    """The ``skiplock`` commands of a shell block that the convention runs."""
    for line, text in _logical_lines(block):
        text = text.strip()
        text = text.removeprefix("$ ")
        lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        words: list[str] = []
        for word in lexer:
            if word in _SHELL_OPERATORS or set(word) <= set("|&;<>()"):
                break
            words.append(word)
        if not words or words[0] != "skiplock":
            continue
        if len(words) > 1 and words[1] in NOT_RUN_COMMANDS:
            continue
        yield Command(line=line, argv=tuple(words[1:]))


def _logical_lines(block: Block) -> Iterator[tuple[int, str]]:
    pending: list[str] = []
    start = block.line
    for offset, text in enumerate(block.code.splitlines()):
        if not pending:
            start = block.line + offset
        if text.rstrip().endswith("\\"):
            pending.append(text.rstrip()[:-1])
            continue
        yield start, " ".join([*pending, text])
        pending = []
    if pending:
        yield start, " ".join(pending)


class ExampleFailed(Exception):
    """A block failed: the message names the file, the block and the line."""


@attrs.define
class Outcome:
    """What running a file's blocks did."""

    python_run: int = 0
    commands_run: int = 0
    skipped: list[Block] = attrs.Factory(list)


def run_file(path: Path, dsn: Callable[[], str]) -> Outcome:
    """Run the blocks of ``path`` by the convention; ``dsn()`` makes the scratch database
    (called at most once, only if a block needs it). Raises ExampleFailed."""
    outcome = Outcome()
    blocks = parse_blocks(path)
    scratch: list[str] = []

    def database() -> str:
        if not scratch:
            scratch.append(dsn())
        return scratch[0]

    module = types.ModuleType("docs_example_" + re.sub(r"\W", "_", path.stem))
    module.__file__ = str(path)
    sys.modules[module.__name__] = module
    try:
        with asyncio.Runner() as runner:
            for block in blocks:
                if block.language not in PYTHON | SHELL:
                    continue
                if block.skip:
                    outcome.skipped.append(block)
                    continue
                if block.language in PYTHON:
                    _run_python(block, module.__dict__, runner, database)
                    outcome.python_run += 1
                else:
                    for command in shell_commands(block):
                        _run_command(block, command, database)
                        outcome.commands_run += 1
    finally:
        sys.modules.pop(module.__name__, None)
    return outcome


def _run_python(
    block: Block, namespace: dict[str, Any], runner: asyncio.Runner, database: Callable[[], str]
) -> None:
    code = block.code
    if DOC_DSN_RE.search(code):
        code = substitute_dsn(code, database())
    # Padded so that line numbers in tracebacks are the Markdown file's.
    source = "\n" * (block.line - 1) + code
    filename = f"{block.name}[block {block.number}]"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    try:
        # dont_inherit: not this module's ``from __future__ import annotations``.
        compiled = compile(
            source, filename, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True
        )
        if compiled.co_flags & inspect.CO_COROUTINE:
            runner.run(eval(compiled, namespace))
        else:
            exec(compiled, namespace)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise ExampleFailed(f"{block.where} failed:\n{_describe(exc, filename)}") from exc


def _describe(exc: BaseException, filename: str) -> str:
    """The traceback from the block's own frame on (the runner's frames left out)."""
    frames = traceback.extract_tb(exc.__traceback__)
    first = next((i for i, f in enumerate(frames) if f.filename == filename), len(frames))
    lines = ["Traceback (most recent call last):\n", *traceback.format_list(frames[first:])]
    return "".join(lines + traceback.format_exception_only(exc))


def _run_command(block: Block, command: Command, database: Callable[[], str]) -> None:
    dsn = database()
    argv = [
        substitute_dsn(word, dsn).replace("${SKIPLOCK_DSN}", dsn).replace("$SKIPLOCK_DSN", dsn)
        for word in command.argv
    ]
    env = {**os.environ, "SKIPLOCK_DSN": dsn}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "skiplock", *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        raise ExampleFailed(
            f"{block.where}: `skiplock {' '.join(command.argv)}` (line {command.line}) "
            f"did not finish within {COMMAND_TIMEOUT:g} s"
        ) from exc
    if done.returncode != 0:
        raise ExampleFailed(
            f"{block.where}: `skiplock {' '.join(command.argv)}` (line {command.line}) "
            f"exited {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
        )
