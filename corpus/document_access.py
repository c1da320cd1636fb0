"""Who may read a document (a dataset) of a corpus: the corpus's rule (`corpus.selectors`), narrowed
by the document's own readers where it has any.

Rules: a document without readers of its own is read by every reader of its corpus, as before. A
document with readers (people, groups: `Dataset.reader_users`, `.reader_groups`) is read, among its
corpus's readers, by those people, the members of those groups, and by the people who manage the
corpus's documents: its owner, its writers and superusers (they set the readers, so they see what
they set). Everything that shows a document's text asks here: search narrows the index's rows to
the readable documents inside the scan (`hidden_dataset_ids`, the dataset filter the scan already
has), and pages answer 404 for a document one may not read, as for a missing one.

Nothing is cached beyond the request that computes it: a change of readers or of a group's members
takes effect at the next search.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, Group
from django.db.models import Q, QuerySet
from django.db.models.signals import m2m_changed
from django.dispatch import receiver
from django.http import Http404

from core.errors import ApplicationError
from corpus.memory_rows import memory_counts_by_dataset
from corpus.models import Corpus, Dataset
from corpus.selectors import check_write, corpora_readable_among, corpora_writable_by, part_for_user

User = AbstractBaseUser | AnonymousUser


def _managing(user: User, corpus_ids: Iterable[int]) -> set[int]:
    """The corpora among `corpus_ids` whose documents `user` manages (owner, writer, superuser)."""
    ids = set(corpus_ids)
    if not ids or not user.is_authenticated:
        return set()
    return set(corpora_writable_by(user).filter(pk__in=ids).values_list("pk", flat=True))


def _granted(user: User) -> Q:
    return Q(reader_users=user) | Q(reader_groups__in=user.groups.all())


def hidden_dataset_ids(user: User, corpus_ids: Iterable[int]) -> dict[int, frozenset[int]]:
    """Per corpus of `corpus_ids` (corpora `user` may read), the documents with readers of their own
    that `user` may not read; a corpus with none is absent. Two small queries, for the corpora that
    have such documents only (callers that know none has any need not call it)."""
    restricted = list(
        Dataset.objects.filter(corpus_id__in=set(corpus_ids), restricted=True)
        .order_by()
        .values_list("corpus_id", "pk")
    )
    if not restricted:
        return {}
    others = {corpus for corpus, _ in restricted} - _managing(user, {corpus for corpus, _ in restricted})
    if not others:
        return {}
    granted = (
        set(
            Dataset.objects.filter(corpus_id__in=others, restricted=True)
            .filter(_granted(user))
            .order_by()
            .values_list("pk", flat=True)
        )
        if user.is_authenticated
        else set()
    )
    hidden: dict[int, set[int]] = {}
    for corpus, pk in restricted:
        if corpus in others and pk not in granted:
            hidden.setdefault(corpus, set()).add(pk)
    return {corpus: frozenset(pks) for corpus, pks in hidden.items()}


def readable_datasets(user: User, corpus: Corpus) -> QuerySet[Dataset]:
    """The documents of `corpus` that `user` may read (none when he may not read the corpus)."""
    if not corpora_readable_among(user, [corpus]):
        return Dataset.objects.none()
    hidden = hidden_dataset_ids(user, [corpus.pk]).get(corpus.pk, frozenset())
    return corpus.datasets.exclude(pk__in=hidden) if hidden else corpus.datasets.all()


def document_readable(user: User, dataset: Dataset) -> bool:
    """Whether `user` may read `dataset`: its corpus's rule, then its own readers."""
    if not corpora_readable_among(user, [dataset.corpus]):
        return False
    if not dataset.restricted:
        return True
    return dataset.pk not in hidden_dataset_ids(user, [dataset.corpus_id]).get(dataset.corpus_id, frozenset())


def dataset_readers_set(
    *, dataset: Dataset, users: Iterable[AbstractBaseUser] = (), groups: Iterable[Group] = ()
) -> Dataset:
    """Give `dataset` these readers (replacing its own; none: its corpus's readers again). The
    caller has checked that the person asking may write the corpus."""
    dataset.reader_users.set(list(users))
    dataset.reader_groups.set(list(groups))
    # Also when nothing changed in the lists (m2m_changed is not sent): a document whose reader groups
    # were deleted is restricted with none left, and giving it none opens it to the corpus again.
    _restricted_sync([dataset.pk])
    dataset.refresh_from_db(fields=["restricted"])
    return dataset


def readers_named(
    *, users: Iterable[str] = (), groups: Iterable[str] = ()
) -> tuple[list[AbstractBaseUser], list[Group]]:
    """The people (by username) and groups (by name) named as a document's readers; an
    ApplicationError naming every one that does not exist (nothing is changed then)."""
    users, groups = (
        sorted({u.strip() for u in users if u.strip()}),
        sorted({g.strip() for g in groups if g.strip()}),
    )
    User = get_user_model()
    found_users = list(User.objects.filter(**{f"{User.USERNAME_FIELD}__in": users}))
    found_groups = list(Group.objects.filter(name__in=groups))
    missing = {
        "users": sorted(set(users) - {u.get_username() for u in found_users}),
        "groups": sorted(set(groups) - {g.name for g in found_groups}),
    }
    if missing["users"] or missing["groups"]:
        named = ", ".join(
            [*(f"user {n!r}" for n in missing["users"]), *(f"group {n!r}" for n in missing["groups"])]
        )
        raise ApplicationError(f"No such reader: {named}.", {k: v for k, v in missing.items() if v})
    return found_users, found_groups


def dataset_readers(dataset: Dataset) -> dict[str, list[str]]:
    """The document's own readers by name: {"users": [...], "groups": [...]} (both empty: its
    corpus's readers). Reads prefetched `reader_users` / `reader_groups` where the caller did."""
    return {
        "users": sorted(u.get_username() for u in dataset.reader_users.all()),
        "groups": sorted(g.name for g in dataset.reader_groups.all()),
    }


def dataset_readers_on_upload(
    *, dataset: Dataset, users: Iterable[AbstractBaseUser] = (), groups: Iterable[Group] = ()
) -> Dataset:
    """A new upload's readers: those given, else those of the version it replaces (a new version of
    a document does not open it to the whole corpus), else none (the corpus's readers)."""
    users, groups = list(users), list(groups)
    if not users and not groups and dataset.replaces_id is not None:
        users = list(dataset.replaces.reader_users.all())
        groups = list(dataset.replaces.reader_groups.all())
    return dataset_readers_set(dataset=dataset, users=users, groups=groups) if users or groups else dataset


def _restricted_sync(dataset_ids: Iterable[int]) -> None:
    ids = set(dataset_ids)
    with_readers = set(
        Dataset.objects.filter(pk__in=ids)
        .filter(Q(reader_users__isnull=False) | Q(reader_groups__isnull=False))
        .values_list("pk", flat=True)
    )
    Dataset.objects.filter(pk__in=with_readers, restricted=False).update(restricted=True)
    Dataset.objects.filter(pk__in=ids - with_readers, restricted=True).update(restricted=False)


@receiver(m2m_changed, sender=Dataset.reader_users.through, dispatch_uid="dataset_reader_users")
@receiver(m2m_changed, sender=Dataset.reader_groups.through, dispatch_uid="dataset_reader_groups")
def readers_changed(
    sender: type, instance: object, action: str, reverse: bool, pk_set: set | None, **kwargs: object
) -> None:
    """Keep `Dataset.restricted` true to the readers, whichever way they change (the API, a
    source's rules, the admin, a user or group deleted)."""
    if action not in ("post_add", "post_remove", "post_clear", "pre_clear"):
        return
    if not reverse:
        _restricted_sync([instance.pk])
    elif action == "pre_clear":
        # From the user's or group's side: the datasets it is about to leave, read before they go.
        field = "reader_users" if sender is Dataset.reader_users.through else "reader_groups"
        instance._document_reader_of = list(
            Dataset.objects.filter(**{field: instance}).values_list("pk", flat=True)
        )
    else:
        _restricted_sync(pk_set or getattr(instance, "_document_reader_of", []))


def get_dataset_for_user(user: User, pk: int, *, write: bool = False) -> Dataset:
    """The dataset (a document), by its corpus's rule and its own readers (this module's rule):
    Http404 for a document `user` may not read, as for a missing one."""
    dataset = part_for_user(Dataset, user, pk, write=False, missing="No such dataset.")
    hidden = hidden_dataset_ids(user, [dataset.corpus_id]) if dataset.restricted else {}
    if dataset.pk in hidden.get(dataset.corpus_id, ()):
        raise Http404("No such dataset.")
    check_write(user, dataset.corpus, write)
    return dataset


def corpus_datasets(*, corpus: Corpus, user: User | None = None) -> list[Dataset]:
    """Datasets with `memory_count`: memories of the searchable state (the active build and its
    appends) that came from each; given `user`, only the documents he may read."""
    hidden = hidden_dataset_ids(user, [corpus.pk]).get(corpus.pk, ()) if user is not None else ()
    datasets = list(corpus.datasets.select_related("uploaded_by")
                    .prefetch_related("reader_users", "reader_groups")
                    .exclude(pk__in=hidden).order_by("name", "id"))
    counts = memory_counts_by_dataset(build_ids=corpus.serving_build_ids)
    for dataset in datasets:
        dataset.memory_count = counts.get(dataset.pk, 0)
    return datasets
