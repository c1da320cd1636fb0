"""Who may sign in through the provider: allauth's documented adapter hooks, configured by the
OIDC_* settings (docs/single-sign-on.md)."""

from __future__ import annotations

import logging
from typing import Any

from allauth.account.adapter import DefaultAccountAdapter
from allauth.core.exceptions import ImmediateHttpResponse
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter
from allauth.socialaccount.models import SocialLogin
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from accounts.audit import audit_record
from accounts.oidc.claims import claim_email_verified, claims_merged, sign_in_refusal

logger = logging.getLogger(__name__)


def refusal_page(request: HttpRequest, reason: str, *, status: int = 403) -> HttpResponse:
    return render(request, "accounts/sso_refused.html",
                  {"reason": reason, "provider_name": settings.OIDC_PROVIDER_NAME}, status=status)


class PortalAccountAdapter(DefaultAccountAdapter):
    """allauth's account side: local accounts are made by an admin, never signed up here."""

    def is_open_for_signup(self, request: HttpRequest) -> bool:
        return False

    def respond_user_inactive(self, request: HttpRequest, user: AbstractUser) -> HttpResponse:
        return refusal_page(request, "Your account here is deactivated. Ask an administrator of this portal.")


class PortalSocialAccountAdapter(DefaultSocialAccountAdapter):
    def is_open_for_signup(self, request: HttpRequest, sociallogin: SocialLogin) -> bool:
        return settings.OIDC_SIGNUP

    def authenticate_by_email(self, sociallogin: SocialLogin) -> tuple[AbstractUser, str] | None:
        """A first sign-in joins the local account of the same email only when the provider says the
        address is verified (or sends no `email_verified` and OIDC_TRUST_EMAIL is on): anyone can
        put any address on an account at many providers. Superusers are never joined by email;
        they are the way in when the provider is down."""
        claims = claims_merged(sociallogin.account.extra_data)
        email = str(claims.get("email") or "").strip()
        verified = claim_email_verified(claims)
        if not email or not (verified or (verified is None and settings.OIDC_TRUST_EMAIL)):
            return None
        users = list(get_user_model().objects.filter(email__iexact=email, is_superuser=False)[:2])
        if len(users) != 1:
            return None  # none, or ambiguous: never guess which person it is
        return users[0], email

    def pre_social_login(self, request: HttpRequest, sociallogin: SocialLogin) -> None:
        claims = claims_merged(sociallogin.account.extra_data)
        reason = sign_in_refusal(
            claims,
            allowed_domains=settings.OIDC_ALLOWED_DOMAINS,
            blocked_groups=settings.OIDC_BLOCKED_GROUPS,
            groups_claim=settings.OIDC_GROUPS_CLAIM,
        )
        user = sociallogin.user
        if reason is not None:
            if user is not None and user.pk and user.is_active and sociallogin.is_existing:
                # Refused now: their tokens and sockets stop too (accounts.oidc.signals).
                user.is_active = False
                user.save(update_fields=["is_active"])
                audit_record(action="deactivated", request=request, target=user.get_username(), reason=reason)
                logger.warning("sign-in of %s refused, account deactivated: %s", user.get_username(), reason)
            raise ImmediateHttpResponse(refusal_page(request, reason))
        if not sociallogin.is_existing:
            self._refuse_unverified_email_match(request, claims)

    def _refuse_unverified_email_match(self, request: HttpRequest, claims: dict[str, Any]) -> None:
        """A new identity whose email an existing account already has, unverified: not joined (see
        authenticate_by_email), and not made a second account of the same address either."""
        email = str(claims.get("email") or "").strip()
        if email and get_user_model().objects.filter(email__iexact=email).exists():
            raise ImmediateHttpResponse(refusal_page(
                request, f"An account with the email address {email} already exists here, and "
                         f"{settings.OIDC_PROVIDER_NAME} did not confirm that the address is yours. "
                         "Ask an administrator to link your accounts."))
