"""Settings helpers fail loudly; production mode refuses unsafe settings; migrations are complete."""

from __future__ import annotations

import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command

from core.env import envbool, envint, envlist, envstr

ROOT = Path(__file__).resolve().parents[2]


def test_envbool(monkeypatch):
    for raw, expected in (
        ("1", True),
        ("yes", True),
        ("ON", True),
        ("0", False),
        ("off", False),
        ("", False),
    ):
        monkeypatch.setenv("HDRAG_T", raw)
        assert envbool("HDRAG_T", not expected) is expected
    monkeypatch.setenv("HDRAG_T", "ture")
    with pytest.raises(ImproperlyConfigured, match="HDRAG_T='ture' is not a boolean"):
        envbool("HDRAG_T", False)
    monkeypatch.delenv("HDRAG_T")
    assert envbool("HDRAG_T", True) is True


def test_envint_and_envlist(monkeypatch):
    monkeypatch.setenv("HDRAG_T", "10k")
    with pytest.raises(ImproperlyConfigured, match="HDRAG_T='10k' is not an integer"):
        envint("HDRAG_T", 1)
    monkeypatch.setenv("HDRAG_T", "0")
    with pytest.raises(ImproperlyConfigured, match="must be >= 1"):
        envint("HDRAG_T", 1, minimum=1)
    monkeypatch.setenv("HDRAG_T", " 42 ")
    assert envint("HDRAG_T", 1) == 42
    monkeypatch.setenv("HDRAG_T", "a.example, ,b.example")
    assert envlist("HDRAG_T", []) == ["a.example", "b.example"]


def test_envstr_reads_secret_files(monkeypatch, tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("from-file\n")
    monkeypatch.setenv("HDRAG_T", "from-env")
    assert envstr("HDRAG_T") == "from-env"
    monkeypatch.setenv("HDRAG_T_FILE", str(secret))
    assert envstr("HDRAG_T") == "from-file"
    monkeypatch.setenv("HDRAG_T_FILE", str(tmp_path / "missing"))
    with pytest.raises(ImproperlyConfigured, match="HDRAG_T_FILE=.*missing: cannot read"):
        envstr("HDRAG_T")


def _start(**env: str) -> subprocess.CompletedProcess:
    clean = {
        k: v for k, v in os.environ.items() if k not in ("DEBUG", "SECRET_KEY", "DATABASE_URL", "REDIS_URL")
    }
    return subprocess.run([sys.executable, "-c", "import django; django.setup(); print('started')"],
                          cwd=ROOT, env={**clean, "DJANGO_SETTINGS_MODULE": "hdrag_site.settings", **env},
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("env", "problem"), [
    ({"DEBUG": "1", "SECRET_KEY": "s" * 50}, "DEBUG is on"),
    ({"DEBUG": "0"}, "SECRET_KEY is the development default"),
    ({"DEBUG": "0", "SECRET_KEY": "s" * 50}, "DATABASE_URL is not set"),
])
def test_production_refuses_unsafe_settings(env, problem, tmp_path):
    result = _start(HDRAG_ENV="production", DATA_DIR=str(tmp_path), **env)
    assert result.returncode != 0 and problem in result.stderr and "started" not in result.stdout


def test_production_starts_with_real_settings(tmp_path):
    result = _start(HDRAG_ENV="production", DEBUG="0", SECRET_KEY="s" * 50, DATA_DIR=str(tmp_path),
                    DATABASE_URL="postgres://postgres@127.0.0.1:5432/postgres", REDIS_URL="redis://127.0.0.1:6379/0",
                    ALLOWED_HOSTS="portal.example")
    assert result.returncode == 0, result.stderr
    assert "started" in result.stdout


def test_unknown_mode_is_refused(tmp_path):
    result = _start(HDRAG_ENV="staging", DATA_DIR=str(tmp_path))
    assert result.returncode != 0 and "HDRAG_ENV='staging'" in result.stderr


@pytest.mark.django_db
def test_migrations_are_complete():
    out = StringIO()
    call_command("makemigrations", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()


def test_engine_config_layers_portal_settings_under_the_yaml_file(settings, tmp_path):
    from core import runtime

    settings.LLM_CONTEXT_SIZE, settings.LLM_MAX_NEW_TOKENS, settings.HDRAG_CONFIG_FILE = 4096, 300, ""
    runtime.engine_config.cache_clear()
    try:
        config = runtime.engine_config()
        assert (config.llama_context_size, config.max_new_tokens) == (4096, 300)
        overrides = tmp_path / "engine.yaml"
        overrides.write_text("max_new_tokens: 77\ntemperature: 0.1\n")
        settings.HDRAG_CONFIG_FILE = str(overrides)
        runtime.engine_config.cache_clear()
        config = runtime.engine_config()
        # The file wins where it speaks; the portal's settings stay where it is silent.
        assert (config.llama_context_size, config.max_new_tokens, config.temperature) == (4096, 77, 0.1)
        overrides.write_text("max_new_token: 77\n")
        runtime.engine_config.cache_clear()
        with pytest.raises(ValueError, match="unknown config keys: max_new_token"):
            runtime.engine_config()
    finally:
        runtime.engine_config.cache_clear()
