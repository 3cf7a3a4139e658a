"""``python -m skiplock``: the same as the ``skiplock`` command."""

from __future__ import annotations

from skiplock.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
