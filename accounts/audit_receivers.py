"""What the audit trail hears from other libraries' signals: Django's sign-ins and failed sign-ins
(the login form and single sign-on alike), django-axes' lockouts, and the admin's log of changes to
users and groups. Connected by `AccountsConfig.ready()`."""

from __future__ import annotations

from typing import Any

from axes.signals import user_locked_out
from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.db.models.signals import post_save
from django.dispatch import receiver

from accounts.audit import audit_record

ADMIN_FLAGS = {ADDITION: "added", CHANGE: "changed", DELETION: "deleted"}
AUDITED_MODELS = {("auth", "user"), ("auth", "group"), ("accounts", "quota")}


# The views that sign a person in through the identity provider (django-allauth's callback); any
# other sign-in is the login form's (or the admin's), with a password.
SSO_VIEWS = frozenset({"openid_connect_callback"})


@receiver(user_logged_in, dispatch_uid="audit_sign_in")
def _signed_in(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    match = getattr(request, "resolver_match", None)
    method = "single sign-on" if match is not None and match.url_name in SSO_VIEWS else "password"
    audit_record(action="sign_in", actor=user, request=request, target=user.get_username(), method=method)


@receiver(user_login_failed, dispatch_uid="audit_sign_in_failed")
def _sign_in_failed(sender: Any, credentials: dict, request: Any = None, **kwargs: Any) -> None:
    audit_record(action="sign_in_failed", request=request, target=str(credentials.get("username", ""))[:150])


@receiver(user_locked_out, dispatch_uid="audit_locked_out")
def _locked_out(sender: Any, request: Any, username: str | None = None, **kwargs: Any) -> None:
    audit_record(action="locked_out", request=request, target=str(username or "")[:150])


@receiver(post_save, sender=LogEntry, dispatch_uid="audit_admin_change")
def _admin_changed(sender: Any, instance: LogEntry, created: bool, **kwargs: Any) -> None:
    kind = instance.content_type
    if not created or kind is None or (kind.app_label, kind.model) not in AUDITED_MODELS:
        return
    audit_record(action="admin_change", actor=instance.user, target=f"{kind.model}: {instance.object_repr}",
                 change=ADMIN_FLAGS.get(instance.action_flag, str(instance.action_flag)),
                 message=instance.get_change_message())
