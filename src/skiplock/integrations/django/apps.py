"""The ``skiplock`` Django app: migrations, read-only models, admin, management commands
and system checks (``INSTALLED_APPS = [..., "skiplock.integrations.django"]``)."""

from __future__ import annotations

from django.apps import AppConfig
from django.core import checks
from django.db.models.signals import post_migrate


class SkiplockConfig(AppConfig):
    """App label ``skiplock``."""

    name = "skiplock.integrations.django"
    label = "skiplock"
    verbose_name = "skiplock"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import _schema
        from .checks import check_backend_configured, check_mounts, check_schema_version

        checks.register(check_backend_configured)
        checks.register(check_mounts, checks.Tags.urls)
        checks.register(check_schema_version, checks.Tags.database)
        # Later skiplock versions' schema migrations, applied by every `migrate`.
        post_migrate.connect(
            _schema.upgrade_after_migrate, sender=self, dispatch_uid="skiplock-schema"
        )
