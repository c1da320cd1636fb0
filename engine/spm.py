"""In-process SentencePiece (SPM) tokenizer that reproduces llama.cpp's token ids exactly.

It follows llama.cpp's `src/llama-vocab.cpp` for `tokenizer.ggml.model == "llama"`:

1. Special-token partition (`tokenizer_st_partition`): control, user-defined and unknown
   tokens, longest first, are cut out of the raw text before anything else. With
   `parse_special=False`, control and unknown tokens are skipped (they are tokenized as
   plain text) but user-defined ones (Gemma: newline/tab/space runs, HTML tags) still are.
2. Each remaining text fragment: optional space prefix, ' ' → '▁', then SPM bigram merging:
   repeatedly merge the adjacent pair whose concatenation is a vocabulary token with the
   highest score (ties: leftmost). Symbols that are not tokens fall back to `<0xNN>` bytes.

Speed comes from caching per word. Merging never crosses a boundary between characters
`a`, `b` that no vocabulary token holds next to each other, because every merged symbol is
itself a token. Words are cut only before a '▁' whose left neighbour never precedes '▁'
inside any token (checked against the vocabulary at load time), so a word's ids are
independent of its context and can be cached.
"""

from __future__ import annotations

import heapq
import re
import threading
from collections.abc import Sequence
from itertools import islice
from pathlib import Path

import numpy as np

from engine.gguf import GGUFError, GGUFMetadata, read_metadata

# llama.cpp token types (tokenizer.ggml.token_type) and the attribute each one maps to.
TYPE_NORMAL, TYPE_UNKNOWN, TYPE_CONTROL, TYPE_USER_DEFINED, TYPE_UNUSED, TYPE_BYTE = 1, 2, 3, 4, 5, 6

# Texts llama.cpp's vocabulary loader forces to CONTROL whatever the file says (EOT/EOM/FIM/EOG
# detection by text; Gemma's user-defined '</s>' is one). Mirrors llama-vocab.cpp `load()`.
_CONTROL_LOOKING = frozenset({
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "_<EOT>", "<｜end▁of▁sentence｜>", "<end_of_utterance>", "<|eom_id|>", "<|return|>",
    "<|call|>", "</s>",
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>", "<|code_prefix|>",
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", "<|code_suffix|>",
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>", "<|code_middle|>",
    "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>",
    "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", "<|file_sep|>",
})
SPACE = "▁"
_DEFAULT_CACHE_SIZE = 1 << 18


def effective_token_types(tokens: Sequence[str], token_types: np.ndarray) -> np.ndarray:
    """Token types as llama.cpp uses them after its by-text overrides. (vocab,) int32."""
    types = np.asarray(token_types, dtype=np.int32).copy()
    for token_id, text in enumerate(tokens):
        if text in _CONTROL_LOOKING:
            types[token_id] = TYPE_CONTROL
    return types


def _trie_pattern(strings: Sequence[str]) -> str:
    """A regex matching the longest of `strings` at a position (a trie, longer branches first)."""
    trie: dict = {}
    for text in strings:
        node = trie
        for char in text:
            node = node.setdefault(char, {})
        node[""] = True

    def emit(node: dict) -> str:
        branches = [re.escape(char) + emit(child) for char, child in sorted(node.items()) if char]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        if "" in node:
            return "(?:" + body + ")?"
        return body

    return emit(trie)


class GGUFTokenizer:
    """llama.cpp's SPM tokenizer from a GGUF's own vocabulary, in process.

    `tokenize(text)` returns exactly what llama.cpp's `/tokenize` returns for the same
    `add_special` and `parse_special` flags. The engine's defaults are content tokens only:
    `add_special=False` (no BOS/EOS) and `parse_special=False` (a literal "<start_of_turn>"
    in a document is text, not a control token).
    """

    def __init__(
        self,
        tokens: Sequence[str],
        scores: np.ndarray,
        token_types: np.ndarray,
        *,
        bos_id: int | None = None,
        eos_id: int | None = None,
        add_bos: bool = False,
        add_eos: bool = False,
        add_space_prefix: bool = False,
        add_special: bool = False,
        parse_special: bool = False,
        cache_size: int = _DEFAULT_CACHE_SIZE,
    ) -> None:
        if not tokens:
            raise ValueError("the vocabulary is empty")
        if len(scores) != len(tokens) or len(token_types) != len(tokens):
            raise ValueError(
                f"vocabulary arrays disagree: {len(tokens)} tokens, {len(scores)} scores, {len(token_types)} "
                "types"
            )
        self.vocab_size = len(tokens)
        self.add_special = add_special
        self.parse_special = parse_special
        self._tokens = list(tokens)
        # Later duplicates win, as in llama.cpp's token_to_id map.
        self._token_to_id = {text: token_id for token_id, text in enumerate(self._tokens)}
        self._scores = [float(score) for score in np.asarray(scores, dtype=np.float32)]
        self._types = effective_token_types(self._tokens, token_types)
        self._bos_id, self._eos_id = bos_id, eos_id
        self._add_bos, self._add_eos, self._add_space_prefix = add_bos, add_eos, add_space_prefix
        self.special_ids = {
            int(i) for i in np.flatnonzero((self._types == TYPE_CONTROL) | (self._types == TYPE_UNKNOWN))
        }
        self._byte_ids = [self._byte_token(byte) for byte in range(256)]
        self._pieces = self._build_pieces()
        self._build_partition()
        self._build_word_pattern()
        self._cache: dict[str, list[int]] = {}
        self._cache_size = cache_size
        # Threads share a tokenizer (the portal keeps one per model): a read is one dict lookup, safe
        # under the GIL; an insert and its eviction (which iterates the dict) take this lock.
        self._cache_lock = threading.Lock()

    @classmethod
    def from_gguf(cls, gguf_path: str | Path, **options: object) -> GGUFTokenizer:
        """Build from a GGUF file's `tokenizer.ggml.*` metadata (SPM vocabularies only)."""
        return cls.from_metadata(read_metadata(gguf_path), **options)

    @classmethod
    def from_metadata(cls, metadata: GGUFMetadata, **options: object) -> GGUFTokenizer:
        if metadata.tokenizer_model != "llama":
            raise GGUFError(
                f"{metadata.path}: tokenizer.ggml.model is {metadata.tokenizer_model!r}; "
                "GGUFTokenizer implements only the SPM ('llama') tokenizer"
            )
        fields = metadata.fields
        return cls(
            metadata.tokens,
            metadata.scores,
            metadata.token_types,
            bos_id=metadata.special_token_id("bos"),
            eos_id=metadata.special_token_id("eos"),
            add_bos=bool(fields.get("tokenizer.ggml.add_bos_token", True)),
            add_eos=bool(fields.get("tokenizer.ggml.add_eos_token", False)),
            add_space_prefix=bool(fields.get("tokenizer.ggml.add_space_prefix", True)),
            **options,  # type: ignore[arg-type]
        )

    # -- setup ---------------------------------------------------------------------------

    def _byte_token(self, byte: int) -> int:
        token_id = self._token_to_id.get(f"<0x{byte:02X}>")
        if token_id is None:
            token_id = self._token_to_id.get(chr(byte))
        return -1 if token_id is None else token_id

    def _build_pieces(self) -> list[bytes]:
        """Each token's bytes as llama.cpp's token_to_piece(special=True) renders it."""
        pieces = []
        for text, kind in zip(self._tokens, self._types.tolist(), strict=True):
            if kind == TYPE_NORMAL:
                pieces.append(text.replace(SPACE, " ").encode("utf-8"))
            elif kind in (TYPE_CONTROL, TYPE_UNKNOWN, TYPE_USER_DEFINED):
                pieces.append(text.encode("utf-8"))
            elif kind == TYPE_BYTE:
                match = re.fullmatch(r"<0x([0-9A-Fa-f]{2})>", text)
                pieces.append(bytes([int(match.group(1), 16)]) if match else text.encode("utf-8"))
            else:
                pieces.append(b"")
        return pieces

    def _build_partition(self) -> None:
        kinds = (
            (TYPE_USER_DEFINED,)
            if not self.parse_special
            else (TYPE_USER_DEFINED, TYPE_CONTROL, TYPE_UNKNOWN)
        )
        ids = [i for i in np.flatnonzero(np.isin(self._types, kinds)).tolist() if self._tokens[i]]
        # llama.cpp sorts by byte length, longest first; equal lengths keep id order here.
        ids.sort(key=lambda i: (-len(self._tokens[i].encode("utf-8")), i))
        self._special_order = {self._tokens[i]: rank for rank, i in enumerate(ids)}
        self._special_id = {self._tokens[i]: i for i in ids}
        texts = list(self._special_id)
        self._special_re = re.compile("(?=(" + _trie_pattern(texts) + "))") if texts else None
        text_set = set(texts)
        # Every special token that starts where a longer one does is one of its prefixes.
        self._special_prefixes = {
            text: [text[:k] for k in range(1, len(text) + 1) if text[:k] in text_set] for text in texts
        }

    def _build_word_pattern(self) -> None:
        before_space = set()
        for text in self._tokens:
            start = text.find(SPACE, 1)
            while start > 0:
                if text[start - 1] != SPACE:
                    before_space.add(text[start - 1])
                start = text.find(SPACE, start + 1)
        if before_space:
            glue = "".join(re.escape(char) for char in sorted(before_space))
            self._word_re = re.compile(f"{SPACE}*(?:[^{SPACE}{glue}]+|[{glue}]{SPACE}*)+|{SPACE}+")
        else:
            self._word_re = re.compile(f"{SPACE}*[^{SPACE}]+|{SPACE}+")

    # -- tokenization --------------------------------------------------------------------

    def _partition(self, text: str) -> list[str | int]:
        found = {m.group(1) for m in self._special_re.finditer(text)} if self._special_re else ()
        if not found:
            return [text]
        candidates = {prefix for text_found in found for prefix in self._special_prefixes[text_found]}
        fragments: list[str | int] = [text]
        for special in sorted(candidates, key=self._special_order.__getitem__):
            token_id = self._special_id[special]
            split: list[str | int] = []
            for fragment in fragments:
                if isinstance(fragment, int) or special not in fragment:
                    split.append(fragment)
                    continue
                for index, part in enumerate(fragment.split(special)):
                    if index:
                        split.append(token_id)
                    if part:
                        split.append(part)
            fragments = split
        return fragments

    def _merge(self, word: str) -> list[int]:
        """SPM bigram merging of one escaped word (llama.cpp's llm_tokenizer_spm_session)."""
        vocab, scores = self._token_to_id, self._scores
        n = len(word)
        if n == 1:
            token_id = vocab.get(word)
            return [token_id] if token_id is not None else self._bytes_of(word)
        starts = list(range(n))
        lengths = [1] * n
        prev = list(range(-1, n - 1))
        nxt = list(range(1, n + 1))
        nxt[-1] = -1
        heap: list[tuple[float, int, int, int]] = []

        def push(left: int, right: int) -> None:
            if left < 0 or right < 0:
                return
            size = lengths[left] + lengths[right]
            token_id = vocab.get(word[starts[left] : starts[left] + size])
            if token_id is not None:
                heapq.heappush(heap, (-scores[token_id], left, right, size))

        for index in range(1, n):
            push(index - 1, index)
        while heap:
            _, left, right, size = heapq.heappop(heap)
            if lengths[left] == 0 or lengths[right] == 0 or lengths[left] + lengths[right] != size:
                continue
            lengths[left] = size
            lengths[right] = 0
            nxt[left] = nxt[right]
            if nxt[right] >= 0:
                prev[nxt[right]] = left
            push(prev[left], left)
            push(left, nxt[left])

        ids: list[int] = []
        index = 0
        while index != -1:
            symbol = word[starts[index] : starts[index] + lengths[index]]
            token_id = vocab.get(symbol)
            if token_id is not None:
                ids.append(token_id)
            else:
                ids.extend(self._bytes_of(symbol))
            index = nxt[index]
        return ids

    def _bytes_of(self, symbol: str) -> list[int]:
        ids = [self._byte_ids[byte] for byte in symbol.encode("utf-8")]
        if -1 in ids:
            raise ValueError(f"the vocabulary has no byte-fallback token for {symbol!r}")
        return ids

    def _encode_text(self, text: str, out: list[int]) -> None:
        cache = self._cache
        for word in self._word_re.findall(text.replace(" ", SPACE)):
            ids = cache.get(word)
            if ids is None:
                ids = self._merge(word)
                with self._cache_lock:
                    if len(cache) >= self._cache_size:
                        for stale in list(islice(cache, self._cache_size // 4)):
                            cache.pop(stale, None)
                    cache[word] = ids
            out.extend(ids)

    def tokenize(self, text: str) -> list[int]:
        """Token ids of `text` (with this tokenizer's add_special/parse_special flags)."""
        if not isinstance(text, str):
            raise TypeError(f"tokenize expects str, got {type(text).__name__}")
        out: list[int] = []
        if self.add_special and self._add_bos and self._bos_id is not None:
            out.append(self._bos_id)
        if text:
            prev_special = True
            for fragment in self._partition(text):
                if isinstance(fragment, int):
                    out.append(fragment)
                    prev_special = True
                    continue
                if self._add_space_prefix and prev_special:
                    fragment = " " + fragment
                self._encode_text(fragment, out)
                prev_special = False
        if self.add_special and self._add_eos and self._eos_id is not None:
            out.append(self._eos_id)
        return out

    def bulk_tokenize(self, texts: list[str]) -> list[list[int]]:
        return [self.tokenize(text) for text in texts]

    def count_tokens(self, text: str) -> int:
        return len(self.tokenize(text))

    def detokenize(self, tokens: list[int]) -> str:
        """Concatenated pieces, as llama.cpp's `/detokenize` (control tokens rendered as text)."""
        if tokens and not 0 <= min(tokens) <= max(tokens) < self.vocab_size:
            bad = next(t for t in tokens if not 0 <= t < self.vocab_size)
            raise ValueError(f"token id {bad} is outside the vocabulary (0..{self.vocab_size - 1})")
        raw = b"".join([self._pieces[token_id] for token_id in tokens])
        return raw.decode("utf-8", errors="replace")

    def token_text(self, token_id: int) -> str:
        """The vocabulary entry for `token_id` (escaped form, e.g. '▁the')."""
        return self._tokens[token_id]
