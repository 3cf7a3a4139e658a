"""Install skiplock's schema (the SQL the package ships) on the database being migrated;
reversed, drop it (``_schema.forwards``/``backwards``).

The models are unmanaged views of skiplock's tables: their operations here only record
them in Django's migration state (``db_table`` follows the configured schema, as the
models do), and create nothing.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import migrations, models

from skiplock.integrations.django import _schema
from skiplock.integrations.django._schema import table
from skiplock.integrations.django.models import TextArrayField


class Migration(migrations.Migration):
    initial = True
    dependencies: ClassVar[list[tuple[str, str]]] = []
    operations: ClassVar[list[Any]] = [
        migrations.RunPython(_schema.forwards, _schema.backwards, elidable=False),
        migrations.CreateModel(
            name="Job",
            fields=[
                ("id", models.BigIntegerField(primary_key=True, serialize=False)),
                ("kind", models.TextField()),
                (
                    "tenant",
                    models.TextField(
                        db_column="tenant_id", null=True, verbose_name="tenant (queue)"
                    ),
                ),
                (
                    "state",
                    models.TextField(
                        choices=[
                            ("pending", "pending"),
                            ("running", "running"),
                            ("succeeded", "succeeded"),
                            ("failed", "failed"),
                            ("dead", "dead"),
                            ("cancelled", "cancelled"),
                        ],
                        db_column="status",
                    ),
                ),
                ("priority", models.SmallIntegerField()),
                ("payload", models.JSONField(null=True)),
                ("attempts", models.IntegerField()),
                ("max_attempts", models.IntegerField()),
                ("available_at", models.DateTimeField()),
                ("created_at", models.DateTimeField()),
                ("claimed_at", models.DateTimeField(null=True)),
                ("claimed_by", models.TextField(null=True)),
                ("completed_at", models.DateTimeField(null=True)),
                ("last_error", models.TextField(null=True)),
                ("idempotency_key", models.TextField(null=True)),
            ],
            options={
                "verbose_name": "job",
                "db_table": table("jobs"),
                "ordering": ["-id"],
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="Worker",
            fields=[
                ("id", models.TextField(primary_key=True, serialize=False)),
                ("host", models.TextField()),
                ("pid", models.IntegerField()),
                ("started_at", models.DateTimeField()),
                ("heartbeat_at", models.DateTimeField()),
                ("kinds", TextArrayField(null=True)),
                ("tenants", TextArrayField(null=True, verbose_name="tenants (queues)")),
            ],
            options={
                "verbose_name": "worker",
                "db_table": table("workers"),
                "ordering": ["id"],
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="AuditEvent",
            fields=[
                ("id", models.BigIntegerField(primary_key=True, serialize=False)),
                ("at", models.DateTimeField()),
                ("job_id", models.BigIntegerField(null=True)),
                ("action", models.TextField()),
                ("actor", models.TextField(null=True)),
                ("details", models.JSONField(null=True)),
            ],
            options={
                "verbose_name": "audit event",
                "db_table": table("audit"),
                "ordering": ["-id"],
                "managed": False,
            },
        ),
    ]
