"""One error shape for every API failure: {"error": {"code", "message", "details"}}.

DRF's exceptions, Django's Http404/PermissionDenied, the services' ApplicationError (whose
subclasses carry their own code and status) and the store's validation errors all pass through
`exception_handler`; anything else is logged and answered as a 500 in the same shape.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.http import Http404, HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions, status
from rest_framework.response import Response

from core.errors import ApplicationError
from engine.multivector import DocumentNotFoundError
from engine.multivector import ValidationError as StoreValidationError

logger = logging.getLogger(__name__)


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details if details is not None else {}}}


def _first_message(detail: Any) -> str:
    if isinstance(detail, dict):
        for field, value in detail.items():
            inner = _first_message(value)
            return inner if field == "non_field_errors" else f"{field}: {inner}"
    if isinstance(detail, list) and detail:
        return _first_message(detail[0])
    return str(detail)


def _api_exception(exc: exceptions.APIException) -> Response:
    headers = {}
    if getattr(exc, "auth_header", None):
        headers["WWW-Authenticate"] = exc.auth_header
    if getattr(exc, "wait", None):
        headers["Retry-After"] = str(max(1, int(exc.wait + 0.999)))
    if isinstance(exc.detail, dict | list):
        code = "invalid" if isinstance(exc, exceptions.ValidationError) else exc.default_code
        message = "Invalid input: " + _first_message(exc.detail)
        details = exc.detail if isinstance(exc.detail, dict) else {"errors": exc.detail}
    else:
        code, message, details = getattr(exc.detail, "code", None) or exc.default_code, str(exc.detail), {}
    return Response(error_body(str(code), message, details), status=exc.status_code, headers=headers)


def exception_handler(exc: Exception, context: dict) -> Response:
    if isinstance(exc, exceptions.APIException):
        return _api_exception(exc)
    if isinstance(exc, Http404):
        return Response(error_body("not_found", str(exc) or "Not found."), status=status.HTTP_404_NOT_FOUND)
    if isinstance(exc, PermissionDenied):
        return Response(error_body("permission_denied", str(exc) or "You may not do this."),
                        status=status.HTTP_403_FORBIDDEN)
    if isinstance(exc, ApplicationError):
        retry_after = getattr(exc, "retry_after", None)  # chat.llm.queue.QueueFull
        headers = {"Retry-After": str(retry_after)} if retry_after else None
        return Response(error_body(exc.code, exc.message, exc.details), status=exc.status, headers=headers)
    if isinstance(exc, RequestDataTooBig):
        return Response(error_body("too_large", str(exc)), status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
    if isinstance(exc, DocumentNotFoundError):
        return Response(error_body("not_found", str(exc)), status=status.HTTP_404_NOT_FOUND)
    if isinstance(exc, StoreValidationError):
        return Response(error_body("invalid", str(exc)), status=status.HTTP_400_BAD_REQUEST)
    view = context.get("view")
    logger.exception("API error in %s", type(view).__name__ if view else "?", exc_info=exc)
    return Response(error_body("internal", "Internal error; it has been logged."),
                    status=status.HTTP_500_INTERNAL_SERVER_ERROR)


@csrf_exempt  # any method: it changes nothing, and a CSRF 403 would hide the 404
def not_found(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
    """Unknown paths under /api/ answer in the API's shape, not with the HTML 404 page."""
    return JsonResponse(error_body("not_found", f"No API endpoint at {request.path}."), status=404)
