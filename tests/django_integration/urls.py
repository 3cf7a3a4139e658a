from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from skiplock.integrations.django import urls as skiplock_urls

from .testapp import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("orders/", views.create_order),
    path("ops/api/", include(skiplock_urls.rest_api())),
    path("ops/dashboard/", include(skiplock_urls.dashboard())),
    path("ops/", include(skiplock_urls.probes())),
]
