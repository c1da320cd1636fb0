"""Who sees what: owner, read-only member, writing member, outsider, staff, anonymous."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from corpus.models import Corpus, IndexBuild, Memory
from corpus.selectors import (
    corpora_readable_among,
    corpora_visible_to,
    corpora_writable_by,
    get_corpus_for_user,
)
from corpus.services.builds import build_start
from corpus.services.corpora import corpus_create
from tests.plugins.portal import PASSWORD, TEXTS, _user, jsonl_bytes, login, unmarked


@pytest.fixture
def built(corpus, owner, dataset, django_capture_on_commit_callbacks) -> IndexBuild:
    with django_capture_on_commit_callbacks(execute=True):
        build = build_start(corpus=corpus, user=owner)
    build.refresh_from_db()
    assert build.status == IndexBuild.Status.SUCCEEDED, build.error
    return build


def test_every_page_but_login_needs_a_login(client, corpus):
    for url in (reverse("corpus:list"), reverse("corpus:detail", args=[corpus.pk]), reverse("memory:search"),
                reverse("memory:stats", args=[corpus.pk]), reverse("chat:index"), "/"):
        response = client.get(url)
        assert response.status_code == 302 and "/accounts/login/" in response["Location"], url
    assert client.get(reverse("login")).status_code == 200
    assert client.get(reverse("healthz")).status_code == 200


def test_login_and_logout(client, owner):
    response = client.post(reverse("login"), {"username": "owner", "password": PASSWORD})
    assert response.status_code == 302
    assert client.get(reverse("corpus:list")).status_code == 200
    client.post(reverse("logout"))
    assert client.get(reverse("corpus:list")).status_code == 302


def test_selectors_per_role(corpus, owner, member, writer, outsider, staff):
    assert list(corpora_visible_to(owner)) == [corpus]
    assert list(corpora_visible_to(member)) == [corpus] and not corpora_writable_by(member).exists()
    assert list(corpora_writable_by(writer)) == [corpus]
    assert not corpora_visible_to(outsider).exists() and not corpora_writable_by(outsider).exists()
    assert list(corpora_writable_by(staff)) == [corpus]
    private = corpus_create(owner=owner, name="Private", hdc_dimensions=1024)
    private.readable_groups.set(member.groups.all())
    private.writable_groups.set(writer.groups.all())
    assert private not in corpora_visible_to(member) and private not in corpora_visible_to(writer)
    everyone = corpus_create(owner=owner, name="Public", visibility=Corpus.Visibility.EVERYONE)
    assert everyone in corpora_visible_to(outsider) and everyone not in corpora_writable_by(outsider)


def test_readable_among_loaded_rows_follows_the_same_rules(corpus, owner, member, writer, outsider, staff):
    """`corpora_readable_among` (what searches use: rules decided on the loaded rows, one query for
    shared corpora) keeps exactly the corpora `corpora_visible_to` returns, for every role and
    visibility, also for an inactive user and anonymous."""
    from django.contrib.auth.models import AnonymousUser

    private = corpus_create(owner=owner, name="Private", hdc_dimensions=1024)
    private.readable_groups.set(member.groups.all())
    private.readable_users.set([outsider])
    everyone = corpus_create(owner=writer, name="Public", visibility=Corpus.Visibility.EVERYONE)
    person = corpus_create(owner=writer, name="Shared with a person", visibility=Corpus.Visibility.GROUPS)
    person.readable_users.set([outsider])
    inactive = _user("gone", is_active=False)
    rows = list(Corpus.objects.order_by("pk"))
    for user in (owner, member, writer, outsider, staff, inactive, AnonymousUser()):
        expected = [c for c in rows if c in set(corpora_visible_to(user))]
        assert corpora_readable_among(user, rows) == expected, user
    assert [c.name for c in corpora_readable_among(outsider, rows)] == [everyone.name, person.name]
    assert corpora_readable_among(member, rows) == [corpus, everyone]


def test_outsider_sees_nothing(corpus, built, dataset, outsider):
    client = login(outsider)
    listing = client.get(reverse("corpus:list"))
    assert corpus.name not in listing.content.decode() and "No corpora yet" in listing.content.decode()
    pages = [
        ("get", reverse("corpus:detail", args=[corpus.pk])),
        ("get", reverse("corpus:edit", args=[corpus.pk])),
        ("get", reverse("corpus:build_status", args=[corpus.pk])),
        ("get", reverse("memory:stats", args=[corpus.pk])),
        ("post", reverse("corpus:dataset_add", args=[corpus.pk])),
        ("post", reverse("corpus:build_start", args=[corpus.pk])),
        ("post", reverse("corpus:dataset_toggle", args=[dataset.pk])),
        ("post", reverse("corpus:dataset_delete", args=[dataset.pk])),
        ("post", reverse("corpus:build_cancel", args=[built.pk])),
        ("post", reverse("corpus:delete", args=[corpus.pk])),
    ]
    for method, url in pages:
        assert getattr(client, method)(url).status_code == 404, url
    search = client.get(reverse("memory:search"), {"q": "Bastille", "corpora": [corpus.pk]})
    assert TEXTS[3] not in unmarked(search)
    assert client.get(reverse("admin:index")).status_code == 302
    assert client.get(reverse("admin:corpus_memory_changelist")).status_code == 302
    assert Corpus.objects.filter(pk=corpus.pk).exists() and dataset.enabled


def test_member_reads_but_cannot_write(corpus, built, dataset, member):
    client = login(member)
    detail = client.get(reverse("corpus:detail", args=[corpus.pk]))
    assert detail.status_code == 200 and dataset.name in detail.content.decode()
    assert (
        "Build index" not in detail.content.decode()
        and 'enctype="multipart/form-data"' not in detail.content.decode()
    )
    upload = SimpleUploadedFile("x.jsonl", jsonl_bytes(["member text that must not be stored anywhere"]))
    assert client.post(reverse("corpus:dataset_add", args=[corpus.pk]), {"file": upload}).status_code == 403
    assert client.post(reverse("corpus:build_start", args=[corpus.pk])).status_code == 403
    assert (
        client.post(reverse("corpus:dataset_toggle", args=[dataset.pk]), {"enabled": "0"}).status_code == 403
    )
    assert client.post(reverse("corpus:build_cancel", args=[built.pk])).status_code == 403
    assert client.get(reverse("corpus:edit", args=[corpus.pk])).status_code == 403
    assert corpus.datasets.count() == 1 and corpus.builds.count() == 1
    search = client.get(reverse("memory:search"), {"q": "storming of the Bastille", "corpora": [corpus.pk]})
    assert TEXTS[3] in unmarked(search)
    stats = client.get(reverse("memory:stats", args=[corpus.pk]))
    assert stats.status_code == 200 and stats.content.decode().count("<svg") == 5
    with pytest.raises(Exception, match="not change"):
        get_corpus_for_user(member, corpus.pk, write=True)


def test_writer_uploads_toggles_and_builds_from_the_pages(corpus, writer, django_capture_on_commit_callbacks):
    client = login(writer)
    upload = SimpleUploadedFile("team.jsonl", jsonl_bytes(TEXTS))
    response = client.post(reverse("corpus:dataset_add", args=[corpus.pk]), {"file": upload})
    assert response.status_code == 302
    dataset = corpus.datasets.get()
    assert dataset.uploaded_by == writer and dataset.format == "jsonl"
    client.post(reverse("corpus:dataset_toggle", args=[dataset.pk]), {"enabled": "0"})
    dataset.refresh_from_db()
    assert not dataset.enabled
    with django_capture_on_commit_callbacks(execute=True):
        assert client.post(reverse("corpus:build_start", args=[corpus.pk])).status_code == 302
    status = client.get(reverse("corpus:build_status", args=[corpus.pk])).json()
    assert (
        status["builds"][0]["status"] == "succeeded" and status["active_build"] == status["builds"][0]["id"]
    )
    page = client.get(reverse("corpus:detail", args=[corpus.pk])).content.decode()
    assert "Serving build" in page and f">{len(TEXTS)}<" in page


def test_admin_for_staff_only(corpus, built, dataset, staff, owner):
    client = login(owner)
    assert client.get(reverse("admin:corpus_corpus_changelist")).status_code == 302
    client = login(staff)
    for name in ("corpus_corpus", "corpus_dataset", "corpus_indexbuild", "corpus_memory"):
        assert client.get(reverse(f"admin:{name}_changelist")).status_code == 200, name
    memories = client.get(reverse("admin:corpus_memory_changelist"), {"q": "Bastille"}).content.decode()
    assert "Bastille" in memories
    memory = Memory.objects.first()
    assert (
        client.post(reverse("admin:corpus_memory_change", args=[memory.pk]), {"text": "x"}).status_code == 403
    )
    response = client.post(reverse("admin:corpus_dataset_changelist"),
                           {"action": "disable", "_selected_action": [dataset.pk]})
    assert response.status_code == 302
    dataset.refresh_from_db()
    assert not dataset.enabled
    upload = SimpleUploadedFile(
        "admin.jsonl", jsonl_bytes(["Uploaded through the admin with the same validation."])
    )
    response = client.post(
        reverse("admin:corpus_dataset_add"), {"corpus": corpus.pk, "enabled": "on", "upload": upload}
    )
    assert response.status_code == 302
    assert corpus.datasets.filter(name="admin.jsonl", format="jsonl").exists()
    bad = SimpleUploadedFile("bad.json", b"this is not json")
    response = client.post(reverse("admin:corpus_dataset_add"), {"corpus": corpus.pk, "upload": bad})
    assert response.status_code == 200 and "not JSON" in response.content.decode()
    response = client.post(reverse("admin:corpus_corpus_changelist"),
                           {"action": "start_builds", "_selected_action": [corpus.pk]})
    assert response.status_code == 302 and corpus.builds.count() == 2
    queued = corpus.builds.get(status=IndexBuild.Status.QUEUED)
    client.post(
        reverse("admin:corpus_indexbuild_changelist"), {"action": "cancel", "_selected_action": [queued.pk]}
    )
    queued.refresh_from_db()
    assert queued.status == IndexBuild.Status.CANCELLED


def test_sources_are_the_owners_alone(corpus, owner, member, writer, outsider, staff, settings, tmp_path,
                                      django_capture_on_commit_callbacks):
    """A corpus's sources: managed by its owner and staff; its readers and writers are refused,
    an outsider learns nothing, and no page or response carries a source's token."""
    from corpus.sources.models import Source

    token = "ghp-never-shown-anywhere"
    response = login(owner).post(f"/api/v1/corpora/{corpus.pk}/sources/", {
        "name": "handbook", "kind": "git", "location": "https://git.example.com/team/handbook.git",
        "token": token}, content_type="application/json")
    assert response.status_code == 201 and token not in response.content.decode(), response.content
    assert response.json()["has_token"] is True
    source = Source.objects.get(pk=response.json()["id"])
    assert source.token == token
    api = {"list": f"/api/v1/corpora/{corpus.pk}/sources/", "get": f"/api/v1/sources/{source.pk}/"}
    pages = {"status": reverse("corpus:source_status", args=[corpus.pk])}
    posts = [
        f"/api/v1/sources/{source.pk}/sync/",
        reverse("corpus:source_sync", args=[source.pk]),
        reverse("corpus:source_delete", args=[source.pk]),
        reverse("corpus:source_add", args=[corpus.pk]),
    ]
    for user, code in [(outsider, 404), (member, 403), (writer, 403)]:
        client = login(user)
        for url in [*api.values(), *pages.values()]:
            assert client.get(url).status_code == code, (user, url)
        for url in posts:
            assert (
                client.post(url, {"name": "x", "kind": "web", "location": "http://127.0.0.1/"}).status_code
                == code
            )
        assert client.delete(api["get"]).status_code == code
        detail = client.get(reverse("corpus:detail", args=[corpus.pk]))
        assert "handbook.git" not in detail.content.decode() and 'id="sources"' not in detail.content.decode()
    assert Source.objects.filter(pk=source.pk, status=Source.Status.IDLE).exists()
    for user in (owner, staff):
        client = login(user)
        listed = client.get(api["list"])
        assert listed.status_code == 200 and listed.json()["results"][0]["name"] == "handbook"
        page = client.get(reverse("corpus:detail", args=[corpus.pk])).content.decode()
        assert 'id="sources"' in page and "handbook.git" in page
        for body in (listed.content.decode(), page, client.get(pages["status"]).content.decode()):
            assert token not in body
    schema = login(owner).get("/api/schema/").content.decode()
    assert "/api/v1/corpora/{corpus_id}/sources/" in schema and "/api/v1/sources/{source_id}/sync/" in schema
    assert (
        login(owner).delete(api["get"]).status_code == 204
        and not Source.objects.filter(pk=source.pk).exists()
    )
