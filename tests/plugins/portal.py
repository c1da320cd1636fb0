"""Portal fixtures: an owner, a read-only group member, a writing group member, an outsider, staff.

Every access test checks what the outsider (and the read-only member) can *not* do. Celery tasks
run inline (eager, errors propagated); `transaction.on_commit` callbacks run through
`django_capture_on_commit_callbacks(execute=True)`. Each test gets its own DATA_DIR.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from django.contrib.auth.models import Group, User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from corpus.models import Corpus, Dataset, IndexBuild
from corpus.services.builds import build_start
from corpus.services.corpora import corpus_create, dataset_upload

PASSWORD = "correct-horse-battery-staple"
SMALL_HDC = {"hdc_dimensions": 1024, "hdc_ngram": 3}
TEXTS = [
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "Photosynthesis converts light energy into chemical energy stored in glucose molecules.",
    "A binary search halves the remaining interval at every comparison step of the loop.",
    "The French revolution began in 1789 with the storming of the Bastille prison in Paris.",
    "Mitochondria are the membrane-bound organelles that produce most of the cell's ATP.",
    "Python generators yield values lazily, one at a time, when the caller asks for the next.",
    "Volcanoes erupt when magma from the mantle rises through cracks in the earth's crust.",
    "A hash table maps keys to buckets with a hash function to give constant-time lookups.",
]


@pytest.fixture
def data_dir(settings, tmp_path) -> Path:
    settings.DATA_DIR = tmp_path / "data"
    # Uploads queue no job unless a test asks (tests/corpus/test_appends.py does).
    settings.INDEX_ON_UPLOAD = False
    # New corpora read nothing by meaning unless a test asks (the encoder is slow on two cores:
    # tests/corpus/test_meaning_background.py turns the site's default back on).
    settings.MEANING_CHANNEL_DEFAULT = False
    settings.CHROMA_PATH, settings.CHROMA_URL = (
        settings.DATA_DIR / "chroma",
        "",
    )  # corpus pages open the store
    settings.FILE_UPLOAD_TEMP_DIR = str(tmp_path / "data" / "tmp")
    Path(settings.FILE_UPLOAD_TEMP_DIR).mkdir(parents=True)
    return settings.DATA_DIR


@pytest.fixture(scope="session")
def celery_eager():
    from hdrag_site.celery import app

    app.conf.task_always_eager = True
    app.conf.task_eager_propagates = True
    yield
    app.conf.task_always_eager = False


def _user(name: str, *groups: Group, **flags: bool) -> User:
    user = User.objects.create_user(username=name, password=PASSWORD, **flags)
    user.groups.add(*groups)
    return user


@pytest.fixture
def readers(db) -> Group:
    return Group.objects.create(name="readers")


@pytest.fixture
def writers(db) -> Group:
    return Group.objects.create(name="writers")


@pytest.fixture
def owner(db) -> User:
    return _user("owner")


@pytest.fixture
def member(readers) -> User:
    """In the corpus's readable group: may read, may not write."""
    return _user("member", readers)


@pytest.fixture
def writer(writers) -> User:
    """In the corpus's writable group: may upload and build."""
    return _user("writer", writers)


@pytest.fixture
def outsider(db) -> User:
    return _user("outsider")


@pytest.fixture
def staff(db) -> User:
    return _user("staff", is_staff=True, is_superuser=True)


@pytest.fixture
def corpus(owner, readers, writers) -> Corpus:
    return corpus_create(owner=owner, name="Team notes", visibility=Corpus.Visibility.GROUPS,
                         readable_groups=[readers], writable_groups=[writers], **SMALL_HDC)


def login(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def client_for() -> Callable[[User], Client]:
    return login


def jsonl_bytes(texts: list[str]) -> bytes:
    return "".join(json.dumps({"text": t}) + "\n" for t in texts).encode()


def upload(corpus: Corpus, user: User, texts: list[str] = TEXTS, name: str = "notes.jsonl") -> Dataset:
    return dataset_upload(
        corpus=corpus, user=user, uploaded_file=SimpleUploadedFile(name, jsonl_bytes(texts))
    )


@pytest.fixture
def dataset(corpus, owner) -> Dataset:
    return upload(corpus, owner)


def unmarked(response) -> str:  # noqa: ANN001 - a test client response
    """The page's HTML without the search page's <mark> highlights, to find a memory's plain text."""
    return response.content.decode().replace("<mark>", "").replace("</mark>", "")


def as_file(name: str, content: bytes) -> io.BytesIO:
    handle = io.BytesIO(content)
    handle.name = name
    return handle


def build_now(corpus: Corpus, user, capture) -> IndexBuild:  # noqa: ANN001
    """Start a build and run it inline (its task is queued on commit), then refresh the rows."""
    with capture(execute=True):
        build = build_start(corpus=corpus, user=user)
    build.refresh_from_db()
    corpus.refresh_from_db()
    return build


def stored_files(data_dir: Path) -> list[Path]:
    """Everything a failed upload could have left behind (datasets, staging, spooled uploads);
    the multi-vector store the corpus page opens is not the upload's doing."""
    store = data_dir / "chroma"
    return sorted(p for p in data_dir.rglob("*") if p.is_file() and store not in p.parents)
