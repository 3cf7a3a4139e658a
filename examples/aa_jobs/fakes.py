"""In-process stand-ins for the outside world: an e-mail provider, a webhook consumer and
a virus scanner, each with a switch an operator (or a test) flips to break it."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from typing import Literal

Mode = Literal["ok", "fail", "stall"]


class OutsideError(Exception):
    """The outside service refused the request (a failed attempt: retried, then dead)."""


class _Switch:
    """``ok`` answers, ``fail`` raises, ``stall`` hangs until the switch changes (the
    kind's timeout ends the attempt first)."""

    def __init__(self) -> None:
        self.mode: Mode = "ok"
        self._changed = asyncio.Event()

    def set_mode(self, mode: Mode) -> None:
        self.mode = mode
        self._changed.set()
        self._changed = asyncio.Event()

    async def gate(self, name: str) -> None:
        while self.mode == "stall":
            await self._changed.wait()
        if self.mode == "fail":
            raise OutsideError(f"{name} is unavailable (switch: fail)")


class FakeEmailProvider(_Switch):
    """A provider that deduplicates by the caller's reference, as real ones do with an
    idempotency key: asked again for a reference it has sent, it answers with the first
    message id and sends nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.message_ids: dict[str, str] = {}
        self.delivered: Counter[str] = Counter()  # reference -> e-mails really sent

    async def send(self, recipient: str, template: str, *, reference: str) -> str:
        self.calls += 1
        await self.gate("the e-mail provider")
        if reference not in self.message_ids:
            self.message_ids[reference] = f"msg-{uuid.uuid4().hex}"
            self.delivered[reference] += 1
        return self.message_ids[reference]


class FakeWebhookConsumer(_Switch):
    """An external consumer of outbox events; counts each event it accepted."""

    def __init__(self) -> None:
        super().__init__()
        self.received: Counter[int] = Counter()  # event id -> deliveries accepted

    async def deliver(self, event_id: int, topic: str, body: object) -> None:
        await self.gate("the webhook consumer")
        self.received[event_id] += 1


class FakeScanner(_Switch):
    """A slow virus scanner: ``seconds`` per file; ``EICAR`` in the content is a virus."""

    def __init__(self, seconds: float = 0.05) -> None:
        super().__init__()
        self.seconds = seconds

    async def scan(self, content: bytes) -> Literal["clean", "infected"]:
        await self.gate("the virus scanner")
        await asyncio.sleep(self.seconds)
        return "infected" if b"EICAR" in content else "clean"
