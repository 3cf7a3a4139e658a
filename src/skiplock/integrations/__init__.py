"""Integrations with web frameworks (import the one you use): ``skiplock.integrations.fastapi``."""

from __future__ import annotations
