"""The provider's sign-in and callback (allauth's, keeping the raw ID token for logout), the logout
that ends the provider's session too, and the pages allauth redirects to by name."""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlencode

import requests
from allauth.socialaccount.models import SocialApp, SocialToken
from allauth.socialaccount.providers.oauth2.views import OAuth2CallbackView, OAuth2LoginView
from allauth.socialaccount.providers.openid_connect.views import OpenIDConnectOAuth2Adapter
from django.conf import settings
from django.contrib.auth import logout
from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.views import LogoutView
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import resolve_url
from django.views.decorators.http import require_POST

from accounts.oidc import PROVIDER_ID
from accounts.oidc.adapter import refusal_page

logger = logging.getLogger(__name__)
ID_TOKEN_SESSION_KEY = "oidc_id_token"


class IdTokenKeepingAdapter(OpenIDConnectOAuth2Adapter):
    """allauth's OpenID Connect adapter, which also keeps the raw ID token of this sign-in in the
    session: RP-initiated logout sends it back as `id_token_hint` (allauth stores only the access
    and refresh tokens). The session is cycled, not emptied, at login, so the key survives it."""

    def complete_login(self, request: HttpRequest, app: SocialApp, token: SocialToken, **kwargs: Any) -> Any:
        login = super().complete_login(request, app, token, **kwargs)
        id_token = (kwargs.get("response") or {}).get("id_token")
        if id_token:
            request.session[ID_TOKEN_SESSION_KEY] = id_token
        return login


@login_not_required
def sso_login(request: HttpRequest, provider_id: str) -> HttpResponse:
    try:
        return OAuth2LoginView.adapter_view(IdTokenKeepingAdapter(request, provider_id))(request)
    except SocialApp.DoesNotExist:
        raise Http404("no such identity provider") from None


@login_not_required
def sso_callback(request: HttpRequest, provider_id: str) -> HttpResponse:
    try:
        return OAuth2CallbackView.adapter_view(IdTokenKeepingAdapter(request, provider_id))(request)
    except SocialApp.DoesNotExist:
        raise Http404("no such identity provider") from None


def _end_session_url(request: HttpRequest, id_token: str) -> str | None:
    """The provider's end_session_endpoint with the ID token and the way back to the login page;
    None when the provider has none or cannot be reached (the portal's own logout still happened)."""
    try:
        config = IdTokenKeepingAdapter(request, PROVIDER_ID).openid_config
    except (requests.RequestException, ValueError, SocialApp.DoesNotExist):
        logger.warning("logout: the identity provider's configuration could not be read", exc_info=True)
        return None
    endpoint = config.get("end_session_endpoint")
    if not endpoint:
        return None
    query = urlencode({"id_token_hint": id_token, "client_id": settings.OIDC_CLIENT_ID,
                       "post_logout_redirect_uri": request.build_absolute_uri(resolve_url("login"))})
    return f"{endpoint}{'&' if '?' in endpoint else '?'}{query}"


@require_POST
@login_not_required
def portal_logout(request: HttpRequest) -> HttpResponse:
    """Ends the portal session; after a sign-in through the provider, sends the browser to end the
    provider's session too (else the next "Sign in with" would pass straight through)."""
    id_token = request.session.get(ID_TOKEN_SESSION_KEY)
    if not id_token or not settings.OIDC_ENABLED:
        return LogoutView.as_view()(request)
    logout(request)
    return HttpResponseRedirect(
        _end_session_url(request, id_token) or resolve_url(settings.LOGOUT_REDIRECT_URL)
    )


@login_not_required
def account_inactive(request: HttpRequest) -> HttpResponse:
    return refusal_page(request, "Your account here is deactivated. Ask an administrator of this portal.")
