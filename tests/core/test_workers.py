"""The suite's worker processes (tests/plugins/workers.py) never share a Redis database or a DATA_DIR."""

from __future__ import annotations

import os

from django.conf import settings

from tests.plugins.workers import STARTED_WITH, redis_url_for_worker, worker_number


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
