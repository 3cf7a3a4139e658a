"""Entry point: ``python -m benchmarks`` from the repository root."""

from __future__ import annotations

from benchmarks.cli import main

raise SystemExit(main())
