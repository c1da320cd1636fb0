"""The audit trail for staff (`accounts.audit`): filtered, newest first; anyone else 403."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.audit import ACTIONS, audit_events
from accounts.serializers import AuditEventSerializer
from api.views.base import PAGE_PARAMETERS, ApiView, errors, page_of

FILTERS = [OpenApiParameter("action", str, enum=sorted(ACTIONS), description="Only this action."),
           OpenApiParameter("actor", str, description="Part of the actor's username."),
           OpenApiParameter("since", str, description="From this day (YYYY-MM-DD)."),
           OpenApiParameter("until", str, description="To this day, inclusive (YYYY-MM-DD).")]


class AuditList(ApiView):
    @extend_schema(operation_id="audit_list", summary="The audit trail, newest first (staff)",
                   parameters=[*FILTERS, *PAGE_PARAMETERS], responses={200: page_of(AuditEventSerializer),
                                                                     **errors(400, 403)}, tags=["staff"])
    def get(self, request: Request) -> Response:
        if not request.user.is_staff:
            raise PermissionDenied("Only staff read the audit trail.")
        events = audit_events(**{name: request.query_params.get(name, "").strip()
                                 for name in ("action", "actor", "since", "until")})
        return self.paginated(events, AuditEventSerializer)
