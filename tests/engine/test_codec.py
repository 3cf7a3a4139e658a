"""Typed payload codec (R25): encode objects, decode by the processor's annotation."""

from __future__ import annotations

import dataclasses
import enum
from datetime import UTC, datetime
from typing import Any

import attrs
import pydantic
import pytest

from skiplock import JobContext, UndecodablePayloadError
from skiplock.engine import decoder_for, encode
from skiplock.engine._codec import payload_annotation


class Tier(enum.Enum):
    FREE = "free"
    PRO = "pro"


@attrs.frozen
class Email:
    to: str
    subject: str = ""
    tier: Tier = Tier.FREE
    sent_after: datetime | None = None


@dataclasses.dataclass(frozen=True)
class Report:
    name: str
    pages: list[int]


class Invoice(pydantic.BaseModel):
    number: int
    customer: str


def test_codec_encodes_attrs_dataclass_and_pydantic_to_json_values() -> None:
    when = datetime(2024, 5, 1, 12, tzinfo=UTC)
    assert encode(Email("a@b.c", tier=Tier.PRO, sent_after=when)) == {
        "to": "a@b.c",
        "subject": "",
        "tier": "pro",
        "sent_after": when.isoformat(),
    }
    assert encode(Report("q1", [1, 2])) == {"name": "q1", "pages": [1, 2]}
    assert encode(Invoice(number=7, customer="acme")) == {"number": 7, "customer": "acme"}
    raw = {"x": 1}
    assert encode(raw) is raw
    assert encode("text") == "text"


def test_codec_round_trips_typed_payloads() -> None:
    email = Email("a@b.c", tier=Tier.PRO, sent_after=datetime(2024, 5, 1, tzinfo=UTC))
    assert decoder_for(Email)(encode(email)) == email
    assert decoder_for(Report)(encode(Report("q1", [1]))) == Report("q1", [1])
    assert decoder_for(Invoice)({"number": "7", "customer": "acme"}) == Invoice(
        number=7, customer="acme"
    )


@pytest.mark.parametrize("annotation", [dict, str, Any, object, dict[str, Any], list[int]])
def test_codec_raw_annotations_get_the_stored_value(annotation: object) -> None:
    value = {"anything": [1, 2]}
    assert decoder_for(annotation)(value) is value


@pytest.mark.parametrize(
    ("annotation", "value", "match"),
    [
        (Email, {"subject": "no recipient"}, "Email.*to"),
        (Email, {"to": "x", "tier": "gold"}, "Email"),
        (Report, "not a mapping", "Report"),
        (Invoice, {"number": "seven", "customer": "acme"}, "(?s)Invoice.*number"),
    ],
)
def test_codec_undecodable_payload_raises_with_the_reason(
    annotation: object, value: object, match: str
) -> None:
    with pytest.raises(UndecodablePayloadError, match=match):
        decoder_for(annotation)(value)


def test_codec_reads_only_the_payload_annotation() -> None:
    def with_ctx(payload: Email, ctx: JobContext) -> None: ...

    def payload_only(payload: Report) -> None: ...

    def unannotated(payload, ctx):  # type: ignore[no-untyped-def]
        ...

    assert payload_annotation(with_ctx) == (Email, 2)
    assert payload_annotation(payload_only) == (Report, 1)
    assert payload_annotation(unannotated)[1] == 2


def test_codec_unresolvable_annotation_is_a_clear_type_error() -> None:
    def broken(payload: NotDefinedAnywhere) -> None:  # type: ignore[name-defined]  # noqa: F821
        ...

    with pytest.raises(TypeError, match="NotDefinedAnywhere"):
        payload_annotation(broken)
