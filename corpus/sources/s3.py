"""An S3-compatible prefix, read with boto3: `s3://BUCKET/PREFIX` as `BUILD_STORAGE_URL` is
written, an endpoint (blank: AWS), and the source's own KEY:SECRET. A document's version is its
ETag: an object whose ETag is unchanged is not downloaded again.

A source reads only with its own credentials: blank ones are refused, and the client is given
them explicitly, so boto3 never looks for others (the AWS_* variables, a profile, an instance
role). Nothing of the environment configures it: no AWS_ENDPOINT_URL, no proxy. The portal's own
storage (`BUILD_STORAGE_URL`'s bucket, at or around its prefix) is never a source, whatever the
endpoint and credentials. Before each request is sent, its endpoint's addresses are checked by the
outbound policy (core.outbound)."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config as BotoConfig
from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings

from core.outbound import OutboundUnresolved, connect_address, url_host_port
from corpus.object_store import ObjectStore
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


def s3_source_check(*, location: str, endpoint_url: str, token: str) -> tuple[str, str, dict[str, str]]:
    """(bucket, prefix, credentials) of an S3 source the portal will read; else SourceRefused: no
    KEY:SECRET of its own, an endpoint that is not http(s), or the portal's own storage."""
    bucket, prefix = s3_location(location)
    key, _, secret = token.partition(":")
    if not key.strip() or not secret.strip():
        raise SourceRefused("An S3 source needs its own credentials, KEY:SECRET in the token field; the "
                            "portal's own are never used for a source.", {"token": ["required"]})
    if endpoint_url:
        parsed, host = url_parts(endpoint_url)
        if parsed.scheme not in ("https", "http") or not host or parsed.username or parsed.password:
            raise SourceRefused(f"{endpoint_url[:200]!r} is not an http(s) endpoint URL.")
    if settings.BUILD_STORAGE_URL:
        own = ObjectStore.from_url(settings.BUILD_STORAGE_URL)
        own_prefix = f"{own.prefix}/" if own.prefix else ""
        # Inside the portal's prefix or above it: both would list the portal's files. The endpoint
        # is not compared (one store has many spellings of its address).
        if bucket == own.bucket and (prefix.startswith(own_prefix) or own_prefix.startswith(prefix)):
            raise SourceRefused(f"s3://{bucket}/{prefix} holds the portal's own storage (BUILD_STORAGE_URL); "
                                "it is never a source.", {"location": ["the portal's storage"]})
    return bucket, prefix, {"aws_access_key_id": key.strip(), "aws_secret_access_key": secret.strip()}


def _endpoint_check(request: Any, **_: Any) -> None:
    """botocore's `before-send`: the request's host must resolve only to addresses the outbound
    policy allows (OutboundRefused stops the request)."""
    host, port = url_host_port(request.url)
    connect_address(host=host, port=port)


class S3Reader(SourceReader):
    read_errors = (ValueError,)

    def __init__(self, *, location: str, endpoint_url: str, token: str, filters: PathFilter) -> None:
        self.bucket, self.prefix, self.credentials = s3_source_check(
            location=location, endpoint_url=endpoint_url, token=token)
        self.endpoint_url, self.filters = endpoint_url or None, filters

    @cached_property
    def client(self) -> Any:  # botocore's generated S3 client
        timeout = settings.SOURCE_TIMEOUT_SECONDS
        config = BotoConfig(connect_timeout=timeout, read_timeout=timeout, retries={"max_attempts": 2},
                            proxies={}, ignore_configured_endpoint_urls=True)
        # A session of its own, so a handler registered here is this source's only.
        client = boto3.session.Session().client("s3", endpoint_url=self.endpoint_url, config=config,
                                                region_name="us-east-1",
                                                **self.credentials)
        client.meta.events.register("before-send.s3", _endpoint_check)
        return client

    def listing(self, scan: Scan) -> list[Listed]:
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix
            )
            objects = [item for page in pages for item in page.get("Contents", [])]
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "error")
            raise SourceUnavailable(f"s3://{self.bucket}/{self.prefix} cannot be listed: {code}.") from None
        except BotoCoreError as error:
            raise SourceUnavailable(f"The S3 store cannot be reached: {type(error).__name__}.") from None
        except OutboundUnresolved as error:
            raise SourceUnavailable(error.message) from None
        return [
            Listed(item["Key"][len(self.prefix) :], {"etag": item.get("ETag", "").strip('"')}, locator=item)
            for item in objects
            if not item["Key"].endswith("/")
        ]

    def fetch(self, item: Listed, target: Path) -> tuple[str, dict, str]:
        key = item.locator["Key"]
        if item.locator.get("Size", 0) > settings.UPLOAD_MAX_BYTES:
            raise ValueError("larger than the upload limit")
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"]
            sha256 = hashed_copy(body.iter_chunks(1 << 20), target, limit=settings.UPLOAD_MAX_BYTES)
        except ClientError as error:
            # The code only: the message is the store's own text.
            code = error.response.get("Error", {}).get("Code", "an error")
            raise ValueError(f"the store answered {code}") from None
        except BotoCoreError as error:
            raise ValueError(f"cannot be read: {type(error).__name__}") from None
        return sha256, item.version, f"s3://{self.bucket}/{key}"
