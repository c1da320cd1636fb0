from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from accounts.models import AuditEvent, GroupManager, Quota
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


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    """Read-only: the trail is append-only (accounts.audit); the staff page filters and exports it."""

    list_display = ["created", "actor_name", "action", "target", "address"]
    list_filter = ["action"]
    search_fields = ["actor_name", "target"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: AuditEvent | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: AuditEvent | None = None) -> bool:
        return False
