"""Groups people run themselves: anyone may create one and becomes its manager (and a member);
managers add and remove members. Groups are Django's own; `GroupManager` rows say who runs them."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, Group
from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet
from django.http import Http404

from accounts.models import GroupManager
from core.errors import ApplicationError


def groups_shareable_by(user: AbstractBaseUser) -> QuerySet[Group]:
    """Groups `user` may share a corpus with: theirs (member or manager); a superuser's: all."""
    if user.is_superuser:
        return Group.objects.order_by("name")
    return Group.objects.filter(Q(user=user) | Q(managers__user=user)).distinct().order_by("name")


def groups_for_user(user: AbstractBaseUser) -> QuerySet[Group]:
    """The groups page: groups `user` belongs to or manages, with their member counts."""
    return groups_shareable_by(user).prefetch_related("user_set", "managers__user")


def group_can_manage(*, user: AbstractBaseUser, group: Group) -> bool:
    return user.is_superuser or GroupManager.objects.filter(group=group, user=user).exists()


def get_group_for_user(user: AbstractBaseUser, pk: int, *, manage: bool = False) -> Group:
    """The group, or Http404 for one `user` neither belongs to nor manages; PermissionDenied (403)
    when `manage` is asked of a plain member."""
    from django.core.exceptions import PermissionDenied

    group = groups_shareable_by(user).filter(pk=pk).first()
    if group is None:
        raise Http404("No such group.")
    if manage and not group_can_manage(user=user, group=group):
        raise PermissionDenied("Only the group's managers can change its members.")
    return group


def user_get_by_name(username: str) -> AbstractBaseUser:
    username = (username or "").strip()
    if not username:
        raise ApplicationError("Name a user.")
    user = get_user_model().objects.filter(username__iexact=username, is_active=True).first()
    if user is None:
        raise ApplicationError(f"There is no user named {username!r}.")
    return user


def group_create(*, name: str, by: AbstractBaseUser) -> Group:
    name = (name or "").strip()
    if not name:
        raise ApplicationError("A group needs a name.")
    if len(name) > 150:
        raise ApplicationError("A group name has at most 150 characters.")
    try:
        with transaction.atomic():
            group = Group.objects.create(name=name)
            GroupManager.objects.create(group=group, user=by)
            by.groups.add(group)
    except IntegrityError:
        raise ApplicationError(f"A group named {name!r} already exists.") from None
    return group


def group_add_member(*, group: Group, username: str, manager: bool = False) -> AbstractBaseUser:
    user = user_get_by_name(username)
    user.groups.add(group)
    if manager:
        GroupManager.objects.get_or_create(group=group, user=user)
    return user


def group_remove_member(*, group: Group, username: str) -> AbstractBaseUser:
    user = user_get_by_name(username)
    managers = GroupManager.objects.filter(group=group)
    if managers.filter(user=user).exists() and managers.count() == 1:
        raise ApplicationError(f"{user.get_username()} is the group's only manager; name another first.")
    with transaction.atomic():
        user.groups.remove(group)
        managers.filter(user=user).delete()
    return user
