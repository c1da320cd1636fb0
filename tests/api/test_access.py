"""Every endpoint × owner / writer / reader (`member`) / outsider / revoked token / no token.

Outsiders get 404 (they learn nothing), readers 403 where they would write, a revoked or missing
token 401 with `WWW-Authenticate: Bearer`. Each case runs on fresh rows, so writes do not leak
between cases.
"""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from accounts.models import ApiToken
from accounts.services.tokens import api_token_create, api_token_revoke
from chat.services import conversation_create, message_create_assistant, message_create_user
from corpus.models import IndexBuild, Memory
from corpus.services.builds import build_start
from tests.plugins.api import error_of, token_client
from tests.plugins.portal import jsonl_bytes

ROLES = ("owner", "writer", "member", "outsider")
VECTOR = [0.5] * 768
PAGE_META = {"filename": "r.pdf", "source_path": "/docs/r.pdf"}
CHUNK_META = {"filename": "r.pdf", "source_path": "/docs/r.pdf", "text": "Tides follow the moon."}


def _upload() -> dict:
    return {
        "file": SimpleUploadedFile("more.jsonl", jsonl_bytes(["A fresh dataset line about tides and moons."]))
    }


# (method, path, body, format, expected status per role: owner, writer, member (reader), outsider)
CASES = [
    ("get", "/api/v1/corpora/{c}/", None, None, (200, 200, 200, 404)),
    ("patch", "/api/v1/corpora/{c}/", {"description": "new"}, "json", (200, 403, 403, 404)),
    ("delete", "/api/v1/corpora/{c}/", None, None, (204, 403, 403, 404)),
    ("get", "/api/v1/corpora/{c}/datasets/", None, None, (200, 200, 200, 404)),
    ("post", "/api/v1/corpora/{c}/datasets/", _upload, "multipart", (201, 201, 403, 404)),
    ("get", "/api/v1/corpora/{c}/datasets/{d}/", None, None, (200, 200, 200, 404)),
    ("patch", "/api/v1/corpora/{c}/datasets/{d}/", {"enabled": False}, "json", (200, 200, 403, 404)),
    ("delete", "/api/v1/corpora/{c}/datasets/{d}/", None, None, (204, 204, 403, 404)),
    ("get", "/api/v1/corpora/{c}/builds/", None, None, (200, 200, 200, 404)),
    # The fixture's build is still queued: writers get the conflict, readers the refusal.
    ("post", "/api/v1/corpora/{c}/builds/", None, None, (409, 409, 403, 404)),
    ("get", "/api/v1/builds/{b}/", None, None, (200, 200, 200, 404)),
    ("post", "/api/v1/builds/{b}/cancel/", None, None, (202, 202, 403, 404)),
    # Not built yet: readers learn that (409), outsiders do not (404).
    ("get", "/api/v1/corpora/{c}/search/?q=tides", None, None, (409, 409, 409, 404)),
    ("get", "/api/v1/search/?q=tides&corpora={c}", None, None, (200, 200, 200, 404)),
    ("get", "/api/v1/memories/{m}/", None, None, (200, 200, 200, 404)),
    ("get", "/api/v1/corpora/{c}/store/", None, None, (200, 200, 200, 404)),
    (
        "post",
        "/api/v1/corpora/{c}/store/pages/",
        {"doc_id": "r", "index": 1, "embeddings": [VECTOR], "metadata": PAGE_META},
        "json",
        (201, 201, 403, 404),
    ),
    (
        "post",
        "/api/v1/corpora/{c}/store/chunks/",
        {"doc_id": "r", "index": 1, "embeddings": [VECTOR], "metadata": CHUNK_META},
        "json",
        (201, 201, 403, 404),
    ),
    (
        "post",
        "/api/v1/corpora/{c}/store/batch/",
        {
            "kind": "text",
            "doc_id": "r",
            "items": [{"index": 0, "embeddings": [VECTOR], "metadata": CHUNK_META}],
        },
        "json",
        (201, 201, 403, 404),
    ),
    (
        "post",
        "/api/v1/corpora/{c}/store/search/",
        {"kind": "text", "query": VECTOR},
        "json",
        (200, 200, 200, 404),
    ),
    (
        "post",
        "/api/v1/corpora/{c}/store/search/multivector/",
        {"kind": "text", "query": [VECTOR]},
        "json",
        (200, 200, 200, 404),
    ),
    ("get", "/api/v1/corpora/{c}/store/documents/", None, None, (200, 200, 200, 404)),
    ("get", "/api/v1/corpora/{c}/store/embeddings/nothing-page001/", None, None, (404, 404, 404, 404)),
    ("delete", "/api/v1/corpora/{c}/store/documents/nothing/", None, None, (404, 404, 403, 404)),
    ("get", "/api/v1/conversations/{v}/", None, None, (200, 404, 404, 404)),
    ("patch", "/api/v1/conversations/{v}/", {"title": "renamed"}, "json", (200, 404, 404, 404)),
    ("delete", "/api/v1/conversations/{v}/", None, None, (204, 404, 404, 404)),
    ("get", "/api/v1/conversations/{v}/messages/", None, None, (200, 404, 404, 404)),
    ("post", "/api/v1/conversations/{v}/messages/", {"content": ""}, "json", (400, 404, 404, 404)),
    ("get", "/api/v1/conversations/{v}/export/?format=md", None, None, (200, 404, 404, 404)),
    (
        "put",
        "/api/v1/conversations/{v}/messages/{a}/feedback/",
        {"rating": "down"},
        "json",
        (200, 404, 404, 404),
    ),
    # Staff only (none of these four is staff): the team lead's reads.
    ("get", "/api/v1/feedback/", None, None, (403, 403, 403, 403)),
    ("get", "/api/v1/audit/", None, None, (403, 403, 403, 403)),
    ("get", "/api/v1/usage/", None, None, (403, 403, 403, 403)),
    ("get", "/api/v1/models/corpus-{c}", None, None, (200, 200, 200, 404)),
    (
        "post",
        "/api/v1/chat/completions",
        {"model": "corpus-{c}", "messages": []},
        "json",
        (400, 400, 400, 400),
    ),
    (
        "post",
        "/api/v1/chat/completions",
        {"model": "corpus-{c}", "messages": [{"role": "assistant", "content": "x"}]},
        "json",
        (400, 400, 400, 404),
    ),
]
LISTS = ["/api/v1/corpora/", "/api/v1/conversations/", "/api/v1/models", "/api/v1/search/?q=tides"]


@pytest.fixture
def objects(corpus, owner, dataset):
    build = build_start(corpus=corpus, user=owner)  # queued: its task waits for a commit that never comes
    conversation = conversation_create(user=owner, title="Mine", corpus_ids=[corpus.pk])
    message_create_user(conversation_id=conversation.pk, content="Where do tides come from?")
    answer = message_create_assistant(conversation_id=conversation.pk, content="The moon.", status="complete")
    old_build = IndexBuild.objects.create(corpus=corpus, status="succeeded")
    memory = Memory.objects.create(corpus=corpus, build=old_build, hdv_idx=0, content_hash="0" * 32,
                                   text="Tides follow the moon.", dataset=dataset, token_count=5)
    return {
        "c": corpus.pk,
        "d": dataset.pk,
        "b": build.pk,
        "v": conversation.pk,
        "m": memory.pk,
        "a": answer.pk,
    }


def _call(client: APIClient, method: str, path: str, body, fmt):  # noqa: ANN001
    if callable(body):
        body = body()
    elif isinstance(body, dict):
        body = {k: (v.format(**_call.ids) if isinstance(v, str) else v) for k, v in body.items()}
    kwargs = {"format": fmt} if fmt else {}
    return (
        getattr(client, method)(path, body, **kwargs) if body is not None else getattr(client, method)(path)
    )


def _path(template: str, ids: dict) -> str:
    return template.format(**ids)


@pytest.mark.parametrize(("method", "template", "body", "fmt", "expected"), CASES,
                         ids=[f"{c[0]} {c[1]}" for c in CASES])
@pytest.mark.parametrize("role", range(4), ids=ROLES)
def test_endpoint_per_role(request, objects, role, method, template, body, fmt, expected):
    user = request.getfixturevalue(ROLES[role])
    _call.ids = objects
    response = _call(token_client(user), method, _path(template, objects), body, fmt)
    assert response.status_code == expected[role], (ROLES[role], response.content[:300])
    if response.status_code >= 400:
        error = error_of(response)
        if ROLES[role] == "outsider":
            # Outsiders learn nothing: not even the corpus's name.
            assert "Team notes" not in error["message"]


@pytest.mark.parametrize("credentials", ["none", "revoked", "garbage"])
def test_every_endpoint_without_a_valid_token(objects, owner, settings, credentials):
    settings.AXES_FAILURE_LIMIT = settings.LOGIN_ADDRESS_FAILURE_LIMIT = (
        1000  # it fails on purpose, many times
    )
    client = APIClient()
    if credentials == "revoked":
        token, secret = api_token_create(user=owner, name="old")
        api_token_revoke(token=token)
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    elif credentials == "garbage":
        client.credentials(HTTP_AUTHORIZATION="Bearer hdr_not-a-token")
    _call.ids = objects
    every = CASES + [("get", path, None, None, None) for path in LISTS] + [
        ("post", "/api/v1/corpora/", {"name": "x"}, "json", None),
        ("post", "/api/v1/conversations/", {}, "json", None)]
    for method, template, body, fmt, _ in every:
        response = _call(client, method, _path(template, objects), body, fmt)
        assert response.status_code == 401, (method, template, response.content[:300])
        assert response["WWW-Authenticate"].startswith("Bearer")
        assert error_of(response)["code"] in ("not_authenticated", "authentication_failed")


@pytest.mark.parametrize("path", LISTS)
def test_lists_never_show_an_outsider_anything(objects, outsider, path):
    body = token_client(outsider).get(path).json()
    items = body.get("results", body.get("data"))
    assert isinstance(items, list)
    assert all(item.get("id") not in (objects["c"], objects["v"], f"corpus-{objects['c']}") for item in items)
    assert "Team notes" not in str(body)


def test_revoked_token_fails_at_once(owner, corpus):
    token, secret = api_token_create(user=owner, name="short-lived")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert client.get("/api/v1/corpora/").status_code == 200
    api_token_revoke(token=ApiToken.objects.get(pk=token.pk))
    assert client.get("/api/v1/corpora/").status_code == 401


def test_inactive_user_token_fails(owner, corpus):
    client = token_client(owner)
    owner.is_active = False
    owner.save()
    assert client.get("/api/v1/corpora/").status_code == 401


# A document with readers of its own (`corpus.document_access`): two more roles, both in the
# corpus's readable group, one also in the group that reads the document.
DOCUMENT_ROLES = ("document_reader", "member")
DOCUMENT_CASES = [
    ("get", "/api/v1/corpora/{c}/", None, None, (200, 200)),
    ("get", "/api/v1/corpora/{c}/datasets/", None, None, (200, 200)),
    ("get", "/api/v1/corpora/{c}/datasets/{d}/", None, None, (200, 404)),
    ("patch", "/api/v1/corpora/{c}/datasets/{d}/", {"enabled": False}, "json", (403, 404)),
    ("patch", "/api/v1/corpora/{c}/datasets/{d}/", {"readers": {"users": ["member"]}}, "json", (403, 404)),
    ("delete", "/api/v1/corpora/{c}/datasets/{d}/", None, None, (403, 404)),
    ("get", "/api/v1/memories/{m}/", None, None, (200, 404)),
    ("get", "/api/v1/search/?q=tides&corpora={c}", None, None, (200, 200)),
    ("get", "/api/v1/conversations/{v}/", None, None, (404, 404)),
]


@pytest.fixture
def document_reader(readers):  # noqa: ANN001, ANN201 - fixtures
    from django.contrib.auth.models import Group, User

    user = User.objects.create_user("document_reader")
    user.groups.add(readers, Group.objects.get_or_create(name="document-group")[0])
    return user


@pytest.fixture
def document_objects(objects, dataset, document_reader):  # noqa: ANN001, ANN201 - fixtures
    from django.contrib.auth.models import Group

    from corpus.document_access import dataset_readers_set

    dataset_readers_set(dataset=dataset, groups=[Group.objects.get(name="document-group")])
    return objects


@pytest.mark.parametrize(("method", "template", "body", "fmt", "expected"), DOCUMENT_CASES,
                         ids=[f"{c[0]} {c[1]} {c[2]}" for c in DOCUMENT_CASES])
@pytest.mark.parametrize("role", range(2), ids=DOCUMENT_ROLES)
def test_document_endpoint_per_role(request, document_objects, role, method, template, body, fmt, expected):
    user = request.getfixturevalue(DOCUMENT_ROLES[role])
    _call.ids = document_objects
    response = _call(token_client(user), method, _path(template, document_objects), body, fmt)
    assert response.status_code == expected[role], (DOCUMENT_ROLES[role], response.content[:300])
    if method == "get" and template.endswith("/datasets/") and response.status_code == 200:
        listed = {item["id"] for item in response.json()["results"]}
        assert (document_objects["d"] in listed) is (DOCUMENT_ROLES[role] == "document_reader")
