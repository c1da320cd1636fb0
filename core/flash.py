"""The pages' one way to call a service: its refusal becomes an error message, its result a success
message, and the view then redirects (Post/Redirect/Get)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from django.contrib import messages
from django.http import HttpRequest

from core.errors import ApplicationError

T = TypeVar("T")


def flash(
    request: HttpRequest, action: Callable[[], T], success: str | Callable[[T], str] | None = None
) -> T | None:
    """Run `action` (a service call). A refusal (`ApplicationError`) is shown as an error message
    and gives None; otherwise `success` (a text, or a function of the result) is shown and the
    result returned."""
    try:
        result = action()
    except ApplicationError as error:
        messages.error(request, error.message)
        return None
    if success is not None:
        messages.success(request, success(result) if callable(success) else success)
    return result
