"""An S3 prefix source on the real `rclone serve s3` of the tests: synced, changed, unreachable,
refused credentials; and, with the portal's own storage on the same server (BUILD_STORAGE_URL and
the AWS_* variables set), a source never reads it and never uses the portal's credentials."""

from __future__ import annotations

import uuid

import boto3
import pytest

from corpus.services.corpora import corpus_create
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
from tests.plugins.api import error_of
from tests.plugins.portal import SMALL_HDC, upload
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


def test_s3_sync_follows_the_prefix(
    corpus, owner, member, s3_server, bucket, django_capture_on_commit_callbacks
):
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


@pytest.fixture
def storage(settings, monkeypatch, s3_server, s3_prefix):  # noqa: ANN201
    """The portal's own storage on the same rclone, with the worker's AWS_* variables set, as in
    production (docs/deployment.md)."""
    for name, value in s3_server.env(s3_prefix).items():
        monkeypatch.setenv(name, value)
    settings.BUILD_STORAGE_URL = f"s3://{BUCKET}/{s3_prefix}"
    return s3_prefix


@pytest.mark.parametrize("who", ["owner", "staff"])
def test_s3_sources_use_their_own_credentials_never_the_portals_storage(
        who, request, api_for, corpus, member, outsider, s3_server, storage,
        django_capture_on_commit_callbacks):
    # Another user's private upload lands in the portal's storage.
    private = corpus_create(owner=outsider, name="Private", **SMALL_HDC)
    upload(private, outsider)
    assert s3_server.objects(storage), "the upload is in the portal's storage"
    client = api_for(request.getfixturevalue(who))
    url = f"/api/v1/corpora/{corpus.pk}/sources/"
    own = f"s3://{BUCKET}/{storage}/"
    for body in [{"location": own}, {"location": own, "endpoint_url": s3_server.endpoint},
                 {"location": own, "token": ":"}, {"location": own, "token": f"{ACCESS_KEY}:"}]:
        response = client.post(url, {"name": "loot", "kind": "s3", **body}, format="json")
        assert response.status_code == 400, response.content
        assert "own credentials" in error_of(response)["message"], response.content
    # Valid credentials do not open the portal's prefix, a folder inside it, or the bucket above it.
    for location in [own, f"{own}corpora/", f"s3://{BUCKET}/", f"s3://{BUCKET}"]:
        body = {"name": "loot", "kind": "s3", "location": location, "token": f"{ACCESS_KEY}:{SECRET_KEY}",
                "endpoint_url": s3_server.endpoint}
        response = client.post(url, body, format="json")
        assert response.status_code == 400, location
        assert "portal's own storage" in error_of(response)["message"], location
    # Rows made before these rules: the sync refuses them with the same reasons, and reads nothing.
    for token in ["", f"{ACCESS_KEY}:{SECRET_KEY}"]:
        source = Source.objects.create(corpus=corpus, name=f"old-{len(token)}", kind="s3", location=own,
                                       token=token,
                                       endpoint_url=s3_server.endpoint)
        sync(source, django_capture_on_commit_callbacks)
        assert source.status == Source.Status.FAILED and not source.documents.exists(), source.error
        assert ("own credentials" if not token else "portal's own storage") in source.error
    # A blank endpoint is AWS's, never AWS_ENDPOINT_URL's (the portal's store): here it does not resolve.
    source = Source.objects.create(corpus=corpus, name="aws", kind="s3", location=f"s3://{BUCKET}/elsewhere",
                                   token=f"{ACCESS_KEY}:{SECRET_KEY}")
    sync(source, django_capture_on_commit_callbacks)
    assert source.status == Source.Status.FAILED, source.error
    assert "amazonaws.com cannot be resolved" in source.error, source.error
    assert corpus.datasets.count() == 0
