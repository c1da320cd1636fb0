"""Session-wide fixtures. Service fixtures live in tests/plugins/ (one module per service)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest_plugins = ["tests.plugins.llama", "tests.plugins.s3", "tests.plugins.oidc", "tests.plugins.gateway",
                  "tests.plugins.chroma", "tests.plugins.portal", "tests.plugins.chat", "tests.plugins.api",
                  "tests.plugins.services", "tests.plugins.outbound", "tests.plugins.tiers"]


@pytest.fixture(scope="session", autouse=True)
def fast_password_hashing() -> Iterator[None]:
    """Passwords made and checked in the test process are hashed with MD5 first (Django's advice
    for tests: PBKDF2's million rounds cost about 0.4 s a user and a login, most of the quick tier's
    time). The production hashers stay listed after it, so a hash made by a portal the test started
    in another process (its own settings) still checks here; a password made here for another
    process to check would not, and such a test fails at its login rather than passing wrongly."""
    from django.conf import settings
    from django.test import override_settings

    with override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher",
                                             *settings.PASSWORD_HASHERS]):
        yield


@pytest.fixture(scope="session")
def gemma_gguf() -> Path:
    """The real default model (Gemma 3 270M GGUF), assembled once into the repo's .cache."""
    from engine.model_files import default_gguf_path

    return default_gguf_path()


@pytest.fixture(scope="session")
def tokenizer(gemma_gguf):  # noqa: ANN201 - engine.spm.GGUFTokenizer
    """The default model's in-process tokenizer (exact llama.cpp ids), loaded once."""
    from engine.spm import GGUFTokenizer

    return GGUFTokenizer.from_gguf(gemma_gguf)


@pytest.fixture(scope="session")
def embedding_cache(gemma_gguf) -> Path:
    """Where the default model's dequantised token embeddings are cached (beside the model)."""
    return Path(gemma_gguf).parent.parent / "embeddings"


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """The test database, with every other session to it ended before it is dropped.

    Threads that ran ORM code for async consumers (asgiref's executor, chat retrieval)
    keep their own connections, which PostgreSQL counts as users of the database and then
    refuses to drop it. This teardown runs before pytest-django's, which drops it.
    """
    yield
    from django.db import connection

    if connection.vendor == "postgresql":
        with django_db_blocker.unblock(), connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                           " WHERE datname = current_database() AND pid <> pg_backend_pid()")
