"""The home page: your corpora with their index state, recent conversations, and the first steps
for someone who has none yet."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from accounts.services.groups import groups_for_user
from chat.llm.clients import server_pool
from chat.selectors import conversations_for_user
from corpus.selectors import corpus_list_for_user

RECENT_CONVERSATIONS = 8
DASHBOARD_CORPORA = 12


@require_GET
def dashboard(request: HttpRequest) -> HttpResponse:
    corpora = list(corpus_list_for_user(request.user).prefetch_related("builds")[:DASHBOARD_CORPORA])
    for corpus in corpora:
        builds = sorted(corpus.builds.all(), key=lambda b: (b.created, b.pk), reverse=True)
        corpus.last_build = builds[0] if builds else None
    conversations = list(
        conversations_for_user(user=request.user).order_by("-updated")[:RECENT_CONVERSATIONS]
    )
    context = {
        "corpora": corpora, "conversations": conversations,
        "own_count": sum(1 for c in corpora if c.owner_id == request.user.pk),
        "searchable": any(c.active_build_id for c in corpora),
        "group_count": groups_for_user(request.user).count(),
        # Staff see the LLM servers and which are up (URLs without credentials, never a key).
        "llm_servers": server_pool().status() if request.user.is_staff else None,
    }
    return render(request, "dashboard.html", context)
