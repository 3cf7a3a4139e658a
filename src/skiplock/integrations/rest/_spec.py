"""What an operation of the REST API is, and the OpenAPI 3.1 document of a table of them.

The table itself, :data:`~skiplock.integrations.rest.OPERATIONS` (with each operation's
handler), is in ``_operations_async.py``: the dispatch, the routes every binding mounts,
:func:`openapi_of` (the document served at ``<mount>/openapi.json``) and
:func:`operation_openapi` (FastAPI's own document) all come from it and the pydantic
models.
"""

from __future__ import annotations

import copy
import functools
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import attrs
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from skiplock.core.rules import INT8_RANGE

from . import models as m
from ._auth import Permission
from ._http import JSON_TYPE, PROBLEM_TYPE
from ._problems import PROBLEMS

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

H = TypeVar("H")

#: Version of the REST API (its document's ``info.version``), independent of skiplock's.
API_VERSION = "1.0"
_REF = "#/components/schemas/{model}"


@attrs.frozen
class Operation(Generic[H]):
    """One operation: its stable ``id`` (the OpenAPI ``operationId``, also the route
    name in the bindings), HTTP method and path (relative to the mount point, with
    ``{job_id}``), the permission it needs, its inputs, its success response and the
    ``handler`` that answers it (an async one in the table of the async API, a sync one
    in the sync API's). Whether a body is required and the problems it may answer with
    follow from the rest unless given."""

    id: str
    method: str
    path: str
    permission: Permission
    summary: str
    description: str
    response: type[BaseModel]
    status: int = 200
    query: type[BaseModel] = m.NoQuery
    body: type[BaseModel] | None = None
    #: Whether a request must have a body (by default: where the operation takes one).
    body_required: bool = attrs.field(
        default=attrs.Factory(lambda self: self.body is not None, takes_self=True)
    )
    #: Whether it answers 404 when what it names is not there (a job path always may).
    not_found: bool = False
    #: Statuses of the problems it may answer with, besides 401/403/500/503 (by default
    #: what its method, path, query and body allow: :func:`problems_of`).
    problems: tuple[int, ...] = attrs.field(
        default=attrs.Factory(lambda self: problems_of(self), takes_self=True)
    )
    tag: str = "jobs"
    handler: H = attrs.field(kw_only=True)

    @property
    def job_path(self) -> bool:
        """Whether the path names a job (``{job_id}``)."""
        return "{job_id}" in self.path


def problems_of(op: Operation[Any]) -> tuple[int, ...]:
    """The problems ``op`` may answer with besides 401/403/500/503: 400 with a body
    (not JSON), 404 on a job path or with ``not_found``, 409 when it changes a job, 415
    for a POST (a body that is not JSON), 422 with any input (path, query or body)."""
    takes_input = op.job_path or op.body is not None or op.query is not m.NoQuery
    rules = {
        400: op.body is not None,
        404: op.job_path or op.not_found,
        409: op.job_path and op.method != "GET",
        415: op.method == "POST",
        422: takes_input,
    }
    return tuple(status for status, applies in rules.items() if applies)


#: Where the document is served, relative to the mount point (read permission).
OPENAPI_PATH = "/openapi.json"
#: Problems every operation may answer with.
_ALWAYS = (401, 403, 500, 503)


def _pairs(operations: Sequence[Operation[Any]]) -> list[tuple[type[BaseModel], Any]]:
    """Every model with its JSON Schema mode: inputs validate, outputs serialize."""
    pairs: list[tuple[type[BaseModel], Any]] = [(m.Problem, "serialization")]
    for op in operations:
        pairs.append((op.response, "serialization"))
        pairs.append((op.query, "validation"))
        if op.body is not None:
            pairs.append((op.body, "validation"))
    return list(dict.fromkeys(pairs))


@functools.cache
def _definitions(operations: tuple[Operation[Any], ...]) -> dict[str, Any]:
    """The JSON Schema of every model of ``operations`` by name, referencing each other
    as components."""
    _, top = models_json_schema(_pairs(operations), ref_template=_REF)
    return dict(top.get("$defs", {}))


def _ref(model: type[BaseModel]) -> dict[str, Any]:
    return {"$ref": _REF.format(model=model.__name__)}


def _without_null(schema: dict[str, Any]) -> dict[str, Any]:
    """A parameter's schema without the ``null`` an optional field allows (a query
    parameter is absent, never null) and without its null default."""
    schema = dict(schema)
    options = schema.pop("anyOf", None)
    if options is not None:
        kept = [option for option in options if option != {"type": "null"}]
        if len(kept) == 1:
            schema = {**kept[0], **schema}
        else:
            schema["anyOf"] = kept
    if schema.get("default", ...) is None:
        del schema["default"]
    return schema


def _parameters(op: Operation[Any]) -> list[dict[str, Any]]:
    parameters: list[dict[str, Any]] = []
    if op.job_path:
        parameters.append(
            {
                "name": "job_id",
                "in": "path",
                "required": True,
                "description": "The job's id.",
                "schema": {"type": "integer", "minimum": 1, "maximum": INT8_RANGE[1]},
            }
        )
    model = _definitions((op,))[op.query.__name__]
    required = set(model.get("required", ()))
    for name, field in model.get("properties", {}).items():
        schema = _without_null(field)
        schema.pop("title", None)
        parameter: dict[str, Any] = {"name": name, "in": "query", "required": name in required}
        description = schema.pop("description", None)
        if description is not None:
            parameter["description"] = description
        parameter["schema"] = schema
        if schema.get("type") == "array":
            parameter |= {"style": "form", "explode": True}
        parameters.append(parameter)
    return parameters


def _responses(op: Operation[Any]) -> dict[str, Any]:
    success = {"content": {JSON_TYPE: {"schema": _ref(op.response)}}}
    responses: dict[str, Any] = {str(op.status): {"description": op.summary, **success}}
    if op.status == 201:
        responses["201"]["headers"] = {
            "Location": {"description": "The job's URL.", "schema": {"type": "string"}}
        }
        responses["200"] = {"description": "The job with this idempotency key", **success}
    for status in sorted(set(op.problems) | set(_ALWAYS)):
        problem: dict[str, Any] = {
            "description": PROBLEMS[status].title,
            "content": {PROBLEM_TYPE: {"schema": _ref(m.Problem)}},
        }
        if status == 401:
            problem["headers"] = {
                "WWW-Authenticate": {
                    "description": "The challenge of the authorization hook.",
                    "schema": {"type": "string"},
                }
            }
        responses[str(status)] = problem
    return dict(sorted(responses.items()))


def operation_object(op: Operation[Any]) -> dict[str, Any]:
    """The OpenAPI operation object of ``op`` (schemas as component references)."""
    obj: dict[str, Any] = {
        "operationId": op.id,
        "summary": op.summary,
        "description": f"{op.description}\n\nPermission: `{op.permission.value}`.",
        "tags": [op.tag],
    }
    parameters = _parameters(op)
    if parameters:
        obj["parameters"] = parameters
    if op.body is not None:
        obj["requestBody"] = {
            "required": op.body_required,
            "content": {JSON_TYPE: {"schema": _ref(op.body)}},
        }
    obj["responses"] = _responses(op)
    return obj


def _inline(value: Any, definitions: Mapping[str, Any]) -> Any:
    """``value`` with every component reference replaced by the schema it names."""
    if isinstance(value, list):
        return [_inline(item, definitions) for item in value]
    if not isinstance(value, dict):
        return value
    ref = value.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
        target = definitions[ref.rpartition("/")[2]]
        siblings = {k: v for k, v in value.items() if k != "$ref"}
        return _inline({**target, **siblings}, definitions)
    return {key: _inline(item, definitions) for key, item in value.items()}


def operation_openapi(op: Operation[Any]) -> dict[str, Any]:
    """``op``'s parameters, request body and responses with every schema inlined: for a
    framework that generates its own document (FastAPI's ``openapi_extra``), where the
    components of this API do not exist."""
    obj = operation_object(op)
    keys = ("parameters", "requestBody", "responses")
    described = {key: obj[key] for key in keys if key in obj}
    inlined: dict[str, Any] = _inline(described, _definitions((op,)))
    return inlined


_DESCRIPTION = """\
The admin API of skiplock: list, inspect, create, retry, cancel, mark failed and delete
jobs; the dead-letter queue, counts, workers and health.

**Deny by default.** Every operation goes through the application's authorization hook
first; it needs the `read` or the `write` permission (named in each operation). Errors
are RFC 9457 problem details (`application/problem+json`) with a stable `type` URN.
"""


def openapi_of(operations: Sequence[Operation[Any]], base_path: str = "") -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``operations`` mounted at ``base_path`` (its
    ``servers`` entry; the paths are relative to it)."""
    paths: dict[str, Any] = {}
    for op in operations:
        paths.setdefault(op.path, {})[op.method.lower()] = operation_object(op)
    queries = {op.query.__name__ for op in operations}
    definitions = _definitions(tuple(operations))
    schemas = {name: s for name, s in definitions.items() if name not in queries}
    document: dict[str, Any] = copy.deepcopy(
        {
            "openapi": "3.1.0",
            "info": {
                "title": "skiplock REST API",
                "version": API_VERSION,
                "description": _DESCRIPTION,
            },
            "servers": [{"url": base_path or "/"}],
            "tags": [
                {"name": "jobs", "description": "Jobs: list, read, create and change."},
                {"name": "dlq", "description": "The dead-letter queue."},
                {"name": "queue", "description": "Counts, workers and health."},
                {
                    "name": "controls",
                    "description": "Pauses and rate limits set at run time.",
                },
            ],
            "paths": paths,
            "components": {"schemas": schemas},
        }
    )
    return document
