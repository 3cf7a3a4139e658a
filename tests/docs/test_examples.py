"""The docs-example runner itself: which blocks run, how, and how a failure reads."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

import pytest

from .examples import (
    ROOT,
    Command,
    ExampleFailed,
    doc_files,
    parse_blocks,
    run_file,
    shell_commands,
    substitute_dsn,
    wants_schema,
)

if TYPE_CHECKING:
    from pathlib import Path

FENCE = "```"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "page.md"
    path.write_text(textwrap.dedent(text).replace("~~~", FENCE), encoding="utf-8")
    return path


def no_database() -> str:
    raise AssertionError("no block of this file needs a database")


def test_doc_files_are_the_readme_and_every_docs_page() -> None:
    files = doc_files()
    assert files[0] == ROOT / "README.md"
    assert ROOT / "docs" / "adapters" / "psycopg.md" in files
    assert ROOT / "docs" / "contributing.md" in files


def test_blocks_are_numbered_with_their_language_line_and_skip_marker(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        # Title

        ~~~python
        a = 1
        ~~~

        <!-- docs: skip -->

        ~~~sh
        skiplock demo
        ~~~

        1. A list item:

           ~~~py
           if a:
               b = 2
           ~~~
        ~~~
        plain
        ~~~
        """,
    )
    blocks = parse_blocks(path)
    assert [(b.number, b.language, b.line, b.skip) for b in blocks] == [
        (1, "python", 4, False),
        (2, "sh", 10, True),
        (3, "py", 16, False),
        (4, "", 20, False),
    ]
    assert blocks[2].code == "if a:\n    b = 2\n"  # the list item's indentation removed
    assert blocks[0].where == f"{path.as_posix()}, block 1 (python, line 4)"


def test_an_unclosed_block_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, "~~~python\nx = 1\n")
    with pytest.raises(ValueError, match="line 1 is not closed"):
        parse_blocks(path)


def test_the_no_schema_marker(tmp_path: Path) -> None:
    assert wants_schema(write(tmp_path, "text\n"))
    assert not wants_schema(write(tmp_path, "<!-- docs: no-schema -->\ntext\n"))


def test_the_docs_dsn_is_replaced_keeping_a_driver() -> None:
    scratch = "postgresql://u@h:5/db_1?sslmode=disable"
    text = (
        'a("postgresql://postgres@127.0.0.1/app") '
        'b("postgresql+asyncpg://postgres@127.0.0.1/app") '
        'c("postgresql://postgres@127.0.0.1/application")'
    )
    assert substitute_dsn(text, scratch) == (
        'a("postgresql://u@h:5/db_1?sslmode=disable") '
        'b("postgresql+asyncpg://u@h:5/db_1?sslmode=disable") '
        'c("postgresql://postgres@127.0.0.1/application")'
    )
    with pytest.raises(ValueError, match="must be a URL"):
        substitute_dsn(text, "host=h dbname=db")


def test_shell_blocks_run_only_finite_skiplock_commands(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        ~~~sh
        pip install "skiplock[psycopg]"
        $ skiplock schema apply --dsn "$SKIPLOCK_DSN"   # a comment
        skiplock schema sql --from 3 > upgrade.sql && psql -f upgrade.sql
        skiplock worker app.jobs:engine --concurrency 8
        skiplock schema sql \\
            --schema other
        python -m skiplock demo
        ~~~
        """,
    )
    [block] = parse_blocks(path)
    assert list(shell_commands(block)) == [
        Command(line=3, argv=("schema", "apply", "--dsn", "$SKIPLOCK_DSN")),
        Command(line=4, argv=("schema", "sql", "--from", "3")),
        Command(line=6, argv=("schema", "sql", "--schema", "other")),
    ]


def test_python_blocks_share_a_namespace_and_an_event_loop(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        ~~~python
        import asyncio
        loops = []
        ~~~

        ~~~toml
        not = "python"
        ~~~

        ~~~python
        loops.append(asyncio.get_running_loop())
        await asyncio.sleep(0)
        ~~~

        <!-- docs: skip -->
        ~~~python
        raise RuntimeError("skipped blocks do not run")
        ~~~

        ~~~python
        async with asyncio.timeout(5):
            loops.append(asyncio.get_running_loop())
        ~~~

        ~~~python
        assert loops[0] is loops[1]
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise AssertionError("a plain block runs outside the loop")
        ~~~
        """,
    )
    outcome = run_file(path, no_database)
    assert outcome.python_run == 4
    assert [b.number for b in outcome.skipped] == [4]


def test_the_second_async_block_runs_in_the_same_loop(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        ~~~python
        import asyncio
        await asyncio.sleep(0)
        first = asyncio.get_running_loop()
        ~~~

        ~~~python
        await asyncio.sleep(0)
        assert asyncio.get_running_loop() is first
        ~~~
        """,
    )
    assert run_file(path, no_database).python_run == 2


def test_a_failing_block_names_file_block_and_line(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        ~~~python
        x = 1
        ~~~

        ~~~python
        y = x + 1
        assert y == 3, "wrong sum"
        ~~~
        """,
    )
    with pytest.raises(ExampleFailed) as failed:
        run_file(path, no_database)
    message = str(failed.value)
    assert message.startswith(f"{path.as_posix()}, block 2 (python, line 6) failed:")
    assert f'"{path.as_posix()}[block 2]", line 7' in message  # the Markdown file's line
    assert 'assert y == 3, "wrong sum"' in message  # the source line is shown
    assert "AssertionError: wrong sum" in message
    assert "examples.py" not in message  # the runner's own frames left out


def test_annotations_are_evaluated_as_in_a_script(tmp_path: Path) -> None:
    """The runner's own ``from __future__ import annotations`` does not leak into a block."""
    path = write(
        tmp_path,
        """        ~~~python
        def f() -> NotDefinedAnywhere:
            pass
        ~~~
        """,
    )
    with pytest.raises(ExampleFailed, match="NameError: name 'NotDefinedAnywhere'"):
        run_file(path, no_database)


def test_the_scratch_database_is_made_once_and_only_when_used(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        ~~~python
        a = "postgresql://postgres@127.0.0.1/app"
        ~~~

        ~~~python
        b = "postgresql+psycopg://postgres@127.0.0.1/app"
        ~~~

        ~~~python
        assert (a, b) == ("postgresql://s@h/db", "postgresql+psycopg://s@h/db")
        ~~~
        """,
    )
    made: list[str] = []

    def database() -> str:
        made.append("postgresql://s@h/db")
        return made[-1]

    assert run_file(path, database).python_run == 3
    assert len(made) == 1


def test_a_failing_command_reports_its_exit_status(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        ~~~sh
        skiplock schema sql --from 0
        skiplock schema sql --from 99999
        ~~~
        """,
    )
    with pytest.raises(ExampleFailed) as failed:
        run_file(path, lambda: "postgresql://nowhere/db")
    message = str(failed.value)
    assert "block 1 (sh, line 2): `skiplock schema sql --from 99999` (line 3) exited 2" in message
    assert "no schema version 99999" in message
