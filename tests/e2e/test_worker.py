"""End to end with the production components: a real Celery worker process on real Redis, with
PostgreSQL. DATABASE_URL / REDIS_URL come from the environment (default: the local services).
Unreachable services fail this test; they never skip it."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from contextlib import ExitStack

import pytest

from tests.plugins.portal import TEXTS
from tests.plugins.services import ROOT, celery_worker, e2e_env, migrate

pytestmark = pytest.mark.service


def test_real_worker_builds_on_redis_and_postgres(e2e_database, redis_url, tmp_path):
    env = e2e_env(e2e_database, redis_url, f"e2e-{uuid.uuid4().hex[:8]}", tmp_path / "data")
    migrate(env)
    worker_log = tmp_path / "worker.log"
    with celery_worker(env, worker_log, "--pool=solo"):
        driver = subprocess.run([sys.executable, str(ROOT / "tests/e2e/worker_script.py"), json.dumps(TEXTS),
                                 "storming of the Bastille in Paris"],
                                cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    log_tail = worker_log.read_text(errors="replace")[-3000:]
    assert driver.returncode == 0, driver.stderr[-3000:] + log_tail
    outcome = json.loads(driver.stdout.strip().splitlines()[-1])
    assert outcome["vendor"] == "postgresql"
    assert outcome["status"] == "succeeded", (outcome, log_tail)
    assert outcome["active"] == outcome["build"] and outcome["documents"] == outcome["memories"] == len(TEXTS)
    assert outcome["first"] == TEXTS[3] and outcome["outsider"] == 0
    assert "corpus.run_build" in log_tail and "succeeded" in log_tail


def test_web_and_worker_on_separate_disks_share_only_postgres_redis_and_the_store(
        e2e_database, redis_url, s3_server, s3_prefix, tmp_path):
    """Issue 28: the worker and the web process each with a DATA_DIR of its own; the upload reaches
    the worker, and the build the web, only through the object store (`rclone serve s3`)."""
    queue, extra = f"e2e-s3-{uuid.uuid4().hex[:8]}", {"INDEX_ON_UPLOAD": "0", **s3_server.env(s3_prefix)}
    web = e2e_env(e2e_database, redis_url, queue, tmp_path / "web", **extra)
    migrate(web)
    worker_log = tmp_path / "worker.log"
    with celery_worker(e2e_env(e2e_database, redis_url, queue, tmp_path / "worker", **extra), worker_log,
                       "--pool=solo"):
        driver = subprocess.run([sys.executable, str(ROOT / "tests/e2e/worker_script.py"), json.dumps(TEXTS),
                                 "storming of the Bastille in Paris"],
                                cwd=ROOT, env=web, capture_output=True, text=True, timeout=400)
    log_tail = worker_log.read_text(errors="replace")[-3000:]
    assert driver.returncode == 0, driver.stderr[-3000:] + log_tail
    outcome = json.loads(driver.stdout.strip().splitlines()[-1])
    assert outcome["status"] == "succeeded", (outcome, log_tail)
    assert outcome["first"] == TEXTS[3] and outcome["outsider"] == 0
    build = f"corpora/{outcome['corpus']}/builds/{outcome['build']}"
    # The worker wrote the build and read the upload from the store; the web fetched the build.
    assert (tmp_path / "worker" / build / "manifest.json").is_file()
    assert (tmp_path / "web" / build / "manifest.json").is_file()
    assert list((tmp_path / "worker" / f"corpora/{outcome['corpus']}/datasets").iterdir())
    assert f"{build}/corpus.idx" in s3_server.objects(s3_prefix)


TWO_CORPORA = r"""
import json, sys, time
import django
django.setup()
from tests.plugins.waiting import wait_until
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from corpus.models import Corpus, IndexBuild
from corpus.services.builds import build_start
from corpus.services.corpora import corpus_create, dataset_upload
from memory.services import memories_search

step = sys.argv[1]
if step == "build":  # web process A: two uploads, two builds queued at once
    owner = User.objects.create_user("two-owner")
    builds = []
    for name, texts in json.loads(sys.argv[2]).items():
        corpus = corpus_create(owner=owner, name=name, hdc_dimensions=1024, hdc_ngram=3)
        body = "".join(json.dumps({"text": t}) + "\n" for t in texts).encode()
        dataset_upload(corpus=corpus, user=owner, uploaded_file=SimpleUploadedFile(f"{name}.jsonl", body))
        builds.append(build_start(corpus=corpus, user=owner))
    wait_until(lambda: not IndexBuild.objects.filter(status__in=["queued", "running"]).exists(),
               what="both builds done", timeout=300, every=0.3)
    print(json.dumps([{"status": b.status, "error": b.error, "worker": b.worker, "documents": b.documents,
                       "memories": b.memories.count()} for b in IndexBuild.objects.order_by("pk")]))
else:  # web process B, another disk: searches both corpora
    owner = User.objects.get(username="two-owner")
    found = {}
    queries = json.loads(sys.argv[2])
    for corpus in Corpus.objects.order_by("pk"):
        results = memories_search(
            user=owner, corpus_ids=[corpus.pk], query=queries[corpus.name], top_document=True
        )
        found[corpus.name] = results[0].memory.text if results else None
    print(json.dumps(found))
"""


def test_two_workers_and_two_web_processes_on_four_disks(
    e2e_database, redis_url, s3_server, s3_prefix, tmp_path
):
    """Issue 28: two workers and two web processes, each with a disk of its own, sharing PostgreSQL,
    Redis and the store: two builds run at once, each once, on whichever worker took it, and a web
    process that took no upload serves both corpora."""
    queue, extra = f"e2e-two-{uuid.uuid4().hex[:8]}", {"INDEX_ON_UPLOAD": "0", **s3_server.env(s3_prefix)}
    migrate(e2e_env(e2e_database, redis_url, queue, tmp_path / "web-a", **extra))
    logs = [tmp_path / "worker-a.log", tmp_path / "worker-b.log"]
    corpora = {"history": TEXTS, "nature": ["Quokkas are small marsupials that live on Rottnest Island.",
                                            "Tides follow the moon because of its gravitational pull."]}
    with ExitStack() as workers:
        for log in logs:
            workers.enter_context(
                celery_worker(
                    e2e_env(e2e_database, redis_url, queue, tmp_path / log.stem, **extra),
                    log,
                    "--pool=solo",
                    "-n",
                    f"{log.stem}@%h",
                )
            )
        built = subprocess.run([sys.executable, "-c", TWO_CORPORA, "build", json.dumps(corpora)], cwd=ROOT,
                               env=e2e_env(e2e_database, redis_url, queue, tmp_path / "web-a", **extra),
                               capture_output=True, text=True, timeout=400)
        queries = {"history": "storming of the Bastille in Paris", "nature": "Quokkas on Rottnest Island"}
        searched = subprocess.run(
            [sys.executable, "-c", TWO_CORPORA, "search", json.dumps(queries)],
            cwd=ROOT,
            env=e2e_env(e2e_database, redis_url, queue, tmp_path / "web-b", **extra),
            capture_output=True,
            text=True,
            timeout=300,
        )
    log_tail = "".join(log.read_text(errors="replace")[-2000:] for log in logs)
    assert built.returncode == 0, built.stderr[-3000:] + log_tail
    assert searched.returncode == 0, searched.stderr[-3000:] + log_tail
    builds = json.loads(built.stdout.strip().splitlines()[-1])
    assert [b["status"] for b in builds] == ["succeeded", "succeeded"], (builds, log_tail)
    assert (
        [b["documents"] for b in builds] == [b["memories"] for b in builds] == [len(TEXTS), 2]
    )  # each ran once
    found = json.loads(searched.stdout.strip().splitlines()[-1])
    assert found["nature"].startswith("Quokkas") and found["history"] == TEXTS[3]
    assert not (tmp_path / "web-b" / "corpora").joinpath("1", "datasets").exists()  # it took no upload
