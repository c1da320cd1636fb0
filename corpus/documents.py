"""Reads for the document view: one document (an uploaded or synced dataset) a user may read, and the
text around one of its memories with the passage marked and its place named (`engine.places`).

Every check of who may see a document goes through `document_for_user`: today the corpus's rule
(`corpus.selectors`); a per-document rule plugs in there and nowhere else.

The text around a passage is put back together from the memories of the same document and build:
chunked texts carry where each window lies in the text it was cut from (``char_start``/``char_end``,
`engine.dataset_chunks.window_metadata`), and neighbouring windows overlap, so the overlap is shown
once. Memories without those offsets (records of a JSONL file) are shown one block each.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.http import Http404
from django.urls import reverse

from corpus.document_access import document_readable
from corpus.models import Dataset, Memory
from corpus.selectors import get_corpus_for_user
from engine.places import place_label

# Memories shown on each side of the passage (by index row, the order of the source).
AROUND = 4
# Keys whose change starts a new block of text: windows are offsets into one page's, slide's,
# sheet's, message's or record's text.
_BLOCK_KEYS = ("page", "slide", "sheet", "message", "attachment")


def document_for_user(user: AbstractBaseUser | AnonymousUser, corpus_id: int, document_id: int) -> Dataset:
    """The document (dataset) `document_id` of corpus `corpus_id`, or Http404 when `user` may not
    read it (an outsider cannot tell it from a missing one): the one access check of the document
    view, its page images and its original."""
    corpus = get_corpus_for_user(user, corpus_id)
    document = Dataset.objects.filter(pk=document_id, corpus=corpus).select_related("corpus").first()
    if document is None or not document_readable(user, document):
        raise Http404("No such document.")
    return document


def document_url(*, corpus_id: int, document_id: int | None, memory_id: int | None = None) -> str:
    """The document view's address, at the passage of `memory_id` ("" without a document)."""
    if document_id is None:
        return ""
    url = reverse("corpus:document", args=[corpus_id, document_id])
    return f"{url}?memory={memory_id}#passage" if memory_id is not None else url


def document_memory(*, document: Dataset, memory_id: str | None) -> Memory | None:
    """The memory `memory_id` of `document` (None when not asked), else Http404 (a memory of
    another document or corpus is not shown here, whoever asks)."""
    if memory_id in (None, ""):
        return None
    if not str(memory_id).isdigit():
        raise Http404("No such memory in this document.")
    memory = Memory.objects.filter(pk=int(memory_id), dataset=document).select_related("build").first()
    if memory is None:
        raise Http404("No such memory in this document.")
    return memory


@dataclass
class Block:
    """A stretch of the document's text: its place in words and its pieces, (text, is the passage)."""

    label: str
    pieces: list[tuple[str, bool]] = field(default_factory=list)


@dataclass
class _Run:
    start: int
    end: int
    text: str
    metadata: dict[str, Any]


def _block_key(memory: Memory) -> tuple:
    metadata = memory.metadata or {}
    record = metadata.get("record") if "part" in metadata else None
    return (*(str(metadata.get(key)) for key in _BLOCK_KEYS), record)


def _windowed(memory: Memory) -> bool:
    metadata = memory.metadata or {}
    return isinstance(metadata.get("char_start"), int) and isinstance(metadata.get("char_end"), int)


def _runs(memories: list[Memory]) -> list[_Run]:
    """Overlapping windows of one text joined into runs of continuous text, by offset."""
    runs: list[_Run] = []
    for memory in sorted(memories, key=lambda m: m.metadata["char_start"]):
        start, end = memory.metadata["char_start"], memory.metadata["char_end"]
        if runs and start <= runs[-1].end:
            run = runs[-1]
            if end > run.end:
                run.text += memory.text[run.end - start:]
                run.end = end
        else:
            runs.append(_Run(start, end, memory.text, memory.metadata))
    return runs


def _pieces(run: _Run, passage: Memory | None) -> list[tuple[str, bool]]:
    if passage is None or not _windowed(passage):
        return [(run.text, False)]
    start, end = passage.metadata["char_start"], passage.metadata["char_end"]
    if not (run.start <= start and end <= run.end):
        return [(run.text, False)]
    cut_start, cut_end = start - run.start, end - run.start
    pieces = [(run.text[:cut_start], False), (run.text[cut_start:cut_end], True), (run.text[cut_end:], False)]
    return [piece for piece in pieces if piece[0]]


def _group(memories: list[Memory]) -> list[list[Memory]]:
    """Consecutive memories of one text (same block key, all with offsets) together."""
    groups: list[list[Memory]] = []
    for memory in memories:
        if groups and _windowed(memory) and _windowed(groups[-1][-1]) \
                and _block_key(memory) == _block_key(groups[-1][-1]):
            groups[-1].append(memory)
        else:
            groups.append([memory])
    return groups


def passage_blocks(*, memories: list[Memory], passage: Memory | None) -> list[Block]:
    """`memories` (in the source's order) as blocks of text, the passage's text marked in its block."""
    blocks: list[Block] = []
    for group in _group(memories):
        if not _windowed(group[0]):
            memory = group[0]
            blocks.append(Block(place_label(memory.metadata), [(memory.text, memory == passage)]))
            continue
        for run in _runs(group):
            marked = passage if passage is not None and passage in group else None
            blocks.append(Block(place_label(run.metadata), _pieces(run, marked)))
    return blocks


def document_window(*, document: Dataset, passage: Memory | None, around: int = AROUND) -> list[Memory]:
    """The memories of `document` around `passage` in the source's order: `around` on each side
    of it, or the first ones of its corpus's serving state without a passage."""
    fields = ("pk", "hdv_idx", "text", "metadata", "build_id")
    if passage is not None:
        same = Memory.objects.filter(build_id=passage.build_id, dataset=document).only(*fields)
        before = list(same.filter(hdv_idx__lt=passage.hdv_idx).order_by("-hdv_idx")[:around])
        after = list(same.filter(hdv_idx__gt=passage.hdv_idx).order_by("hdv_idx")[:around])
        return [*reversed(before), passage, *after]
    serving = document.corpus.serving_build_ids
    return list(Memory.objects.filter(build_id__in=serving, dataset=document).only(*fields)
                .order_by("build_id", "hdv_idx")[:2 * around + 1])
