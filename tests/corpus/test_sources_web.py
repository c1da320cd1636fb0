"""A web site source, served by a local HTTP server: links followed under the path prefix, a
sitemap, robots.txt honoured, another host never visited, conditional requests, a 500."""

from __future__ import annotations

import pytest

from corpus.sources.models import Source
from corpus.sources.services import source_create
from tests.corpus.source_servers import Site, web_site
from tests.corpus.sources import ADDED, CHANGED, DELETED, DOCS, found, sync

# The servers listen on loopback: these sources are allowed it, as an operator would allow a network.
pytestmark = pytest.mark.usefixtures("allow_loopback")

HTML = "text/html"


def page(title: str, text: str, links: list[str] = ()) -> tuple[str, str]:
    anchors = "".join(f'<li><a href="{href}">{href}</a></li>' for href in links)
    return (f"<html><head><title>{title}</title></head><body><h1>{title}</h1><p>{text}</p>"
            f"<ul>{anchors}</ul></body></html>", HTML)


def text_of(markdown: str) -> str:
    return markdown.splitlines()[-1] if markdown.strip().startswith("#") else markdown.strip()


def publish(site: Site, other: Site, docs: dict[str, str]) -> None:
    """The site's pages: an index linking to every document (one only through the sitemap), a page
    robots.txt forbids, and a link to another host."""
    listed = [f"/docs/{p.replace('.md', '.html').replace('.txt', '.html')}" for p in docs]
    linked, only_in_sitemap = listed[:-1], listed[-1]
    site.pages = {
        "/robots.txt": ("User-agent: *\nDisallow: /docs/private/\n", "text/plain"),
        "/sitemap.xml": (
            "<?xml version='1.0'?><urlset xmlns='http://www.sitemaps.org/schemas/sitemap/0.9'>"
            f"<url><loc>{site.origin}{only_in_sitemap}</loc></url></urlset>",
            "application/xml",
        ),
        "/docs/": page(
            "Index",
            "The documentation index of the team.",
            [*linked, "/docs/private/keys.html", f"{other.origin}/docs/elsewhere.html", "/outside.html"],
        ),
        "/docs/private/keys.html": page("Keys", "The heron vault key is kept under the stairs."),
        "/outside.html": page("Outside", "The lemur page is outside the prefix."),
    }
    for path, url in zip(docs, listed, strict=True):
        site.pages[url] = page(path, text_of(docs[path]))


@pytest.fixture
def sites():
    with web_site() as site, web_site("127.0.0.2") as other:
        other.pages = {"/docs/elsewhere.html": page("Elsewhere", "The ocelot page lives on another host.")}
        yield site, other


def test_web_sync_follows_the_site(corpus, owner, member, sites, django_capture_on_commit_callbacks):
    site, other = sites
    publish(site, other, DOCS)
    source = source_create(
        corpus=corpus,
        user=owner,
        name="intranet",
        kind="web",
        location=f"{site.origin}/docs/",
        sitemap_url=f"{site.origin}/sitemap.xml",
    )
    sync(source, django_capture_on_commit_callbacks)
    assert source.status == Source.Status.SUCCEEDED, source.error
    # The index page is a document too.
    assert (source.added, source.removed) == (len(DOCS) + 1, 0), source.failures
    for phrase in ["quokka installer unpacks", "zymurgy command", "axolotl service", "sextant dashboard"]:
        assert found(member, corpus, phrase), phrase
    assert not other.requests, "another host was visited"
    asked = {path for path, _ in site.requests}
    assert "/docs/private/keys.html" not in asked and "/outside.html" not in asked
    assert not found(member, corpus, "heron vault key")
    assert source.documents.get(path="docs/faq.html").url == f"{site.origin}/docs/faq.html"
    # Change two pages, delete one, add one: only those are downloaded again.
    site.requests.clear()
    publish(site, other, {**{p: t for p, t in DOCS.items() if p != DELETED}, **CHANGED, **ADDED})
    sync(source, django_capture_on_commit_callbacks)
    assert source.status == Source.Status.SUCCEEDED, source.error
    assert (source.added, source.changed, source.removed) == (1, 3, 1), (
        source.failures
    )  # the index changed too
    assert ("/docs/faq.html", "304") in site.requests
    for phrase in ["pangolin installer copies", "kestrel command to compress", "cassowary relay forwards",
                   "sextant dashboard"]:
        assert found(member, corpus, phrase), phrase
    for phrase in ["quokka installer unpacks", "zymurgy command", "axolotl service"]:
        assert not found(member, corpus, phrase), phrase
    # The site answers 500: the sync fails with the reason; every page stays searchable.
    site.failing.add("*")
    sync(source, django_capture_on_commit_callbacks)
    assert source.status == Source.Status.FAILED and "answered 500" in source.error
    assert found(member, corpus, "cassowary relay forwards") and found(member, corpus, "sextant dashboard")


def test_web_one_page_failing_is_named_and_kept(
    corpus, owner, member, sites, django_capture_on_commit_callbacks
):
    site, other = sites
    publish(site, other, DOCS)
    source = source_create(
        corpus=corpus, user=owner, name="intranet", kind="web", location=f"{site.origin}/docs/"
    )
    sync(source, django_capture_on_commit_callbacks)
    assert source.status == Source.Status.SUCCEEDED and source.added == len(
        DOCS
    )  # the sitemap's page not reached
    site.failing.add("/docs/notes.html")
    sync(source, django_capture_on_commit_callbacks)
    assert source.status == Source.Status.SUCCEEDED and source.removed == 0
    assert source.failures == [{"name": "docs/notes.html", "reason": "the site answered 500"}]
    assert found(member, corpus, "axolotl service")
    # A site that cannot be reached at all.
    Source.objects.filter(pk=source.pk).update(location="http://127.0.0.1:9/docs/")
    source.refresh_from_db()
    sync(source, django_capture_on_commit_callbacks)
    assert source.status == Source.Status.FAILED and "cannot be reached" in source.error
    assert_all_still_found_web(member, corpus)


def assert_all_still_found_web(member, corpus) -> None:  # noqa: ANN001
    for phrase in ["quokka installer unpacks", "zymurgy command", "axolotl service"]:
        assert found(member, corpus, phrase), phrase

