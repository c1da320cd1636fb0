"""What every API view shares: authentication, throttling, pagination, the documented errors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, inline_serializer
from rest_framework import serializers
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api.pagination import Pagination
from api.serializers import ErrorSerializer

ERROR_DESCRIPTIONS = {
    400: "Invalid input: `details` names the fields.",
    401: "No credentials, or an invalid or revoked token.",
    403: (
        "Authenticated, but this needs write (or owner) access; or a browser request without its CSRF token."
    ),
    404: "No such object, or one you may not read (outsiders learn nothing).",
    409: "Conflicts with the current state (a build already running, a duplicate, a finished build).",
    413: "The body or upload is larger than the limit.",
    429: "Throttled, the LLM queue is full, or a daily quota is used up (`daily_quota_exceeded`): wait the "
    "`Retry-After` seconds.",
    502: "The LLM server refused the portal's credentials (`llm_unauthorized`): its API key is wrong or "
         "missing.",
    503: "A backing service (LLM server, multi-vector store) is unavailable.",
}


def errors(*codes: int) -> dict[int, OpenApiResponse]:
    """The error responses of an endpoint: 401, 404 and 429 always, plus `codes`."""
    wanted = sorted({401, 404, 429, *codes})
    return {code: OpenApiResponse(ErrorSerializer, description=ERROR_DESCRIPTIONS[code]) for code in wanted}


def page_of(serializer_class: type[serializers.Serializer]) -> serializers.Serializer:
    """The schema of a paginated list of `serializer_class` items."""
    name = serializer_class.__name__.removesuffix("Serializer")
    return inline_serializer(f"Paginated{name}List", {
        "count": serializers.IntegerField(help_text="Items in all pages."),
        "next": serializers.URLField(allow_null=True, help_text="The next page, or null."),
        "previous": serializers.URLField(allow_null=True, help_text="The previous page, or null."),
        "results": serializer_class(many=True),
    })


def id_path(name: str, what: str) -> OpenApiParameter:
    return OpenApiParameter(name, int, OpenApiParameter.PATH, description=f"The {what}'s id.")


PAGE_PARAMETERS = [
    OpenApiParameter("page", int, description="Page number, from 1."),
    OpenApiParameter("page_size", int, description="Items per page (default 50, at most 200)."),
]


class FirstRenderer(BaseContentNegotiation):
    """Always JSON (or the view's own response type): the API has one representation, so an
    unusual Accept header is no reason to fail."""

    def select_parser(self, request: Request, parsers: Sequence) -> Any:
        for parser in parsers:
            if request.content_type.split(";")[0].strip().lower() == parser.media_type:
                return parser
        return None

    def select_renderer(
        self, request: Request, renderers: Sequence, format_suffix: str | None = None
    ) -> tuple:
        return renderers[0], renderers[0].media_type


class ApiView(APIView):
    content_negotiation_class = FirstRenderer

    def paginated(self, items: Any, serializer_class: type[serializers.Serializer], **extra: Any) -> Response:
        """A page of `items`, each as `serializer_class` gives it: the class that `page_of` documents."""
        paginator = Pagination()
        page = paginator.paginate_queryset(items, self.request, view=self)
        response = paginator.get_paginated_response(serializer_class(page, many=True).data)
        response.data.update(extra)
        return response
