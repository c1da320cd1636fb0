from __future__ import annotations

from typing import Any

from django.contrib.auth.backends import ModelBackend
from django.http import HttpRequest


class SuperuserPasswordBackend(ModelBackend):
    """LOCAL_LOGIN=0: a password signs in superusers only (made with `manage.py createsuperuser`,
    the way in when the identity provider is down); everyone else signs in through the provider.
    Sessions of any user stay valid (get_user is ModelBackend's)."""

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> Any:
        user = super().authenticate(request, username=username, password=password, **kwargs)
        return user if user is not None and user.is_superuser else None
