from __future__ import annotations

from django.contrib import admin
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse, HttpResponsePermanentRedirect
from django.templatetags.static import static
from django.urls import include, path

from accounts.oidc.views import portal_logout
from hdrag_site import monitoring
from hdrag_site.dashboard import dashboard


@login_not_required
def healthz(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok", content_type="text/plain")


@login_not_required
def favicon(request: HttpRequest) -> HttpResponse:
    """Browsers ask for /favicon.ico before (or without) reading a page's <link rel="icon">; the
    static URL is resolved per request because production's manifest exists only after collectstatic."""
    return HttpResponsePermanentRedirect(static("img/favicon.svg"))

# The admin's navigation sidebar takes a quarter of a 1280 px screen and pushes list columns off it;
# the breadcrumbs and the index page already lead everywhere.
admin.site.enable_nav_sidebar = False
admin.site.site_header = admin.site.site_title = "HdRAG administration"

urlpatterns = [
    path("", dashboard, name="home"),
    path("accounts/tokens/", include("accounts.token_urls")),
    path("accounts/audit/", include("accounts.audit_urls")),
    path("accounts/logout/", portal_logout, name="logout"),  # also ends the identity provider's session
    path("accounts/", include("django.contrib.auth.urls")),
    path("accounts/", include("accounts.oidc.urls")),
    path("api/", include(("api.urls", "api"))),
    path("admin/", admin.site.urls),
    path("corpora/", include("corpus.urls")),
    path("groups/", include("accounts.group_urls")),
    path("memory/", include("memory.urls")),
    path("chat/", include("chat.urls")),
    path("healthz", healthz, name="healthz"),
    path("healthz/dependencies", monitoring.dependencies, name="health-dependencies"),
    path("metrics", monitoring.metrics, name="metrics"),
    path("favicon.ico", favicon),
]
