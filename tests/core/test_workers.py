"""The suite's worker processes (tests/plugins/workers.py) never share a Redis database or a DATA_DIR."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from django.conf import settings

from tests.plugins.workers import DURATIONS, STARTED_WITH, redis_url_for_worker, worker_number


def test_a_worker_moves_the_redis_database_up_by_its_number_and_keeps_the_rest():
    assert redis_url_for_worker("redis://127.0.0.1:6379/0", 0) == "redis://127.0.0.1:6379/0"
    assert redis_url_for_worker("redis://:s3cret@redis.example:6380/7?ssl_cert_reqs=none", 2) == \
        "redis://:s3cret@redis.example:6380/9?ssl_cert_reqs=none"
    assert redis_url_for_worker("redis://127.0.0.1:6379", 3) == "redis://127.0.0.1:6379/3"
    assert redis_url_for_worker("redis://127.0.0.1:6379/15", 1) == "redis://127.0.0.1:6379/0"


def test_this_process_uses_its_own_share():
    number = worker_number()
    if number is None:  # the suite in one process (-n 0): the environment as given
        assert STARTED_WITH["REDIS_URL"] == settings.REDIS_URL
        return
    if STARTED_WITH["REDIS_URL"]:
        assert redis_url_for_worker(STARTED_WITH["REDIS_URL"], number) == settings.REDIS_URL
    assert os.environ["DATA_DIR"] == f"{STARTED_WITH['DATA_DIR'].rstrip('/')}-gw{number}"


def test_the_recorded_durations_name_test_files_that_exist_and_order_the_collection():
    """The longest files first: the suite's collection (this one's, in the order the plugin left it)
    holds the files of file_durations.json in descending seconds, and that file names no file that is
    gone (a renamed file would fall back to its estimate unnoticed)."""
    recorded = json.loads(DURATIONS.read_text(encoding="utf-8"))
    repo = Path(__file__).resolve().parents[2]
    assert [name for name in recorded if not (repo / name).is_file()] == []
    files = ["tests/core/test_workers.py", "tests/api/test_schema.py", "tests/chat/test_follow_ups.py"]
    command = [sys.executable, "-m", "pytest", "-p", "tests.plugins.workers", "--collect-only", "-q",
               "-p", "no:cacheprovider", *files]
    done = subprocess.run(command, cwd=repo, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    order = list(dict.fromkeys(line.split("::")[0] for line in done.stdout.splitlines() if "::" in line))
    assert order == sorted(files, key=lambda name: -recorded[name])
    assert order[0] == "tests/chat/test_follow_ups.py"
