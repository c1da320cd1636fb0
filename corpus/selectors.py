"""Reads of corpora, datasets and builds. Every lookup a user makes goes through access rules here.

Rules: a superuser reads and writes everything. Otherwise a corpus is readable by its owner, by
every user when its visibility is "everyone", and by the people it is shared with when its
visibility is "groups" (shown as "shared"): its readable and writable users, and the members of its
readable and writable groups. It is writable by its owner and, unless private, by its writable
users and the members of its writable groups. A private corpus is the owner's alone whatever
shares it lists.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q, QuerySet
from django.http import Http404

from corpus.models import Corpus, Dataset, IndexBuild
from corpus.serializers import BuildSerializer

User = AbstractBaseUser | AnonymousUser


def _readable(user: User) -> Q:
    groups = user.groups.all()
    shared = (Q(readable_groups__in=groups) | Q(writable_groups__in=groups)
              | Q(readable_users=user) | Q(writable_users=user))
    return (
        Q(owner=user)
        | Q(visibility=Corpus.Visibility.EVERYONE)
        | (Q(visibility=Corpus.Visibility.GROUPS) & shared)
    )


def _writable(user: User) -> Q:
    shared = Q(writable_groups__in=user.groups.all()) | Q(writable_users=user)
    return Q(owner=user) | (~Q(visibility=Corpus.Visibility.PRIVATE) & shared)


def _restricted(user: User, rule) -> QuerySet[Corpus]:  # one of the Q builders above
    if not user.is_authenticated or not user.is_active:
        return Corpus.objects.none()
    if user.is_superuser:
        return Corpus.objects.all()
    # The group joins can match a corpus several times; filter ids first so callers can annotate.
    return Corpus.objects.filter(pk__in=Corpus.objects.filter(rule(user)).values("pk"))


def corpora_visible_to(user: User) -> QuerySet[Corpus]:
    return _restricted(user, _readable)


def corpora_readable_among(user: User, corpora: Iterable[Corpus]) -> list[Corpus]:
    """The corpora of `corpora` (loaded rows, order kept) that `user` may read: `corpora_visible_to`'s
    rules, decided from the rows themselves for superusers, owners and "everyone" corpora, and with
    one query for the shared ("groups") ones. Per request this replaces building and compiling the
    rule's joins (a few ms of ORM work) for the common cases."""
    if not user.is_authenticated or not user.is_active:
        return []
    corpora = list(corpora)
    shared = [c.pk for c in corpora if c.visibility == Corpus.Visibility.GROUPS and c.owner_id != user.pk]
    allowed = set(corpora_visible_to(user).filter(pk__in=shared).values_list("pk", flat=True)) \
        if shared and not user.is_superuser else set()
    return [c for c in corpora if user.is_superuser or c.owner_id == user.pk
            or c.visibility == Corpus.Visibility.EVERYONE or c.pk in allowed]


def corpora_writable_by(user: User) -> QuerySet[Corpus]:
    return _restricted(user, _writable)


def corpus_can_write(*, user: User, corpus: Corpus) -> bool:
    return corpora_writable_by(user).filter(pk=corpus.pk).exists()


def corpus_can_manage(*, user: User, corpus: Corpus) -> bool:
    """Settings, sharing and deletion: the owner (and superusers) only."""
    return user.is_authenticated and (user.is_superuser or corpus.owner_id == user.pk)


def get_corpus_for_user(user: User, pk: int, *, write: bool = False) -> Corpus:
    """The corpus, or Http404 when `user` may not read it (outsiders learn nothing about it),
    or PermissionDenied (403) when `write` is asked of a reader who may not write."""
    try:
        # get(): no ORDER BY on a primary key (first() would sort by the model's ordering).
        corpus = Corpus.objects.select_related("owner", "active_build").get(pk=pk)
    except Corpus.DoesNotExist:
        corpus = None
    if corpus is None or not corpora_readable_among(user, [corpus]):
        raise Http404("No such corpus.")
    check_write(user, corpus, write)
    return corpus


def check_write(user: User, corpus: Corpus, write: bool) -> None:
    if write and not corpus_can_write(user=user, corpus=corpus):
        raise PermissionDenied("You may read this corpus but not change it.")


def part_for_user(model: type[Dataset] | type[IndexBuild], user: User, pk: int, *, write: bool,
                   missing: str) -> Dataset | IndexBuild:
    """A row of a corpus (a dataset, a build), by the corpus's rule: Http404 when `user` may not
    read the corpus, PermissionDenied when `write` is asked of a reader who may not write."""
    part = model.objects.filter(pk=pk, corpus__in=corpora_visible_to(user)).select_related("corpus").first()
    if part is None:
        raise Http404(missing)
    check_write(user, part.corpus, write)
    return part


def get_build_for_user(user: User, pk: int, *, write: bool = False) -> IndexBuild:
    return part_for_user(IndexBuild, user, pk, write=write, missing="No such build.")


def corpus_list_for_user(user: User) -> QuerySet[Corpus]:
    return (corpora_visible_to(user).select_related("owner", "active_build")
            .annotate(dataset_count=Count("datasets", distinct=True)).order_by("name", "id"))


def corpus_builds(*, corpus: Corpus, limit: int = 20) -> list[IndexBuild]:
    return list(corpus.builds.select_related("created_by").order_by("-created", "-id")[:limit])


def build_state(build: IndexBuild) -> dict:
    """The JSON-safe view of a build's progress shared by events, polling, templates and the API."""
    return BuildSerializer(build).data
