"""A bad engine setting stops the processes when they start, with a clear message (issue 30.5):
the web process (importing the ASGI application), the Celery worker, and `manage.py check`
(what `./portal run` runs first, through migrate). Real processes, started as `./portal run` does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MESSAGE = "hdc_ngram must be in 1..16, got 99"


@pytest.fixture
def bad_env(tmp_path) -> dict:
    config = tmp_path / "engine.yaml"
    config.write_text("hdc_ngram: 99\n")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "hdrag_site.settings", "DATA_DIR": str(tmp_path / "data"),
           "HDRAG_CONFIG_FILE": str(config)}
    env.pop("REDIS_URL", None)  # the worker's local broker: nothing else needed to start
    return env


def _run(command: list[str], env: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_web_process_refuses_to_start(bad_env):
    result = _run([sys.executable, "-c", "import hdrag_site.asgi"], bad_env)
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr and MESSAGE in result.stderr
    assert f"HDRAG_CONFIG_FILE={bad_env['HDRAG_CONFIG_FILE']}" in result.stderr


def test_manage_check_and_so_portal_run_refuse(bad_env):
    result = _run([sys.executable, "manage.py", "check"], bad_env)
    assert result.returncode != 0 and "hdrag.E001" in result.stderr and MESSAGE in result.stderr
    good = {**bad_env}
    Path(good["HDRAG_CONFIG_FILE"]).write_text("hdc_ngram: 4\n")
    assert _run([sys.executable, "manage.py", "check"], good).returncode == 0


def test_the_worker_refuses_to_start(bad_env):
    result = _run(
        [sys.executable, "-m", "celery", "-A", "hdrag_site", "worker", "--pool", "solo", "-l", "warning"],
        bad_env,
    )
    assert result.returncode != 0 and MESSAGE in result.stderr + result.stdout


def test_a_yaml_that_is_not_yaml_is_named(bad_env):
    Path(bad_env["HDRAG_CONFIG_FILE"]).write_text("hdc_ngram: [unclosed\n")
    result = _run([sys.executable, "manage.py", "check"], bad_env)
    assert result.returncode != 0 and "bad engine settings" in result.stderr
