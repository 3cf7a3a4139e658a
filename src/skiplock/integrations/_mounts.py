"""Where the skiplock routers of one app are mounted, and the check that no two of them
overlap (framework-neutral: the FastAPI and Flask bindings call it as a router is
mounted).

A door with routes of its own under its mount point (the REST API, the dashboard)
claims everything under that prefix: two such doors on the same prefix, or one inside
the other, would answer each other's requests (the dashboard's job page answering with
the REST API's JSON). The probes and the metrics claim their exact paths. Mounting a
router whose claim overlaps another's raises :class:`MountConflict` at once, naming
both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from collections.abc import Iterable

#: The doors that claim every path under their prefix; the others claim exact paths.
TREE_DOORS = frozenset({"REST API", "dashboard"})


class MountConflict(ValueError):
    """Two skiplock routers mounted on overlapping paths of one app."""


@attrs.frozen
class Mount:
    """What one mounted router claims: ``door`` (``REST API``, ``dashboard``,
    ``probes``, ``metrics``), its ``prefix`` (no trailing slash; ``""`` at the root) and
    ``path``, the exact path a probe or metrics route claims (None for a tree door).
    ``token`` tells routers apart: the routes of one router share it."""

    door: str
    prefix: str
    token: int
    path: str | None = None

    @property
    def where(self) -> str:
        return self.path if self.path is not None else (self.prefix or "/")


def _normal(path: str) -> str:
    return "/" + path.strip("/") if path.strip("/") else ""


def mount(door: str, prefix: str, token: int, path: str | None = None) -> Mount:
    """The claim of a route of ``door`` mounted at ``prefix`` (``path``: its full path,
    for a door that claims exact paths)."""
    if door in TREE_DOORS:
        return Mount(door, _normal(prefix), token)
    return Mount(door, _normal(prefix), token, _normal(path or prefix) or "/")


def _inside(path: str, prefix: str) -> bool:
    """Whether ``path`` is ``prefix`` or below it, segment-wise (``""`` holds all)."""
    return path == prefix or path.startswith(prefix + "/") or prefix == ""


def overlap(a: Mount, b: Mount) -> bool:
    """Whether two claims overlap (the routes of one router never do)."""
    if a.token == b.token and a.prefix == b.prefix:
        return False
    if a.path is None and b.path is None:
        return _inside(a.prefix, b.prefix) or _inside(b.prefix, a.prefix)
    if a.path is None:
        return _inside(b.where, a.prefix)
    if b.path is None:
        return _inside(a.where, b.prefix)
    return a.path == b.path


def check_mount(new: Mount, mounted: Iterable[Mount]) -> None:
    """MountConflict if ``new`` overlaps a claim of ``mounted``, naming both."""
    for other in mounted:
        if overlap(new, other):
            raise MountConflict(
                f"skiplock: the {new.door} mounted at {new.where!r} overlaps the "
                f"{other.door} mounted at {other.where!r}; mount each skiplock router at "
                "its own prefix (e.g. the REST API at /admin/jobs, the dashboard at "
                "/admin/dashboard: docs/dashboard.md, 'Mounting')"
            )


def claims(door: str, token: int, prefix: str, paths: Iterable[tuple[str, str]]) -> list[Mount]:
    """What a router of ``door`` claims, included at ``prefix``: ``paths`` are its routes'
    paths in the router (its own prefix included) with their paths relative to the door's
    mount point."""
    found = {
        mount(door, prefix + full[: len(full) - len(relative)], token, prefix + full)
        for full, relative in paths
    }
    return sorted(found, key=lambda claim: claim.where)


def register(new: list[Mount], mounted: list[Mount]) -> None:
    """Check ``new`` against ``mounted`` (MountConflict), then add it."""
    for claim in new:
        check_mount(claim, mounted)
    mounted.extend(new)
