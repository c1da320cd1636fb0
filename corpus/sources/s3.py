"""An S3-compatible prefix, read with boto3: `s3://BUCKET/PREFIX` as `BUILD_STORAGE_URL` is
written, an endpoint, and KEY:SECRET (blank: boto3's own credentials, the AWS_* variables). A
document's version is its ETag: an object whose ETag is unchanged is not downloaded again."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config as BotoConfig
from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings

from corpus.sources.reading import (
    Listed,
    PathFilter,
    Scan,
    SourceReader,
    SourceRefused,
    SourceUnavailable,
    hashed_copy,
    url_parts,
)


def s3_location(url: str) -> tuple[str, str]:
    """(bucket, prefix ending in / or empty) of s3://BUCKET/PREFIX; else SourceRefused."""
    parsed, _ = url_parts(url)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise SourceRefused(f"An S3 source looks like s3://BUCKET/PREFIX, not {url[:200]!r}.")
    prefix = parsed.path.strip("/")
    return parsed.netloc, f"{prefix}/" if prefix else ""


class S3Reader(SourceReader):
    read_errors = (ClientError, BotoCoreError, ValueError)

    def __init__(self, *, location: str, endpoint_url: str, token: str, filters: PathFilter) -> None:
        self.bucket, self.prefix = s3_location(location)
        self.endpoint_url, self.filters = endpoint_url or None, filters
        key, _, secret = token.partition(":")
        self.credentials = {"aws_access_key_id": key, "aws_secret_access_key": secret} if token else {}

    @cached_property
    def client(self) -> Any:  # botocore's generated S3 client
        timeout = settings.SOURCE_TIMEOUT_SECONDS
        config = BotoConfig(connect_timeout=timeout, read_timeout=timeout, retries={"max_attempts": 2})
        return boto3.client("s3", endpoint_url=self.endpoint_url, config=config,
                            region_name="us-east-1", **self.credentials)

    def listing(self, scan: Scan) -> list[Listed]:
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix)
            objects = [item for page in pages for item in page.get("Contents", [])]
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "error")
            raise SourceUnavailable(f"s3://{self.bucket}/{self.prefix} cannot be listed: {code}.") from None
        except BotoCoreError as error:
            raise SourceUnavailable(f"The S3 store cannot be reached: {type(error).__name__}.") from None
        return [Listed(item["Key"][len(self.prefix):], {"etag": item.get("ETag", "").strip('"')}, locator=item)
                for item in objects if not item["Key"].endswith("/")]

    def fetch(self, item: Listed, target: Path) -> tuple[str, dict, str]:
        key = item.locator["Key"]
        if item.locator.get("Size", 0) > settings.UPLOAD_MAX_BYTES:
            raise ValueError("larger than the upload limit")
        body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"]
        sha256 = hashed_copy(body.iter_chunks(1 << 20), target, limit=settings.UPLOAD_MAX_BYTES)
        return sha256, item.version, f"s3://{self.bucket}/{key}"
