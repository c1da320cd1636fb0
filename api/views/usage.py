"""Usage for staff (`chat.usage_report`): the numbers the usage page draws."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from api.views.base import ApiView, errors
from chat.serializers import UsageReportSerializer
from chat.usage_report import DAYS_CHOICES, usage_report
from core.errors import ApplicationError


class Usage(ApiView):
    @extend_schema(
        operation_id="usage_get",
        summary="Usage over the last days (staff)",
        parameters=[OpenApiParameter("days", int, enum=list(DAYS_CHOICES), description="Default 30.")],
        responses={200: UsageReportSerializer, **errors(400, 403)},
        tags=["staff"],
    )
    def get(self, request: Request) -> Response:
        if not request.user.is_staff:
            raise PermissionDenied("Only staff read the usage.")
        days = request.query_params.get("days", "30")
        if not days.isdigit() or int(days) not in DAYS_CHOICES:
            raise ApplicationError(
                f"days must be one of {', '.join(map(str, DAYS_CHOICES))}.", {"days": days}
            )
        return Response(UsageReportSerializer(usage_report(days=int(days))).data)
