"""Corpus and dataset writes: create/update corpora, accept uploads, enable/disable datasets."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, Group
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import UploadedFile
from django.db import IntegrityError, transaction

from accounts.audit import audit_record
from core.errors import ApplicationError, ConflictError
from core.runtime import default_gguf
from corpus.build_parameters import BuildParameters
from corpus.chroma import store_for
from corpus.corpus_settings import setting_named, settings_declared, settings_refusals
from corpus.files import corpus_dir, staging_dir
from corpus.models import Corpus, Dataset
from corpus.object_store import delete_corpus_objects, delete_dataset, put_dataset
from corpus.quotas import storage_usage, upload_quota_check
from corpus.serving import forget_build, tokenizer_for
from corpus.uploads import upload_limit_message
from engine.datasets import DatasetError, validate_dataset
from engine.text_store import text_store_delete_source

# What a corpus has beside its declared settings (corpus.corpus_settings) that the services change.
CORPUS_FIELDS = ("description", "visibility")
logger = logging.getLogger(__name__)
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class DatasetRejected(ApplicationError):
    """An upload that was not stored; the message says why and names the file."""

    code = "dataset_rejected"


class DatasetTooLarge(DatasetRejected):
    code = "too_large"
    status = 413


class StorageQuotaExceeded(DatasetTooLarge):
    """Storing the upload would take its uploader past USER_STORAGE_QUOTA_BYTES (corpus.quotas)."""

    code = "quota_exceeded"


class DatasetDuplicate(DatasetRejected, ConflictError):
    code = "duplicate"
    status = 409


class CorpusNameTaken(ConflictError):
    code = "name_taken"


class CorpusSettingsInvalid(ApplicationError):
    """A value or a rule between settings refused; `details` maps each field to its messages."""


def corpus_create(*, owner: AbstractBaseUser, name: str, readable_groups: Iterable[Group] = (),
                  writable_groups: Iterable[Group] = (), **options: Any) -> Corpus:
    """A new corpus owned by `owner`; `options` are any of CORPUS_FIELDS and the declared settings.
    Raises ApplicationError (CorpusSettingsInvalid: the refusals by field in `details`)."""
    name = name.strip()
    if not name:
        raise ApplicationError("A corpus needs a name.")
    corpus = Corpus(owner=owner, name=name)
    if "meaning_channel" not in options:
        # On by default, but not beside late interaction (the rule between them: `settings_refusals`).
        late = setting_named("late_interaction").cleaned(options.get("late_interaction", False))
        options = {**options, "meaning_channel": settings.MEANING_CHANNEL_DEFAULT and not late}
    _options_apply(corpus, options, check_all=True)
    corpus = _checked_save(corpus, readable_groups=readable_groups, writable_groups=writable_groups)
    audit_record(action="corpus_created", target=f"{corpus.name} (#{corpus.pk})", owner=owner.get_username())
    return corpus


def corpus_update(*, corpus: Corpus, name: str | None = None, readable_groups: Iterable[Group] | None = None,
                  writable_groups: Iterable[Group] | None = None, **options: Any) -> Corpus:
    """Change the given settings (any of CORPUS_FIELDS and the declared settings, the name, the
    groups): the page and the API both change a corpus here. A setting declared `rebuild` applies to
    the next build, the rest at once. Raises ApplicationError (its refusals by field in `details`)."""
    if name is not None:
        if not name.strip():
            raise ApplicationError("A corpus needs a name.", {"name": name})
        corpus.name = name.strip()
    _options_apply(corpus, options, check_all=False)
    return _checked_save(corpus, readable_groups=readable_groups, writable_groups=writable_groups)


def _options_apply(corpus: Corpus, options: dict[str, Any], *, check_all: bool) -> None:
    """Set `options` on `corpus` (not saved) after the declaration's checks: every setting's with
    `check_all`, else those whose value changes; then the rules between settings."""
    declared = {setting.name: setting for setting in settings_declared()}
    unknown = sorted(set(options) - set(declared) - set(CORPUS_FIELDS))
    if unknown:
        raise ValueError(f"unknown corpus settings: {', '.join(unknown)}")
    changed = set(declared) if check_all else set()
    for field, value in options.items():
        if field in declared:
            value = declared[field].cleaned(value)
            if getattr(corpus, field) != value:
                changed.add(field)
        setattr(corpus, field, value)
    refusals = settings_refusals({name: getattr(corpus, name) for name in declared}, changed=changed)
    if refusals:
        raise CorpusSettingsInvalid("Invalid corpus settings.", refusals)


def _checked_save(corpus: Corpus, *, readable_groups: Iterable[Group] | None,
                  writable_groups: Iterable[Group] | None) -> Corpus:
    """Validate the other fields (the declared settings were checked by `_options_apply`), then
    save the row and the given group lists together (None: unchanged)."""
    try:
        corpus.full_clean(exclude=["owner", "active_build", *(s.name for s in settings_declared())],
                          validate_unique=False)
    except ValidationError as error:
        raise CorpusSettingsInvalid("Invalid corpus settings.", error.message_dict) from None
    try:
        with transaction.atomic():
            corpus.save()
            if readable_groups is not None:
                corpus.readable_groups.set(readable_groups)
            if writable_groups is not None:
                corpus.writable_groups.set(writable_groups)
    except IntegrityError:
        raise CorpusNameTaken(
            f"You already have a corpus named {corpus.name!r}.", {"name": corpus.name}
        ) from None
    return corpus


def dataset_set_enabled(*, dataset: Dataset, enabled: bool) -> Dataset:
    """Searches skip disabled datasets at once; no rebuild needed (the index filters by source)."""
    Dataset.objects.filter(pk=dataset.pk).update(enabled=enabled)
    dataset.enabled = enabled
    return dataset


def _text_records_delete(*, corpus_id: int, source_id: int) -> None:
    try:
        deleted = text_store_delete_source(store=store_for(corpus_id), source_id=source_id)
    except Exception:  # noqa: BLE001 - leftovers are never searched (see dataset_delete) and the next build prunes them
        logger.warning(
            "corpus %s: deleting the text records of dataset %s failed", corpus_id, source_id, exc_info=True
        )
    else:
        logger.info("corpus %s: deleted %d text records of dataset %s", corpus_id, deleted, source_id)


def dataset_delete(*, dataset: Dataset) -> None:
    """Drop the dataset and its file. Memories of an already built index stay until the next build,
    but searches no longer return them (their source is gone from the enabled set).

    When the serving build used late interaction, the dataset's text records leave the corpus's
    store too. That happens on commit: before it, a rollback would bring the dataset back without
    its records. A failure there is only logged: the records left behind cannot be returned (a
    late-interaction search filters on the enabled datasets, as HDC does) and the next build's
    prune deletes them.
    """
    path = Path(dataset.file.path)
    corpus_id, source_id = dataset.corpus_id, dataset.pk
    active = BuildParameters.from_json(
        Corpus.objects.filter(pk=corpus_id).values_list("active_build__parameters", flat=True).first())
    relative = dataset.file.name
    dataset.delete()
    transaction.on_commit(lambda: path.unlink(missing_ok=True))
    transaction.on_commit(lambda: delete_dataset(relative))
    if active.late_interaction:
        transaction.on_commit(lambda: _text_records_delete(corpus_id=corpus_id, source_id=source_id))


def dataset_discard(*, dataset: Dataset) -> None:
    """A person deletes a document (`dataset_delete`), and the audit trail says who and which."""
    target = f"{dataset.name} in {dataset.corpus.name} (#{dataset.corpus_id})"
    dataset_delete(dataset=dataset)
    audit_record(action="document_deleted", target=target, size=dataset.size, sha256=dataset.sha256)


def datasets_retire_replaced(*, dataset_ids: Iterable[int]) -> list[int]:
    """Delete the datasets that `dataset_ids` replace (`Dataset.replaces`). Called inside the
    transaction that activates the job indexing `dataset_ids`, so a search sees the old version or
    the new one, never both or neither. Returns the ids deleted."""
    replaced = list(Dataset.objects.filter(pk__in=list(dataset_ids), replaces__isnull=False)
                    .values_list("replaces_id", flat=True))
    for old in Dataset.objects.filter(pk__in=replaced):
        dataset_delete(dataset=old)
    return replaced


def datasets_superseded(*, corpus: Corpus) -> list[int]:
    """The corpus's datasets that a newer dataset replaces: a full build leaves them out."""
    return list(corpus.datasets.filter(replaced_by__isnull=False).values_list("pk", flat=True).distinct())


def _replaced_by_name(*, corpus: Corpus, name: str) -> tuple[Dataset | None, Dataset | None]:
    """(the dataset a new upload named `name` replaces, a waiting version to delete with it). A
    dataset that replaces another one that still exists was not indexed yet (its activation deletes
    the old one): the new upload replaces what serves, and the waiting version goes."""
    current = corpus.datasets.filter(name=name).select_related("replaces").order_by("-pk").first()
    if current is not None and current.replaces is not None:
        return current.replaces, current
    return current, None


def _clean_name(name: str) -> str:
    base = Path(name.replace("\\", "/")).name.strip()
    if not base or base in (".", ".."):
        raise DatasetRejected("The uploaded file has no name.")
    return base[-255:]


def _disk_name(name: str, sha256: str) -> str:
    """`<sha256[:16]>-<name made safe>`, at most 255 bytes (the usual file-name limit): a long name
    loses the end of its stem, never its suffix, which tells the format."""
    safe = _UNSAFE.sub("_", name)
    suffix = Path(safe).suffix
    room = 255 - 17 - len(suffix)
    return f"{sha256[:16]}-{safe[:-len(suffix) or None][:room]}{suffix}"


def _stage(uploaded: UploadedFile, staged: Path, limit: int) -> tuple[str, int]:
    """Put the upload at `staged` (same filesystem as the datasets) and return (sha256, size).

    A file our upload handler already spooled and hashed is hard-linked (no copy); anything else
    (tests' in-memory files, other handlers) is streamed across with hashing and the size limit.
    """
    temporary = getattr(uploaded, "temporary_file_path", None)
    digest = getattr(uploaded, "sha256", None)
    if temporary is not None and digest:
        try:
            os.link(temporary(), staged)
            return digest, staged.stat().st_size
        except OSError:
            pass
    hasher = hashlib.sha256()
    size = 0
    with open(staged, "wb") as out:
        for chunk in uploaded.chunks():
            size += len(chunk)
            if size > limit:
                raise DatasetTooLarge(f"{uploaded.name}: {upload_limit_message(limit)}")
            hasher.update(chunk)
            out.write(chunk)
    return hasher.hexdigest(), size


def _check_quota(*, user: AbstractBaseUser | None, name: str, size: int, lock: bool = False) -> None:
    usage = storage_usage(user=user, lock=lock)
    if not usage.allows(size):
        raise StorageQuotaExceeded(usage.refusal(name), {"used": usage.used, "quota": usage.quota})
    upload_quota_check(user=user, name=name, size=size)


def _corpus_tokenizer(corpus: Corpus):  # engine.spm.GGUFTokenizer
    """The tokenizer the corpus's next build will cut texts with, so the record estimate of a text
    upload counts the chunks the build will make (words instead of tokens undercounted by ~2x)."""
    return tokenizer_for(corpus.gguf_path or default_gguf())


def _dataset_store(*, corpus: Corpus, user: AbstractBaseUser | None, name: str, staged: Path, sha256: str,
                   size: int, report: dict, replaces: Dataset | None, superseded: Dataset | None) -> Dataset:
    """Put the validated, staged file where a dataset lives and insert its row, all or nothing: the
    object store first (`BUILD_STORAGE_URL`), then the row and the rename into DATA_DIR in one
    transaction, with the quota checked again under a lock; `superseded` is deleted in it too."""
    relative = f"corpora/{corpus.pk}/datasets/{_disk_name(name, sha256)}"
    final = Path(settings.DATA_DIR) / relative
    final.parent.mkdir(parents=True, exist_ok=True)
    # With BUILD_STORAGE_URL, the store holds it before any row points at it: a worker on
    # another machine reads it from there (a store that is down refuses the upload, 503).
    put_dataset(relative, staged)
    moved = False
    try:
        with transaction.atomic():
            _check_quota(user=user, name=name, size=size, lock=True)
            dataset = Dataset.objects.create(
                corpus=corpus, name=name, file=relative, size=size, sha256=sha256, format=report["format"],
                record_count=report["record_estimate"], record_count_exact=report["complete"],
                uploaded_by=user, replaces=replaces)
            os.replace(staged, final)
            moved = True
            if superseded is not None:
                dataset_delete(dataset=superseded)
    except IntegrityError:
        delete_dataset(relative)
        raise DatasetDuplicate(f"{name}: the same content is already in this corpus.") from None
    except BaseException:
        if moved:
            final.unlink(missing_ok=True)
        delete_dataset(relative)
        raise
    return dataset


def dataset_upload(
    *,
    corpus: Corpus,
    user: AbstractBaseUser | None,
    uploaded_file: UploadedFile,
    name: str | None = None,
    replaces: Dataset | None = None,
    replace: bool = False,
) -> Dataset:
    """Validate an uploaded file by content and store it in `corpus`, all or nothing.

    Steps: size limit -> staged copy with sha256 -> duplicate check -> the uploader's storage quota
    -> `validate_dataset` (format sniffed from the content, UTF-8, readable records) -> row insert
    and atomic rename into DATA_DIR/corpora/<corpus>/datasets/ in one transaction, the quota checked
    again there under a lock. Raises DatasetRejected (nothing stored). With `replaces`, the new
    dataset takes that one's place when the job indexing it activates (`datasets_retire_replaced`);
    with `replace`, it replaces the corpus's dataset of the same name, if there is one.
    """
    name = _clean_name(name or uploaded_file.name or "")
    limit = settings.UPLOAD_MAX_BYTES
    if uploaded_file.size is not None and uploaded_file.size > limit:
        raise DatasetTooLarge(f"{name}: {upload_limit_message(limit)}")
    # The content decides the format (`validate_dataset`): "GPL-3" or "Apache-2.0" are plain text.
    # The staged file keeps the name's suffix, known or not, so a refusal names it as the user wrote it.
    suffix = Path(name).suffix.lower()
    staging = staging_dir()
    staging.mkdir(parents=True, exist_ok=True)
    staged = staging / f"{uuid.uuid4().hex}{suffix}"
    try:
        sha256, size = _stage(uploaded_file, staged, limit)
        duplicate = corpus.datasets.filter(sha256=sha256).first()
        if duplicate is not None:
            raise DatasetDuplicate(
                f"{name}: the same content is already in this corpus as {duplicate.name!r}.",
                {"dataset": duplicate.pk},
            )
        _check_quota(user=user, name=name, size=size)
        superseded = None
        if replace and replaces is None:
            replaces, superseded = _replaced_by_name(corpus=corpus, name=name)
        try:
            report = validate_dataset(
                staged, tokenizer=_corpus_tokenizer(corpus), chunk_size=corpus.chunk_size
            )
        except DatasetError as error:
            raise DatasetRejected(str(error).replace(str(staged), name)) from None
        dataset = _dataset_store(corpus=corpus, user=user, name=name, staged=staged, sha256=sha256, size=size,
                                 report=report, replaces=replaces, superseded=superseded)
    finally:
        staged.unlink(missing_ok=True)
    dataset.validation = report
    return dataset


def corpus_delete(*, corpus: Corpus) -> None:
    """Delete a corpus, its rows and, once committed, its files: this process's mapped builds of it
    (and what was made for them) first, then its directory and its objects in the store."""
    directory, corpus_id = corpus_dir(corpus.pk), corpus.pk
    audit_record(action="corpus_deleted", target=f"{corpus.name} (#{corpus.pk})")
    corpus.delete()

    def remove() -> None:
        for build in (directory / "builds").glob("*"):
            forget_build(build)
        shutil.rmtree(directory, ignore_errors=True)
        delete_corpus_objects(corpus_id)

    transaction.on_commit(remove)
