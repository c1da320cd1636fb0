"""The audit trail (accounts.audit): each event is written by the action itself through the real pages
and API (who, what, target, from which address), no route changes or deletes one, staff alone read it
(page with filters, API, CSV) and the retention removes only what is older. Sign-in through the
identity provider and the deactivation by a blocked group: tests/e2e/browser/test_sso.py."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone

from accounts.audit import audit_prune, audit_record
from accounts.models import ApiToken, AuditEvent
from chat.services import conversation_create, message_create_user
from corpus.models import Corpus
from tests.plugins.api import token_client
from tests.plugins.portal import PASSWORD, as_file, jsonl_bytes, login

ADDRESS = "10.9.8.7"


@pytest.fixture(autouse=True)
def fast_hashing(settings) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher",
                                 "django.contrib.auth.hashers.PBKDF2PasswordHasher"]


def _last(action: str) -> AuditEvent:
    event = AuditEvent.objects.filter(action=action).order_by("-id").first()
    assert event is not None, (
        f"no {action} event; have {list(AuditEvent.objects.values_list('action', flat=True))}"
    )
    return event


def test_sign_ins_failures_and_lockouts_with_their_address(owner, settings):
    assert Client().post("/accounts/login/", {"username": "owner", "password": PASSWORD},
                         REMOTE_ADDR=ADDRESS).status_code == 302
    signed_in = _last("sign_in")
    assert (signed_in.actor, signed_in.address, signed_in.details["method"]) == (owner, ADDRESS, "password")
    for _ in range(settings.AXES_FAILURE_LIMIT):
        Client().post("/accounts/login/", {"username": "owner", "password": "wrong"}, REMOTE_ADDR=ADDRESS)
    failed = _last("sign_in_failed")
    assert (failed.actor, failed.target, failed.address) == (None, "owner", ADDRESS)
    assert AuditEvent.objects.filter(action="sign_in_failed").count() == settings.AXES_FAILURE_LIMIT
    assert _last("locked_out").target == "owner"


def test_tokens_created_and_revoked_on_the_page(owner):
    page = login(owner)
    page.post("/accounts/tokens/", {"name": "ci"}, REMOTE_ADDR=ADDRESS)
    created = _last("token_created")
    token = ApiToken.objects.get()
    assert created.actor == owner and token.prefix in created.target and created.address == ADDRESS
    page.post(f"/accounts/tokens/{token.pk}/revoke/")
    assert _last("token_revoked").target == created.target


def test_corpora_created_shared_unshared_and_deleted(owner, member, readers):
    api = token_client(owner)
    corpus_id = api.post("/api/v1/corpora/", {"name": "Ledger"}, format="json").json()["id"]
    assert (
        _last("corpus_created").target == f"Ledger (#{corpus_id})" and _last("corpus_created").actor == owner
    )
    page = login(owner)
    owner.groups.add(readers)
    page.post(f"/corpora/{corpus_id}/share/", {"kind": "user", "username": member.username, "access": "read"})
    assert _last("corpus_shared").details == {"person": member.username, "access": "read"}
    page.post(f"/corpora/{corpus_id}/share/", {"kind": "group", "group": readers.pk, "access": "write"})
    assert _last("corpus_shared").details == {"group": "readers", "access": "write"}
    page.post(f"/corpora/{corpus_id}/share/remove/", {"user": member.pk})
    assert _last("corpus_unshared").details == {"user_id": member.pk, "group_id": None}
    page.post(f"/corpora/{corpus_id}/visibility/", {"visibility": "everyone"})
    assert _last("corpus_visibility").details == {"visibility": "everyone"}
    assert api.delete(f"/api/v1/corpora/{corpus_id}/").status_code == 204
    assert _last("corpus_deleted").target == f"Ledger (#{corpus_id})" and not Corpus.objects.exists()


@pytest.mark.slow
def test_documents_deleted_sources_created_synced_deleted_and_exports(owner, corpus, settings, tmp_path,
                                                                     django_capture_on_commit_callbacks):
    api = token_client(owner)
    upload = api.post(
        f"/api/v1/corpora/{corpus.pk}/datasets/",
        {"file": as_file("notes.jsonl", jsonl_bytes(["Tides follow the moon."]))},
        format="multipart",
    )
    assert api.delete(f"/api/v1/corpora/{corpus.pk}/datasets/{upload.json()['id']}/").status_code == 204
    assert _last("document_deleted").target == f"notes.jsonl in {corpus.name} (#{corpus.pk})"
    folder = tmp_path / "share" / "notes"
    folder.mkdir(parents=True)
    (folder / "tides.md").write_text("# Tides\n\nTides follow the moon.\n")
    settings.SOURCE_ROOTS = [str(tmp_path / "share")]
    source = api.post(f"/api/v1/corpora/{corpus.pk}/sources/",
                      {"name": "Notes", "kind": "folder", "location": str(folder)}, format="json").json()
    assert _last("source_created").details["kind"] == "folder"
    with django_capture_on_commit_callbacks(execute=True):  # the sync runs (inline) and ends
        assert api.post(f"/api/v1/sources/{source['id']}/sync/", {}, format="json").status_code == 202
    assert _last("source_synced").target == f"Notes of corpus #{corpus.pk}"
    assert api.delete(f"/api/v1/sources/{source['id']}/").status_code == 204
    assert _last("source_deleted").target == f"Notes of corpus #{corpus.pk}"
    conversation = conversation_create(user=owner, corpus_ids=[])
    message_create_user(conversation_id=conversation.pk, content="Where do tides come from?")
    assert api.get(f"/api/v1/conversations/{conversation.pk}/export/").status_code == 200
    assert login(owner).get(f"/chat/{conversation.pk}/export.md").status_code == 200
    exports = AuditEvent.objects.filter(action="conversation_exported").order_by("id")
    assert [event.details["format"] for event in exports] == ["jsonl", "md"]


def test_admin_changes_to_users_and_groups(staff, member):
    admin = login(staff)
    response = admin.post("/admin/auth/group/add/", {"name": "auditors", "permissions": []})
    assert response.status_code == 302
    added = _last("admin_change")
    assert (added.actor, added.target, added.details["change"]) == (staff, "group: auditors", "added")
    page = admin.get(f"/admin/auth/user/{member.pk}/change/")
    assert page.status_code == 200
    admin.post(f"/admin/auth/user/{member.pk}/delete/", {"post": "yes"})
    deleted = _last("admin_change")
    assert (deleted.target, deleted.details["change"]) == (f"user: {member.username}", "deleted")


def test_staff_alone_read_filter_and_export_the_trail(owner, staff, member):
    audit_record(action="corpus_created", actor=owner, target="=cmd|' /C calc'!A0")
    audit_record(action="token_created", actor=member, target="ci of member")
    rows = token_client(staff).get("/api/v1/audit/", {"actor": "own"}).json()["results"]
    assert [(r["actor"], r["action"]) for r in rows] == [("owner", "corpus_created")]
    assert token_client(staff).get("/api/v1/audit/", {"since": "yesterday"}).status_code == 400
    page = login(staff).get("/accounts/audit/", {"action": "token_created"})
    assert page.status_code == 200 and "ci of member" in page.content.decode()
    exported = list(csv.reader(io.StringIO(login(staff).get("/accounts/audit/export.csv").content.decode())))
    assert exported[0][:3] == ["created", "actor", "action"] and exported[-1][3].startswith("'=cmd")
    for user in (owner, member):
        assert token_client(user).get("/api/v1/audit/").status_code == 403
        assert login(user).get("/accounts/audit/").status_code == 403
        assert login(user).get("/accounts/audit/export.csv").status_code == 403


def test_no_route_changes_or_deletes_an_event_and_the_model_refuses_both(staff, owner):
    event = audit_record(action="corpus_created", actor=owner, target="kept")
    admin = login(staff)
    assert admin.get(f"/admin/accounts/auditevent/{event.pk}/delete/").status_code == 403
    assert (
        admin.post(f"/admin/accounts/auditevent/{event.pk}/change/", {"target": "changed"}).status_code == 403
    )
    event.refresh_from_db()
    assert event.target == "kept"
    with pytest.raises(ValueError):
        event.save()
    with pytest.raises(ValueError):
        event.delete()
    for method in ("put", "patch", "delete", "post"):
        assert getattr(token_client(staff), method)("/api/v1/audit/").status_code == 405
    routes = [str(p.pattern) for p in _patterns(get_resolver()) if "audit" in str(p.pattern)]
    assert routes and all("delete" not in route and "edit" not in route for route in routes)


def _patterns(resolver: URLResolver) -> list[URLPattern]:
    found = []
    for pattern in resolver.url_patterns:
        if isinstance(pattern, URLResolver):
            found += _patterns(pattern)
        else:
            found.append(pattern)
    return found


def test_the_retention_removes_only_older_events(settings, owner):
    settings.AUDIT_RETENTION_DAYS = 30
    kept, old = (
        audit_record(action="corpus_created", target="new"),
        audit_record(action="corpus_created", target="old"),
    )
    AuditEvent.objects.filter(pk=old.pk).update(created=timezone.now() - timedelta(days=31))
    assert audit_prune() == 1 and list(AuditEvent.objects.values_list("pk", flat=True)) == [kept.pk]
    settings.AUDIT_RETENTION_DAYS = 0
    AuditEvent.objects.filter(pk=kept.pk).update(created=timezone.now() - timedelta(days=3650))
    assert audit_prune() == 0 and AuditEvent.objects.count() == 1
