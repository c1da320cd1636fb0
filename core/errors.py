"""The one application error: a message for people and details for programs.

Services raise it (or a subclass) for anything the caller did wrong or cannot do now; views show
the message, the API maps it to one JSON error shape (`api.errors`): `code` and `status` say how a
program should read it (a subclass overrides them: a conflict is 409, an unavailable store 503).
"""

from __future__ import annotations

from typing import Any


class ApplicationError(Exception):
    code = "invalid"
    status = 400

    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}


class ConflictError(ApplicationError):
    """The request is valid but clashes with the current state (a running build, a taken name)."""

    code = "conflict"
    status = 409


class CredentialsLockedOut(Exception):
    """The account or the client address is locked out: the check is refused, and not counted
    (raised by `accounts.throttle`, answered 429 by the API and the body limit)."""

    def __init__(self) -> None:
        from django.conf import settings

        self.retry_after = int(settings.AXES_COOLOFF_TIME.total_seconds())  # at most this long
        super().__init__("Too many failed credential checks for this account or from this address.")
