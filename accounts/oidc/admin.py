"""Registered by accounts/admin.py. The admin shows each person's provider identity and last sign-in through
it, and which groups the identity provider manages (their memberships change at every sign-in)."""

from __future__ import annotations

from allauth.socialaccount.models import SocialAccount
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group
from django.db.models import QuerySet
from django.http import HttpRequest

from accounts.models import ManagedGroup

User = get_user_model()


class ProviderIdentityInline(admin.TabularInline):
    model = SocialAccount
    verbose_name = verbose_name_plural = "identity provider sign-in"
    fields = ("uid", "last_login", "date_joined")
    readonly_fields = fields
    extra = 0
    can_delete = True  # unlinking lets the identity sign in as a new account (or be linked again)

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


admin.site.unregister(User)


@admin.register(User)
class PortalUserAdmin(UserAdmin):
    inlines = [*UserAdmin.inlines, ProviderIdentityInline]
    list_display = (*UserAdmin.list_display, "is_active", "provider_sign_in")

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).prefetch_related("socialaccount_set")

    @admin.display(description="last sign-in through the provider")
    def provider_sign_in(self, user: User) -> str:
        accounts = list(user.socialaccount_set.all())
        return max(a.last_login for a in accounts).strftime("%Y-%m-%d %H:%M") if accounts else "-"


admin.site.unregister(Group)


@admin.register(Group)
class PortalGroupAdmin(GroupAdmin):
    list_display = ("name", "managed_by_provider")
    list_filter = (("managed", admin.EmptyFieldListFilter),)
    actions = ["mark_managed", "unmark_managed"]

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).select_related("managed")

    @admin.display(boolean=True, description="managed by the identity provider")
    def managed_by_provider(self, group: Group) -> bool:
        return hasattr(group, "managed")

    @admin.action(description="Let the identity provider manage the memberships of the selected groups")
    def mark_managed(self, request: HttpRequest, queryset: QuerySet) -> None:
        for group in queryset:
            ManagedGroup.objects.get_or_create(group=group)
        self.message_user(request, "Memberships follow the groups claim from each member's next sign-in.",
                          messages.SUCCESS)

    @admin.action(description="Keep the selected groups by hand (the provider no longer changes them)")
    def unmark_managed(self, request: HttpRequest, queryset: QuerySet) -> None:
        ManagedGroup.objects.filter(group__in=queryset).delete()
