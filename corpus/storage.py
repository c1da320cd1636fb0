"""Where corpus files live: everything under DATA_DIR (datasets, builds), never in the web root."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.files.storage import FileSystemStorage


def data_storage() -> FileSystemStorage:
    return FileSystemStorage(location=settings.DATA_DIR)


def corpus_dir(corpus_id: int) -> Path:
    return Path(settings.DATA_DIR) / "corpora" / str(corpus_id)


def datasets_dir(corpus_id: int) -> Path:
    return corpus_dir(corpus_id) / "datasets"


def build_dir(corpus_id: int, build_id: int) -> Path:
    return corpus_dir(corpus_id) / "builds" / str(build_id)


def staging_dir() -> Path:
    return Path(settings.DATA_DIR) / "tmp" / "staging"
