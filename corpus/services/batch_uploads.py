"""Several datasets in one go: a list of files, or a ZIP archive of them, each accepted or refused
on its own (one bad file never sinks the others), with a result per file for the page to show.

A ZIP is unpacked into the upload spool, then each member goes through `dataset_upload` like a
single upload. Guards against archive bombs: at most `ZIP_MAX_MEMBERS` files, every member's
declared *and* actual size within `UPLOAD_MAX_BYTES`, and all members of one request's archives
together within `UPLOAD_MAX_EXPANDED_BYTES` and the uploader's storage quota, counted as they are
unpacked: past either, the archive is refused whole before any of it is stored. Directories, hidden
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
from corpus.quotas import storage_usage
from corpus.services.corpora import DatasetRejected, dataset_upload
from corpus.uploads import byte_size, upload_limit_message

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
                "skipped": report.get("issue_count", 0), "notes": report.get("notes", []),
                "message": upload_summary(self.dataset)}


def records_phrase(count: int, exact: bool) -> str:
    noun = "record" if count == 1 else "records"
    return f"{count:,} {noun}" if exact else f"about {count:,} {noun}"


def upload_summary(dataset: Dataset) -> str:
    """"notes.pdf: PDF, 12 records" — what a person needs to know about an accepted upload (with the
    validation's notes: pages whose text OCR reads when the corpus is built)."""
    report = getattr(dataset, "validation", {}) or {}
    skipped = report.get("issue_count", 0)
    note = (
        f" ({skipped:,} unreadable {'record' if skipped == 1 else 'records'} will be skipped)"
        if skipped
        else ""
    )
    notes = "".join(f"; {text}" for text in report.get("notes", []))
    return (f"{dataset.name}: {dataset.format_label}, "
            f"{records_phrase(dataset.record_count, dataset.record_count_exact)}{note}{notes}")


def _is_zip(uploaded: UploadedFile) -> bool:
    if not (uploaded.name or "").lower().endswith(".zip"):
        return False
    uploaded.seek(0)
    head = uploaded.read(4)
    uploaded.seek(0)
    return head == ZIP_MAGIC


def _wanted(member: zipfile.ZipInfo) -> bool:
    parts = PurePosixPath(member.filename).parts
    return (
        not member.is_dir() and bool(parts) and not any(p.startswith(".") or p == "__MACOSX" for p in parts)
    )


def _archive_upload(*, corpus: Corpus, user: AbstractBaseUser | None, archive: UploadedFile,
                    room: int) -> tuple[list[UploadOutcome], int]:
    """Store the archive's files, or refuse it whole when they expand past `room` (what this request's
    archives may still expand to) or past the user's storage quota. Returns the outcomes and the
    bytes unpacked."""
    try:
        zipped = zipfile.ZipFile(archive)
    except zipfile.BadZipFile as error:
        return [
            UploadOutcome(archive.name, error=f"{archive.name}: not a readable ZIP archive ({error}).")
        ], 0
    with zipped:
        members = [m for m in zipped.infolist() if _wanted(m)]
        if not members:
            return [UploadOutcome(archive.name, error=f"{archive.name}: the archive holds no files.")], 0
        if len(members) > ZIP_MAX_MEMBERS:
            return [UploadOutcome(archive.name, error=f"{archive.name}: {len(members):,} files; "
                                                      f"at most {ZIP_MAX_MEMBERS:,} per archive.")], 0
        usage = storage_usage(user=user)
        quota_bound = usage.left is not None and usage.left < room
        budget = usage.left if quota_bound else room
        refusal = UploadOutcome(archive.name, error=usage.refusal(archive.name) if quota_bound else (
            f"{archive.name}: its files expand to more than the limit of "
            f"{byte_size(settings.UPLOAD_MAX_EXPANDED_BYTES)} for one upload; nothing of it was stored."))
        # The declared sizes refuse a bomb before a byte is unpacked; the count while unpacking holds
        # whatever the headers say.
        if sum(m.file_size for m in members if m.file_size <= settings.UPLOAD_MAX_BYTES) > budget:
            return [refusal], 0
        spool = Path(settings.FILE_UPLOAD_TEMP_DIR)
        spool.mkdir(parents=True, exist_ok=True)
        # Every file is unpacked before the first is stored, so a refused archive stores nothing.
        with tempfile.TemporaryDirectory(dir=spool, suffix=".unzip") as directory:
            unpacked, expanded = _unpack(zipped, members, Path(directory), budget)
            if expanded > budget:
                return [refusal], expanded
            outcomes = []
            for item in unpacked:
                if isinstance(item, UploadOutcome):
                    outcomes.append(item)
                    continue
                name, path = item
                with open(path, "rb") as handle:
                    outcomes.append(
                        _one(corpus=corpus, user=user, uploaded=File(handle, name=name), name=name)
                    )
                path.unlink()
        return outcomes, expanded


def _unpack(zipped: zipfile.ZipFile, members: list[zipfile.ZipInfo], directory: Path,
            budget: int) -> tuple[list[UploadOutcome | tuple[str, Path]], int]:
    """Each member into `directory` (its name and file), or why not; and the bytes unpacked, which
    stop one byte past `budget`."""
    limit = settings.UPLOAD_MAX_BYTES
    unpacked: list[UploadOutcome | tuple[str, Path]] = []
    expanded = 0
    for index, member in enumerate(members):
        name, path = member.filename, directory / str(index)
        if member.file_size > limit:
            unpacked.append(UploadOutcome(name, error=f"{name}: {upload_limit_message(limit)}"))
            continue
        try:
            with zipped.open(member) as source, open(path, "wb") as out:
                # At most one byte past the per-file limit or the budget: a lying size header cannot fill the
                # disk.
                shutil.copyfileobj(_Capped(source, min(limit, budget - expanded) + 1), out)
                copied = out.tell()
        except (zipfile.BadZipFile, OSError, EOFError) as error:
            path.unlink(missing_ok=True)
            unpacked.append(UploadOutcome(name, error=f"{name}: damaged in the archive ({error})."))
            continue
        expanded += copied
        if expanded > budget:
            break
        if copied > limit:
            path.unlink()
            unpacked.append(UploadOutcome(name, error=f"{name}: {upload_limit_message(limit)}"))
            continue
        unpacked.append((name, path))
    return unpacked, expanded


class _Capped:
    """A read-only view of a stream that ends after `limit` bytes."""

    def __init__(self, stream, limit: int) -> None:  # any binary stream
        self.stream, self.left = stream, limit

    def read(self, size: int = -1) -> bytes:
        if self.left <= 0:
            return b""
        size = self.left if size < 0 else min(size, self.left)
        data = self.stream.read(size)
        self.left -= len(data)
        return data


def _one(
    *, corpus: Corpus, user: AbstractBaseUser | None, uploaded: UploadedFile | File, name: str
) -> UploadOutcome:
    try:
        return UploadOutcome(name, dataset=dataset_upload(corpus=corpus, user=user, uploaded_file=uploaded,
                                                          name=PurePosixPath(name).name, replace=True))
    except DatasetRejected as error:
        return UploadOutcome(name, error=error.message)


def datasets_upload(*, corpus: Corpus, user: AbstractBaseUser | None,
                    files: Iterable[UploadedFile]) -> list[UploadOutcome]:
    """Store each file as a dataset of `corpus` (a ZIP: each file in it), in order; one outcome
    per stored or refused file (a refused ZIP: one for the archive). A file named like a dataset
    the corpus holds replaces it (`dataset_upload(replace=True)`). The ZIPs of one call expand to
    UPLOAD_MAX_EXPANDED_BYTES in all. Never raises for a bad file."""
    outcomes: list[UploadOutcome] = []
    expanded = 0
    for uploaded in files:
        if _is_zip(uploaded):
            stored, unpacked = _archive_upload(corpus=corpus, user=user, archive=uploaded,
                                               room=settings.UPLOAD_MAX_EXPANDED_BYTES - expanded)
            outcomes.extend(stored)
            expanded += unpacked
        else:
            outcomes.append(_one(corpus=corpus, user=user, uploaded=uploaded, name=uploaded.name or ""))
    return outcomes
