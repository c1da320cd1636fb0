from __future__ import annotations

from django.urls import path

from accounts import audit_views

app_name = "audit"
urlpatterns = [
    path("", audit_views.audit_page, name="list"),
    path("export.csv", audit_views.audit_download, name="export"),
]
