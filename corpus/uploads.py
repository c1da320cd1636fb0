"""Upload handler: streams every uploaded file to a temporary file in DATA_DIR, hashing as it goes,
and stops storing a file as soon as it passes `UPLOAD_MAX_BYTES`.

The limit is enforced chunk by chunk while the body is read, so an oversized upload never fills
the disk or memory; the rest of that file's bytes are drained and dropped. The field is then
missing from `request.FILES`, and `request.upload_errors[field]` says why, for the form to show.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from django.conf import settings
from django.core.files.uploadhandler import SkipFile, TemporaryFileUploadHandler

MAX_SUFFIX_BYTES = 32


def byte_size(count: int) -> str:
    """A size for people, in binary units to one decimal: "800 bytes", "64 KiB", "1.5 GiB"."""
    for unit, scale in (("GiB", 1024 ** 3), ("MiB", 1024 ** 2), ("KiB", 1024)):
        if count >= scale:
            return f"{count / scale:.1f}".removesuffix(".0") + f" {unit}"
    return f"{count} byte" if count == 1 else f"{count} bytes"


def upload_limit_message(limit: int) -> str:
    return f"The file is larger than the upload limit of {byte_size(limit)}."


class LimitedHashingUploadHandler(TemporaryFileUploadHandler):
    def __init__(self, request=None) -> None:  # Django's signature
        super().__init__(request)
        self.limit = settings.UPLOAD_MAX_BYTES
        self.received = 0
        self.digest = hashlib.sha256()
        if request is not None and not hasattr(request, "upload_errors"):
            request.upload_errors = {}

    def new_file(self, field_name: str, file_name: str, *args, **kwargs) -> None:
        Path(settings.FILE_UPLOAD_TEMP_DIR).mkdir(parents=True, exist_ok=True)
        if len(Path(file_name).suffix.encode()) > MAX_SUFFIX_BYTES:
            # Django names the spool file "<random>.upload<suffix>": a suffix this long would pass
            # the file system's 255-byte limit (OSError, a 500), and no supported format has one.
            if self.request is not None:
                self.request.upload_errors[field_name] = f"{file_name[:80]}…: unsupported file type."
            raise SkipFile
        self.received = 0
        self.digest = hashlib.sha256()
        super().new_file(field_name, file_name, *args, **kwargs)

    def receive_data_chunk(self, raw_data: bytes, start: int) -> None:
        self.received += len(raw_data)
        if self.received > self.limit:
            self.file.close()  # deletes the partial temporary file
            if self.request is not None:
                self.request.upload_errors[self.field_name] = (
                    f"{self.file_name}: {upload_limit_message(self.limit)}"
                )
            raise SkipFile
        self.digest.update(raw_data)
        return super().receive_data_chunk(raw_data, start)

    def file_complete(self, file_size: int):  # returns Django's TemporaryUploadedFile
        uploaded = super().file_complete(file_size)
        uploaded.sha256 = self.digest.hexdigest()
        return uploaded
