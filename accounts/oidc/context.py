from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest


def single_sign_on(request: HttpRequest) -> dict:
    """What the login page needs to offer the provider's button."""
    return {"sso_enabled": settings.OIDC_ENABLED, "sso_provider_name": settings.OIDC_PROVIDER_NAME,
            "local_login": settings.LOCAL_LOGIN}
