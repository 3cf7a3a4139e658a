"""Input validation (X2): everything is checked before anything is written."""

from __future__ import annotations

import re

from ._types import EnqueueRequest

#: PostgreSQL identifiers we create or accept (schema names): lower case, <= 63 bytes.
IDENTIFIER_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
#: Job kinds: dotted/dashed names, <= 200 chars.
KIND_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:\-]{0,199}$")
MAX_PAYLOAD_BYTES = 1024 * 1024
MAX_TENANT_LENGTH = 200
MAX_IDEMPOTENCY_KEY_LENGTH = 255
PRIORITY_RANGE = (-32768, 32767)


def validate_identifier(name: str) -> str:
    """Return ``name`` if it is a safe SQL identifier, else raise ValidationError."""
    raise NotImplementedError


def encode_payload(payload: object, *, max_bytes: int = MAX_PAYLOAD_BYTES) -> str:
    """Serialise to compact JSON; raise ValidationError if not JSON or too large."""
    raise NotImplementedError


def validate_request(
    request: EnqueueRequest,
    *,
    known_kinds: frozenset[str] | None = None,
    max_payload_bytes: int = MAX_PAYLOAD_BYTES,
) -> None:
    """Raise ValidationError (or UnknownKindError) on the first problem in ``request``."""
    raise NotImplementedError
