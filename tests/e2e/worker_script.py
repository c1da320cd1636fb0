"""Run by test_worker_e2e in a separate process (its own DATABASE_URL/REDIS_URL/CELERY_QUEUE):
create users and a corpus, upload a dataset, start a build that a real Celery worker picks up
from Redis, wait for it, search it, and print the outcome as one JSON line."""

from __future__ import annotations

import json
import sys

import django

django.setup()

from django.contrib.auth.models import User  # noqa: E402
from django.core.files.uploadedfile import SimpleUploadedFile  # noqa: E402

from corpus.models import IndexBuild  # noqa: E402
from corpus.services.builds import build_start  # noqa: E402
from corpus.services.corpora import corpus_create, dataset_upload  # noqa: E402
from memory.services import memories_search  # noqa: E402
from tests.plugins.waiting import wait_until  # noqa: E402

texts = json.loads(sys.argv[1])
owner = User.objects.create_user("e2e-owner")
outsider = User.objects.create_user("e2e-outsider")
corpus = corpus_create(owner=owner, name="e2e", hdc_dimensions=1024, hdc_ngram=3)
content = "".join(json.dumps({"text": t}) + "\n" for t in texts).encode()
dataset_upload(corpus=corpus, user=owner, uploaded_file=SimpleUploadedFile("e2e.jsonl", content))
build = build_start(corpus=corpus, user=owner)  # autocommit: queued to Redis at once


def build_done() -> bool:
    build.refresh_from_db()
    return build.status not in (IndexBuild.Status.QUEUED, IndexBuild.Status.RUNNING)


wait_until(build_done, what=f"build {build.pk} done by the worker", timeout=240, every=0.5)
corpus.refresh_from_db()
results = memories_search(user=owner, corpus_ids=[corpus.pk], query=sys.argv[2])
print(
    json.dumps(
        {
            "status": build.status,
            "error": build.error,
            "documents": build.documents,
            "active": corpus.active_build_id,
            "build": build.pk,
            "corpus": corpus.pk,
            "memories": build.memories.count(),
            "first": results[0].memory.text if results else None,
            "outsider": len(memories_search(user=outsider, corpus_ids=[corpus.pk], query=sys.argv[2])),
            "vendor": django.db.connection.vendor,
        }
    )
)
