"""An S3 prefix source on the real `rclone serve s3` of the tests: synced, changed, unreachable,
refused credentials. Uploads stay on local disk here (no BUILD_STORAGE_URL): the source is only read."""

from __future__ import annotations

import uuid

import boto3
import pytest

from corpus.sources.models import Source
from corpus.sources.services import source_create
from tests.corpus.sources import (
    ADDED,
    CHANGED,
    DELETED,
    DOCS,
    assert_all_still_found,
    assert_first_sync,
    assert_second_sync,
    sync,
)
from tests.plugins.s3 import ACCESS_KEY, BUCKET, SECRET_KEY

# The servers listen on loopback: these sources are allowed it, as an operator would allow a network.
pytestmark = pytest.mark.usefixtures("allow_loopback")


@pytest.fixture
def bucket(s3_server):
    client = boto3.client("s3", endpoint_url=s3_server.endpoint, aws_access_key_id=ACCESS_KEY,
                          aws_secret_access_key=SECRET_KEY, region_name="us-east-1")
    return client, f"sources-{uuid.uuid4().hex[:8]}"


def put(client, prefix: str, files: dict[str, str]) -> None:  # noqa: ANN001 - a boto3 client
    for path, text in files.items():
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/{path}", Body=text.encode())


def test_s3_sync_follows_the_prefix(corpus, owner, member, s3_server, bucket, django_capture_on_commit_callbacks):
    client, prefix = bucket
    put(client, prefix, {**DOCS, "photo.jpg": "not a document"})
    put(client, f"{prefix}-other", {"elsewhere.md": "The ocelot note is under another prefix.\n"})
    source = source_create(corpus=corpus, user=owner, name="bucket", kind="s3", location=f"s3://{BUCKET}/{prefix}",
                           endpoint_url=s3_server.endpoint, token=f"{ACCESS_KEY}:{SECRET_KEY}")
    sync(source, django_capture_on_commit_callbacks)
    assert_first_sync(source, member, corpus)
    etag = source.documents.get(path="faq.md").version["etag"]
    put(client, prefix, CHANGED | ADDED)
    client.delete_object(Bucket=BUCKET, Key=f"{prefix}/{DELETED}")
    sync(source, django_capture_on_commit_callbacks)
    assert_second_sync(source, member, corpus)
    assert source.documents.get(path="faq.md").version["etag"] == etag
    assert source.documents.get(path="new/cassowary.md").url == f"s3://{BUCKET}/{prefix}/new/cassowary.md"
    # Refused credentials, then a store that cannot be reached: the reason, and nothing lost.
    Source.objects.filter(pk=source.pk).update(token=f"{ACCESS_KEY}:wrong-secret")
    sync(source, django_capture_on_commit_callbacks)
    assert source.status == Source.Status.FAILED and "cannot be listed" in source.error
    assert "wrong-secret" not in source.error
    assert_all_still_found(member, corpus)
    Source.objects.filter(pk=source.pk).update(endpoint_url="http://127.0.0.1:9",
                                               token=f"{ACCESS_KEY}:{SECRET_KEY}")
    sync(source, django_capture_on_commit_callbacks)
    assert source.status == Source.Status.FAILED and "cannot be reached" in source.error
    assert_all_still_found(member, corpus)
