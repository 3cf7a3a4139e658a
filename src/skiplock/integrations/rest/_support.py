"""What the REST handlers share (written once for the async and the sync API): parsing
the path, query and body into the models (errors are 422 problems with ``errors``), the
JSON of pages and counts, and the problem of each engine error."""

from __future__ import annotations

import types
import typing
from typing import Any, TypeVar

import attrs
import pydantic
from pydantic import BaseModel, TypeAdapter

from skiplock.core import (
    DatabaseUnavailableError,
    InvalidTransitionError,
    Job,
    JobNotFoundError,
    SkiplockError,
    StoreError,
    UndecodableRowError,
    ValidationError,
    job_json,
)
from skiplock.engine import SelectionChangedError

from . import models as m
from ._auth import Permission
from ._problems import (
    BadRequest,
    Conflict,
    InternalError,
    InvalidRequest,
    NotFound,
    Problem,
    SelectionChanged,
    Unavailable,
    UnsupportedMediaType,
)

if typing.TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from datetime import datetime

    from skiplock.core import JobPage, StateCount
    from skiplock.engine import BulkResult

    from ._http import Request
    from ._spec import Operation


M = TypeVar("M", bound=BaseModel)

#: At most this many field errors are listed in a 422.
MAX_ERRORS = 20
#: Media types an HTML form (or a no-CORS ``fetch``) can send across sites: a write
#: request with one and a body is refused, so a forged cross-site form cannot send a
#: write its fields (the JSON a client sends needs a CORS preflight). An empty body is
#: taken whatever its declared type: a bodiless cross-site request can be sent without
#: one anyway, and some servers stamp one on every request (Django's ``runserver``
#: declares ``text/plain``).
FORM_TYPES = frozenset({"application/x-www-form-urlencoded", "multipart/form-data", "text/plain"})

_JOB_ID: TypeAdapter[int] = TypeAdapter(m.JobId)


def field_errors(exc: pydantic.ValidationError, *where: str) -> list[dict[str, Any]]:
    """pydantic's errors as ``{"loc": [*where, ...], "msg": ...}`` (never the input)."""
    return [
        {"loc": [*where, *error["loc"]], "msg": error["msg"]}
        for error in exc.errors(include_url=False, include_input=False)[:MAX_ERRORS]
    ]


def _takes_many(annotation: Any) -> bool:
    """Whether a field's type is a list (possibly optional)."""
    if typing.get_origin(annotation) is list:
        return True
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return any(_takes_many(arg) for arg in typing.get_args(annotation))
    return False


def parse_query(model: type[M], query: Mapping[str, Sequence[str]]) -> M:
    """The query parameters as ``model``: a list field takes every value of its
    parameter, another field exactly one."""
    data: dict[str, Any] = {}
    errors: list[dict[str, Any]] = []
    for name, values in query.items():
        field = model.model_fields.get(name)
        if field is not None and _takes_many(field.annotation):
            data[name] = list(values)
        elif len(values) == 1:
            data[name] = values[0]
        else:
            errors.append({"loc": ["query", name], "msg": "expected one value"})
            data[name] = values[-1]
    try:
        parsed = model.model_validate(data)
    except pydantic.ValidationError as exc:
        errors += field_errors(exc, "query")
        raise InvalidRequest("invalid query parameters", errors=errors) from None
    if errors:
        raise InvalidRequest("invalid query parameters", errors=errors)
    return parsed


def parse_job_id(request: Request) -> int:
    """The ``job_id`` path parameter."""
    try:
        return _JOB_ID.validate_python(request.path_params.get("job_id"), strict=False)
    except pydantic.ValidationError as exc:
        errors = field_errors(exc, "path", "job_id")
        raise InvalidRequest("invalid job id", errors=errors) from None


def _is_json(media_type: str) -> bool:
    return media_type == "application/json" or (
        media_type.startswith("application/") and media_type.endswith("+json")
    )


def parse_body(model: type[M] | None, request: Request, *, required: bool) -> M | None:
    """The JSON body as ``model`` (its defaults when the body is empty and optional);
    None for an operation that takes no body, which then must not have one."""
    media_type = request.media_type
    has_body = bool(request.body.strip())
    if has_body and media_type in FORM_TYPES:
        raise UnsupportedMediaType(f"{media_type} is not accepted: send JSON")
    if model is None:
        if has_body:
            raise UnsupportedMediaType("this operation takes no body")
        return None
    if not has_body:
        if required:
            raise InvalidRequest(
                "a JSON body is required", errors=[{"loc": ["body"], "msg": "Field required"}]
            )
        return model()
    if media_type is None or not _is_json(media_type):
        raise UnsupportedMediaType(f"send the body as application/json, not {media_type}")
    try:
        return model.model_validate_json(request.body)
    except pydantic.ValidationError as exc:
        if any(e["type"] == "json_invalid" for e in exc.errors()):
            raise BadRequest("the body is not valid JSON") from None
        raise InvalidRequest("invalid body", errors=field_errors(exc, "body")) from None


def iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def cursor(text: str | None) -> int | None:
    """The id a keyset page starts after (the cursor is a validated id as text)."""
    return None if text is None else int(text)


#: Seconds a client is asked to wait (``Retry-After``) when the database is unreachable:
#: about how often the store tries to reconnect.
RETRY_AFTER = 2


def problem_for(exc: SkiplockError) -> Problem:
    """The problem an error of the engine's admin API answers with."""
    detail = " ".join(str(exc).split())
    if isinstance(exc, ValidationError):
        return InvalidRequest(detail)
    if isinstance(exc, JobNotFoundError):
        return NotFound(detail)
    if isinstance(exc, SelectionChangedError):
        return SelectionChanged(detail, count=exc.count, confirmed=exc.confirmed)
    if isinstance(exc, InvalidTransitionError):
        return Conflict(detail)
    if isinstance(exc, UndecodableRowError):  # a row written around the API: not transient
        return InternalError(detail)
    if isinstance(exc, DatabaseUnavailableError):  # transient: ask to come back soon
        return Unavailable(detail, headers={"Retry-After": str(RETRY_AFTER)})
    if isinstance(exc, StoreError):
        return Unavailable(detail)
    return InternalError(detail)


@attrs.frozen
class Call:
    """A request that passed the hook, parsed: its path, which job, the query and the
    body (as the operation's models)."""

    path: str
    job_id: int
    query: BaseModel
    body: BaseModel | None


def parse_call(op: Operation[Any], request: Request) -> Call:
    """``request`` parsed for ``op`` (a 4xx :class:`Problem` if it does not fit)."""
    return Call(
        path=request.path,
        job_id=parse_job_id(request) if op.job_path else 0,
        query=parse_query(op.query, request.query),
        # Writes also refuse form bodies (the cross-site form check).
        body=parse_body(op.body, request, required=op.body_required)
        if op.permission is Permission.WRITE
        else None,
    )


def typed(value: object, model: type[M]) -> M:
    assert isinstance(value, model), (value, model)
    return value


def keyset_page(jobs: JobPage, limit: int) -> tuple[Sequence[Job], int | None]:
    """The jobs a page shows from a page of up to ``limit + 1`` read, and the id the next
    page starts after (None: no next page): the extra job says there is one, and so does
    a search the store stopped early (``resume_after``: the page may show fewer than
    ``limit`` jobs, even none, and the next one continues the search)."""
    return jobs.shown(limit)


def page(jobs: JobPage, limit: int) -> dict[str, Any]:
    """A page (``JobPage``) from a page of up to ``limit + 1`` jobs."""
    shown, after = keyset_page(jobs, limit)
    return {
        "jobs": [job_json(job) for job in shown],
        "next_cursor": None if after is None else str(after),
        "partial": jobs.resume_after is not None,
    }


def skipped_json(result: BulkResult) -> list[dict[str, object]]:
    """The jobs a bulk action left alone (``SkippedJob``), by id."""
    return [skipped.to_json() for skipped in result.skipped]


def counts_json(counts: Iterable[StateCount]) -> dict[str, Any]:
    """Jobs per state, kind and tenant (``Counts``), by kind, tenant and state."""
    ordered = sorted(counts, key=lambda c: (c.kind, c.tenant is not None, c.tenant or "", c.state))
    return {
        "counts": [
            {"state": c.state.value, "kind": c.kind, "tenant": c.tenant, "count": c.count}
            for c in ordered
        ]
    }
