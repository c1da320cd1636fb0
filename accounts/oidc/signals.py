"""Receivers: groups and staff status at every sign-in through the provider; sockets closed when a
person is deactivated (API tokens stop by themselves: accounts.services.tokens reads is_active per
request)."""

from __future__ import annotations

from typing import Any

from allauth.account.signals import user_logged_in
from allauth.socialaccount.models import SocialLogin
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models.signals import post_save
from django.dispatch import receiver

from accounts.oidc.claims import claim_groups, claims_merged
from accounts.oidc.groups import user_groups_sync, user_staff_sync
from core.sockets import user_sockets_close


@receiver(user_logged_in)
def groups_from_claims(sender: Any, request: Any, user: Any, sociallogin: SocialLogin | None = None,
                       **kwargs: Any) -> None:
    if sociallogin is None:
        return
    names = claim_groups(claims_merged(sociallogin.account.extra_data), settings.OIDC_GROUPS_CLAIM)
    user_groups_sync(user=user, names=names, create=settings.OIDC_CREATE_GROUPS)
    user_staff_sync(user=user, names=names, admin_groups=settings.OIDC_ADMIN_GROUPS)


@receiver(post_save, sender=get_user_model())
def sockets_closed_on_deactivation(sender: Any, instance: Any, created: bool, **kwargs: Any) -> None:
    if not created and not instance.is_active:
        user_sockets_close(user_id=instance.pk)
