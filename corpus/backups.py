"""Backups of a whole portal, and restoring one on a fresh machine (docs/backups-and-upgrades.md).

A backup is a directory: `database.jsonl` (every row, Django's `dumpdata` with natural foreign
keys, so it loads into SQLite or PostgreSQL alike; every timestamp to the microsecond,
`corpus.backup_format`), `files/` (every dataset's upload and every serving segment's files, in
DATA_DIR's layout) and `backup.json`, written last, which ties the two: the migrations the rows are
in, each copied file's size and sha256, and each serving build's model by name and sha256.
`backup_read` checks every one of those files before a restore writes anything.

Consistency while the portal serves: the rows are read as one snapshot (PostgreSQL: one
REPEATABLE READ transaction; SQLite: the online backup API copies the file, then the copy is
dumped), and only then are the files copied, those of the segments and datasets that snapshot
names. A published segment's files never change (a build writes a new directory; activation is one
UPDATE of the corpus row), so files copied after the snapshot are the ones its rows describe. A
file deleted between the two (a cleanup, a corpus deleted) makes the backup start again.
"""

from __future__ import annotations

import json
import logging
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.db import connection, connections, transaction
from django.db.migrations.recorder import MigrationRecorder

from core.errors import ApplicationError
from corpus.backup_format import FORMAT_NAME
from corpus.files import build_dir
from corpus.models import Corpus, Dataset, IndexBuild
from corpus.object_store import MANIFEST, build_key, file_digest, object_store
from engine.files import atomic_write

logger = logging.getLogger(__name__)
FORMAT = 1
MANIFEST_NAME, DUMP_NAME, FILES = "backup.json", "database.jsonl", "files"
# Made again by migrate (content types, permissions), or of no use on another machine (sessions).
EXCLUDED = ["contenttypes", "auth.permission", "sessions"]
SNAPSHOT_ALIAS = "backup_snapshot"
ATTEMPTS = 3


class BackupError(ApplicationError):
    code = "backup"


class _Vanished(Exception):
    """A file the snapshot names was deleted before it was copied: take a new snapshot."""


def applied_migrations(alias: str) -> list[str]:
    return sorted(f"{app}.{name}" for app, name in MigrationRecorder(connections[alias]).applied_migrations())


def _describe(alias: str) -> dict[str, Any]:
    """What the snapshot's files are: every serving segment and every dataset, by the rows."""
    corpora = {c.pk: {"name": c.name, "serving": c.serving_build_ids}
               for c in Corpus.objects.using(alias).order_by("pk")}
    serving = sorted({i for c in corpora.values() for i in c["serving"]})
    builds = {b.pk: {"corpus": b.corpus_id, "number": b.number, "kind": b.kind, "build_dir": b.build_dir,
                     "published": (b.parameters or {}).get("published") or {},
                     "model": {k: (b.parameters or {}).get(k) for k in ("model_name", "model_sha256")}}
              for b in IndexBuild.objects.using(alias).filter(pk__in=serving)}
    datasets = {d.pk: {"corpus": d.corpus_id, "path": d.file.name, "bytes": d.size, "sha256": d.sha256}
                for d in Dataset.objects.using(alias).order_by("pk")}
    return {"corpora": corpora, "builds": builds, "datasets": datasets,
            "migrations": applied_migrations(alias)}


def _dump(alias: str, dump: Path) -> dict[str, Any]:
    call_command("dumpdata", format=FORMAT_NAME, output=str(dump), database=alias, exclude=EXCLUDED,
                 use_natural_foreign_keys=True, verbosity=0)
    return _describe(alias)


@contextmanager
def _sqlite_snapshot(work: Path) -> Iterator[str]:
    """A copy of the SQLite file by its online backup API (consistent while others write), opened
    as a database alias of its own."""
    copy = work / "snapshot.sqlite3"
    connection.ensure_connection()
    target = sqlite3.connect(copy)
    try:
        connection.connection.backup(target)
    finally:
        target.close()
    connections.databases[SNAPSHOT_ALIAS] = {**connections.databases["default"], "NAME": str(copy)}
    try:
        yield SNAPSHOT_ALIAS
    finally:
        connections[SNAPSHOT_ALIAS].close()
        del connections.databases[SNAPSHOT_ALIAS]
        copy.unlink(missing_ok=True)


def _snapshot(directory: Path) -> dict[str, Any]:
    dump = directory / DUMP_NAME
    if connection.vendor == "sqlite":
        with tempfile.TemporaryDirectory(dir=directory) as work, _sqlite_snapshot(Path(work)) as alias:
            return _dump(alias, dump)
    with transaction.atomic():
        with connection.cursor() as cursor:
            # The first statement of the transaction: every later read sees the same moment.
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        return _dump("default", dump)


def _copy_file(source: Path, target: Path) -> dict[str, Any]:
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        shutil.copyfile(source, target)
    except FileNotFoundError as error:
        raise _Vanished(str(source)) from error
    return file_digest(target)


def _fetch_file(relative: str, target: Path, expected: dict[str, Any] | None) -> dict[str, Any]:
    store = object_store()
    target.parent.mkdir(parents=True, exist_ok=True)
    if not store.exists(relative):
        raise _Vanished(relative)
    store.get(relative, target, expected)
    return file_digest(target)


def _copy_segment(build_id: int, build: dict[str, Any], files: Path) -> tuple[dict[str, Any], str]:
    """Copy one serving segment into the backup; returns its files' digests and a problem ('' none)."""
    relative = build_key(build["corpus"], build_id)
    if object_store() is not None and build["published"]:
        return {name: _fetch_file(f"{relative}/{name}", files / relative / name, expected)
                for name, expected in build["published"].items()}, ""
    source = Path(build["build_dir"] or build_dir(build["corpus"], build_id))
    if not (source / MANIFEST).is_file():
        source = build_dir(build["corpus"], build_id)  # a DATA_DIR moved since the build
    if not (source / MANIFEST).is_file():
        return {}, f"build {build_id} of corpus {build['corpus']} serves but its files are missing ({source})"
    return {path.name: _copy_file(path, files / relative / path.name)
            for path in sorted(source.iterdir()) if path.is_file() and not path.name.startswith(".")}, ""


def _copy_files(described: dict[str, Any], directory: Path) -> dict[str, Any]:
    files = directory / FILES
    problems = []
    for build_id, build in described["builds"].items():
        build["files"], problem = _copy_segment(build_id, build, files)
        if problem:
            problems.append(problem)
    for dataset in described["datasets"].values():
        source = Path(settings.DATA_DIR) / dataset["path"]
        # What was copied, checked by a restore: None for an upload already lost (a restore reports it).
        dataset["file"] = None
        if object_store() is not None and not source.is_file():
            dataset["file"] = _fetch_file(dataset["path"], files / dataset["path"], None)
        elif source.is_file():
            dataset["file"] = _copy_file(source, files / dataset["path"])
        else:
            problems.append(f"dataset {dataset['path']} of corpus {dataset['corpus']}: its file is missing")
            continue
        if dataset["file"]["sha256"] != dataset["sha256"]:
            problems.append(f"dataset {dataset['path']}: sha256 {dataset['file']['sha256'][:12]}… "
                            "differs from its row's")
    described["problems"] = problems
    return described


def backup_create(*, directory: Path) -> dict[str, Any]:
    """Write a backup of this portal into `directory` (new or empty); returns its manifest."""
    directory = Path(directory)
    if directory.exists() and any(directory.iterdir()):
        raise BackupError(f"{directory} is not empty: a backup goes into a new or empty directory.")
    for attempt in range(1, ATTEMPTS + 1):
        directory.mkdir(parents=True, exist_ok=True)
        started = datetime.now(UTC)
        described = _snapshot(directory)
        try:
            manifest = _copy_files(described, directory)
            break
        except _Vanished as error:
            logger.info(
                "backup: %s was deleted after the snapshot; taking a new one (attempt %d)", error, attempt
            )
            shutil.rmtree(directory / FILES, ignore_errors=True)
            (directory / DUMP_NAME).unlink(missing_ok=True)
    else:
        raise BackupError(f"The portal's files changed under {ATTEMPTS} snapshots in a row; try again.")
    manifest = {
        "format": FORMAT,
        "created": started.isoformat(),
        "database": connection.vendor,
        "object_store": bool(object_store()),
        "dump_sha256": file_digest(directory / DUMP_NAME)["sha256"],
        **manifest,
    }
    with atomic_write(directory / MANIFEST_NAME) as written:
        written.write_text(json.dumps(manifest, indent=1, sort_keys=True))
    return manifest


def _listed_files(directory: Path, manifest: dict[str, Any]) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Every file the manifest lists, with the size and sha256 it had when the backup was taken."""
    yield directory / DUMP_NAME, {"sha256": manifest["dump_sha256"]}
    for build_id, build in manifest["builds"].items():
        folder = directory / FILES / build_key(build["corpus"], int(build_id))
        for name, digest in build["files"].items():
            yield folder / name, digest
    for dataset in manifest["datasets"].values():
        # A backup written before "file" was recorded copied every upload it lists, as its row says.
        copied = dataset.get("file", {"bytes": dataset["bytes"], "sha256": dataset["sha256"]})
        if copied is not None:
            yield directory / FILES / dataset["path"], copied


def _damaged(directory: Path, manifest: dict[str, Any]) -> list[str]:
    """'PATH (missing)' or 'PATH (changed)' for each listed file that is not as it was copied."""
    damaged = []
    for path, expected in _listed_files(directory, manifest):
        if not path.is_file():
            damaged.append(f"{path} (missing)")
            continue
        found = file_digest(path)
        if any(found[key] != expected[key] for key in ("bytes", "sha256") if key in expected):
            damaged.append(f"{path} (changed)")
    return damaged


def backup_read(directory: Path) -> dict[str, Any]:
    """The manifest of a backup, every file it lists checked (present, with its size and sha256):
    a damaged backup raises BackupError naming each such file."""
    directory = Path(directory)
    try:
        manifest = json.loads((directory / MANIFEST_NAME).read_text())
    except (OSError, ValueError) as error:
        raise BackupError(f"{directory} holds no complete backup ({MANIFEST_NAME}: {error}).") from error
    if manifest.get("format") != FORMAT:
        raise BackupError(f"backup format {manifest.get('format')!r}; this release reads format {FORMAT}.")
    damaged = _damaged(directory, manifest)
    if damaged:
        raise BackupError(f"the backup in {directory} is damaged, so nothing was restored: "
                          f"{'; '.join(damaged)}.")
    return manifest
