from __future__ import annotations

from django.db import models


class Order(models.Model):
    """A row a view creates in the same transaction as its task's job."""

    email: models.TextField[str, str] = models.TextField()
    confirmed: models.BooleanField[bool, bool] = models.BooleanField(default=False)


class Attempt(models.Model):
    """One run of a test task, written by the task itself (the worker's own connection)."""

    key: models.TextField[str, str] = models.TextField()
    note: models.TextField[str, str] = models.TextField(default="")
