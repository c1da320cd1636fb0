"""A document's own readers, from the outsider's side: two groups (hr, sales) read one corpus; the
HR document is for hr, the sales document for sales, the handbook for both. For each person, the
search (API and page, pipeline and raw), a memory's page, the datasets' list and detail show only
their documents; a change of readers or of a group's members takes effect at the next search."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.urls import reverse
from rest_framework.test import APIClient

from corpus.document_access import dataset_readers_set, document_readable, hidden_dataset_ids
from corpus.models import Dataset, Memory
from memory.services import memories_search
from tests.plugins.api import token_client
from tests.plugins.portal import build_now, login, upload

HR = [
    "Salary bands for engineers are reviewed every spring by the payroll committee.",
    "Parental leave lasts sixteen weeks and the payroll keeps paying the full salary.",
]
SALES = [
    "The Acme contract renews in March with a discount of eight percent on licences.",
    "Our quota for the northern territory doubled after the Acme licences were signed.",
]
BOTH = [
    "The office opens at eight and the cafeteria serves lunch from noon to two.",
    "Visitors sign in at the front desk and wear a badge while in the building.",
]


@pytest.fixture
def groups(corpus) -> dict[str, Group]:
    found = {name: Group.objects.create(name=name) for name in ("hr", "sales")}
    corpus.readable_groups.add(*found.values())
    return found


@pytest.fixture
def people(groups, member, outsider, owner, writer) -> dict[str, User]:
    alice = User.objects.create_user("alice")
    alice.groups.add(groups["hr"])
    bob = User.objects.create_user("bob")
    bob.groups.add(groups["sales"])
    return {
        "alice": alice,
        "bob": bob,
        "member": member,
        "outsider": outsider,
        "owner": owner,
        "writer": writer,
    }


@pytest.fixture
def documents(corpus, owner, groups, django_capture_on_commit_callbacks) -> dict[str, Dataset]:
    made = {
        "hr": upload(corpus, owner, HR, "hr.jsonl"),
        "sales": upload(corpus, owner, SALES, "sales.jsonl"),
        "both": upload(corpus, owner, BOTH, "handbook.jsonl"),
    }
    dataset_readers_set(dataset=made["hr"], groups=[groups["hr"]])
    dataset_readers_set(dataset=made["sales"], groups=[groups["sales"]])
    build_now(corpus, owner, django_capture_on_commit_callbacks)
    return made


# Who reads which document: the corpus's owner and writers manage every document.
SEES = {
    "alice": {"hr", "both"},
    "bob": {"sales", "both"},
    "member": {"both"},
    "outsider": set(),
    "owner": {"hr", "sales", "both"},
    "writer": {"hr", "sales", "both"},
}
QUERIES = {"hr": "payroll salary leave", "sales": "Acme contract licences", "both": "office cafeteria badge"}


def _found(user: User, corpus_id: int, documents: dict[str, Dataset], raw: bool = False) -> set[str]:
    names = {d.pk: key for key, d in documents.items()}
    found = set()
    for query in QUERIES.values():
        results = memories_search(
            user=user, corpus_ids=[corpus_id], query=query, raw_limit=50 if raw else None
        )
        found |= {names[r.dataset_id] for r in results}
    return found


def test_restricted_follows_the_readers(corpus, owner, groups):
    dataset = upload(corpus, owner)
    assert not dataset.restricted
    dataset.reader_groups.add(groups["hr"])
    dataset.refresh_from_db()
    assert dataset.restricted
    dataset.reader_groups.clear()
    dataset.refresh_from_db()
    assert not dataset.restricted


def test_search_shows_each_person_only_their_documents(corpus, people, documents):
    for name, sees in SEES.items():
        for raw in (False, True):
            assert _found(people[name], corpus.pk, documents, raw=raw) == sees, (name, raw)


def test_the_top_ten_are_all_readable_inside_the_scan(corpus, people, documents):
    # Raw mode: the index's own top rows. A filter after the scan would leave fewer than asked.
    results = memories_search(user=people["member"], corpus_ids=[corpus.pk], query=QUERIES["hr"], raw_limit=2)
    assert len(results) == 2
    assert {r.dataset_id for r in results} == {documents["both"].pk}


def test_a_chosen_dataset_filter_is_intersected(corpus, people, documents):
    chosen = [documents["hr"].pk, documents["both"].pk]
    found = memories_search(
        user=people["bob"], corpus_ids=[corpus.pk], query=QUERIES["hr"], dataset_ids=chosen, raw_limit=50
    )
    assert {r.dataset_id for r in found} == {documents["both"].pk}


def test_api_search_memories_and_datasets(corpus, people, documents):
    for name in SEES:
        _api_surfaces(corpus, people, documents, name)


def _api_surfaces(corpus, people, documents, name) -> None:  # noqa: ANN001 - the test's fixtures
    client: APIClient = token_client(people[name])
    expected = {documents[key].pk for key in SEES[name]}
    searched = client.get(f"/api/v1/corpora/{corpus.pk}/search/?q={QUERIES['hr']}&mode=raw&limit=50")
    listed = client.get(f"/api/v1/corpora/{corpus.pk}/datasets/")
    if name == "outsider":
        assert searched.status_code == listed.status_code == 404
    else:
        assert {item["dataset"] for item in searched.json()["results"]} == expected, name
        assert {item["id"] for item in listed.json()["results"]} == expected, name
    for key, dataset in documents.items():
        memory = Memory.objects.filter(dataset=dataset, build=corpus.active_build).first()
        wanted = 200 if key in SEES[name] else 404
        assert client.get(f"/api/v1/corpora/{corpus.pk}/datasets/{dataset.pk}/").status_code == wanted, name
        assert client.get(f"/api/v1/memories/{memory.pk}/").status_code == wanted, name
        assert login(people[name]).get(f"/memory/{memory.pk}/").status_code == wanted, name
        for view in ("corpus:document", "corpus:document_original"):  # the document view (issue 58)
            address = reverse(view, args=[corpus.pk, dataset.pk])
            assert login(people[name]).get(address).status_code == wanted, (name, view)
        assert document_readable(people[name], dataset) is (key in SEES[name]), name


def test_search_page_shows_only_readable_documents(corpus, people, documents):
    page = login(people["bob"]).get("/memory/search/", {"q": QUERIES["hr"], "corpora": corpus.pk})
    text = page.content.decode()
    assert page.status_code == 200
    assert "hr.jsonl" not in text
    assert not any(line[:30] in text for line in HR)
    assert "handbook.jsonl" in text


def test_a_change_of_readers_or_membership_takes_effect_at_the_next_search(corpus, people, documents, groups):
    bob, hr = people["bob"], documents["hr"]
    assert "hr" not in _found(bob, corpus.pk, documents)
    bob.groups.add(groups["hr"])
    assert "hr" in _found(bob, corpus.pk, documents)
    bob.groups.remove(groups["hr"])
    dataset_readers_set(dataset=hr, users=[bob], groups=[groups["hr"]])
    assert "hr" in _found(bob, corpus.pk, documents)
    dataset_readers_set(dataset=hr)  # no readers of its own: the corpus's again
    assert "hr" in _found(people["member"], corpus.pk, documents)
    assert hidden_dataset_ids(people["member"], [corpus.pk]) == {
        corpus.pk: frozenset({documents["sales"].pk})
    }


def test_api_sets_readers_writers_only_and_names_unknown_ones(corpus, people, documents):
    path = f"/api/v1/corpora/{corpus.pk}/datasets/{documents['both'].pk}/"
    body = {"readers": {"users": ["bob"], "groups": ["hr"]}}
    assert token_client(people["member"]).patch(path, body, format="json").status_code == 403
    assert token_client(people["outsider"]).patch(path, body, format="json").status_code == 404
    # Alice cannot read the sales document: she learns nothing of it.
    sales = f"/api/v1/corpora/{corpus.pk}/datasets/{documents['sales'].pk}/"
    assert token_client(people["alice"]).patch(sales, body, format="json").status_code == 404
    wrong = token_client(people["writer"]).patch(
        path, {"readers": {"users": ["nobody"], "groups": ["hr", "x"]}}, format="json"
    )
    assert wrong.status_code == 400
    assert "nobody" in wrong.json()["error"]["message"] and "'x'" in wrong.json()["error"]["message"]
    assert not Dataset.objects.get(pk=documents["both"].pk).restricted  # nothing changed
    done = token_client(people["writer"]).patch(path, body, format="json")
    assert done.status_code == 200
    assert done.json()["readers"] == {"users": ["bob"], "groups": ["hr"]}
    assert "both" not in _found(people["member"], corpus.pk, documents)
    assert "both" in _found(people["alice"], corpus.pk, documents)


def test_upload_with_readers(corpus, people, groups):
    client = token_client(people["owner"])
    from django.core.files.uploadedfile import SimpleUploadedFile

    from tests.plugins.portal import jsonl_bytes

    refused = client.post(
        f"/api/v1/corpora/{corpus.pk}/datasets/",
        {"file": SimpleUploadedFile("a.jsonl", jsonl_bytes(HR)), "reader_groups": "hr,nope"},
        format="multipart",
    )
    assert refused.status_code == 400 and "nope" in refused.json()["error"]["message"]
    assert not corpus.datasets.exists()  # nothing stored
    made = client.post(
        f"/api/v1/corpora/{corpus.pk}/datasets/",
        {
            "file": SimpleUploadedFile("a.jsonl", jsonl_bytes(HR)),
            "reader_groups": "hr",
            "reader_users": "bob",
        },
        format="multipart",
    )
    assert made.status_code == 201, made.content
    assert made.json()["readers"] == {"users": ["bob"], "groups": ["hr"]}
    assert Dataset.objects.get(pk=made.json()["id"]).restricted


def test_the_corpus_page_sets_a_documents_readers(corpus, people, groups):
    dataset = upload(corpus, people["owner"], BOTH, "handbook.jsonl")
    path = f"/corpora/datasets/{dataset.pk}/readers/"
    assert login(people["outsider"]).post(path, {"groups": "hr"}).status_code == 404
    assert login(people["member"]).post(path, {"groups": "hr"}).status_code == 403
    refused = login(people["writer"]).post(path, {"groups": "hr, nope"}, follow=True)
    assert "nope" in refused.content.decode()
    assert not Dataset.objects.get(pk=dataset.pk).restricted  # nothing changed
    page = login(people["writer"]).post(path, {"groups": "hr", "users": "bob"}, follow=True)
    assert "read by the readers named" in page.content.decode()
    dataset.refresh_from_db()
    assert dataset.restricted and {g.name for g in dataset.reader_groups.all()} == {"hr"}
    # The member no longer sees the row; alice does, with its readers.
    assert "handbook.jsonl" not in login(people["member"]).get(f"/corpora/{corpus.pk}/").content.decode()
    assert "handbook.jsonl" in login(people["alice"]).get(f"/corpora/{corpus.pk}/").content.decode()
    login(people["owner"]).post(path, {"groups": "", "users": ""})
    assert not Dataset.objects.get(pk=dataset.pk).restricted


def test_the_corpus_pages_upload_form_gives_the_files_readers(corpus, people, groups):
    """The page's upload (the script's per-file request and the plain form alike) names readers as the
    API's does: an unknown name stores nothing, and every file of the request, a ZIP's included, gets them."""
    from django.core.files.uploadedfile import SimpleUploadedFile

    from tests.plugins.portal import jsonl_bytes

    path = reverse("corpus:dataset_add", args=[corpus.pk])
    page = login(people["owner"]).get(f"/corpora/{corpus.pk}/").content.decode()
    assert 'name="reader_groups"' in page and 'name="reader_users"' in page
    refused = login(people["writer"]).post(
        path, {"file": SimpleUploadedFile("hr.jsonl", jsonl_bytes(HR)), "reader_groups": "hr, nope"},
        HTTP_ACCEPT="application/json",
    )
    assert refused.status_code == 400 and "nope" in refused.json()["results"][0]["error"]
    assert not corpus.datasets.exists()  # nothing stored
    stored = login(people["writer"]).post(
        path, {"file": [SimpleUploadedFile("hr.jsonl", jsonl_bytes(HR)),
                        SimpleUploadedFile("pay.jsonl", jsonl_bytes(HR[:1]))],
               "reader_groups": "hr", "reader_users": "bob"}, follow=True,
    )
    assert stored.status_code == 200
    for name in ("hr.jsonl", "pay.jsonl"):
        dataset = corpus.datasets.get(name=name)
        assert dataset.restricted
        assert {g.name for g in dataset.reader_groups.all()} == {"hr"}
        assert {u.username for u in dataset.reader_users.all()} == {"bob"}
        assert document_readable(people["alice"], dataset)
        assert not document_readable(people["member"], dataset)


def test_deleting_a_documents_only_reader_group_keeps_it_closed(corpus, people, groups, documents):
    """Deleting the HR group does not open the HR document to the whole corpus (fail closed): it stays
    read by the corpus's managers only, and the page and the API say so."""
    hr = documents["hr"]
    groups["hr"].delete()
    hr.refresh_from_db()
    assert hr.restricted and not hr.reader_groups.exists() and not hr.reader_users.exists()
    assert "hr" not in _found(people["member"], corpus.pk, documents)
    assert "hr" not in _found(people["alice"], corpus.pk, documents)  # no longer in the group
    assert "hr" in _found(people["owner"], corpus.pk, documents)
    page = login(people["owner"]).get(f"/corpora/{corpus.pk}/").content.decode()
    assert "Only the corpus&#x27;s managers" in page or "Only the corpus's managers" in page
    detail = token_client(people["owner"]).get(f"/api/v1/corpora/{corpus.pk}/datasets/{hr.pk}/").json()
    assert detail["restricted"] is True and detail["readers"] == {"users": [], "groups": []}
    # The owner gives it back to the corpus's readers: empty lists clear the flag.
    dataset_readers_set(dataset=hr)
    assert not Dataset.objects.get(pk=hr.pk).restricted
    assert "hr" in _found(people["member"], corpus.pk, documents)
