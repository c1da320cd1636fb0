"""The pages' one way to call a service and report it (core.flash, issue 30.10): a success is
a message naming what the page shows, a refusal is the service's own error message, and either way
the view redirects."""

from __future__ import annotations

from django.urls import reverse

from corpus.services.builds import build_start
from corpus.services.corpora import corpus_create
from tests.plugins.portal import SMALL_HDC, login, upload


def _messages(response) -> list[tuple[str, str]]:  # noqa: ANN001 - a test client response
    return [(message.level_tag, message.message) for message in response.context["messages"]]


def test_build_messages_name_the_build_as_the_page_numbers_it(corpus, owner, dataset):
    """The corpus page lists builds by their number in the corpus (#1, #2); the messages about a
    build name it the same way, not by its database id."""
    other = corpus_create(owner=owner, name="Other notes", **SMALL_HDC)
    upload(other, owner)
    build_start(corpus=other, user=owner)  # a build of another corpus first: ids and numbers differ
    client = login(owner)

    started = client.post(reverse("corpus:build_start", args=[corpus.pk]), follow=True)
    build = corpus.builds.get()
    assert build.number == 1 and build.pk != build.number
    assert started.redirect_chain == [(reverse("corpus:detail", args=[corpus.pk]), 302)]
    assert _messages(started) == [("success", "Build #1 queued.")]

    refused = client.post(reverse("corpus:build_start", args=[corpus.pk]), follow=True)
    assert [level for level, _ in _messages(refused)] == ["error"]  # the service's refusal, no success
    assert "already queued or running" in _messages(refused)[0][1]
    assert corpus.builds.count() == 1

    cancelled = client.post(reverse("corpus:build_cancel", args=[build.pk]), follow=True)
    assert cancelled.redirect_chain == [(reverse("corpus:detail", args=[corpus.pk]), 302)]
    assert _messages(cancelled) == [("success", "Cancellation of build #1 requested.")]
