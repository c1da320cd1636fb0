"""Readers that follow the source, from the outsider's side: rules `path glob -> groups` on a folder
and on a Git source, a folder's POSIX groups; a change of rule takes effect at the next search
without a rebuild; conversation exports name but do not quote a memory one may no longer read."""

from __future__ import annotations

import grp
import os
from pathlib import Path

import pytest
from django.contrib.auth.models import Group, User

from chat.exports import conversation_export_markdown
from chat.services import conversation_create, message_create_assistant, message_create_user
from corpus.sources.services import source_create
from memory.services import memories_search
from tests.corpus.source_servers import git_server
from tests.corpus.sources import sync
from tests.plugins.api import token_client

FILES = {
    "hr/pay.md": "# Pay\n\nSalary bands for engineers are reviewed by the payroll committee each spring.\n",
    "sales/acme.md": "# Acme\n\nThe Acme contract renews in March with a discount on the licences.\n",
    "handbook.md": "# Handbook\n\nThe office cafeteria serves lunch and visitors wear a badge.\n",
}
PHRASES = {
    "hr/pay.md": "payroll committee salary bands",
    "sales/acme.md": "Acme contract licences discount",
    "handbook.md": "office cafeteria lunch badge",
}
RULES = [{"pattern": "hr/**", "groups": ["hr"]}, {"pattern": "sales/**", "groups": ["sales"]}]


@pytest.fixture
def people(corpus, member) -> dict[str, User]:
    groups = {name: Group.objects.create(name=name) for name in ("hr", "sales")}
    corpus.readable_groups.add(*groups.values())
    alice, bob = User.objects.create_user("alice"), User.objects.create_user("bob")
    alice.groups.add(groups["hr"])
    bob.groups.add(groups["sales"])
    return {"alice": alice, "bob": bob, "member": member}


def write(folder: Path, files: dict[str, str]) -> None:
    for path, text in files.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(text)


def seen(user: User, corpus) -> set[str]:  # noqa: ANN001 - a Corpus
    """The documents (paths) a search for each document's words shows `user`."""
    corpus.refresh_from_db()
    paths = set()
    for query in PHRASES.values():
        for result in memories_search(user=user, corpus_ids=[corpus.pk], query=query, raw_limit=50):
            paths.add(result.dataset_name.split("/", 1)[1])
    return paths


@pytest.fixture
def folder(settings, tmp_path) -> Path:
    settings.SOURCE_ROOTS = [str(tmp_path / "shared")]
    folder = tmp_path / "shared" / "team"
    write(folder, FILES)
    return folder


def test_folder_rules_and_a_change_of_rule_without_a_rebuild(
    corpus, owner, people, folder, django_capture_on_commit_callbacks
):
    source = source_create(
        corpus=corpus, user=owner, name="team", kind="folder", location=str(folder), reader_rules=RULES
    )
    sync(source, django_capture_on_commit_callbacks)
    assert seen(people["alice"], corpus) == {"hr/pay.md", "handbook.md"}
    assert seen(people["bob"], corpus) == {"sales/acme.md", "handbook.md"}
    assert seen(people["member"], corpus) == {"handbook.md"}
    assert seen(owner, corpus) == set(FILES)
    builds = corpus.builds.count()
    # The owner opens the HR folder to sales too; the sales rule goes: the corpus's readers.
    response = token_client(owner).patch(
        f"/api/v1/sources/{source.pk}/",
        {"reader_rules": [{"pattern": "hr/*", "groups": ["hr", "sales"]}]},
        format="json",
    )
    assert response.status_code == 200, response.content
    assert response.json()["reader_rules"] == [{"pattern": "hr/*", "groups": ["hr", "sales"]}]
    assert seen(people["bob"], corpus) == set(FILES)
    assert seen(people["member"], corpus) == {"sales/acme.md", "handbook.md"}
    assert corpus.builds.count() == builds  # readers are metadata: no rebuild
    # Bad rules: a clear error, nothing changed; only the owner may change them.
    bad = token_client(owner).patch(
        f"/api/v1/sources/{source.pk}/", {"reader_rules": [{"pattern": "x/**"}]}, format="json"
    )
    assert bad.status_code == 400 and "rule 1" in bad.json()["error"]["message"]
    assert (
        token_client(people["member"])
        .patch(f"/api/v1/sources/{source.pk}/", {"reader_rules": []}, format="json")
        .status_code
        == 403
    )
    assert seen(people["member"], corpus) == {"sales/acme.md", "handbook.md"}


def test_a_changed_document_keeps_its_rule_and_a_lost_membership_hides_it(
    corpus, owner, people, folder, django_capture_on_commit_callbacks
):
    source = source_create(
        corpus=corpus, user=owner, name="team", kind="folder", location=str(folder), reader_rules=RULES
    )
    sync(source, django_capture_on_commit_callbacks)
    write(folder, {"hr/pay.md": "# Pay\n\nThe payroll committee moved the salary bands review to autumn.\n"})
    sync(source, django_capture_on_commit_callbacks)
    assert source.changed == 1
    assert seen(people["member"], corpus) == {"handbook.md"}
    assert "hr/pay.md" in seen(people["alice"], corpus)
    people["alice"].groups.add(*people["member"].groups.all())  # she reads the corpus as its members do
    people["alice"].groups.remove(Group.objects.get(name="hr"))
    assert seen(people["alice"], corpus) == {"handbook.md"}


def test_folder_posix_groups(corpus, owner, people, folder, django_capture_on_commit_callbacks):
    # Two of this machine's groups stand for the file server's: the portal groups of the same names read.
    names = [g.gr_name for g in grp.getgrall() if g.gr_gid != os.getgid()][:2]
    try:
        for path, name in zip(("hr/pay.md", "sales/acme.md"), names, strict=True):
            os.chown(folder / path, -1, grp.getgrnam(name).gr_gid)
    except PermissionError:
        pytest.skip("changing a file's group needs root here")
    source = source_create(
        corpus=corpus, user=owner, name="team", kind="folder", location=str(folder), posix_groups=True
    )
    # The handbook keeps this process's group: a portal group that nobody is in reads it.
    own = grp.getgrgid(os.getgid()).gr_name
    sync(source, django_capture_on_commit_callbacks)
    people["alice"].groups.add(Group.objects.get(name=names[0]))
    assert seen(people["alice"], corpus) == {"hr/pay.md"}
    assert seen(people["member"], corpus) == set()
    people["member"].groups.add(Group.objects.get(name=own))
    assert seen(people["member"], corpus) == {"handbook.md"}
    # The file server moves the sales file into the first group: the next sync follows, no rebuild.
    builds = corpus.builds.count()
    os.chown(folder / "sales/acme.md", -1, grp.getgrnam(names[0]).gr_gid)
    sync(source, django_capture_on_commit_callbacks)
    assert corpus.builds.count() == builds
    assert seen(people["alice"], corpus) == {"hr/pay.md", "sales/acme.md"}


@pytest.mark.usefixtures("allow_loopback")
def test_git_rules(corpus, owner, people, tmp_path, django_capture_on_commit_callbacks):
    with git_server(tmp_path / "git") as server:
        work = server.repository("team", FILES)
        source = source_create(
            corpus=corpus,
            user=owner,
            name="team",
            kind="git",
            location=server.url("team"),
            branch="main",
            reader_rules=RULES,
        )
        sync(source, django_capture_on_commit_callbacks)
        assert seen(people["alice"], corpus) == {"hr/pay.md", "handbook.md"}
        assert seen(people["bob"], corpus) == {"sales/acme.md", "handbook.md"}
        server.commit(
            work, {"hr/leave.md": "# Leave\n\nParental leave lasts sixteen weeks on full payroll.\n"}
        )
        sync(source, django_capture_on_commit_callbacks)
    results = memories_search(
        user=people["bob"], corpus_ids=[corpus.pk], query="parental leave weeks", raw_limit=50
    )
    assert results and all(not r.dataset_name.startswith("team/hr/") for r in results)
    found = memories_search(
        user=people["alice"], corpus_ids=[corpus.pk], query="parental leave weeks", raw_limit=5
    )
    assert "team/hr/leave.md" in {r.dataset_name for r in found}


def test_export_names_but_does_not_quote_what_is_no_longer_readable(
    corpus, owner, people, folder, django_capture_on_commit_callbacks
):
    source = source_create(
        corpus=corpus, user=owner, name="team", kind="folder", location=str(folder), reader_rules=RULES
    )
    sync(source, django_capture_on_commit_callbacks)
    alice = people["alice"]
    conversation = conversation_create(user=alice, title="Pay", corpus_ids=[corpus.pk])
    message_create_user(conversation_id=conversation.pk, content="When are salary bands reviewed?")
    memories = memories_search(user=alice, corpus_ids=[corpus.pk], query=PHRASES["hr/pay.md"])
    assert any(m.dataset_name == "team/hr/pay.md" for m in memories)
    message_create_assistant(
        conversation_id=conversation.pk, content="In spring.", status="complete", memories=memories
    )
    assert "payroll committee" in conversation_export_markdown(conversation=conversation)
    alice.groups.add(*people["member"].groups.all())  # she reads the corpus as its members do
    alice.groups.remove(Group.objects.get(name="hr"))  # and leaves HR
    exported = conversation_export_markdown(conversation=conversation)
    assert "team/hr/pay.md" in exported  # named
    assert "payroll committee" not in exported and "no longer readable" in exported  # not quoted
    # The conversation's messages (API and chat page alike: `chat.serializers.MessageSerializer`) likewise.
    listed = token_client(alice).get(f"/api/v1/conversations/{conversation.pk}/messages/").json()["results"]
    shown = [m for message in listed for m in message["memories"] if m["source"] == "team/hr/pay.md"]
    assert shown and all(m["excerpt"] == "" and m["url"] == "" for m in shown)
    assert "payroll committee" not in str(listed)
