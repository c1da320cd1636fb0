from __future__ import annotations

from django.contrib import admin

from accounts.models import GroupManager, Quota
from accounts.oidc import admin as sso_admin  # noqa: F401 - users' provider identities, managed groups


@admin.register(GroupManager)
class GroupManagerAdmin(admin.ModelAdmin):
    """Who may run a group's membership from the portal's Groups page (its creator, or whom staff name)."""

    list_display = ["group", "user"]
    list_select_related = ["group", "user"]
    search_fields = ["group__name", "user__username"]
    raw_id_fields = ["user"]


@admin.register(Quota)
class QuotaAdmin(admin.ModelAdmin):
    """Daily limits of a person or a group (accounts.quotas); blank: the next rule's, 0: none."""

    list_display = ["__str__", "questions_per_day", "tokens_per_day", "upload_bytes_per_day"]
    list_select_related = ["user", "group"]
    search_fields = ["user__username", "group__name"]
    raw_id_fields = ["user"]
