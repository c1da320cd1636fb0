"""Groups and staff status from the groups claim, applied at every sign-in through the provider."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.contrib.auth.models import AbstractUser, Group
from django.db import transaction

from accounts.models import ManagedGroup

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class GroupSync:
    added: list[str]
    removed: list[str]
    ignored: list[str]  # names in the claim of groups made by hand (not managed): left alone


@transaction.atomic
def user_groups_sync(*, user: AbstractUser, names: set[str], create: bool) -> GroupSync:
    """Make `user`'s memberships of provider-managed groups exactly `names` (empty: none).

    A missing group is created, and marked managed, when `create`; a group of that name made by
    hand is not joined (the provider must not widen a hand-kept group: an admin marks it managed
    first, in the admin). Memberships of unmanaged groups are never changed."""
    existing = {group.name: group for group in Group.objects.filter(name__in=names).select_related("managed")}
    wanted: list[Group] = []
    ignored: list[str] = []
    for name in sorted(names):
        group = existing.get(name)
        if group is None:
            if not create:
                continue
            group, _ = Group.objects.get_or_create(name=name)
            ManagedGroup.objects.get_or_create(group=group)
        elif not hasattr(group, "managed"):
            ignored.append(name)
            continue
        wanted.append(group)
    current = set(user.groups.filter(managed__isnull=False))
    to_add = [group for group in wanted if group not in current]
    to_remove = [group for group in current if group not in wanted]
    user.groups.add(*to_add)
    user.groups.remove(*to_remove)
    if ignored:
        logger.warning("sign-in of %s: the groups claim names groups made by hand, not joined: %s",
                       user.get_username(), ", ".join(ignored))
    return GroupSync(added=sorted(g.name for g in to_add), removed=sorted(g.name for g in to_remove),
                     ignored=ignored)


def user_staff_sync(*, user: AbstractUser, names: set[str], admin_groups: list[str]) -> bool:
    """With admin groups configured, a person is staff exactly while the claim names one of them.
    Superusers (made with manage.py, the way in when the provider is down) are never demoted.
    Returns whether is_staff changed."""
    if not admin_groups or user.is_superuser:
        return False
    staff = bool(names & set(admin_groups))
    if user.is_staff == staff:
        return False
    user.is_staff = staff
    user.save(update_fields=["is_staff"])
    return True
