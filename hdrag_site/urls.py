from __future__ import annotations

from django.contrib import admin
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse, HttpResponsePermanentRedirect
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView


@login_not_required
def healthz(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok", content_type="text/plain")


@login_not_required
def favicon(request: HttpRequest) -> HttpResponse:
    """Browsers ask for /favicon.ico before (or without) reading a page's <link rel="icon">; the
    static URL is resolved per request because production's manifest exists only after collectstatic."""
    return HttpResponsePermanentRedirect(static("img/favicon.svg"))


urlpatterns = [
    path("", RedirectView.as_view(pattern_name="chat:index", permanent=False), name="home"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("admin/", admin.site.urls),
    path("corpora/", include("corpus.urls")),
    path("memory/", include("memory.urls")),
    path("chat/", include("chat.urls")),
    path("healthz", healthz, name="healthz"),
    path("favicon.ico", favicon),
]
