"""An S3-compatible prefix, read with boto3: `s3://BUCKET/PREFIX` as `BUILD_STORAGE_URL` is
written, an endpoint, and KEY:SECRET (blank: boto3's own credentials, the AWS_* variables). A
document's version is its ETag: an object whose ETag is unchanged is not downloaded again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config as BotoConfig
from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings

from corpus.sources.reading import (
    Fetched,
    Known,
    PathFilter,
    Progress,
    Scan,
    SourceRefused,
    SourceUnavailable,
    hashed_copy,
    local_name,
    url_parts,
)


def s3_location(url: str) -> tuple[str, str]:
    """(bucket, prefix ending in / or empty) of s3://BUCKET/PREFIX; else SourceRefused."""
    parsed, _ = url_parts(url)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise SourceRefused(f"An S3 source looks like s3://BUCKET/PREFIX, not {url[:200]!r}.")
    prefix = parsed.path.strip("/")
    return parsed.netloc, f"{prefix}/" if prefix else ""


class S3Reader:
    def __init__(self, *, location: str, endpoint_url: str, token: str, filters: PathFilter) -> None:
        self.bucket, self.prefix = s3_location(location)
        self.endpoint_url, self.filters = endpoint_url or None, filters
        key, _, secret = token.partition(":")
        self.credentials = {"aws_access_key_id": key, "aws_secret_access_key": secret} if token else {}

    def _client(self) -> Any:  # botocore's generated S3 client
        timeout = settings.SOURCE_TIMEOUT_SECONDS
        config = BotoConfig(connect_timeout=timeout, read_timeout=timeout, retries={"max_attempts": 2})
        return boto3.client("s3", endpoint_url=self.endpoint_url, config=config,
                            region_name="us-east-1", **self.credentials)

    def _listing(self, client: Any) -> list[dict]:
        try:
            pages = client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix)
            return [item for page in pages for item in page.get("Contents", [])]
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "error")
            raise SourceUnavailable(f"s3://{self.bucket}/{self.prefix} cannot be listed: {code}.") from None
        except BotoCoreError as error:
            raise SourceUnavailable(f"The S3 store cannot be reached: {type(error).__name__}.") from None

    def scan(self, *, known: dict[str, Known], workdir: Path, progress: Progress) -> Scan:
        client = self._client()
        scan = Scan()
        objects = [item for item in self._listing(client) if not item["Key"].endswith("/")]
        for number, item in enumerate(objects):
            progress(number, len(objects))
            path = item["Key"][len(self.prefix):]
            if not self.filters.wants(path):
                continue
            etag = item.get("ETag", "").strip('"')
            previous = known.get(path)
            if previous is not None and previous.version.get("etag") == etag:
                scan.unchanged.add(path)
                continue
            if item.get("Size", 0) > settings.UPLOAD_MAX_BYTES:
                scan.failed.append((path, "larger than the upload limit"))
                continue
            target = local_name(workdir, number, path)
            try:
                body = client.get_object(Bucket=self.bucket, Key=item["Key"])["Body"]
                sha256 = hashed_copy(body.iter_chunks(1 << 20), target, limit=settings.UPLOAD_MAX_BYTES)
            except (ClientError, BotoCoreError, ValueError) as error:
                scan.failed.append((path, str(error)))
                continue
            scan.fetched.append(Fetched(path, target, sha256, {"etag": etag},
                                        url=f"s3://{self.bucket}/{item['Key']}"))
        return scan
