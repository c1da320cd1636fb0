"""A real Celery worker (prefork, Redis, PostgreSQL) whose pool child is killed mid-build: the task is
redelivered, finds its build's process gone and fails the build at once (BUILD_STALE_SECONDS is an
hour here, so the heartbeat sweep cannot be what frees the corpus), and a new build can start. The
same mid-append, and mid-merge (the full build an append's end queues when the appends grow past
SEGMENT_MERGE_PERCENT): the state it would have replaced keeps serving."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

from tests.plugins.services import ROOT, celery_worker, e2e_env, migrate

pytestmark = pytest.mark.service

DRIVER = r"""
import json, os, signal, sys, time
import django
django.setup()
from tests.plugins.waiting import wait_until
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from corpus.models import IndexBuild
from corpus.services.builds import build_start
from corpus.services.corpora import corpus_create, dataset_upload

owner = User.objects.create_user("killed-owner")
corpus = corpus_create(owner=owner, name="killed", hdc_dimensions=1024, hdc_ngram=3)
words = "river fox glucose bastille mitochondria generator volcano hash table binary search".split()
lines = [json.dumps({"text": " ".join(words[(i + j) % len(words)] for j in range(60)) + f" {i}"})
         for i in range(20000)]
dataset_upload(corpus=corpus, user=owner,
               uploaded_file=SimpleUploadedFile("big.jsonl", "\n".join(lines).encode()))
build = build_start(corpus=corpus, user=owner)

def wait(condition, seconds):
    def holds():
        build.refresh_from_db()
        return condition()
    return wait_until(holds, what=f"build {build.pk} ({build.status}, {build.phase})", timeout=seconds)

started = wait(lambda: build.status == "running" and build.worker
               and build.phase not in ("", "starting"), 180)
assert started, build.status
pid = int(build.worker.split(":")[1])
os.kill(pid, signal.SIGKILL)
killed = time.monotonic()
wait(lambda: build.status != "running", 120)
seconds = time.monotonic() - killed
print(json.dumps({"status": build.status, "error": build.error, "seconds": seconds, "killed_pid": pid,
                  "next": build_start(corpus=corpus, user=owner).status}))
"""


def test_a_killed_pool_child_fails_its_build_at_redelivery(e2e_database, redis_url, tmp_path):
    env = e2e_env(e2e_database, redis_url, f"e2e-killed-{uuid.uuid4().hex[:8]}", tmp_path / "data",
                  BUILD_STALE_SECONDS="3600")
    migrate(env)
    worker_log = tmp_path / "worker.log"
    with celery_worker(env, worker_log, "--concurrency", "1"):
        driver = subprocess.run(
            [sys.executable, "-c", DRIVER], cwd=ROOT, env=env, capture_output=True, text=True, timeout=400
        )
    log_tail = worker_log.read_text(errors="replace")[-4000:]
    assert driver.returncode == 0, driver.stderr[-3000:] + log_tail
    outcome = json.loads(driver.stdout.strip().splitlines()[-1])
    assert outcome["status"] == "failed", (outcome, log_tail)
    assert "worker process running this build died" in outcome["error"]
    assert outcome["seconds"] < 60 and outcome["next"] == "queued", outcome
    assert "WorkerLostError" in log_tail or "SIGKILL" in log_tail


# What the append and merge drivers share: a corpus built from `first`, then `big` (20,000 rows)
# uploaded as an append; `kill_mid_job` kills a job's pool child once it encodes, and says what it
# left; `append_last` appends one more upload and says whether it serves.
JOB_DRIVER = r"""
import json, os, signal
import django
django.setup()
from tests.plugins.waiting import wait_until
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from corpus.files import build_dir
from corpus.models import IndexBuild, Memory
from corpus.services.builds import index_after_upload
from corpus.services.corpora import corpus_create, dataset_upload
from memory.services import memories_search

owner = User.objects.create_user("job-owner")
corpus = corpus_create(owner=owner, name="killed mid-job", hdc_dimensions=1024, hdc_ngram=3)
QUOKKA = "Quokkas are small marsupials that live on Rottnest Island off Western Australia."

def upload(name, texts):
    body = "\n".join(json.dumps({"text": t}) for t in texts).encode()
    dataset_upload(corpus=corpus, user=owner, uploaded_file=SimpleUploadedFile(name, body))
    return index_after_upload(corpus=corpus, user=owner)  # what the page and the API call after storing

def wait(job, condition, seconds):
    def holds():
        job.refresh_from_db()
        return condition(job)
    return wait_until(holds, what=f"job {job.pk} ({job.status}, {job.phase})", timeout=seconds)

def top(query):
    found = memories_search(user=owner, corpus_ids=[corpus.pk], query=query, top_document=True)
    return found[0].memory.text if found else None

def kill_mid_job(job):
    running = wait(job, lambda j: j.status == "running" and j.worker
                   and j.phase in ("tokenize", "encode"), 180)
    assert running, job.phase
    os.kill(int(job.worker.split(":")[1]), signal.SIGKILL)
    wait(job, lambda j: j.status != "running", 120)
    corpus.refresh_from_db()
    return {"killed": job.status, "error": job.error, "state": corpus.serving_build_ids,
            "rows_left": Memory.objects.filter(build_id=job.pk).count(),
            "dir_left": build_dir(corpus.pk, job.pk).exists()}

def append_last():
    last = upload("new.jsonl", [QUOKKA])
    assert last.kind == "append", last.kind
    assert wait(last, lambda j: j.status in ("succeeded", "failed"), 240), last.status
    corpus.refresh_from_db()
    return last, {"last": last.status, "last_error": last.error, "new_found": top(QUOKKA)}

first = upload("first.jsonl", ["The storming of the Bastille began the French revolution in 1789.",
                               "Mitochondria produce most of the cell's chemical energy."])
assert wait(first, lambda j: j.status == "succeeded", 180), (first.status, first.error)
words = "river fox glucose bastille mitochondria generator volcano hash table binary search".split()
big = upload("big.jsonl",
             [" ".join(words[(i + j) % len(words)] for j in range(60)) + f" {i}" for i in range(20000)])
assert big.kind == "append"
"""

APPEND_DRIVER = JOB_DRIVER + r"""
outcome = kill_mid_job(big) | {"first": first.pk, "old_found": top("the storming of the Bastille in 1789")}
last, ending = append_last()
outcome |= ending | {"appends": corpus.active_appends, "last_id": last.pk,
                     "pending_covered": sorted(last.parameters["dataset_ids"])}
print(json.dumps(outcome))
"""

MERGE_DRIVER = JOB_DRIVER + r"""
assert wait(big, lambda j: j.status in ("succeeded", "failed"), 400), big.status
assert big.status == "succeeded", big.error
# The append holds far more than SEGMENT_MERGE_PERCENT of the full build: its end queued a merge.
merge = wait_until(lambda: IndexBuild.objects.filter(corpus=corpus, kind="build", pk__gt=big.pk).first(),
                   what="the merge queued after the append")
outcome = kill_mid_job(merge) | {
    "before": [first.pk, big.pk], "old_found": top("the storming that began the French revolution"),
    "big_found": top("river fox glucose bastille mitochondria generator volcano")}
outcome |= append_last()[1]
print(json.dumps(outcome))
"""


def _drive(
    driver: str, name: str, e2e_database: str, redis_url: str, tmp_path, timeout: int
) -> tuple[dict, str]:
    """Run `driver` against a real worker on a queue of its own: its outcome, and the worker log's tail."""
    env = e2e_env(e2e_database, redis_url, f"e2e-{name}-{uuid.uuid4().hex[:8]}", tmp_path / "data",
                  BUILD_STALE_SECONDS="3600", INDEX_ON_UPLOAD="1")
    migrate(env)
    worker_log = tmp_path / "worker.log"
    with celery_worker(env, worker_log, "--concurrency", "1"):
        driver_run = subprocess.run([sys.executable, "-c", driver], cwd=ROOT, env=env, capture_output=True,
                                    text=True, timeout=timeout)
    log_tail = worker_log.read_text(errors="replace")[-4000:]
    assert driver_run.returncode == 0, driver_run.stderr[-3000:] + log_tail
    return json.loads(driver_run.stdout.strip().splitlines()[-1]), log_tail


def test_an_upload_is_appended_by_the_real_worker_and_a_killed_append_leaves_nothing(
        e2e_database, redis_url, tmp_path):
    outcome, log_tail = _drive(APPEND_DRIVER, "append", e2e_database, redis_url, tmp_path, timeout=500)
    # Killed mid-append: failed at redelivery, the previous state serves, nothing of it is left.
    assert outcome["killed"] == "failed" and "died" in outcome["error"], outcome
    assert outcome["state"] == [outcome["first"]] and outcome["rows_left"] == 0 and not outcome["dir_left"], (
        outcome
    )
    assert outcome["old_found"].startswith("The storming of the Bastille"), outcome
    # The next upload's append holds what the killed one did not make searchable, and serves.
    assert outcome["last"] == "succeeded", (outcome, log_tail)
    assert outcome["appends"] == [outcome["last_id"]] and len(outcome["pending_covered"]) == 2, outcome
    assert outcome["new_found"].startswith("Quokkas"), outcome


def test_a_killed_merge_leaves_the_state_it_would_have_replaced_serving(e2e_database, redis_url, tmp_path):
    outcome, log_tail = _drive(MERGE_DRIVER, "merge", e2e_database, redis_url, tmp_path, timeout=900)
    # Killed mid-merge: failed at redelivery; the full build and its append still serve, searched
    # together; nothing of the merge is left.
    assert outcome["killed"] == "failed" and "died" in outcome["error"], outcome
    assert outcome["state"] == outcome["before"] and outcome["rows_left"] == 0 and not outcome["dir_left"], (
        outcome
    )
    assert outcome["old_found"].startswith(("The storming of the Bastille", "Mitochondria")), (
        outcome
    )  # first.jsonl
    assert outcome["big_found"] is not None and outcome["big_found"].split()[-1].isdigit(), (
        outcome
    )  # a big.jsonl row
    # The next upload is appended onto that state and serves.
    assert outcome["last"] == "succeeded", (outcome, log_tail)
    assert outcome["new_found"].startswith("Quokkas"), outcome
