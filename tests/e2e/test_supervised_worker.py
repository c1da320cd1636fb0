"""The real Celery worker (prefork pool, embedded beat, Redis, PostgreSQL) under `./portal supervise`,
as `./portal run` runs it: its main process killed with SIGKILL while its pool and beat children hold
its output is noticed within 5 s, its children go with it (no second beat left sending tasks, no
zombie), it is restarted, and an upload made after the kill is built by the new worker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from tests.plugins.portal import TEXTS
from tests.plugins.services import ROOT, e2e_env, migrate
from tests.plugins.supervised import Supervised, group_members
from tests.plugins.waiting import wait_until

pytestmark = pytest.mark.service

# The Procfile's worker entry, on the test's own queue.
WORKER = ('exec "$PY" -m celery -A hdrag_site worker -Q "$CELERY_QUEUE" -l info --concurrency 1 '
          '-B --schedule "$DATA_DIR/celerybeat-schedule" --without-gossip --without-mingle')


def test_a_sigkilled_worker_is_restarted_and_builds_an_upload_made_after(e2e_database, redis_url, tmp_path):
    env = e2e_env(e2e_database, redis_url, f"e2e-supervised-{uuid.uuid4().hex[:8]}", tmp_path / "data",
                  PY=sys.executable)
    migrate(env)
    procfile = tmp_path / "Procfile"
    procfile.write_text(f"worker: {WORKER}\n")
    portal = Supervised("supervise", "--restart", "worker", str(procfile), env=env)
    try:
        _, started = portal.wait_for(r"system \| worker started \(pid=(\d+)\)")
        portal.wait_for(r"worker \| .*celery@\S+ ready\.", timeout=120)
        main = int(started[1])
        # The main process, its pool child and the beat process, all writing to the one pipe.
        children = wait_until(lambda: len(members := group_members(main)) >= 3 and members,
                              what=lambda: f"the worker's pool and beat children: {group_members(main)}")
        os.kill(main, signal.SIGKILL)
        killed = time.monotonic()
        noticed, _ = portal.wait_for(r"system \| worker died \(rc=-9\); restarting it", after=killed)
        assert noticed - killed < 5.0, portal.output[-4000:]
        assert group_members(main) == [], (children, portal.output[-4000:])
        driver = subprocess.run([sys.executable, str(ROOT / "tests/e2e/worker_script.py"), json.dumps(TEXTS),
                                 "storming of the Bastille in Paris"],
                                cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
        assert driver.returncode == 0, driver.stderr[-3000:] + portal.output[-4000:]
        outcome = json.loads(driver.stdout.strip().splitlines()[-1])
        assert outcome["status"] == "succeeded", (outcome, portal.output[-4000:])
        assert outcome["first"] == TEXTS[3], outcome
        _, restarted = portal.wait_for(r"system \| worker started \(pid=(\d+)\)", after=killed)
        portal.wait_for(r"worker \| .*Task corpus\.run_build\[\S+\] succeeded", after=killed)
        new_main = int(restarted[1])
    finally:
        portal.process.send_signal(signal.SIGTERM)
        returncode = portal.finish(timeout=60)
    assert returncode == 128 + signal.SIGTERM, portal.output[-4000:]
    assert group_members(new_main) == [], portal.output[-4000:]
