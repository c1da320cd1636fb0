from __future__ import annotations

from django.apps import AppConfig


class AccountsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "accounts"
    verbose_name = "Accounts"

    def ready(self) -> None:
        from accounts import audit_receivers  # noqa: F401 - sign-ins, lockouts and admin changes into the audit trail
        from accounts.oidc import signals  # noqa: F401 - connects the sign-in and deactivation receivers
