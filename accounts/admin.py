from __future__ import annotations

from django.contrib import admin

from accounts.models import GroupManager
from accounts.oidc import admin as sso_admin  # noqa: F401 - users' provider identities, managed groups


@admin.register(GroupManager)
class GroupManagerAdmin(admin.ModelAdmin):
    """Who may run a group's membership from the portal's Groups page (its creator, or whom staff name)."""

    list_display = ["group", "user"]
    list_select_related = ["group", "user"]
    search_fields = ["group__name", "user__username"]
    raw_id_fields = ["user"]
