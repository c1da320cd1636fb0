"""Sharing, run by owners: who may read or write a corpus, and groups people run themselves.

A share names a user or a group and an access, "read" or "write" (write includes read). Sharing
a private corpus makes it "shared" (visibility "groups"): the owner asked for it to be seen.
Access checks read the rows at every request, so a share or a visibility change applies at once.

Groups: anyone may create one and becomes its manager (and a member); managers add and remove
members. An owner may share with the groups they belong to or manage (a superuser: any group).
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, Group
from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet
from django.http import Http404

from core.errors import ApplicationError
from corpus.models import Corpus, GroupManager

ACCESS_LEVELS = ("read", "write")


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


def _user_named(username: str) -> AbstractBaseUser:
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
    user = _user_named(username)
    user.groups.add(group)
    if manager:
        GroupManager.objects.get_or_create(group=group, user=user)
    return user


def group_remove_member(*, group: Group, username: str) -> AbstractBaseUser:
    user = _user_named(username)
    managers = GroupManager.objects.filter(group=group)
    if managers.filter(user=user).exists() and managers.count() == 1:
        raise ApplicationError(f"{user.get_username()} is the group's only manager; name another first.")
    with transaction.atomic():
        user.groups.remove(group)
        managers.filter(user=user).delete()
    return user


def _check_access(access: str) -> bool:
    if access not in ACCESS_LEVELS:
        raise ApplicationError(f"Access must be one of {', '.join(ACCESS_LEVELS)}, not {access!r}.")
    return access == "write"


def _make_shared(corpus: Corpus) -> bool:
    if corpus.visibility != Corpus.Visibility.PRIVATE:
        return False
    corpus.visibility = Corpus.Visibility.GROUPS
    corpus.save(update_fields=["visibility", "updated"])
    return True


def corpus_share_with_user(*, corpus: Corpus, username: str, access: str) -> tuple[AbstractBaseUser, bool]:
    """Give `username` read or write access; returns (user, whether the corpus stopped being private)."""
    write = _check_access(access)
    user = _user_named(username)
    if user.pk == corpus.owner_id:
        raise ApplicationError(f"{user.get_username()} owns this corpus already.")
    with transaction.atomic():
        (corpus.writable_users if write else corpus.readable_users).add(user)
        (corpus.readable_users if write else corpus.writable_users).remove(user)
        opened = _make_shared(corpus)
    return user, opened


def corpus_share_with_group(*, corpus: Corpus, by: AbstractBaseUser, group_id: int, access: str) -> tuple[Group, bool]:
    write = _check_access(access)
    group = groups_shareable_by(by).filter(pk=group_id).first()
    if group is None:
        raise ApplicationError("Choose one of your groups (create one on the Groups page).")
    with transaction.atomic():
        (corpus.writable_groups if write else corpus.readable_groups).add(group)
        (corpus.readable_groups if write else corpus.writable_groups).remove(group)
        opened = _make_shared(corpus)
    return group, opened


def corpus_unshare(*, corpus: Corpus, user_id: int | None = None, group_id: int | None = None) -> None:
    with transaction.atomic():
        if user_id is not None:
            corpus.readable_users.remove(user_id)
            corpus.writable_users.remove(user_id)
        if group_id is not None:
            corpus.readable_groups.remove(group_id)
            corpus.writable_groups.remove(group_id)


def corpus_set_visibility(*, corpus: Corpus, visibility: str) -> Corpus:
    if visibility not in Corpus.Visibility.values:
        raise ApplicationError(f"Visibility must be one of {', '.join(Corpus.Visibility.values)}.")
    corpus.visibility = visibility
    corpus.save(update_fields=["visibility", "updated"])
    return corpus


def corpus_access_list(*, corpus: Corpus) -> list[dict]:
    """Who has access, for the corpus page: [{"kind": "user"|"group", "id", "name", "access",
    "members"}] (owner first), whether or not the current visibility lets the shares apply."""
    rows = [{"kind": "owner", "id": corpus.owner_id, "name": corpus.owner.get_username(), "access": "owner"}]
    for users, access in ((corpus.writable_users, "write"), (corpus.readable_users, "read")):
        rows += [{"kind": "user", "id": u.pk, "name": u.get_username(), "access": access}
                 for u in users.order_by("username")]
    for groups, access in ((corpus.writable_groups, "write"), (corpus.readable_groups, "read")):
        rows += [{"kind": "group", "id": g.pk, "name": g.name, "access": access,
                  "members": g.user_set.count()} for g in groups.order_by("name")]
    return rows
