"""Chunking of plain text into overlapping token windows (``chunk_size // 8`` overlap).

Part of `engine.datasets`, which re-exports `window_bounds` and `chunk_spans`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from engine.tokenizer import Tokenizer

_SEGMENT_CHARS = 256 * 1024


def window_bounds(n_units: int, chunk_size: int) -> list[tuple[int, int]]:
    """Overlapping windows ``[start, end)`` over `n_units` tokens: `chunk_size` long, stepping by
    ``chunk_size - chunk_size // 8``, the last one ending exactly at `n_units`. Together they
    cover every unit; consecutive windows share ``chunk_size // 8`` units."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    step = chunk_size - chunk_size // 8
    bounds = []
    start = 0
    while True:
        end = min(start + chunk_size, n_units)
        bounds.append((start, end))
        if end >= n_units:
            return bounds
        start += step


def _token_offsets(text: str, tokens: list[int], marks: list[int], tokenizer: Tokenizer) -> list[int] | None:
    """Character offset in `text` of each token index in `marks` (sorted), or None when the
    tokenizer does not reproduce `text`.

    Offsets grow by detokenizing the tokens from the last clean mark (one pass over the tokens).
    A mark that splits a character's byte-fallback tokens detokenizes to a trailing U+FFFD; it
    maps to the start of that character, so the chunks on both sides keep it whole, and the next
    span is detokenized from the last clean mark again so it never starts inside a character.
    """
    offsets, anchor_token, anchor_char = [], 0, 0
    for mark in marks:
        piece = tokenizer.detokenize(tokens[anchor_token:mark]) if mark > anchor_token else ""
        whole = piece.rstrip("\ufffd")
        if not text.startswith(whole, anchor_char):
            return None
        offsets.append(anchor_char + len(whole))
        if whole == piece:
            anchor_token, anchor_char = mark, anchor_char + len(whole)
    return offsets


def chunk_spans(text: str, tokenizer: Tokenizer | None, chunk_size: int) -> list[tuple[int, int, int]]:
    """Character spans ``(start, end, n_tokens)`` of the overlapping windows of `text`.

    With a tokenizer the windows are `window_bounds` over its tokens, mapped back to character
    offsets so every chunk is exact source text. If the tokenizer does not round-trip the text
    (normalising tokenizers), the spans are estimated proportionally to token positions. Without
    a tokenizer, whitespace-separated words stand in for tokens.
    """
    if tokenizer is None:
        words = [match.span() for match in re.finditer(r"\S+", text)]
        return [(words[start][0], words[end - 1][1], end - start)
                for start, end in window_bounds(len(words), chunk_size) if end > start]
    tokens = tokenizer.tokenize(text)
    bounds = [(start, end) for start, end in window_bounds(len(tokens), chunk_size) if end > start]
    marks = sorted({mark for bound in bounds for mark in bound})
    offsets = _token_offsets(text, tokens, marks, tokenizer)
    if offsets is None:
        offsets = [round(len(text) * mark / len(tokens)) for mark in marks]
    at = dict(zip(marks, offsets, strict=True))
    return [(at[start], at[end], end - start) for start, end in bounds]


def window_metadata(char_start: int, text: str, n_tokens: int) -> dict:
    """The metadata every chunked document carries: where its text lies in the text it was cut
    from (``char_start``/``char_end``) and its length (``tokens``)."""
    return {"char_start": char_start, "char_end": char_start + len(text), "tokens": n_tokens}


def _chunk_stream(
    pieces: Iterable[str], tokenizer: Tokenizer | None, chunk_size: int
) -> Iterator[tuple[int, str, int, int]]:
    """Chunk a text arriving in pieces: ``(char_start, text, n_tokens, chunk_index)``.

    Text is processed in segments of about `_SEGMENT_CHARS`, cut at a line break. The last
    window of a segment is not emitted; its text is carried into the next segment, so window
    starts keep their step and overlap across segment borders.
    """
    pending, base, index, target = "", 0, 0, _SEGMENT_CHARS
    pieces = iter(pieces)
    done = False
    while not done:
        while len(pending) < target and not done:
            piece = next(pieces, None)
            done = piece is None
            pending += piece or ""
        if done:
            segment, pending = pending, ""
        else:
            cut = pending.rfind("\n", 0, target) + 1 or pending.rfind(" ", 0, target) + 1 or target
            segment, pending = pending[:cut], pending[cut:]
        spans = chunk_spans(segment, tokenizer, chunk_size)
        carried_from = len(segment)
        if not done and spans:
            carried_from = spans.pop()[0]
            pending = segment[carried_from:] + pending
        # A segment that held no complete window must grow, or the same text would be cut again.
        target = _SEGMENT_CHARS if spans else 2 * target
        for start, end, n_tokens in spans:
            chunk = segment[start:end]
            lead = len(chunk) - len(chunk.lstrip())
            if chunk.strip():
                yield base + start + lead, chunk.strip(), n_tokens, index
                index += 1
        base += carried_from

