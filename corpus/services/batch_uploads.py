"""Several datasets in one go: a list of files, or a ZIP archive of them, each accepted or refused
on its own (one bad file never sinks the others), with a result per file for the page to show.

A ZIP is unpacked member by member into the upload spool and each member goes through
`dataset_upload` like a single upload. Guards against archive bombs: at most `ZIP_MAX_MEMBERS`
files, every member's declared *and* actual size within `UPLOAD_MAX_BYTES`. Directories, hidden
files and macOS resource forks are skipped silently.
"""

from __future__ import annotations

import shutil
import tempfile
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.files import File
from django.core.files.uploadedfile import UploadedFile

from corpus.models import Corpus, Dataset
from corpus.services.corpora import DatasetRejected, dataset_upload
from corpus.uploads import upload_limit_message

ZIP_MAX_MEMBERS = 2000
ZIP_MAGIC = b"PK\x03\x04"


@dataclass
class UploadOutcome:
    """One file's fate: the stored dataset, or why it was refused."""

    name: str
    dataset: Dataset | None = None
    error: str = ""

    def as_json(self) -> dict:
        if self.dataset is None:
            return {"name": self.name, "ok": False, "error": self.error}
        report = getattr(self.dataset, "validation", {}) or {}
        return {"name": self.name, "ok": True, "id": self.dataset.pk, "format": self.dataset.format,
                "records": self.dataset.record_count, "exact": self.dataset.record_count_exact,
                "skipped": report.get("issue_count", 0), "message": upload_summary(self.dataset)}


def records_phrase(count: int, exact: bool) -> str:
    noun = "record" if count == 1 else "records"
    return f"{count:,} {noun}" if exact else f"about {count:,} {noun}"


def upload_summary(dataset: Dataset) -> str:
    """"notes.pdf: PDF, 12 records" — what a person needs to know about an accepted upload."""
    report = getattr(dataset, "validation", {}) or {}
    skipped = report.get("issue_count", 0)
    note = f" ({skipped:,} unreadable {'record' if skipped == 1 else 'records'} will be skipped)" if skipped else ""
    return f"{dataset.name}: {dataset.format_label}, {records_phrase(dataset.record_count, dataset.record_count_exact)}{note}"


def _is_zip(uploaded: UploadedFile) -> bool:
    if not (uploaded.name or "").lower().endswith(".zip"):
        return False
    uploaded.seek(0)
    head = uploaded.read(4)
    uploaded.seek(0)
    return head == ZIP_MAGIC


def _wanted(member: zipfile.ZipInfo) -> bool:
    parts = PurePosixPath(member.filename).parts
    return not member.is_dir() and bool(parts) and not any(p.startswith(".") or p == "__MACOSX" for p in parts)


def _archive_upload(*, corpus: Corpus, user: AbstractBaseUser | None, archive: UploadedFile) -> list[UploadOutcome]:
    limit = settings.UPLOAD_MAX_BYTES
    try:
        zipped = zipfile.ZipFile(archive)
    except zipfile.BadZipFile as error:
        return [UploadOutcome(archive.name, error=f"{archive.name}: not a readable ZIP archive ({error}).")]
    with zipped:
        members = [m for m in zipped.infolist() if _wanted(m)]
        if not members:
            return [UploadOutcome(archive.name, error=f"{archive.name}: the archive holds no files.")]
        if len(members) > ZIP_MAX_MEMBERS:
            return [UploadOutcome(archive.name, error=f"{archive.name}: {len(members):,} files; "
                                                      f"at most {ZIP_MAX_MEMBERS:,} per archive.")]
        spool = Path(settings.FILE_UPLOAD_TEMP_DIR)
        spool.mkdir(parents=True, exist_ok=True)
        outcomes = []
        for member in members:
            name = member.filename
            if member.file_size > limit:
                outcomes.append(UploadOutcome(name, error=f"{name}: {upload_limit_message(limit)}"))
                continue
            with tempfile.NamedTemporaryFile(dir=spool, suffix=".member") as spooled:
                try:
                    with zipped.open(member) as source:
                        # Read at most one byte past the limit: a lying size header cannot fill the disk.
                        shutil.copyfileobj(_Capped(source, limit + 1), spooled)
                    copied = spooled.tell()
                except (zipfile.BadZipFile, OSError, EOFError) as error:
                    outcomes.append(UploadOutcome(name, error=f"{name}: damaged in the archive ({error})."))
                    continue
                if copied > limit:
                    outcomes.append(UploadOutcome(name, error=f"{name}: {upload_limit_message(limit)}"))
                    continue
                spooled.seek(0)
                outcomes.append(_one(corpus=corpus, user=user, uploaded=File(spooled, name=name), name=name))
        return outcomes


class _Capped:
    """A read-only view of a stream that ends after `limit` bytes."""

    def __init__(self, stream, limit: int) -> None:  # noqa: ANN001 - any binary stream
        self.stream, self.left = stream, limit

    def read(self, size: int = -1) -> bytes:
        if self.left <= 0:
            return b""
        size = self.left if size < 0 else min(size, self.left)
        data = self.stream.read(size)
        self.left -= len(data)
        return data


def _one(*, corpus: Corpus, user: AbstractBaseUser | None, uploaded: UploadedFile | File, name: str) -> UploadOutcome:
    try:
        return UploadOutcome(name, dataset=dataset_upload(corpus=corpus, user=user, uploaded_file=uploaded,
                                                          name=PurePosixPath(name).name))
    except DatasetRejected as error:
        return UploadOutcome(name, error=error.message)


def datasets_upload(*, corpus: Corpus, user: AbstractBaseUser | None,
                    files: Iterable[UploadedFile]) -> list[UploadOutcome]:
    """Store each file as a dataset of `corpus` (a ZIP: each file in it), in order; one outcome
    per stored or refused file. Never raises for a bad file."""
    outcomes: list[UploadOutcome] = []
    for uploaded in files:
        if _is_zip(uploaded):
            outcomes.extend(_archive_upload(corpus=corpus, user=user, archive=uploaded))
        else:
            outcomes.append(_one(corpus=corpus, user=user, uploaded=uploaded, name=uploaded.name or ""))
    return outcomes
