"""A web site: pages under a path prefix of one host, reached by links from a start URL (depth and
page caps) or listed by a sitemap, robots.txt honoured (`urllib.robotparser`). Each request is
conditional (ETag, Last-Modified): a page the site says is unchanged is not downloaded again, and
its links are the ones it had (kept in its version)."""

from __future__ import annotations

import hashlib
import xml.etree.ElementTree as ElementTree
from collections import deque
from html.parser import HTMLParser
from pathlib import Path, PurePosixPath
from urllib.parse import urldefrag, urljoin, urlparse
from urllib.robotparser import RobotFileParser

import requests
from django.conf import settings

from core.outbound import OutboundRefused, OutboundUnresolved, url_check
from core.outbound_http import pinned_session
from corpus.sources.reading import (
    READABLE_SUFFIXES,
    Fetched,
    Known,
    PathFilter,
    Progress,
    Scan,
    SourceRefused,
    SourceUnavailable,
    local_name,
    url_parts,
)

USER_AGENT = "HdRAG-Portal-sync"
SUFFIX_BY_TYPE = {"text/html": ".html", "application/xhtml+xml": ".html", "text/plain": ".txt",
                  "text/markdown": ".md", "application/pdf": ".pdf", "application/json": ".json",
                  "application/xml": ".xml", "text/xml": ".xml",
                  "application/vnd.openxmlformats-officedocument.wordprocessingml.document": ".docx"}


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.hrefs.extend(value for name, value in attrs if name == "href" and value)


def web_url_check(url: str) -> str:
    parsed, host = url_parts(url)
    if parsed.scheme not in ("https", "http") or not host:
        raise SourceRefused(f"{url[:200]!r} is not an http(s) URL.")
    return url


class WebReader:
    def __init__(self, *, start_url: str, path_prefix: str, sitemap_url: str, max_pages: int, max_depth: int,
                 filters: PathFilter) -> None:
        self.start = urldefrag(web_url_check(start_url)).url
        parsed = urlparse(self.start)
        self.origin = f"{parsed.scheme}://{parsed.netloc}"
        self.prefix = path_prefix or (parsed.path.rsplit("/", 1)[0] + "/")
        self.sitemap = web_url_check(sitemap_url) if sitemap_url else ""
        self.max_pages, self.max_depth, self.filters = max_pages, max_depth, filters
        # Every request connects to an address the outbound policy checked (core.outbound_http).
        self.session = pinned_session()
        self.session.headers["User-Agent"] = USER_AGENT
        self.timeout = settings.SOURCE_TIMEOUT_SECONDS

    def _get(self, url: str, headers: dict | None = None) -> requests.Response:
        # Redirects are followed by hand: one may lead to another host.
        return self.session.get(url, headers=headers or {}, timeout=self.timeout, stream=True,
                                allow_redirects=False)

    def _robots(self) -> RobotFileParser:
        robots = RobotFileParser(f"{self.origin}/robots.txt")
        try:
            response = self._get(robots.url)
        except OutboundUnresolved as error:
            raise SourceUnavailable(error.message) from None
        except requests.RequestException as error:
            raise SourceUnavailable(f"{self.origin} cannot be reached: {type(error).__name__}") from None
        if response.status_code >= 500:
            raise SourceUnavailable(f"{robots.url} answered {response.status_code}.")
        if response.status_code == 200:
            robots.parse(response.text.splitlines())
        else:
            robots.allow_all = True
        return robots

    def _own(self, url: str) -> bool:
        try:
            parsed = urlparse(url)
        except ValueError:  # a malformed link (an unclosed IPv6 bracket, say) is no page of the site
            return False
        return f"{parsed.scheme}://{parsed.netloc}" == self.origin and parsed.path.startswith(self.prefix)

    def _key(self, url: str) -> str:
        parsed = urlparse(url)
        return parsed.path.lstrip("/") + (f"?{parsed.query}" if parsed.query else "")

    def _sitemap_urls(self) -> list[str]:
        # The reason names the status or the failure's type, never the text the site sent.
        unreadable = f"The sitemap {self.sitemap} cannot be read"
        try:
            response = self._get(self.sitemap)
        except OutboundUnresolved as error:
            raise SourceUnavailable(f"The sitemap cannot be read: {error.message}") from None
        except requests.RequestException as error:
            raise SourceUnavailable(f"{unreadable}: {type(error).__name__}") from None
        if response.status_code != 200:
            raise SourceUnavailable(f"{unreadable}: it answered {response.status_code}.")
        try:
            root = ElementTree.fromstring(response.content)
        except ElementTree.ParseError:
            raise SourceUnavailable(f"{unreadable}: it is not well-formed XML.") from None
        return [node.text.strip() for node in root.iter() if node.tag.endswith("loc") and node.text]

    def scan(self, *, known: dict[str, Known], workdir: Path, progress: Progress) -> Scan:
        robots = self._robots()
        scan = Scan()
        seeds = [self.start, *_joined(self.start, self._sitemap_urls() if self.sitemap else [])]
        queue = deque((url, 0) for url in seeds)
        seen: set[str] = set()
        while queue and len(scan.present) < self.max_pages:
            url, depth = queue.popleft()
            if url in seen or not self._own(url) or not robots.can_fetch(USER_AGENT, url):
                continue
            seen.add(url)
            progress(len(scan.present), self.max_pages)
            links = self._page(url, known.get(self._key(url)), scan, workdir, first=url == self.start)
            if depth < self.max_depth:
                queue.extend((link, depth + 1) for link in _joined(url, links))
        return scan

    def _page(self, url: str, known: Known | None, scan: Scan, workdir: Path, *, first: bool) -> list[str]:
        """Read one page into the scan; returns its links."""
        key = self._key(url)
        headers = {}
        if known is not None:
            headers = {k: v for k, v in (("If-None-Match", known.version.get("etag")),
                                         ("If-Modified-Since", known.version.get("last_modified"))) if v}
        try:
            response = self._get(url, headers)
        except OutboundRefused as error:
            if first:
                raise
            scan.failed.append((key, error.message))
            return []
        except (requests.RequestException, OutboundUnresolved) as error:
            reason = error.message if isinstance(error, OutboundUnresolved) else type(error).__name__
            if first:
                raise SourceUnavailable(f"{url} cannot be reached: {reason}") from None
            scan.failed.append((key, f"cannot be reached: {reason}"))
            return known.version.get("links", []) if known else []
        if response.status_code in (301, 302, 303, 307, 308):
            return self._redirect(url, key, response, scan, first=first)
        if response.status_code == 304 and known is not None:
            scan.unchanged.add(key)
            return known.version.get("links", [])
        if response.status_code >= 500 or (first and response.status_code != 200):
            if first:
                raise SourceUnavailable(f"{url} answered {response.status_code}.")
            scan.failed.append((key, f"the site answered {response.status_code}"))
            return known.version.get("links", []) if known else []
        if response.status_code != 200:
            return []  # gone (404, 410): removed at the source
        return self._store(url, key, response, scan, workdir)

    def _redirect(self, url: str, key: str, response: requests.Response, scan: Scan, *,
                  first: bool) -> list[str]:
        """A redirect's target, as a link to follow if it is the site's; one the outbound policy
        refuses fails the page (the start page: the sync) with the policy's reason."""
        target = _joined(url, [response.headers.get("Location", "")])
        if not target or urlparse(target[0]).scheme not in ("http", "https"):
            return []
        try:
            url_check(target[0], strict=True)
        except (OutboundRefused, OutboundUnresolved) as error:
            reason = f"redirects to an address sources may not reach: {error.message}"
            if first:
                raise SourceRefused(f"{url} {reason}") from None
            scan.failed.append((key, reason))
            return []
        return target

    def _store(self, url: str, key: str, response: requests.Response, scan: Scan, workdir: Path) -> list[str]:
        kind = response.headers.get("Content-Type", "").split(";")[0].strip().lower()
        suffix = SUFFIX_BY_TYPE.get(kind) or PurePosixPath(urlparse(url).path).suffix.lower()
        body = b""
        for chunk in response.iter_content(1 << 16):
            body += chunk
            if len(body) > settings.UPLOAD_MAX_BYTES:
                scan.failed.append((key, "larger than the upload limit"))
                return []
        links: list[str] = []
        if suffix == ".html":
            parser = _Links()
            parser.feed(body.decode(response.encoding or "utf-8", errors="replace"))
            links = _joined(url, parser.hrefs)
        if suffix not in READABLE_SUFFIXES or not self.filters.wants(key, any_suffix=True):
            return links
        target = local_name(workdir, len(scan.fetched), key, suffix)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(body)
        version = {
            "etag": response.headers.get("ETag", ""),
            "last_modified": response.headers.get("Last-Modified", ""),
            "links": sorted({link for link in links if self._own(link)}),
            "suffix": suffix,
        }
        scan.fetched.append(Fetched(key, target, hashlib.sha256(body).hexdigest(), version, url=url))
        return links


def _joined(base: str, hrefs: list[str]) -> list[str]:
    """The links made absolute and without their fragment; a malformed one is dropped."""
    joined = []
    for href in hrefs:
        try:
            joined.append(urldefrag(urljoin(base, href)).url)
        except ValueError:
            continue
    return joined
