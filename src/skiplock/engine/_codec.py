"""Typed payloads (R25): objects in, JSON stored, the processor's annotated type out.

attrs classes and dataclasses go through cattrs (its JSON preset, so datetimes, enums and
nested classes work); pydantic models are recognised by duck typing (``model_dump`` /
``model_validate``) so the engine never imports pydantic. Anything else is stored and
handed over as it is.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable
from typing import Any

import attrs
import cattrs
from cattrs.preconf.json import make_converter

from skiplock.core import JSON

from ._errors import UndecodablePayloadError

_converter = make_converter()

#: Annotations that mean "give me the stored JSON as it is".
_RAW: frozenset[object] = frozenset(
    {Any, object, dict, list, str, int, float, bool, type(None), inspect.Parameter.empty}
)

Decoder = Callable[[JSON], Any]


def _is_pydantic_model(cls: object) -> bool:
    return (
        isinstance(cls, type)
        and callable(getattr(cls, "model_validate", None))
        and callable(getattr(cls, "model_dump", None))
        and hasattr(cls, "model_fields")
    )


def _is_structured(cls: object) -> bool:
    return isinstance(cls, type) and (attrs.has(cls) or dataclasses.is_dataclass(cls))


#: Types that are JSON-ready as they are (their content is validated later).
_PLAIN: frozenset[type] = frozenset({dict, list, str, int, float, bool, type(None)})


def encode(payload: object) -> JSON:
    """A JSON-ready value for ``payload``: attrs/dataclass instances and pydantic models
    are converted, everything else is returned unchanged (and validated later)."""
    cls = type(payload)
    if cls in _PLAIN:  # the common case, without the class inspection below
        return payload
    if _is_structured(cls):
        return _converter.unstructure(payload)
    if _is_pydantic_model(cls):
        return payload.model_dump(mode="json")  # type: ignore[attr-defined]
    return payload


def _raw(value: JSON) -> Any:
    return value


def decoder_for(annotation: object) -> Decoder:
    """The decoder for a processor's payload annotation (already resolved)."""
    if annotation in _RAW or typing.get_origin(annotation) is not None:
        # Generic aliases (dict[str, Any], list[int], unions) stay raw as well: the engine
        # only converts to classes it knows how to build.
        return _raw
    if _is_structured(annotation):
        cls = typing.cast("type[Any]", annotation)

        def structure(value: JSON) -> Any:
            try:
                return _converter.structure(value, cls)
            except (cattrs.BaseValidationError, ValueError, TypeError, KeyError) as exc:
                raise UndecodablePayloadError(_describe(exc, cls)) from exc

        return structure
    if _is_pydantic_model(annotation):
        model = typing.cast("Any", annotation)

        def validate(value: JSON) -> Any:
            try:
                return model.model_validate(value)
            except ValueError as exc:  # pydantic's ValidationError is a ValueError
                raise UndecodablePayloadError(f"not a valid {model.__name__}: {exc}") from exc

        return validate
    return _raw


def _describe(exc: Exception, cls: type[Any]) -> str:
    if isinstance(exc, cattrs.BaseValidationError):
        details = "; ".join(cattrs.transform_error(exc))
    else:
        details = f"{type(exc).__name__}: {exc}"
    return f"not a valid {cls.__name__}: {details}"


def payload_annotation(fn: Callable[..., Any]) -> tuple[object, int]:
    """The first parameter's resolved annotation and the number of positional parameters.

    Only that one annotation is evaluated, so ``ctx: JobContext`` may be imported under
    ``TYPE_CHECKING``. Raises TypeError when the annotation cannot be resolved.
    """
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"cannot inspect processor {fn!r}: {exc}") from None
    params = [
        p
        for p in signature.parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
    ]
    if not params:
        raise TypeError(f"processor {fn!r} must accept the payload (and optionally ctx)")
    first = params[0]
    takes_two = len(params) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in params)
    positional = 2 if takes_two else 1
    annotation = first.annotation
    if isinstance(annotation, str):
        annotation = _resolve(fn, first.name, annotation)
    return annotation, positional


def resolve_annotation(fn: Callable[..., Any], annotation: str) -> object:
    """A string annotation of ``fn`` evaluated in its module (raises if it cannot be)."""
    target = inspect.unwrap(fn)
    target = getattr(target, "__func__", target)
    globalns = getattr(target, "__globals__", {})

    def probe() -> None: ...

    probe.__annotations__ = {"it": annotation}
    return typing.get_type_hints(probe, globalns=globalns)["it"]


def _resolve(fn: Callable[..., Any], name: str, annotation: str) -> object:
    try:
        return resolve_annotation(fn, annotation)
    except Exception as exc:
        raise TypeError(
            f"cannot resolve the payload annotation {annotation!r} of processor "
            f"{getattr(fn, '__qualname__', fn)!r}: {exc}. Import that type at module "
            "level (not under TYPE_CHECKING), or annotate with dict / Any."
        ) from None
