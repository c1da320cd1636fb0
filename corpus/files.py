"""Where corpus files live: everything under DATA_DIR (datasets, builds), never in the web root."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.files.storage import FileSystemStorage


class DataDirStorage(FileSystemStorage):
    """FileSystemStorage rooted at the *current* DATA_DIR (read on each use, not at import)."""

    @property
    def base_location(self) -> str:
        return str(settings.DATA_DIR)

    @property
    def location(self) -> str:
        return str(Path(settings.DATA_DIR).resolve())


def data_storage() -> FileSystemStorage:
    return DataDirStorage()


def corpus_dir(corpus_id: int) -> Path:
    return Path(settings.DATA_DIR) / "corpora" / str(corpus_id)


def datasets_dir(corpus_id: int) -> Path:
    return corpus_dir(corpus_id) / "datasets"


def build_dir(corpus_id: int, build_id: int) -> Path:
    return corpus_dir(corpus_id) / "builds" / str(build_id)


def staging_dir() -> Path:
    return Path(settings.DATA_DIR) / "tmp" / "staging"
