"""Group pages: people run their own groups (create one, add and remove members)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from accounts.services.groups import (
    get_group_for_user,
    group_add_member,
    group_can_manage,
    group_create,
    group_remove_member,
    groups_for_user,
)
from core.flash import flash


@require_GET
def group_list(request: HttpRequest) -> HttpResponse:
    groups = list(groups_for_user(request.user))
    for group in groups:
        group.can_manage = group_can_manage(user=request.user, group=group)
    return render(request, "accounts/groups.html", {"groups": groups})


@require_POST
def group_new(request: HttpRequest) -> HttpResponse:
    group = flash(request, lambda: group_create(name=request.POST.get("name", ""), by=request.user),
                  lambda group: f"Group {group.name} created; you manage it. Add its members below.")
    return redirect("groups:detail", pk=group.pk) if group is not None else redirect("groups:list")


@require_GET
def group_detail(request: HttpRequest, pk: int) -> HttpResponse:
    group = get_group_for_user(request.user, pk)
    managers = set(group.managers.values_list("user_id", flat=True))
    members = [{"user": u, "manager": u.pk in managers} for u in group.user_set.order_by("username")]
    return render(
        request,
        "accounts/group.html",
        {"group": group, "members": members, "can_manage": group_can_manage(user=request.user, group=group)},
    )


@require_POST
def group_member_add(request: HttpRequest, pk: int) -> HttpResponse:
    group = get_group_for_user(request.user, pk, manage=True)
    flash(request, lambda: group_add_member(group=group, username=request.POST.get("username", ""),
                                            manager=request.POST.get("manager") == "1"),
          lambda user: f"{user.get_username()} added to {group.name}.")
    return redirect("groups:detail", pk=group.pk)


@require_POST
def group_member_remove(request: HttpRequest, pk: int) -> HttpResponse:
    group = get_group_for_user(request.user, pk, manage=True)
    flash(request, lambda: group_remove_member(group=group, username=request.POST.get("username", "")),
          lambda user: f"{user.get_username()} removed from {group.name}.")
    return redirect("groups:detail", pk=group.pk)
