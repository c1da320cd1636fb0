"""Citations: which primed memory supports each sentence of an answer, and how grounded it is.

No second model call: an answer is split into sentences (`sentences`), each sentence's *claim*
(its words that are not stop words and not already in the question, `claim_words`) is scored
against every primed memory by one of the engine's channels, and a sentence whose best score
reaches the threshold cites every memory at or above it (best first). A sentence with a claim
that reaches no memory is *unsupported*; a sentence without a claim ("Sure!", "Here is an
example:", the question said again) is neither and is left out of the grounding. A claim is two
or more words, or one named value (a word with a digit or an underscore, one written in capitals
or in backticks, an option, a file name or a path: "`MLOCK_ONFAULT`.", "It is 256.", "It is
-rdynamic.", "libmemusage.so").

The sentence's *subject* is its words that the question has too (`subject_words`): "A psyton is a
person who ..." answers "What is a psyton?" about "psyton".

A memory supports nothing when the question names something it does not mention
(`asked_names`: the question's named values and the functions it calls, "memfd_create()"): "The
maximum length of the name passed to memfd_create() is 256." takes its 256 from getentropy's page,
where "maximum ... length ... 256" stand together and memfd_create is not. A name counts as
mentioned inside a longer one (a chunk of sync_file_range's page that names only
SYNC_FILE_RANGE_WAIT_BEFORE); a question that names nothing asks nothing of the memories.

Nor does a memory support a value taken from the wrong line of one of its lists
(`misbound_values`): documentation names a value and then describes it, and when the memory
describes another of its values in clearly more of the question's words (`RIVAL_MARGIN`) than the
one the sentence gives, the model picked the neighbour ("`TLS_TX_ZEROCOPY_RO`" for the option
that expects the sender not to pad records, which the memory says of TLS_RX_EXPECT_NO_PAD).

Channels (`SupportScorer`), each a score in [0, 1] per (sentence, memory):

* `WordSupport`: the share of the claim's distinct words that the memory holds, as whole words
  (`claim_tokens`: lowercased, two or more word characters, or a number). Exact names and values,
  which is what a made-up sentence gets wrong.
* `SubjectWindowSupport`: the same share, but within `window` words after an occurrence of the
  sentence's subject in the memory (a named value also a few words before it, as a manual page
  names a flag and then describes it; the whole memory for a sentence without a subject). A memory
  holds several entries, pages or paragraphs side by side, and the 0.5B model's commonest
  made-up answer gives the asked term the definition of its neighbour ("A psyton is a person
  who has decided to be in management", the words of the entry after it): every word is in the
  memory, none near the psyton.
* `HDCSupport`: the claim and the memories encoded by a build's `HDCEncoder` (token embeddings
  bound into n-grams), and the ternary dot product over the claim's nonzero dimensions
  (`dot / nnz(claim)`): near 0 for a random memory, 1 when the memory agrees on every dimension.
  Finds paraphrases the word channel misses, and counts only words of the corpus's vocabulary.
* `MeanSupport`: the mean of several channels.

The grounding of an answer is the share of its claim sentences that are supported, each weighed
by the model's *certainty* of it where the server sent the answer tokens' log-probabilities
(`engine.llm.answer.AnswerTokens`): the geometric mean of the probabilities its claim words' tokens were
sampled with (`claim_certainty`). A sentence whose words a memory holds but whose value the model
picked among others counts little ("The largest value an eventfd counter can hold is 1.", 0.46);
one it read off a memory counts nearly fully. Without log-probabilities the grounding is the plain share. None
for an answer without claims (nothing to check), and 0 for an answer with claims but no memories.
Which channel and threshold the portal uses, and the weighing, were measured with `bench.answers`
against its fact judge (docs/answer-measurements.md).
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from engine import bits
from engine.encoder import HDCEncoder
from engine.lexical import STOP_WORDS
from engine.tokenizer import Tokenizer

# Fewer claim words than this, and no named value, and a sentence states nothing checkable.
MIN_CLAIM_WORDS = 2
# A supported sentence the model was less certain of than this is shown as unsure.
UNSURE_BELOW = 0.5
_TOKEN = re.compile(r"\w+")
# A named value: a word with a digit or an underscore, in capitals, or in backticks; an option
# ("-rdynamic", "--all"), a file name ("libmemusage.so") or a path ("/dev/shm").
_NAMED = re.compile(r"`[^`\n]+`|\b\w*[\d_]\w*\b|\b[A-Z][A-Z0-9]+\b"
                    r"|(?<![\w-])-{1,2}[A-Za-z][\w-]*|\b\w{2,}(?:\.\w+)+\b|(?<!\w)/\w[\w/.-]*")
# A claim word (`claim_tokens`, lowercased) that names a value: a digit or an underscore in it.
_IDENTIFIER = re.compile(r"[\d_]")
# A value's description: the words after it in a memory, up to this many.
DESCRIPTION_WORDS = 15
# Another value of the memory described in this many more of the question's words than the
# sentence's value makes the sentence's value misbound there (`misbound_values`).
RIVAL_MARGIN = 4
# A function a text calls by name: "memfd_create()", "mincore( )".
_CALLED = re.compile(r"\b(\w+)\(\s*\)")

_FENCE = re.compile(r"^[ \t]*(```|~~~)")
# A line's block marker: list bullets and numbers, headings, quotes.
_BLOCK_MARKER = re.compile(r"^[ \t]*(?:[-*+][ \t]+|\d{1,3}[.)][ \t]+|#{1,6}[ \t]+|>[ \t]?)*")
# A sentence ends at . ! or ? (and any closing quote, bracket or emphasis) before whitespace and
# a capital, a digit, an opening mark, or the end of the line.
_SENTENCE_END = re.compile(r"[.!?]+[\"'\u201d\u2019)\]*_`]*(?=[ \t]+[A-Z0-9\"'\u201c\u2018(\[*_`]|[ \t]*$)")


@dataclass(frozen=True)
class Sentence:
    """`text` is `answer[start:end]` (code points)."""

    start: int
    end: int
    text: str


def sentences(answer: str) -> list[Sentence]:
    """The sentences of a Markdown answer, in order: each line outside fenced code blocks, without
    its list or heading marker, cut after sentence punctuation. Code blocks are not sentences."""
    out: list[Sentence] = []
    fenced = False
    offset = 0
    for line in answer.splitlines(keepends=True):
        line_start, offset = offset, offset + len(line)
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        body = line.rstrip("\r\n")
        start = _BLOCK_MARKER.match(body).end()
        for end in [m.end() for m in _SENTENCE_END.finditer(body, start)] + [len(body)]:
            piece = body[start:end]
            stripped = piece.strip()
            if stripped:
                first = start + len(piece) - len(piece.lstrip())
                out.append(Sentence(line_start + first, line_start + first + len(stripped), stripped))
            start = end
    return out


def claim_tokens(text: str) -> list[str]:
    """The words of `text` a claim is made of, in order: lowercased runs of word characters, two or
    more long or a number, not stop words (`engine.lexical.STOP_WORDS`)."""
    return [w for w in _TOKEN.findall(text.lower()) if (len(w) > 1 or w.isdigit()) and w not in STOP_WORDS]


def _claim_and_subject(sentence: str, asked: set[str]) -> tuple[list[str], list[str]]:
    """The sentence's distinct words (`claim_tokens`) in order: those not in `asked` (its claim) and
    those in it (its subject)."""
    claim: list[str] = []
    subject: list[str] = []
    for word in dict.fromkeys(claim_tokens(sentence)):
        (subject if word in asked else claim).append(word)
    return claim, subject


def claim_words(sentence: str, question: str = "") -> list[str]:
    """The sentence's distinct words (`claim_tokens`) that are not in `question`, in order."""
    return _claim_and_subject(sentence, set(claim_tokens(question)))[0]


def subject_words(sentence: str, question: str) -> list[str]:
    """The sentence's distinct words (`claim_tokens`) that `question` has too: what it is about."""
    return _claim_and_subject(sentence, set(claim_tokens(question)))[1]


def _named_words(text: str, pattern: re.Pattern[str] = _NAMED) -> set[str]:
    """The words (`claim_tokens`) of the `pattern` matches in `text` (its named values)."""
    return {word for value in pattern.findall(text) for word in claim_tokens(value)}


def asked_names(question: str) -> set[str]:
    """What the question names, lowercased: its named values (`_NAMED`, numbers left out: "mode 2"
    names nothing) and the functions it calls ("mincore()")."""
    found = _named_words(question) | _named_words(question, _CALLED)
    return {word for word in found if not word.isdigit()}


def mentions(memory: str, names: set[str]) -> bool:
    """Whether `memory` mentions one of `names` (`asked_names`), inside a longer word too; True
    when there are no names."""
    text = memory.lower()
    return not names or any(name in text for name in names)


def _is_value(word: str) -> bool:
    """A claim word that names a value (a digit or an underscore in it) and is not a plain number."""
    return bool(_IDENTIFIER.search(word)) and not word.isdigit()


def misbound_values(values: set[str], memory: Sequence[str], question: set[str]) -> bool:
    """Whether the memory (its `claim_tokens`) describes another of its values in `RIVAL_MARGIN`
    more of the `question` words than it describes any of `values` (each value's description: the
    `DESCRIPTION_WORDS` words after an occurrence). False when the memory holds none of `values`."""
    described: dict[str, int] = {}
    for at, token in enumerate(memory):
        if _is_value(token):
            shared = len(question.intersection(memory[at + 1:at + 1 + DESCRIPTION_WORDS]))
            described[token] = max(described.get(token, 0), shared)
    mine = max((described[value] for value in values if value in described), default=None)
    if mine is None:
        return False
    rival = max((shared for token, shared in described.items() if token not in values), default=0)
    return rival >= mine + RIVAL_MARGIN


def is_claim(sentence: str, claim: Sequence[str]) -> bool:
    """Whether a sentence with these claim words states something checkable: `MIN_CLAIM_WORDS`
    of them, or one that is a named value."""
    if len(claim) >= MIN_CLAIM_WORDS:
        return True
    named = _named_words(sentence)
    return any(word in named for word in claim)


class SupportScorer(Protocol):
    """Scores claims against memories. Shapes: claims (s,) word lists, memories (m,) texts ->
    (s, m) float64 in [0, 1]. `subjects` (s,) word lists, when given, are the claims' subjects
    (`subject_words`); a channel may ignore them."""

    name: str

    def scores(self, claims: Sequence[Sequence[str]], memories: Sequence[str],
               subjects: Sequence[Sequence[str]] | None = None) -> np.ndarray: ...


class WordSupport:
    """The share of a claim's words the memory holds."""

    name = "words"

    def scores(self, claims: Sequence[Sequence[str]], memories: Sequence[str],
               subjects: Sequence[Sequence[str]] | None = None) -> np.ndarray:
        held = [set(claim_tokens(text)) for text in memories]
        out = np.zeros((len(claims), len(memories)))
        for row, claim in enumerate(claims):
            if claim:
                for column, vocabulary in enumerate(held):
                    out[row, column] = sum(word in vocabulary for word in claim) / len(claim)
        return out


class SubjectWindowSupport:
    """The share of a claim's words that the memory holds within `window` words after an occurrence
    of one of the claim's subject words, or, for a claim word with a digit or an underscore (a flag,
    a field, a number), within `before` words before it too: a manual page names a flag first and
    describes it after ("SYNC_FILE_RANGE_WAIT_BEFORE  Wait upon write-out of all pages ...").
    The whole memory for a claim without a subject, 0 for a memory where its subject does not occur."""

    def __init__(self, window: int = 15, before: int = 10) -> None:
        if window < 1:
            raise ValueError(f"window must be at least 1 word, got {window}")
        if before < 0:
            raise ValueError(f"before must be at least 0 words, got {before}")
        self.window = window
        self.before = before
        self.name = f"subject window {window}"

    def scores(self, claims: Sequence[Sequence[str]], memories: Sequence[str],
               subjects: Sequence[Sequence[str]] | None = None) -> np.ndarray:
        texts = [claim_tokens(text) for text in memories]
        held = [set(tokens) for tokens in texts]
        out = np.zeros((len(claims), len(memories)))
        for row, claim in enumerate(claims):
            if not claim:
                continue
            wanted = set(claim)
            values = {word for word in wanted if _IDENTIFIER.search(word)} if self.before else set()
            subject = set(subjects[row]) if subjects is not None else set()
            for column, tokens in enumerate(texts):
                if not subject:
                    out[row, column] = len(wanted & held[column]) / len(wanted)
                    continue
                best = 0
                for at, token in enumerate(tokens):
                    if token in subject:
                        near = wanted.intersection(tokens[at:at + self.window + 1])
                        if values:
                            near |= values.intersection(tokens[max(0, at - self.before):at])
                        best = max(best, len(near))
                        if best == len(wanted):
                            break
                out[row, column] = best / len(wanted)
        return out


class HDCSupport:
    """The ternary agreement of a claim's hypervector with a memory's, over the claim's nonzero
    dimensions, clipped to [0, 1]; a claim the encoder has no token for scores 0."""

    name = "hdc"

    def __init__(self, tokenizer: Tokenizer, encoder: HDCEncoder) -> None:
        self.tokenizer = tokenizer
        self.encoder = encoder

    def scores(self, claims: Sequence[Sequence[str]], memories: Sequence[str],
               subjects: Sequence[Sequence[str]] | None = None) -> np.ndarray:
        if not claims or not memories:
            return np.zeros((len(claims), len(memories)))
        texts = [" ".join(claim) for claim in claims] + list(memories)
        pos, neg = self.encoder.encode(self.tokenizer.bulk_tokenize(texts))
        claim_pos, claim_neg = pos[:len(claims)], neg[:len(claims)]
        dots = bits.score64_batch(pos[len(claims) :], neg[len(claims) :], claim_pos, claim_neg).astype(
            np.float64
        )
        nonzero = np.bitwise_count(claim_pos | claim_neg).sum(axis=1, dtype=np.int64)[:, None]
        return np.clip(np.divide(dots, nonzero, out=np.zeros_like(dots), where=nonzero > 0), 0.0, 1.0)


class MeanSupport:
    """The mean of several channels' scores."""

    def __init__(self, *channels: SupportScorer) -> None:
        if not channels:
            raise ValueError("MeanSupport needs at least one channel")
        self.channels = channels
        self.name = "+".join(channel.name for channel in channels)

    def scores(self, claims: Sequence[Sequence[str]], memories: Sequence[str],
               subjects: Sequence[Sequence[str]] | None = None) -> np.ndarray:
        return np.mean([channel.scores(claims, memories, subjects) for channel in self.channels], axis=0)


@dataclass(frozen=True)
class SentenceCitation:
    """One sentence: `memories` are the indices of the memories that support it, best first
    (empty: unsupported, when it is a `claim`); `scores` the support of every memory (m,)."""

    start: int
    end: int
    text: str
    claim: bool
    memories: tuple[int, ...]
    scores: tuple[float, ...]
    certainty: float | None = None  # `claim_certainty`; None: not known (no log-probabilities)

    @property
    def supported(self) -> bool:
        return bool(self.memories)

    @property
    def unsure(self) -> bool:
        """Supported, but the model was less certain of its words than `UNSURE_BELOW`."""
        return self.supported and self.certainty is not None and self.certainty < UNSURE_BELOW

    @property
    def weight(self) -> float:
        """What the sentence adds to the grounding: its certainty if supported (1 if not known)."""
        if not self.supported:
            return 0.0
        return 1.0 if self.certainty is None else self.certainty

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "claim": self.claim,
            "memories": list(self.memories),
            "scores": [round(score, 3) for score in self.scores],
            "certainty": None if self.certainty is None else round(self.certainty, 3),
            "unsure": self.unsure,
        }


@dataclass(frozen=True)
class Attribution:
    sentences: tuple[SentenceCitation, ...]
    grounding: float | None  # the claims' weights (`SentenceCitation.weight`) / claims; None without claims

    @property
    def claims(self) -> int:
        return sum(sentence.claim for sentence in self.sentences)


class TokenProbabilities:
    """An answer's token log-probabilities (`engine.llm.answer.AnswerTokens.spans`: [start, end) byte
    offsets in its UTF-8 text, sorted), looked up by character ranges of the answer."""

    def __init__(self, answer: str, spans: Sequence[tuple[int, int, float]]) -> None:
        self._bytes_before = [0]  # UTF-8 offset of each character
        for character in answer:
            self._bytes_before.append(self._bytes_before[-1] + len(character.encode("utf-8")))
        self._spans = list(spans)
        self._ends = [span[1] for span in self._spans]

    def __bool__(self) -> bool:
        return bool(self._spans)

    def logprobs(self, start: int, end: int) -> list[float]:
        """The log-probabilities of the tokens overlapping characters [start, end)."""
        low, high = self._bytes_before[start], self._bytes_before[end]
        out = []
        for span in self._spans[bisect.bisect_right(self._ends, low):]:
            if span[0] >= high:
                break
            out.append(span[2])
        return out


def claim_certainty(sentence: Sentence, claim: Sequence[str], tokens: TokenProbabilities) -> float | None:
    """The geometric mean of the probabilities of the tokens that make up the sentence's claim
    words (each occurrence, as `claim_tokens` reads them); None when none is covered."""
    wanted = set(claim)
    logprobs: list[float] = []
    for match in _TOKEN.finditer(sentence.text):
        if match.group().lower() in wanted:
            logprobs += tokens.logprobs(sentence.start + match.start(), sentence.start + match.end())
    return math.exp(sum(logprobs) / len(logprobs)) if logprobs else None


def attribute(answer: str, memories: Sequence[str], *, scorer: SupportScorer, threshold: float,
              question: str = "", token_logprobs: Sequence[tuple[int, int, float]] = ()) -> Attribution:
    """Split `answer` into sentences and cite, for each claim, the `memories` (texts, in their
    order: index i is memory i) whose support reaches `threshold` (0 for a memory that does not
    mention what the question names, `asked_names`, and for one that binds the sentence's value to
    less of the question than another value, `misbound_values`); with `token_logprobs`
    (`engine.llm.answer.AnswerTokens.spans`) each claim also gets its `claim_certainty`."""
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")
    found = sentences(answer)
    asked = set(claim_tokens(question))
    split = [_claim_and_subject(sentence.text, asked) for sentence in found]
    claimed = [is_claim(sentence.text, claim) for sentence, (claim, _) in zip(found, split, strict=True)]
    scored = [claim for (claim, _), keep in zip(split, claimed, strict=True) if keep]
    subjects = [subject for (_, subject), keep in zip(split, claimed, strict=True) if keep]
    table = scorer.scores(scored, list(memories), subjects) if scored and memories else \
        np.zeros((len(scored), len(memories)))
    names = asked_names(question)
    table[:, [not mentions(text, names) for text in memories]] = 0.0
    asked_words = asked - names
    memory_tokens: list[list[str]] | None = None
    for row, claim in enumerate(scored):
        values = {word for word in claim if _is_value(word)}
        if values and (table[row] >= threshold).any():
            memory_tokens = memory_tokens or [claim_tokens(text) for text in memories]
            for column in np.flatnonzero(table[row] >= threshold):
                if misbound_values(values, memory_tokens[column], asked_words):
                    table[row, column] = 0.0
    rows = iter(table)
    tokens = TokenProbabilities(answer, token_logprobs)
    out: list[SentenceCitation] = []
    for sentence, (claim, _), keep in zip(found, split, claimed, strict=True):
        row = next(rows) if keep else np.zeros(len(memories))
        order = np.argsort(-row, kind="stable")
        cited = tuple(int(i) for i in order if keep and row[i] >= threshold)
        certainty = claim_certainty(sentence, claim, tokens) if keep and tokens else None
        out.append(SentenceCitation(sentence.start, sentence.end, sentence.text, keep, cited,
                                    tuple(float(score) for score in row), certainty))
    claim_count = sum(claimed)
    grounding = sum(c.weight for c in out if c.claim) / claim_count if claim_count else None
    return Attribution(tuple(out), grounding)


# The *grounded* cut: where the weighed grounding best separates the answers bench.answers' fact
# judge calls grounded from the others (Youden's J, the same 0.6-0.65 on the Jargon File, manual
# pages and kernel documentation; docs/answer-measurements.md). 0.75 suited the plain share.
GROUNDED_FROM = 0.6
PARTLY_FROM = 0.25


def grounding_word(
    grounding: float | None, *, grounded: float = GROUNDED_FROM, partly: float = PARTLY_FROM
) -> str:
    """The plain word for a grounding: "grounded" (at least `grounded`), "partly" (at least
    `partly`), "not grounded"; "" when there was nothing to check (None)."""
    if grounding is None:
        return ""
    if grounding >= grounded:
        return "grounded"
    return "partly" if grounding >= partly else "not grounded"
