"""The audit trail's staff page and its CSV export (`accounts.audit`); everyone else gets 403."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import render
from django.views.decorators.http import require_GET

from accounts.audit import ACTIONS, audit_events, audit_export
from core.errors import ApplicationError

PAGE_SIZE = 50
FILTERS = ("action", "actor", "since", "until")


def _events(request: HttpRequest):  # QuerySet[AuditEvent], or the filter's error
    if not request.user.is_staff:
        raise PermissionDenied("Only staff read the audit trail.")
    return audit_events(**{name: request.GET.get(name, "").strip() for name in FILTERS})


@require_GET
def audit_page(request: HttpRequest) -> HttpResponse:
    chosen = {name: request.GET.get(name, "").strip() for name in FILTERS}
    try:
        page = Paginator(_events(request), PAGE_SIZE).get_page(request.GET.get("page"))
        error = ""
    except ApplicationError as problem:
        page, error = None, problem.message
    query = "&".join(f"{name}={value}" for name, value in chosen.items() if value)
    return render(request, "accounts/audit.html", {"page": page, "error": error, "chosen": chosen,
                                                   "actions": sorted(ACTIONS.items()), "query": query},
                  status=400 if error else 200)


@require_GET
def audit_download(request: HttpRequest) -> HttpResponse:
    try:
        events = _events(request)
    except ApplicationError as problem:
        return HttpResponseBadRequest(problem.message, content_type="text/plain")
    response = HttpResponse(audit_export(events.iterator()), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="audit-trail.csv"'
    return response
