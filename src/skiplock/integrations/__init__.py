"""Integrations with web frameworks (import the one you use): ``skiplock.integrations.fastapi``,
``skiplock.integrations.django``."""

from __future__ import annotations
