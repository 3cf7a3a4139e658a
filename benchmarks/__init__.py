"""skiplock's benchmark harness: ``python -m benchmarks --help`` (see docs/performance.md)."""

from __future__ import annotations
