"""Object storage for uploads and index segments, so that web processes and workers can run on
different machines (docs/ARCHITECTURE.md "Several machines").

`BUILD_STORAGE_URL` unset: nothing here runs; uploads and builds live under `DATA_DIR` as they
always did. `s3://BUCKET/PREFIX`: an S3-compatible store, reached with boto3 (which reads
`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and `AWS_DEFAULT_REGION` itself).
Keys mirror `DATA_DIR`'s layout: `PREFIX/corpora/<corpus>/datasets/<file>` for uploads (the web
writes them, a worker reads them), `PREFIX/corpora/<corpus>/builds/<build>/<file>` for segments
(a worker publishes them before activation, a web process fetches them into its local cache).

Every file is published with its size and sha256 (recorded on the build row as
`BuildParameters.published`, committed with the activation), and every fetch is checked against
them before it is renamed into place: a file that was cut short, or corrupted in the store or the
cache, is never memory-mapped.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from django.conf import settings

from core.cache import function_cache_register
from core.errors import ApplicationError
from engine.files import atomic_write

logger = logging.getLogger(__name__)
MANIFEST = "manifest.json"


class ObjectStoreUnavailable(ApplicationError):
    """The object store cannot be reached, or refused an operation: a 503 with the reason."""

    code = "store_unavailable"
    status = 503


class ObjectStoreCorrupt(ObjectStoreUnavailable):
    """A stored file does not match the size and checksum recorded when it was published."""

    code = "store_corrupt"


def file_digest(path: Path) -> dict[str, Any]:
    """{"bytes", "sha256"} of a file."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return {"bytes": path.stat().st_size, "sha256": digest.hexdigest()}


@dataclass(frozen=True)
class ObjectStore:
    """An S3 bucket and key prefix, through boto3."""

    bucket: str
    prefix: str

    @classmethod
    def from_url(cls, url: str) -> ObjectStore:
        parsed = urlparse(url)
        if parsed.scheme != "s3" or not parsed.netloc:
            raise ValueError(f"BUILD_STORAGE_URL must look like s3://BUCKET/PREFIX, got {url!r}")
        return cls(parsed.netloc, parsed.path.strip("/"))

    @property
    def client(self) -> Any:  # botocore's generated S3 client
        return _client()

    def key(self, relative: str) -> str:
        return f"{self.prefix}/{relative}" if self.prefix else relative

    def _call(self, what: str, call: Any, *args: Any, **kwargs: Any) -> Any:
        from boto3.exceptions import Boto3Error
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return call(*args, **kwargs)
        except (BotoCoreError, ClientError, Boto3Error) as error:
            raise ObjectStoreUnavailable(
                f"The object store (s3://{self.bucket}/{self.prefix}) could not {what}: {error}"
            ) from error

    def put(self, relative: str, path: Path) -> dict[str, Any]:
        """Upload one file; returns its {"bytes", "sha256"}."""
        digest = file_digest(path)
        self._call(f"store {relative}", self.client.upload_file, str(path), self.bucket, self.key(relative))
        return digest

    def get(self, relative: str, path: Path, expected: dict[str, Any] | None = None) -> None:
        """Download one file to `path` (atomically: a temporary name, checked, then renamed)."""
        with atomic_write(path) as partial:
            self._call(
                f"read {relative}", self.client.download_file, self.bucket, self.key(relative), str(partial)
            )
            if expected is not None:
                found = file_digest(partial)
                if found != {"bytes": expected["bytes"], "sha256": expected["sha256"]}:
                    raise ObjectStoreCorrupt(
                        f"{relative} in the object store does not match what was published "
                        f"({found['bytes']} bytes, sha256 {found['sha256'][:12]}…; expected "
                        f"{expected['bytes']} bytes, {expected['sha256'][:12]}…)"
                    )

    def delete_prefix(self, relative: str) -> int:
        """Delete every object under a folder; returns how many."""
        paginator = self.client.get_paginator("list_objects_v2")
        deleted = 0
        prefix = self.key(relative.rstrip("/") + "/")
        for page in self._call(f"list {relative}", lambda: list(paginator.paginate(Bucket=self.bucket,
                                                                                    Prefix=prefix))):
            keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
            if keys:
                self._call(f"delete {relative}", self.client.delete_objects, Bucket=self.bucket,
                           Delete={"Objects": keys, "Quiet": True})
                deleted += len(keys)
        return deleted

    def sizes(self, relative: str) -> dict[str, int]:
        """{key relative to the prefix: size} of every object under a folder: one listing (a page of
        1,000 keys a request), nothing downloaded."""
        paginator = self.client.get_paginator("list_objects_v2")
        prefix, root = self.key(relative.rstrip("/") + "/"), len(self.key(""))
        pages = self._call(f"list {relative}",
                           lambda: list(paginator.paginate(Bucket=self.bucket, Prefix=prefix)))
        return {item["Key"][root:]: item["Size"] for page in pages for item in page.get("Contents", [])}

    def exists(self, relative: str) -> bool:
        """Whether an object is stored under `relative`."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.head_object(Bucket=self.bucket, Key=self.key(relative))
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise ObjectStoreUnavailable(
                f"The object store (s3://{self.bucket}/{self.prefix}) could not read {relative}: {error}"
            ) from error
        except BotoCoreError as error:
            raise ObjectStoreUnavailable(
                f"The object store (s3://{self.bucket}/{self.prefix}) could not read {relative}: {error}"
            ) from error
        return True

    def delete(self, relative: str) -> None:
        self._call(
            f"delete {relative}", self.client.delete_object, Bucket=self.bucket, Key=self.key(relative)
        )

    def ping(self) -> None:
        """Raise ObjectStoreUnavailable unless the bucket answers (the health endpoint)."""
        self._call("be reached", self.client.head_bucket, Bucket=self.bucket)


def _client() -> Any:
    """The boto3 client of this process's environment (boto3 clients are thread-safe)."""
    return _client_for(*(os.environ.get(name, "") for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID",
                                                               "AWS_DEFAULT_REGION")))


@function_cache_register
@functools.lru_cache(maxsize=4)
def _client_for(endpoint: str, access_key: str, region: str) -> Any:  # one per environment
    """Short timeouts, so a store that is down fails a request in seconds; checksums are asked for
    only where S3 requires them (S3-compatible servers differ, and every file is checked by sha256).
    boto3 reads the AWS_* variables itself; the arguments only key the cache."""
    import boto3
    from botocore.config import Config

    config = Config(
        connect_timeout=5,
        read_timeout=60,
        retries={"max_attempts": 2, "mode": "standard"},
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    return boto3.client("s3", config=config)


def object_store() -> ObjectStore | None:
    """The configured store, or None when builds and uploads stay under DATA_DIR."""
    return ObjectStore.from_url(settings.BUILD_STORAGE_URL) if settings.BUILD_STORAGE_URL else None


def build_key(corpus_id: int, build_id: int) -> str:
    return f"corpora/{corpus_id}/builds/{build_id}"


def publish_build(*, corpus_id: int, build_id: int, directory: Path) -> dict[str, dict[str, Any]]:
    """Upload a finished build or segment directory, file by file, the manifest last; returns
    {file name: {"bytes", "sha256"}} for the build row. A worker killed part way leaves objects
    that no row points at; the sweep that fails its job deletes them (`unpublish_build`)."""
    store = object_store()
    if store is None:
        return {}
    files = sorted(
        (p for p in directory.iterdir() if p.is_file()), key=lambda p: (p.name == MANIFEST, p.name)
    )
    published = {}
    for path in files:
        published[path.name] = store.put(f"{build_key(corpus_id, build_id)}/{path.name}", path)
    return published


def unpublish_build(*, corpus_id: int, build_id: int) -> None:
    """Best effort: delete a build's objects (a failed job's, or a deleted build's)."""
    store = object_store()
    if store is None:
        return
    try:
        store.delete_prefix(build_key(corpus_id, build_id))
    except ObjectStoreUnavailable:
        logger.warning("build %s: deleting its objects failed; they are never read", build_id, exc_info=True)


def fetch_build(
    *, corpus_id: int, build_id: int, directory: Path, published: dict[str, dict[str, Any]]
) -> None:
    """Make `directory` hold the published files of a build, each checked (a file already there
    with the right size is kept; the manifest, fetched last, marks the directory complete)."""
    store = object_store()
    if store is None or not published:
        return
    names = sorted(published, key=lambda name: (name == MANIFEST, name))
    for name in names:
        path = directory / name
        if path.is_file() and path.stat().st_size == published[name]["bytes"] and name != MANIFEST:
            continue
        store.get(f"{build_key(corpus_id, build_id)}/{name}", path, published[name])


def verify_local(directory: Path, published: dict[str, dict[str, Any]]) -> list[str]:
    """The names of the files of `directory` that are missing or differ from what was published."""
    bad = []
    for name, expected in published.items():
        path = directory / name
        if not path.is_file() or file_digest(path) != {
            "bytes": expected["bytes"],
            "sha256": expected["sha256"],
        }:
            bad.append(name)
    return bad


def delete_corpus_objects(corpus_id: int) -> None:
    """Best effort: every object of a deleted corpus (uploads and builds)."""
    store = object_store()
    if store is None:
        return
    try:
        store.delete_prefix(f"corpora/{corpus_id}")
    except ObjectStoreUnavailable:
        logger.warning(
            "corpus %s: deleting its objects failed; they are never read", corpus_id, exc_info=True
        )


def put_dataset(relative: str, path: Path) -> None:
    store = object_store()
    if store is not None:
        store.put(relative, path)


def fetch_dataset(relative: str, path: Path) -> None:
    """Bring an uploaded dataset to this machine's DATA_DIR when it is not there (a worker)."""
    store = object_store()
    if store is not None and not path.is_file():
        store.get(relative, path)


def delete_dataset(relative: str) -> None:
    store = object_store()
    if store is None:
        return
    try:
        store.delete(relative)
    except ObjectStoreUnavailable:
        logger.warning("dataset %s: deleting its object failed; it is never read", relative, exc_info=True)
