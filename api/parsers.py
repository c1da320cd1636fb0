"""JSON bodies up to `API_MAX_JSON_BYTES` (413 beyond); read with a bound, whatever the
Content-Length says, so a lying or missing header cannot make the parser hold more."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from rest_framework import exceptions, status
from rest_framework.parsers import JSONParser


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."
    default_code = "too_large"


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


class LimitedJSONParser(JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: dict | None = None) -> Any:
        limit = settings.API_MAX_JSON_BYTES
        declared = (parser_context or {}).get("request")
        length = declared.META.get("CONTENT_LENGTH") if declared is not None else None
        if length and str(length).isdigit() and int(length) > limit:
            raise PayloadTooLarge(f"The JSON body is larger than the limit of {limit} bytes.")
        body = stream.read(limit + 1)
        if len(body) > limit:
            raise PayloadTooLarge(f"The JSON body is larger than the limit of {limit} bytes.")
        try:
            return json.loads(body.decode(settings.DEFAULT_CHARSET), parse_constant=_reject_constant)
        except (ValueError, UnicodeDecodeError) as error:
            raise exceptions.ParseError(f"JSON parse error: {error}") from None
