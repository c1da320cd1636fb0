from __future__ import annotations

from django.apps import AppConfig


class ApiConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "api"
    verbose_name = "REST API"

    def ready(self) -> None:
        from api import schema  # noqa: F401 - registers the schema extensions
        from api.authentication import bearer_token_check
        from core.bodylimit import body_limit_credential_check_register

        body_limit_credential_check_register(bearer_token_check)
