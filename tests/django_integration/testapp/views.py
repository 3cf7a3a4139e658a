"""A view that writes a row and enqueues a task in one ``atomic()`` block."""

from __future__ import annotations

from django.db import transaction
from django.http import HttpRequest, JsonResponse

from .models import Order
from .tasks import confirm_order


class Refused(Exception):
    """Raised after the enqueue to roll the block back."""


def create_order(request: HttpRequest) -> JsonResponse:
    with transaction.atomic():
        order = Order.objects.create(email=request.POST["email"])
        result = confirm_order.enqueue(order.pk)
        if request.POST.get("fail"):
            raise Refused("rolled back after the enqueue")
    return JsonResponse({"order": order.pk, "task": result.id})
