"""Owners share corpora with people and groups from the corpus page; people run their own groups.
Every change applies at once; outsiders and plain members cannot share or manage."""

from __future__ import annotations

from django.contrib.auth.models import Group
from django.urls import reverse

from accounts.models import GroupManager
from corpus.models import Corpus
from corpus.services.corpora import corpus_create
from tests.plugins.portal import _user, login


def share(client, corpus, **data):
    return client.post(reverse("corpus:share_add", args=[corpus.pk]), data, follow=True)


def test_owner_shares_a_private_corpus_with_a_person_who_then_reads_it(owner, outsider):
    corpus = corpus_create(owner=owner, name="Private notes")
    detail = reverse("corpus:detail", args=[corpus.pk])
    assert login(outsider).get(detail).status_code == 404
    page = share(login(owner), corpus, kind="user", username="outsider", access="read").content.decode()
    assert "Shared: outsider may now read this corpus. The corpus was private; it is now shared." in page
    corpus.refresh_from_db()
    assert corpus.visibility == Corpus.Visibility.GROUPS
    assert login(outsider).get(detail).status_code == 200
    # Read access is not write access.
    assert login(outsider).post(reverse("corpus:build_start", args=[corpus.pk])).status_code == 403
    share(login(owner), corpus, kind="user", username="outsider", access="write")
    assert list(corpus.writable_users.all()) == [outsider] and not corpus.readable_users.exists()
    assert login(outsider).post(reverse("corpus:build_start", args=[corpus.pk])).status_code == 302


def test_the_page_lists_who_has_access_and_removal_applies_at_once(owner, outsider, readers):
    corpus = corpus_create(owner=owner, name="Notes")
    readers.user_set.add(owner)
    share(login(owner), corpus, kind="user", username="outsider", access="write")
    share(login(owner), corpus, kind="group", group=str(readers.pk), access="read")
    page = login(owner).get(reverse("corpus:detail", args=[corpus.pk])).content.decode()
    access = page[page.index('id="access-list"'):page.index("</table>", page.index('id="access-list"'))]
    assert "<strong>owner</strong>" in access and "<strong>outsider</strong>" in access
    assert "read and write" in access and "Group <strong>readers</strong>" in access
    login(owner).post(reverse("corpus:share_remove", args=[corpus.pk]), {"user": outsider.pk})
    assert login(outsider).get(reverse("corpus:detail", args=[corpus.pk])).status_code == 404


def test_visibility_change_applies_at_once_and_says_so(owner, outsider):
    corpus = corpus_create(owner=owner, name="Notes")
    response = login(owner).post(
        reverse("corpus:visibility", args=[corpus.pk]), {"visibility": "everyone"}, follow=True
    )
    assert (
        "It applies at once." in response.content.decode() and "next build" not in response.content.decode()
    )
    assert login(outsider).get(reverse("corpus:detail", args=[corpus.pk])).status_code == 200
    bad = login(owner).post(
        reverse("corpus:visibility", args=[corpus.pk]), {"visibility": "nobody"}, follow=True
    )
    assert "Visibility must be one of" in bad.content.decode()


def test_sharing_errors_are_clear(owner, corpus, outsider, writers):
    client = login(owner)
    assert (
        "There is no user named &#x27;ghost&#x27;."
        in share(client, corpus, kind="user", username="ghost").content.decode()
    )
    assert "owns this corpus already" in share(client, corpus, kind="user", username="owner").content.decode()
    assert (
        "Access must be one of"
        in share(client, corpus, kind="user", username="outsider", access="admin").content.decode()
    )
    # The owner is not in "writers": they cannot share with a group that is not theirs.
    foreign = Group.objects.create(name="someone else's")
    assert (
        "Choose one of your groups"
        in share(client, corpus, kind="group", group=str(foreign.pk)).content.decode()
    )
    assert "Choose a group." in share(client, corpus, kind="group", group="x").content.decode()


def test_only_the_owner_shares(corpus, member, writer, outsider):
    url = reverse("corpus:share_add", args=[corpus.pk])
    data = {"kind": "user", "username": "outsider", "access": "write"}
    assert login(member).post(url, data).status_code == 403
    assert login(writer).post(url, data).status_code == 403
    assert login(outsider).post(url, data).status_code == 404
    assert (
        login(writer)
        .post(reverse("corpus:visibility", args=[corpus.pk]), {"visibility": "everyone"})
        .status_code
        == 403
    )
    assert not corpus.writable_users.exists()


def test_people_create_and_run_groups_without_the_admin(owner, outsider):
    client = login(owner)
    response = client.post(reverse("groups:new"), {"name": "Research"}, follow=True)
    group = Group.objects.get(name="Research")
    assert "Group Research created; you manage it." in response.content.decode()
    assert (
        GroupManager.objects.filter(group=group, user=owner).exists()
        and owner.groups.filter(pk=group.pk).exists()
    )
    client.post(reverse("groups:member_add", args=[group.pk]), {"username": "outsider"})
    assert outsider.groups.filter(pk=group.pk).exists()
    # The new group is offered for sharing on the owner's corpus page and in the settings form.
    corpus = corpus_create(owner=owner, name="Lab book")
    page = client.get(reverse("corpus:detail", args=[corpus.pk])).content.decode()
    assert f'<option value="{group.pk}">Research</option>' in page
    assert "Research" in client.get(reverse("corpus:edit", args=[corpus.pk])).content.decode()
    share(client, corpus, kind="group", group=str(group.pk), access="read")
    assert login(outsider).get(reverse("corpus:detail", args=[corpus.pk])).status_code == 200
    # A plain member sees the group but cannot change it; an outsider does not see it at all.
    assert login(outsider).get(reverse("groups:detail", args=[group.pk])).status_code == 200
    assert (
        login(outsider).post(reverse("groups:member_add", args=[group.pk]), {"username": "owner"}).status_code
        == 403
    )
    stranger = _user("stranger")
    assert login(stranger).get(reverse("groups:detail", args=[group.pk])).status_code == 404
    assert "Research" not in login(stranger).get(reverse("groups:list")).content.decode()


def test_group_errors_and_the_last_manager(owner):
    client = login(owner)
    assert (
        "A group needs a name."
        in client.post(reverse("groups:new"), {"name": " "}, follow=True).content.decode()
    )
    client.post(reverse("groups:new"), {"name": "Team"})
    assert (
        "already exists" in client.post(reverse("groups:new"), {"name": "Team"}, follow=True).content.decode()
    )
    group = Group.objects.get(name="Team")
    response = client.post(
        reverse("groups:member_remove", args=[group.pk]), {"username": "owner"}, follow=True
    )
    assert "the group&#x27;s only manager" in response.content.decode()
    assert owner.groups.filter(pk=group.pk).exists()
