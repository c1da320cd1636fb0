"""Document readers: one declaration per format, shared by uploads, ZIPs and every kind of source.

A reader turns one file into `Part`s: a run of text and its place in the document (the keys of
`engine.places`: page, slide, sheet and rows, heading path, line range, message and attachment, region
of a page image). The dataset iteration (`engine.datasets`) chunks each part on its own and copies its
place into the metadata of every memory cut from it, so a citation can name and open that place.

Contract of a reader (`Reader`):
- ``name``: the format's name as stored in a memory's metadata ("pdf", "xlsx", "eml", ...);
- ``suffixes``: the file name endings it claims (lower case, with the dot);
- ``sniff(head, suffix)``: True when the file's first bytes are this format (content wins over the
  name; a claimed suffix with other content raises `DocumentError`);
- ``read(path, options)``: the parts in document order; raises `DocumentError` with a reason a person
  can act on (encrypted, password-protected, damaged, no text and OCR off, over a limit); a piece it
  skips while reading the rest (a mail's attachment of an unknown type, a damaged message of a
  mailbox) is reported with `skipped(options, place, reason)`, an issue of the upload;
- with ``options.defer_ocr`` (an upload's validation), a page or image OCR would read is checked by
  decode and caps only (it opens, its pixels decode, within the pixel and page caps) and yielded as a
  `Part` with ``ocr_pending`` and no text: the OCR is left to the build in the worker.

Every reader streams (a sheet of 100,000 rows is never held whole) and honours `ReadOptions`' caps.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


class DocumentError(ValueError):
    """A document whose text cannot be read; the message says why, in words a person can act on."""


@dataclass(frozen=True)
class ReadOptions:
    """What a corpus allows its readers: OCR on or off, and the caps a shared drive needs."""

    ocr: bool = True
    max_pages: int = 5_000
    max_rows: int = 1_000_000
    max_pixels: int = 20_000 * 20_000
    max_seconds: float = 600.0
    # An XLSX, PPTX, ODS, ODP, ODT or EPUB is a ZIP: the archive caps of a ZIP upload apply before it is
    # opened (corpus.services.batch_uploads: ZIP_MAX_MEMBERS; UPLOAD_MAX_EXPANDED_BYTES' default).
    max_members: int = 2_000
    max_expanded_bytes: int = 1024 ** 3
    # An upload's validation: pages and images OCR would read are checked, not read (`Part.ocr_pending`).
    defer_ocr: bool = False
    # Told (place, reason) of a piece that is skipped while the rest of the document is read (an
    # attachment of a type no reader knows, a damaged message of a mailbox); None: only logged.
    on_skip: Callable[[dict[str, Any], str], None] | None = None


class Clock:
    """One document's time cap (`ReadOptions.max_seconds`): `check()` between pages, slides, chapters."""

    def __init__(self, options: ReadOptions, label: str) -> None:
        from time import monotonic

        self.now, self.limit, self.label = monotonic, options.max_seconds, label
        self.started = monotonic()

    def check(self) -> None:
        if self.now() - self.started > self.limit:
            raise DocumentError(f"reading the {self.label} file took longer than the limit of "
                                f"{self.limit:g} seconds")


@dataclass(frozen=True)
class Part:
    """A run of a document's text with its place (`engine.places` keys) and `share`, the fraction of
    the document read once this part is done (0..1; progress and partial-read estimates).
    `ocr_pending`: a page or image whose text OCR reads at build time (`ReadOptions.defer_ocr`); no text."""

    text: str
    place: dict[str, Any] = field(default_factory=dict)
    share: float = 1.0
    ocr_pending: bool = False


@dataclass(frozen=True)
class Reader:
    """One format's declaration (see the module's contract)."""

    name: str
    suffixes: tuple[str, ...]
    sniff: Callable[[bytes, str], bool]
    read: Callable[[Path, ReadOptions], Iterator[Part]]
    label: str = ""


# The formats, as data: each module exposes READERS, a tuple of `Reader`s. Order matters for sniffing
# (the first reader whose sniff accepts the head wins), so specific containers come before generic ones.
READER_MODULES: tuple[str, ...] = ("engine.readers.pdf", "engine.readers.docx", "engine.readers.sheets",
                                    "engine.readers.slides", "engine.readers.books", "engine.readers.images",
                                    "engine.readers.mail", "engine.readers.code")


def readers() -> tuple[Reader, ...]:
    """Every declared reader, in `READER_MODULES` order (modules are imported on first use)."""
    from importlib import import_module

    return tuple(reader for name in READER_MODULES for reader in import_module(name).READERS)


def reader_named(name: str) -> Reader | None:
    """The reader whose `name` (a memory's "format") is `name`, or None."""
    return next((reader for reader in readers() if reader.name == name), None)


def reader_suffixes() -> dict[str, str]:
    """Every claimed file name ending and the name of the reader that claims it (".xlsx": "xlsx")."""
    return {suffix: reader.name for reader in readers() for suffix in reader.suffixes}


def reader_for(head: bytes, suffix: str) -> Reader | None:
    """The reader of a file whose first bytes are `head` and whose name ends in `suffix`, or None when
    no reader claims it (the caller then tries the dataset formats: JSON, text, ...). Raises
    DocumentError when a reader's suffix is given to other content."""
    suffix = suffix.lower()
    for reader in readers():
        if reader.sniff(head, suffix):
            return reader
    return None


def skipped(options: ReadOptions, place: dict[str, Any], reason: str) -> None:
    """Report a piece of a document that is skipped while the rest is read: given to
    `options.on_skip` (the dataset iteration logs it as an issue of the upload), else logged."""
    if options.on_skip is None:
        logger.warning("skipped %s: %s", place, reason)
    else:
        options.on_skip(place, reason)
