"""Backup and restore (`manage.py backup` / `restore` / `check_restore`), end to end in real
processes: a portal made by the real services (corpora built and appended, a conversation with
citations, an API token) is backed up, restored into an empty database and an empty DATA_DIR (and
an empty bucket prefix), and the restored portal shows the same rows and answers every search the
same, every timestamp to the microsecond; then it takes a new upload and appends it, and an upload
lost afterwards is named by `check_restore` and the start check. On SQLite with local files and on
the real PostgreSQL with the real S3 store (`rclone serve s3`): each kind of database and each kind of
file store once; PostgreSQL with local files is restored by the backup-during-an-append test. A
backup that lacks, or holds a changed copy of, any file it lists (an upload, a segment file, meaning
rows, a segment's manifest, the database dump) is refused, naming it, before anything is written."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from urllib.parse import urlparse, urlunparse

import boto3
import psycopg
import pytest

from tests.corpus.portal_process import REPO, SCENARIO, Portal
from tests.plugins.waiting import wait_until

PG_DEFAULT = "postgres://postgres@127.0.0.1:5432/hdrag_test"


def pg_url(name: str) -> str:
    """A fresh PostgreSQL database `name` on the server of DATABASE_URL (or the local one)."""
    base = urlparse(os.environ.get("DATABASE_URL") or PG_DEFAULT)
    database = f"{base.path.strip('/')}_{name}"
    admin = urlunparse(base._replace(path="/postgres"))
    try:
        with psycopg.connect(admin, autocommit=True, connect_timeout=10) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
            connection.execute(f'CREATE DATABASE "{database}"')
    except psycopg.OperationalError as error:
        pytest.fail(f"PostgreSQL is not reachable at {admin}: {error}", pytrace=False)
    return urlunparse(base._replace(path=f"/{database}"))


def drop_pg(url: str) -> None:
    parsed = urlparse(url)
    with psycopg.connect(urlunparse(parsed._replace(path="/postgres")), autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{parsed.path.strip("/")}" WITH (FORCE)')


def _machines(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> tuple[Portal, Portal]:
    if kind == "sqlite":
        return Portal(tmp_path / "source"), Portal(tmp_path / "restored")
    source_db, restored_db = pg_url("backup_source"), pg_url("backup_restored")
    request.addfinalizer(lambda: (drop_pg(source_db), drop_pg(restored_db)))
    if kind == "postgresql":
        return Portal(tmp_path / "source", source_db), Portal(tmp_path / "restored", restored_db)
    s3 = request.getfixturevalue("s3_server")
    prefix = request.getfixturevalue("s3_prefix")
    return (Portal(tmp_path / "source", source_db, s3.env(f"{prefix}-source")),
            Portal(tmp_path / "restored", restored_db, s3.env(f"{prefix}-restored")))


@pytest.mark.service
@pytest.mark.parametrize("kind", ["sqlite", "postgresql+s3"])
def test_a_restore_on_a_fresh_machine_gives_back_everything(kind, tmp_path, request):
    source, restored = _machines(kind, tmp_path, request)
    source.manage("migrate", "-v0")
    # On the production-like kind the second corpus reads by meaning too: its rows go through the
    # object store and back, and its searches must come back the same (the other kinds load no encoder).
    token = source.scenario("make", *(["--meaning"] if kind == "postgresql+s3" else []))["token"]
    before = source.scenario("state", token)
    assert before["token_user"] == "owner" and len(before["corpora"]["Team notes"]["serving"]) == 2
    assert any(before["corpora"]["Team notes"]["searches"].values())

    backup = tmp_path / "backup"
    source.manage("backup", str(backup))
    stamps = source.scenario("timestamps")
    manifest = json.loads((backup / "backup.json").read_text())
    assert manifest["problems"] == [] and len(manifest["builds"]) == 3 and len(manifest["datasets"]) == 3
    if kind == "postgresql+s3":
        shutil.rmtree(
            source.data_dir / "corpora"
        )  # the store holds them: the backup must not need this cache

    result = restored.manage("restore", str(backup))
    assert "every corpus's files checked" in result.stdout
    assert restored.scenario("timestamps") == stamps
    # Not all at whole milliseconds (the dump's format once cut them there): the comparison can fail.
    assert any(t and t[19:20] == "." and t[23:26] != "000" for rows in stamps.values()
               for values in rows.values() for t in values)
    if kind == "postgresql+s3":
        # Serving from the restored bucket: this machine fetches every segment again.
        shutil.rmtree(restored.data_dir / "corpora")
    after = restored.scenario("state", token)
    assert after == before
    assert "agree" in restored.manage("check_restore").stdout

    appended = restored.scenario("append")
    assert appended["job"] == [3, "append", "succeeded"] and appended["serving"] == 3
    assert appended["found"][0].startswith("Glaciers carve")

    lost = manifest["datasets"]["1"]["path"]  # notes.jsonl, the team's first upload
    if kind == "postgresql+s3":
        _delete_object(restored, lost)
    else:
        (restored.data_dir / lost).unlink()
    check = restored.manage("check_restore", check=False)
    assert check.returncode != 0 and "corpus 1 ('Team notes') cannot be rebuilt whole" in check.stderr
    assert "'notes.jsonl'" in check.stderr and "'more.jsonl'" not in check.stderr
    started = restored.manage("check", "--database", "default")
    assert "hdrag.W011" in started.stderr and "'notes.jsonl'" in started.stderr


def _delete_object(portal: Portal, relative: str) -> None:
    """Delete one object of `portal`'s store through the S3 API (the server's own directory may be cached)."""
    env, store = portal.env, urlparse(portal.env["BUILD_STORAGE_URL"])
    client = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name=env["AWS_DEFAULT_REGION"],
                          aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])
    client.delete_object(Bucket=store.netloc, Key=f"{store.path.strip('/')}/{relative}")


@pytest.fixture(scope="module")
def backed_up(tmp_path_factory) -> tuple[Portal, Path]:
    """A SQLite portal with its content (its second corpus with the meaning channel), and a backup
    of it: made once, read by the tests below (none changes either; one that must damage the backup
    damages its own copy)."""
    tmp_path = tmp_path_factory.mktemp("backed_up")
    source = Portal(tmp_path / "source")
    source.manage("migrate", "-v0")
    source.scenario("make", "--meaning")
    backup = tmp_path / "backup"
    source.manage("backup", str(backup))
    return source, backup


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgresql+s3", marks=pytest.mark.service)])
def backup_of(request, tmp_path_factory):  # noqa: ANN201 - (kind, backup, S3Server or None)
    """(kind, a backup made on it, the S3 server or None): `backed_up`'s on SQLite; on PostgreSQL with
    the S3 store, one made the same way, its uploads and segments read from the store."""
    if request.param == "sqlite":
        return request.param, request.getfixturevalue("backed_up")[1], None
    tmp_path = tmp_path_factory.mktemp("backed_up_s3")
    database = pg_url("damage_source")
    request.addfinalizer(lambda: drop_pg(database))
    server = request.getfixturevalue("s3_server")
    source = Portal(tmp_path / "source", database, server.env(f"{tmp_path.name}-source"))
    source.manage("migrate", "-v0")
    source.scenario("make", "--meaning")
    source.manage("backup", str(tmp_path / "backup"))
    return request.param, tmp_path / "backup", server


# Every kind of file a backup lists, where it lies in the backup.
LISTED = {"upload": "files/corpora/*/datasets/*", "segment file": "files/corpora/*/builds/*/corpus.idx",
          "meaning rows": "files/corpora/*/builds/*/meaning.npz",
          "segment manifest": "files/corpora/*/builds/*/manifest.json", "database dump": "database.jsonl"}


def _written(restored: Portal, s3_prefix: str, server) -> list[str]:  # noqa: ANN001 - S3Server or None
    """What a restore wrote: the DATA_DIR's corpora, the database's tables, the bucket prefix's objects."""
    written = [str(p) for p in (restored.data_dir / "corpora").rglob("*")]
    if restored.database_url:
        with psycopg.connect(restored.database_url, connect_timeout=10) as db:
            written += [row[0] for row in db.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'")]
        written += server.objects(s3_prefix)
    elif (restored.data_dir / "portal.sqlite3").exists():
        with closing(sqlite3.connect(restored.data_dir / "portal.sqlite3")) as db:
            written += [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return written


# Its PostgreSQL case connects in the test's own code, so every case is in the service tier.
@pytest.mark.service
@pytest.mark.parametrize("damage", ["missing", "changed"])
@pytest.mark.parametrize("listed", list(LISTED))
def test_a_backup_lacking_or_changing_a_file_it_lists_is_refused_before_anything_is_written(
        backup_of, listed, damage, tmp_path, request):
    kind, original, server = backup_of
    backup = shutil.copytree(original, tmp_path / "backup")
    files = sorted(backup.glob(LISTED[listed]))
    assert files, f"the backup holds no {listed}"
    if damage == "missing":
        files[0].unlink()
    else:  # the same size, one bit flipped: only the checksum tells
        content = bytearray(files[0].read_bytes())
        content[len(content) // 2] ^= 1
        files[0].write_bytes(bytes(content))
    restored, prefix = Portal(tmp_path / "restored"), f"{tmp_path.name}-restored"
    if kind == "postgresql+s3":
        database = pg_url("damage_restored")
        request.addfinalizer(lambda: drop_pg(database))
        restored = Portal(tmp_path / "restored", database, server.env(prefix))
    result = restored.manage("restore", str(backup), check=False)
    assert result.returncode != 0 and "is damaged, so nothing was restored" in result.stderr
    assert f"{files[0]} ({damage})" in result.stderr
    assert _written(restored, prefix, server) == []


@pytest.mark.slow
def test_a_restore_refuses_a_database_that_is_not_empty(backed_up):
    source, backup = backed_up
    result = source.manage("restore", str(backup), check=False)
    assert result.returncode != 0 and "The database is not empty" in result.stderr


@pytest.mark.slow
def test_a_backup_goes_into_an_empty_directory(backed_up):
    source, backup = backed_up
    result = source.manage("backup", str(backup), check=False)
    assert result.returncode != 0 and "is not empty" in result.stderr


@pytest.mark.slow
def test_rows_restored_without_their_files_are_named_at_start(backed_up, tmp_path):
    """The database restored, the segment files not (an admin who restored only the database)."""
    _, backup = backed_up
    restored = Portal(tmp_path / "restored")
    restored.manage("restore", str(backup))
    shutil.rmtree(restored.data_dir / "corpora" / "1" / "builds")
    check = restored.manage("check_restore", check=False)
    assert check.returncode != 0 and "corpus 1 ('Team notes') cannot serve" in check.stderr
    assert "build #1: its index files are missing" in check.stderr and "append #2" in check.stderr
    started = restored.manage("check", "--database", "default")  # what `./portal run` runs through migrate
    assert (
        "hdrag.W010" in started.stderr and "Team notes" in started.stderr and "Recipes" not in started.stderr
    )


def _job_status(database_url: str, number: int) -> str | None:
    with psycopg.connect(database_url, connect_timeout=10) as db:
        row = db.execute(
            "SELECT status FROM corpus_indexbuild WHERE corpus_id = 1 AND number = %s", (number,)
        ).fetchone()
    return row[0] if row else None


@pytest.mark.service
def test_a_backup_taken_while_an_append_runs_restores_the_index_it_served(tmp_path, request):
    """The append is running when the backup's snapshot is read (its process held still with
    SIGSTOP, as a slow worker would be, so that the order is certain): the restore serves the index
    of before the append and marks the append as interrupted; the source's append then succeeds."""
    source, restored = _machines("postgresql", tmp_path, request)
    source.manage("migrate", "-v0")
    source.scenario("make", "--small")
    before = source.scenario("state")
    appending = subprocess.Popen(
        [sys.executable, str(SCENARIO), "append_many", "1000"],
        cwd=REPO,
        env=source.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(lambda: _job_status(source.database_url, 3) == "running" or appending.poll() is not None,
                   what="the append running", timeout=300)
        appending.send_signal(signal.SIGSTOP)
        assert _job_status(source.database_url, 3) == "running"
        backup = tmp_path / "during"
        source.manage("backup", str(backup))
        appending.send_signal(signal.SIGCONT)
        output, errors = appending.communicate(timeout=600)
    finally:
        if appending.poll() is None:
            appending.kill()
    assert appending.returncode == 0, errors[-2000:]
    assert json.loads(output.strip().splitlines()[-1])["job"] == [3, "append", "succeeded"]

    restored.manage("restore", str(backup))
    after = restored.scenario("state")
    # As served at the snapshot: the same index and searches, users and conversations; the upload
    # the append was indexing is kept (its dataset row and file), to be indexed again.
    assert (after["users"], after["conversations"]) == (before["users"], before["conversations"])
    notes, notes_before = after["corpora"]["Team notes"], before["corpora"]["Team notes"]
    assert (notes["serving"], notes["searches"]) == (notes_before["serving"], notes_before["searches"])
    assert [d[0] for d in notes["datasets"]] == sorted(
        [d[0] for d in notes_before["datasets"]] + ["survey.jsonl"]
    )
    assert "agree" in restored.manage("check_restore").stdout
    assert _job_status(restored.database_url, 3) == "failed"
    assert restored.scenario("append")["found"][0].startswith("Glaciers carve")
