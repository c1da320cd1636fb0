"""Restoring a backup (`corpus.backups`) on a fresh machine: an empty database and an empty
DATA_DIR (or bucket prefix), migrated by this release. The backup must come from this release's
migrations; an older one is restored with its own release, then upgraded (docs/backups-and-upgrades.md).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import transaction
from django.utils import timezone

from corpus.backups import DUMP_NAME, FILES, BackupError, applied_migrations, backup_read
from corpus.files import build_dir
from corpus.integrity import CorpusFiles, corpora_files_reports
from corpus.models import Corpus, IndexBuild
from corpus.object_store import build_key, object_store

INTERRUPTED = ("This job was running when the backup was taken and did not finish on this machine; "
               "the index it would have replaced stays active. Start a new build.")


def _require_fresh() -> None:
    corpora_dir = Path(settings.DATA_DIR) / "corpora"
    if get_user_model().objects.exists() or Corpus.objects.exists():
        raise BackupError("The database is not empty: a backup is restored into a new database "
                          "(create it, then run restore, which migrates it).")
    if corpora_dir.is_dir() and any(corpora_dir.iterdir()):
        raise BackupError(f"{corpora_dir} is not empty: restore into a fresh DATA_DIR.")


def _check_release(manifest: dict[str, Any]) -> None:
    here, there = set(applied_migrations("default")), set(manifest["migrations"])
    if here != there:
        newer, older = sorted(there - here), sorted(here - there)
        raise BackupError(
            "This backup was made by another release of the portal "
            f"(migrations only in the backup: {newer or 'none'}; only here: {older or 'none'}). "
            "Restore it with the release that made it, then upgrade that portal in place."
        )


def _put_files(manifest: dict[str, Any], source: Path) -> None:
    """Copy the backup's files into DATA_DIR, and into the object store when one is set."""
    store = object_store()
    data_dir = Path(settings.DATA_DIR)
    for dataset in manifest["datasets"].values():
        path = source / FILES / dataset["path"]
        if "file" in dataset and dataset["file"] is None:
            continue  # already lost when the backup was taken: the check after the restore names it
        target = data_dir / dataset["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        if store is not None:
            store.put(dataset["path"], target)
    for build_id, build in manifest["builds"].items():
        relative = build_key(build["corpus"], int(build_id))
        target = build_dir(build["corpus"], int(build_id))
        target.mkdir(parents=True, exist_ok=True)
        # The manifest last: it marks a segment directory complete.
        for name in sorted(build["files"], key=lambda n: (n == "manifest.json", n)):
            shutil.copyfile(source / FILES / relative / name, target / name)
            if store is not None:
                store.put(f"{relative}/{name}", target / name)


def _adopt_rows() -> None:
    """Rows from another machine: each build's directory is this DATA_DIR's, and a job the backup
    caught running will never finish here (its worker is elsewhere), so it is failed."""
    with transaction.atomic():
        for build_id, corpus_id in IndexBuild.objects.values_list("pk", "corpus_id"):
            IndexBuild.objects.filter(pk=build_id).update(build_dir=str(build_dir(corpus_id, build_id)))
        IndexBuild.objects.filter(status__in=IndexBuild.ACTIVE_STATUSES).update(
            status=IndexBuild.Status.FAILED, error=INTERRUPTED, finished=timezone.now())


def backup_restore(*, directory: Path) -> list[CorpusFiles]:
    """Restore the backup in `directory` into this (empty) database and DATA_DIR; returns the
    corpora that still lack something after it (none for a backup of a healthy portal). A damaged
    backup is refused before anything is written (`backup_read`)."""
    source = Path(directory)
    manifest = backup_read(source)
    call_command("migrate", interactive=False, verbosity=0)
    _require_fresh()
    _check_release(manifest)
    _put_files(manifest, source)
    call_command("loaddata", str(source / DUMP_NAME), verbosity=0)
    _adopt_rows()
    return corpora_files_reports(deep=True)
