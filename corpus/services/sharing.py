"""Sharing, run by owners: who may read or write a corpus.

A share names a user or a group and an access, "read" or "write" (write includes read). Sharing
a private corpus makes it "shared" (visibility "groups"): the owner asked for it to be seen.
Access checks read the rows at every request, so a share or a visibility change applies at once.

An owner may share with the groups they belong to or manage (a superuser: any group:
`accounts.services.groups.groups_shareable_by`).
"""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, Group
from django.db import transaction

from accounts.audit import audit_record
from accounts.services.groups import groups_shareable_by, user_get_by_name
from core.errors import ApplicationError
from corpus.models import Corpus

ACCESS_LEVELS = ("read", "write")


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
    user = user_get_by_name(username)
    if user.pk == corpus.owner_id:
        raise ApplicationError(f"{user.get_username()} owns this corpus already.")
    with transaction.atomic():
        (corpus.writable_users if write else corpus.readable_users).add(user)
        (corpus.readable_users if write else corpus.writable_users).remove(user)
        opened = _make_shared(corpus)
    audit_record(
        action="corpus_shared", target=_corpus_target(corpus), person=user.get_username(), access=access
    )
    return user, opened


def _corpus_target(corpus: Corpus) -> str:
    return f"{corpus.name} (#{corpus.pk})"


def corpus_share_with_group(
    *, corpus: Corpus, by: AbstractBaseUser, group_id: int, access: str
) -> tuple[Group, bool]:
    write = _check_access(access)
    group = groups_shareable_by(by).filter(pk=group_id).first()
    if group is None:
        raise ApplicationError("Choose one of your groups (create one on the Groups page).")
    with transaction.atomic():
        (corpus.writable_groups if write else corpus.readable_groups).add(group)
        (corpus.readable_groups if write else corpus.writable_groups).remove(group)
        opened = _make_shared(corpus)
    audit_record(action="corpus_shared", target=_corpus_target(corpus), group=group.name, access=access)
    return group, opened


def corpus_unshare(*, corpus: Corpus, user_id: int | None = None, group_id: int | None = None) -> None:
    with transaction.atomic():
        if user_id is not None:
            corpus.readable_users.remove(user_id)
            corpus.writable_users.remove(user_id)
        if group_id is not None:
            corpus.readable_groups.remove(group_id)
            corpus.writable_groups.remove(group_id)
        audit_record(
            action="corpus_unshared", target=_corpus_target(corpus), user_id=user_id, group_id=group_id
        )


def corpus_set_visibility(*, corpus: Corpus, visibility: str) -> Corpus:
    if visibility not in Corpus.Visibility.values:
        raise ApplicationError(f"Visibility must be one of {', '.join(Corpus.Visibility.values)}.")
    corpus.visibility = visibility
    corpus.save(update_fields=["visibility", "updated"])
    audit_record(action="corpus_visibility", target=_corpus_target(corpus), visibility=visibility)
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
