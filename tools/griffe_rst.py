"""A griffe extension for the docs site: reStructuredText roles in docstrings as code.

The docstrings use Sphinx roles (``:class:`~skiplock.Engine```, ``:meth:`advance```) and
``::`` before literal blocks. mkdocstrings renders Markdown, where those would show as
written. This extension rewrites them when griffe loads a docstring: a role becomes a
code span of the name it displays (the last component after ``~``), ``text::`` becomes
``text:``. Loaded by mkdocs.yml (``extensions: [tools/griffe_rst.py:RstRoles]``).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE_RE = re.compile(r":(?:py:)?(?:class|func|meth|attr|data|mod|exc|obj|const|ref):`(~?)([^`]+)`")
_LITERAL_RE = re.compile(r"(?<=\S)::$", re.MULTILINE)


def markdown(text: str) -> str:
    """``text`` with roles as code spans and ``::`` literal-block markers as ``:``."""

    def role(match: re.Match[str]) -> str:
        short, target = match.groups()
        return f"`{target.rsplit('.', 1)[-1] if short else target}`"

    return _LITERAL_RE.sub(":", _ROLE_RE.sub(role, text))


class RstRoles(griffe.Extension):
    """Rewrites every loaded object's docstring with :func:`markdown`."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown(obj.docstring.value)
