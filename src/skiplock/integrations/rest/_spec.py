"""The operations of the REST API, and its OpenAPI 3.1 document built from them.

:data:`OPERATIONS` is the one description of the API: the handlers dispatch on it, the
bindings route it, and :func:`openapi_document` (served by every binding at
``<mount>/openapi.json``) and :func:`operation_openapi` (FastAPI's own document) are
generated from it and the pydantic models.
"""

from __future__ import annotations

import copy
import functools
from typing import TYPE_CHECKING, Any

import attrs
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from skiplock.core._validation import INT8_RANGE

from . import models as m
from ._auth import Permission
from ._http import JSON_TYPE, PROBLEM_TYPE
from ._problems import PROBLEMS

if TYPE_CHECKING:
    from collections.abc import Mapping

#: Version of the REST API (its document's ``info.version``), independent of skiplock's.
API_VERSION = "1.0"
_REF = "#/components/schemas/{model}"


@attrs.frozen
class Operation:
    """One operation: its stable ``id`` (the OpenAPI ``operationId``, also the route
    name in the bindings), HTTP method and path (relative to the mount point, with
    ``{job_id}``), the permission it needs, its inputs and its success response."""

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
    body_required: bool = False
    #: Statuses of the problems it may answer with, besides 401/403/500/503.
    problems: tuple[int, ...] = ()
    tag: str = "jobs"

    @property
    def job_path(self) -> bool:
        """Whether the path names a job (``{job_id}``)."""
        return "{job_id}" in self.path


_READ, _WRITE = Permission.READ, Permission.WRITE
_JOB = "/jobs/{job_id}"

OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "listJobs",
        "GET",
        "/jobs",
        _READ,
        "List jobs",
        "Jobs matching every filter, ordered by id, one keyset page: pass `next_cursor` as "
        "`cursor` (with the same filters) for the next one.",
        m.JobPage,
        query=m.JobQuery,
        problems=(422,),
    ),
    Operation(
        "createJob",
        "POST",
        "/jobs",
        _WRITE,
        "Enqueue a job",
        "Create a job (201). With an `idempotency_key` that already exists, nothing is "
        "created and the existing job is returned (200).",
        m.Job,
        status=201,
        body=m.JobCreate,
        body_required=True,
        problems=(400, 415, 422),
    ),
    Operation(
        "getJob",
        "GET",
        _JOB,
        _READ,
        "Get a job",
        "One job with its attempts, last error, payload and audit trail.",
        m.JobDetail,
        problems=(404, 422),
    ),
    Operation(
        "deleteJob",
        "DELETE",
        _JOB,
        _WRITE,
        "Delete a job",
        "Delete (discard) a job that is not running; returns it as it was, payload "
        "included (an engine with the audit trail records the discard with the payload). "
        "A running job is a 409: cancel it first.",
        m.Job,
        problems=(404, 409, 422),
    ),
    Operation(
        "retryJob",
        "POST",
        _JOB + "/retry",
        _WRITE,
        "Retry a job",
        "Replay a dead, failed or cancelled job: pending and due now, from attempt 0 "
        "unless `reset_attempts` is false. Another state is a 409.",
        m.Job,
        body=m.RetryOptions,
        problems=(400, 404, 409, 415, 422),
    ),
    Operation(
        "cancelJob",
        "POST",
        _JOB + "/cancel",
        _WRITE,
        "Cancel a job",
        "A pending job is never claimed; a running one is asked to stop at its worker's "
        "next heartbeat. A finished job is a 409.",
        m.Job,
        problems=(404, 409, 415, 422),
    ),
    Operation(
        "failJob",
        "POST",
        _JOB + "/fail",
        _WRITE,
        "Mark a job failed",
        "The manual stop: never tried again unless replayed. A succeeded or failed job is a 409.",
        m.Job,
        problems=(404, 409, 415, 422),
    ),
    Operation(
        "listDeadJobs",
        "GET",
        "/dlq",
        _READ,
        "List dead jobs (the DLQ)",
        "Dead jobs with their last error and payload, by id, one keyset page.",
        m.JobPage,
        query=m.DeadJobQuery,
        problems=(422,),
        tag="dlq",
    ),
    Operation(
        "retryDeadJobs",
        "POST",
        "/dlq/retry",
        _WRITE,
        "Retry dead jobs in bulk",
        "Replay every dead job matching the filter (every dead job without one); returns "
        "their ids.",
        m.RetriedJobs,
        body=m.RetryDead,
        body_required=True,
        problems=(400, 415, 422),
        tag="dlq",
    ),
    Operation(
        "getCounts",
        "GET",
        "/counts",
        _READ,
        "Count jobs",
        "The number of jobs per state, kind and tenant.",
        m.Counts,
        tag="queue",
    ),
    Operation(
        "listWorkers",
        "GET",
        "/workers",
        _READ,
        "List workers",
        "The registered workers, their heartbeats and running jobs.",
        m.Workers,
        query=m.WorkersQuery,
        problems=(422,),
        tag="queue",
    ),
    Operation(
        "getHealth",
        "GET",
        "/health",
        _READ,
        "Health report",
        "The health of the queue and its workers (R9). Status 200 whether healthy or not: "
        "read `healthy` and `problems`.",
        m.HealthReport,
        query=m.HealthQuery,
        problems=(422,),
        tag="queue",
    ),
)

#: The operations by id.
BY_ID: Mapping[str, Operation] = {op.id: op for op in OPERATIONS}
#: Where the document is served, relative to the mount point (read permission).
OPENAPI_PATH = "/openapi.json"
#: Problems every operation may answer with.
_ALWAYS = (401, 403, 500, 503)


def _pairs() -> list[tuple[type[BaseModel], Any]]:
    """Every model with its JSON Schema mode: inputs validate, outputs serialize."""
    pairs: list[tuple[type[BaseModel], Any]] = [(m.Problem, "serialization")]
    for op in OPERATIONS:
        pairs.append((op.response, "serialization"))
        pairs.append((op.query, "validation"))
        if op.body is not None:
            pairs.append((op.body, "validation"))
    return list(dict.fromkeys(pairs))


@functools.cache
def _definitions() -> dict[str, Any]:
    """Every model's JSON Schema by name, referencing each other as components."""
    _, top = models_json_schema(_pairs(), ref_template=_REF)
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


def _parameters(op: Operation) -> list[dict[str, Any]]:
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
    model = _definitions()[op.query.__name__]
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


def _responses(op: Operation) -> dict[str, Any]:
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


def operation_object(op: Operation) -> dict[str, Any]:
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


def operation_openapi(op: Operation) -> dict[str, Any]:
    """``op``'s parameters, request body and responses with every schema inlined: for a
    framework that generates its own document (FastAPI's ``openapi_extra``), where the
    components of this API do not exist."""
    obj = operation_object(op)
    keys = ("parameters", "requestBody", "responses")
    inlined: dict[str, Any] = _inline({key: obj[key] for key in keys if key in obj}, _definitions())
    return inlined


_DESCRIPTION = """\
The admin API of skiplock: list, inspect, create, retry, cancel, mark failed and delete
jobs; the dead-letter queue, counts, workers and health.

**Deny by default.** Every operation goes through the application's authorization hook
first; it needs the `read` or the `write` permission (named in each operation). Errors
are RFC 9457 problem details (`application/problem+json`) with a stable `type` URN.
"""


def openapi_document(base_path: str = "") -> dict[str, Any]:
    """The OpenAPI 3.1 document of the API mounted at ``base_path`` (its ``servers``
    entry; the paths are relative to it)."""
    paths: dict[str, Any] = {}
    for op in OPERATIONS:
        paths.setdefault(op.path, {})[op.method.lower()] = operation_object(op)
    queries = {op.query.__name__ for op in OPERATIONS}
    schemas = {name: s for name, s in _definitions().items() if name not in queries}
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
            ],
            "paths": paths,
            "components": {"schemas": schemas},
        }
    )
    return document
