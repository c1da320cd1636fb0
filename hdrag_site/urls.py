from __future__ import annotations

from django.contrib import admin
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse
from django.urls import include, path
from django.views.generic import RedirectView


@login_not_required
def healthz(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok", content_type="text/plain")


urlpatterns = [
    path("", RedirectView.as_view(pattern_name="chat:index", permanent=False), name="home"),
    path("accounts/tokens/", include("api.token_urls")),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/", include(("api.urls", "api"))),
    path("admin/", admin.site.urls),
    path("corpora/", include("corpus.urls")),
    path("memory/", include("memory.urls")),
    path("chat/", include("chat.urls")),
    path("healthz", healthz, name="healthz"),
]
