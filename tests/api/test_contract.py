"""One contract per response: every operation of the generated OpenAPI schema is called as a client
calls it, with real data (a built corpus, a real LLM answer, a real multi-vector store), and what it
answers is validated against that operation's documented response: status, content type, and the
body by JSON Schema, strictly (a key the schema does not name fails too, so a field sent but not
documented cannot slip in)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
import yaml
from django.db import connection
from jsonschema import Draft202012Validator

from accounts.services.tokens import api_token_create
from corpus.models import Dataset
from tests.plugins.chat import make_corpus
from tests.plugins.portal import jsonl_bytes

DIM = 768
META = {"filename": "report.pdf", "source_path": "/docs/report.pdf"}
QUESTION = "How does a generator function pause at yield and resume where it left off?"


def _json_schema(node: Any) -> Any:
    """OpenAPI 3.0's schema dialect as JSON Schema: `nullable` becomes a null alternative, and every
    object that lists its properties admits no others."""
    if isinstance(node, list):
        return [_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _json_schema(value) for key, value in node.items() if key != "nullable"}
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    if node.get("nullable"):
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
        if isinstance(out.get("type"), str):
            out["type"] = [out["type"], "null"]
        elif "type" not in out:
            out = {"anyOf": [out, {"type": "null"}]}
    return out


def _operation_of(schema: dict, method: str, path: str) -> tuple[str, dict]:
    for template, operations in schema["paths"].items():
        parts, wanted = template.strip("/").split("/"), path.split("?")[0].strip("/").split("/")
        if len(parts) == len(wanted) and method.lower() in operations \
                and all(p.startswith("{") or p == w for p, w in zip(parts, wanted, strict=True)):
            return template, operations[method.lower()]
    raise AssertionError(f"{method} {path}: not in the schema")


class Contract:
    """Calls operations over HTTP and checks each answer against the schema; records which were called."""

    def __init__(self, http: httpx.Client, schema: dict) -> None:
        self.http, self.schema = http, schema
        self.components = _json_schema(schema["components"])
        self.called: set[tuple[str, str]] = set()
        self.failures: list[str] = []

    def call(self, method: str, path: str, expected: int, **kwargs: Any) -> Any:
        response = self.http.request(method, path, **kwargs)
        assert response.status_code == expected, (method, path, response.status_code, response.text[:500])
        template, operation = _operation_of(self.schema, method, path)
        self.called.add((method.upper(), template))
        documented = operation["responses"].get(str(expected))
        if documented is None:
            self.failures.append(f"{method} {template}: {expected} is not documented")
            return None
        content_type = response.headers.get("content-type", "").split(";")[0].strip()
        if not documented.get("content"):
            if response.content:
                self.failures.append(f"{method} {template}: a body where none is documented")
            return None
        if content_type not in documented["content"]:
            self.failures.append(
                f"{method} {template}: {content_type} is not among {list(documented['content'])}"
            )
            return None
        if content_type != "application/json":
            return response.text
        body = response.json()
        schema = {
            **_json_schema(documented["content"][content_type]["schema"]),
            "components": self.components,
        }
        for error in Draft202012Validator(schema).iter_errors(body):
            where = "/".join(str(p) for p in error.absolute_path)
            self.failures.append(
                f"{method} {template} {expected}: at {where or 'the top'}: {error.message[:300]}"
            )
        return body


def _rows(seed: int, rows: int = 3) -> list[list[float]]:
    return np.random.default_rng(seed).standard_normal((rows, DIM)).astype(np.float32).tolist()


@pytest.fixture
def contract(live_api, owner) -> Iterator[Contract]:
    from hdrag_site.celery import app

    # Builds stay queued (sent to this test's Redis, never run): what a client sees until a worker
    # takes them, and what can be cancelled.
    app.conf.task_always_eager = False
    secret = api_token_create(user=owner, name="contract")[1]
    try:
        with httpx.Client(
            base_url=live_api.url, headers={"Authorization": f"Bearer {secret}"}, timeout=300
        ) as http:
            schema = http.get("/api/schema/")
            assert schema.status_code == 200, schema.text[:300]
            yield Contract(http, yaml.safe_load(schema.text))
    finally:
        app.conf.task_always_eager = True


def test_every_operation_answers_what_its_schema_documents(
    contract, chat_settings, owner, pydoc_build, settings, tmp_path
):
    c = contract
    corpus = make_corpus(owner, pydoc_build)
    # make_corpus gives its dataset the primary key its index recorded (1): move the sequence past it.
    with connection.cursor() as cursor:
        table = Dataset._meta.db_table
        cursor.execute(
            f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT MAX(id) FROM {table}))"
        )
    corpus_url = f"/api/v1/corpora/{corpus.pk}"
    # Corpora, datasets, builds: a built corpus, and a new one whose builds stay queued.
    c.call("GET", "/api/v1/corpora/", 200)
    c.call("GET", f"{corpus_url}/", 200)
    c.call("PATCH", f"{corpus_url}/", 200, json={"description": "Python's documentation topics."})
    datasets = c.call("GET", f"{corpus_url}/datasets/", 200)
    dataset_id = datasets["results"][0]["id"]
    c.call("GET", f"{corpus_url}/datasets/{dataset_id}/", 200)
    c.call("PATCH", f"{corpus_url}/datasets/{dataset_id}/", 200, json={"enabled": True})
    builds = c.call("GET", f"{corpus_url}/builds/", 200)
    c.call("GET", f"/api/v1/builds/{builds['results'][0]['id']}/", 200)
    scratch = c.call("POST", "/api/v1/corpora/", 201, json={"name": "Scratch", "visibility": "private"})
    scratch_url = f"/api/v1/corpora/{scratch['id']}"
    uploaded = c.call("POST", f"{scratch_url}/datasets/", 201,
                      files={"file": ("tides.jsonl", jsonl_bytes(["Tides follow the moon."]))})
    queued = uploaded["index_job"] or c.call("POST", f"{scratch_url}/builds/", 202)
    c.call("POST", f"/api/v1/builds/{queued['id']}/cancel/", 202)
    c.call("POST", f"{scratch_url}/builds/", 202)
    # Search and memories.
    found = c.call("GET", f"{corpus_url}/search/", 200, params={"q": QUESTION})
    assert found["results"], found
    c.call("GET", "/api/v1/search/", 200, params={"q": QUESTION, "corpora": str(corpus.pk)})
    c.call("GET", f"/api/v1/memories/{found['results'][0]['id']}/", 200)
    # Conversations, with a real answer.
    conversation = c.call(
        "POST", "/api/v1/conversations/", 201, json={"title": "Contract", "corpora": [corpus.pk]}
    )
    conversation_url = f"/api/v1/conversations/{conversation['id']}"
    c.call("GET", "/api/v1/conversations/", 200)
    c.call("GET", f"{conversation_url}/", 200)
    c.call("PATCH", f"{conversation_url}/", 200, json={"token_budget": 400})
    c.call("PATCH", f"{conversation_url}/", 400, json={"model": "no-such-model"})
    turn = c.call("POST", f"{conversation_url}/messages/", 201, json={"content": QUESTION})
    assert turn["message"]["memories"], turn
    c.call("GET", f"{conversation_url}/messages/", 200)
    c.call("GET", f"{conversation_url}/export/", 200)
    c.call("GET", f"{conversation_url}/export/", 200, params={"format": "md"})
    rated = f"{conversation_url}/messages/{turn['message']['id']}/feedback/"
    c.call("PUT", rated, 200, json={"rating": "down", "comment": "It cites the wrong section."})
    c.call("PUT", rated, 204, json={"rating": None})
    c.call("GET", "/api/v1/feedback/", 403)  # staff only
    c.call("GET", "/api/v1/audit/", 403)  # staff only
    c.call("GET", "/api/v1/usage/", 403)  # staff only
    # OpenAI-compatible.
    c.call("GET", "/api/v1/models", 200)
    c.call("GET", f"/api/v1/models/corpus-{corpus.pk}", 200)
    paired = f"corpus-{corpus.pk}@{settings.LLM_MODEL}"  # the corpus, answered by a named LLM model
    c.call("GET", f"/api/v1/models/{paired}", 200)
    completion = c.call("POST", "/api/v1/chat/completions", 200, json={
        "model": paired, "messages": [{"role": "user", "content": QUESTION}]})
    assert completion["memories"] and completion["model"] == paired, completion
    c.call("POST", "/api/v1/chat/completions", 404, json={
        "model": f"corpus-{corpus.pk}@no-such-model", "messages": [{"role": "user", "content": QUESTION}]})
    # The multi-vector store.
    store_url = f"{corpus_url}/store"
    c.call("POST", f"{store_url}/pages/", 201,
           json={"doc_id": "report", "index": 1, "embeddings": _rows(1), "metadata": META})
    c.call(
        "POST",
        f"{store_url}/chunks/",
        201,
        json={
            "doc_id": "report",
            "index": 0,
            "embeddings": _rows(2),
            "metadata": {**META, "text": "a chunk"},
        },
    )
    c.call(
        "POST",
        f"{store_url}/batch/",
        201,
        json={
            "kind": "text",
            "doc_id": "manual",
            "items": [
                {"index": i, "embeddings": _rows(10 + i), "metadata": {**META, "text": f"chunk {i}"}}
                for i in range(3)
            ],
        },
    )
    c.call("GET", f"{store_url}/", 200)
    c.call("POST", f"{store_url}/search/", 200, json={"kind": "text", "query": _rows(2)[0]})
    c.call(
        "POST",
        f"{store_url}/search/multivector/",
        200,
        json={"kind": "text", "query": _rows(2), "n_results": 2},
    )
    c.call("GET", f"{store_url}/embeddings/report-page001/", 200)
    c.call("GET", f"{store_url}/embeddings/report-chunk0000/", 200, params={"encoding": "base64"})
    c.call("GET", f"{store_url}/documents/", 200)
    c.call("DELETE", f"{store_url}/documents/manual/", 200)
    # Sources: a folder under SOURCE_ROOTS, added, read, deleted; another added and synced.
    folder = tmp_path / "sources" / "notes"
    folder.mkdir(parents=True)
    (folder / "tides.md").write_text("# Tides\n\nTides follow the moon.\n")
    settings.SOURCE_ROOTS = [str(tmp_path / "sources")]
    source = c.call("POST", f"{scratch_url}/sources/", 201,
                    json={"name": "Notes", "kind": "folder", "location": str(folder)})
    c.call("GET", f"{scratch_url}/sources/", 200)
    c.call("GET", f"/api/v1/sources/{source['id']}/", 200)
    c.call("PATCH", f"/api/v1/sources/{source['id']}/", 200, json={"reader_rules": []})
    c.call("DELETE", f"/api/v1/sources/{source['id']}/", 204)
    source = c.call("POST", f"{scratch_url}/sources/", 201,
                    json={"name": "Notes again", "kind": "folder", "location": str(folder)})
    c.call("POST", f"/api/v1/sources/{source['id']}/sync/", 202, json={})
    # Deletions last.
    c.call("DELETE", f"{scratch_url}/datasets/{uploaded['id']}/", 204)
    c.call("DELETE", f"{conversation_url}/", 204)
    c.call("DELETE", f"{scratch_url}/", 204)

    documented = {
        (method.upper(), path) for path, operations in c.schema["paths"].items() for method in operations
    }
    assert documented - c.called == set(), "operations this test does not call yet"
    assert not c.failures, f"{len(c.failures)} answers differ from the schema:\n" + "\n".join(c.failures)


def test_the_strict_check_catches_an_undocumented_key_and_a_wrong_type():
    """The check itself: the schema dialect's conversion refuses what it should."""
    schema = {"type": "object", "required": ["id"], "properties": {
        "id": {"type": "integer"}, "note": {"type": "string", "nullable": True},
        "kind": {"type": "string", "enum": ["a"], "nullable": True},
        "build": {"allOf": [{"$ref": "#/components/schemas/Build"}], "nullable": True}}}
    components = {"schemas": {"Build": {"type": "object", "properties": {"id": {"type": "integer"}}}}}
    validator = Draft202012Validator(
        {**_json_schema(copy.deepcopy(schema)), "components": _json_schema(components)}
    )
    assert validator.is_valid({"id": 1, "note": None, "kind": None, "build": None})
    assert validator.is_valid({"id": 1, "build": {"id": 2}})
    assert not validator.is_valid({"id": 1, "extra": 2})  # sent but not documented
    assert not validator.is_valid({"id": "1"})
    assert not validator.is_valid({"id": 1, "build": {"id": 2, "extra": 3}})
    assert not validator.is_valid({"note": "no id"})
