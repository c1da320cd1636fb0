"""Accounts' own rows: API tokens (named, per user, stored as a SHA-256 hash; the secret is shown
once, at creation) and who manages a group."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models
from django.utils import timezone


class ApiToken(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    # The secret has 256 random bits, so a plain (unsalted) SHA-256 cannot be brute-forced and can
    # be looked up by equality in one indexed query per request.
    key_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(
        max_length=16, help_text="The token's first characters, to recognise it in lists."
    )
    created = models.DateTimeField(auto_now_add=True)
    last_used = models.DateTimeField(null=True, blank=True)
    revoked = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "api_apitoken"  # the table it was created as, when tokens were the API's
        ordering = ["-created", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked is None


class GroupManager(models.Model):
    """A user who may add and remove the members of a group (its creator, or one the admin named).

    Groups are Django's own; this row is what lets people other than staff run them."""

    group = models.ForeignKey(Group, on_delete=models.CASCADE, related_name="managers")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="managed_groups"
    )

    class Meta:
        db_table = "corpus_groupmanager"  # the table it was created as, when groups were corpus's
        constraints = [models.UniqueConstraint(fields=["group", "user"], name="groupmanager_unique")]

    def __str__(self) -> str:
        return f"{self.user} manages {self.group}"


class ManagedGroup(models.Model):
    """Marks a group whose memberships the identity provider keeps (accounts.oidc.groups): at each
    sign-in a person is added to the managed groups their groups claim names and removed from the
    others. Groups without this mark are made by hand and never touched by a sign-in."""

    group = models.OneToOneField(Group, on_delete=models.CASCADE, primary_key=True, related_name="managed")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "group managed by the identity provider"

    def __str__(self) -> str:
        return f"{self.group.name} (identity provider)"


class Quota(models.Model):
    """Daily limits of one person or one group (`accounts.quotas`); a blank limit: the next rule's
    (a person's own, then the most generous of their groups', then the settings' default)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE,
                                related_name="quota")
    group = models.OneToOneField(Group, null=True, blank=True, on_delete=models.CASCADE, related_name="quota")
    questions_per_day = models.PositiveIntegerField(null=True, blank=True,
                                                    help_text="Chat turns a day, on every surface (0: none).")
    tokens_per_day = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="LLM tokens a day, prompt and answer (0: none)."
    )
    upload_bytes_per_day = models.PositiveBigIntegerField(null=True, blank=True,
                                                          help_text="Bytes of uploads a day (0: none).")

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(user__isnull=True) ^ models.Q(group__isnull=True),
                name="quota_one_person_or_group",
            )
        ]

    def __str__(self) -> str:
        return f"quota of {self.user or self.group}"


class AuditEvent(models.Model):
    """Who did what, when, from which address (`accounts.audit`). Append-only: a row is never changed,
    and none is deleted but by the retention (`audit_prune`, `AUDIT_RETENTION_DAYS`)."""

    created = models.DateTimeField(default=timezone.now, db_index=True, editable=False)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="+", editable=False)
    actor_name = models.CharField(max_length=150, blank=True, editable=False,
                                  help_text="The actor's username then (kept when the account is gone).")
    action = models.CharField(max_length=40, db_index=True, editable=False)
    target = models.CharField(max_length=300, blank=True, editable=False)
    address = models.GenericIPAddressField(null=True, blank=True, editable=False)
    details = models.JSONField(default=dict, blank=True, editable=False)

    class Meta:
        ordering = ["-created", "-id"]

    def __str__(self) -> str:
        return f"{self.created:%Y-%m-%d %H:%M} {self.actor_name or '-'} {self.action} {self.target}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            raise ValueError("An audit event is never changed.")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise ValueError("An audit event is deleted only by the retention (accounts.audit.audit_prune).")
