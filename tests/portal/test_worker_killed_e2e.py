"""A real Celery worker (prefork, Redis, PostgreSQL) whose pool child is killed mid-build: the task is
redelivered, finds its build's process gone and fails the build at once (BUILD_STALE_SECONDS is an
hour here, so the heartbeat sweep cannot be what frees the corpus), and a new build can start."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid

import pytest

from tests.portal.test_worker_e2e import ROOT, e2e_database, redis_url  # noqa: F401 - fixtures

pytestmark = pytest.mark.service

DRIVER = r"""
import json, os, signal, sys, time
import django
django.setup()
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from corpus.models import IndexBuild
from corpus.services.builds import build_start
from corpus.services.corpora import corpus_create, dataset_upload

owner = User.objects.create_user("killed-owner")
corpus = corpus_create(owner=owner, name="killed", hdc_dimensions=1024, hdc_ngram=3)
words = "river fox glucose bastille mitochondria generator volcano hash table binary search".split()
lines = [json.dumps({"text": " ".join(words[(i + j) % len(words)] for j in range(60)) + f" {i}"}) for i in range(20000)]
dataset_upload(corpus=corpus, user=owner, uploaded_file=SimpleUploadedFile("big.jsonl", "\n".join(lines).encode()))
build = build_start(corpus=corpus, user=owner)

def wait(condition, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        build.refresh_from_db()
        if condition():
            return True
        time.sleep(0.05)
    return False

assert wait(lambda: build.status == "running" and build.worker and build.phase not in ("", "starting"), 180), build.status
pid = int(build.worker.split(":")[1])
os.kill(pid, signal.SIGKILL)
killed = time.monotonic()
wait(lambda: build.status != "running", 120)
seconds = time.monotonic() - killed
print(json.dumps({"status": build.status, "error": build.error, "seconds": seconds, "killed_pid": pid,
                  "next": build_start(corpus=corpus, user=owner).status}))
"""


def test_a_killed_pool_child_fails_its_build_at_redelivery(e2e_database, redis_url, tmp_path):  # noqa: F811
    queue = f"e2e-killed-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "hdrag_site.settings", "HDRAG_ENV": "development",
           "DATABASE_URL": e2e_database, "REDIS_URL": redis_url, "CELERY_QUEUE": queue, "BUILD_STALE_SECONDS": "3600",
           "CELERY_TASK_ALWAYS_EAGER": "0", "DATA_DIR": str(tmp_path / "data"), "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env, check=True,
                   timeout=300)
    worker_log = tmp_path / "worker.log"
    with open(worker_log, "wb") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "hdrag_site", "worker", "-Q", queue, "--concurrency", "1",
             "--without-gossip", "--without-mingle", "-l", "info"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        driver = subprocess.run([sys.executable, "-c", DRIVER], cwd=ROOT, env=env, capture_output=True, text=True,
                                timeout=400)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=60)
    log_tail = worker_log.read_text(errors="replace")[-4000:]
    assert driver.returncode == 0, driver.stderr[-3000:] + log_tail
    outcome = json.loads(driver.stdout.strip().splitlines()[-1])
    assert outcome["status"] == "failed", (outcome, log_tail)
    assert "worker process running this build died" in outcome["error"]
    assert outcome["seconds"] < 60 and outcome["next"] == "queued", outcome
    assert "WorkerLostError" in log_tail or "SIGKILL" in log_tail
