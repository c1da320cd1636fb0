"""The meaning channel (`engine.meaning`): its rows, the real encoder, the second stage of a search
and its gate."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from engine import meaning
from engine.channels import MEANING, WORDS, ChannelUnavailable, RowFilter, best_rows, rows_of
from engine.fusion import FusionChoice
from engine.gate import channel_evidence
from engine.lexical import WordIndex
from engine.meaning import (
    DIMENSIONS,
    MEANING_CANDIDATES,
    MEANING_FALLBACK,
    MEANING_FILE,
    MEANING_GATE,
    PRECISION_TOLERANCE,
    PRECISION_VARIABLE,
    PROBE_TEXTS,
    MeaningChannel,
    MeaningError,
    MeaningIndex,
    SentenceEncoder,
    cpu_has_bfloat16,
    quantize,
    sentence_encoder,
    write_meaning,
)
from engine.retrieval import DEFINER_DEPTH, SearchTarget
from tests.engine.test_retrieval import DictStore, _random_word_corpus, constructed_case, make_corpus


def unit(rng: np.random.Generator, n: int) -> np.ndarray:
    vectors = rng.standard_normal((n, DIMENSIONS)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


ENCODER_LAST = """
import json, sys
from pathlib import Path
if sys.argv[1] == "after a build":
    from engine.build import build_index
    from engine.config import Config
    from engine.model_files import default_gguf_path
    from engine.tokenizer import GGUFTokenizer
    data = Path(sys.argv[2]) / "notes.jsonl"
    data.write_text("".join(json.dumps({"text": f"Note {n}: the kettle boils at noon."}) + "\\n"
                            for n in range(40)))
    gguf = default_gguf_path()
    build_index(datasets=[(1, "notes", data)], out_dir=Path(sys.argv[2]) / "build", gguf_path=gguf,
                tokenizer=GGUFTokenizer.from_gguf(gguf), config=Config(),
                cache_dir=Path(sys.argv[2]) / "cache")
from engine.meaning import SentenceEncoder
encoder = SentenceEncoder()
encoder.encode(["a first text"])
print(encoder.chosen)
"""


@pytest.mark.parametrize("order", ["first", "after a build"])
def test_the_encoder_reads_in_bfloat16_where_the_cpu_has_it_first_or_after_a_build(tmp_path, order):
    """As the meaning worker (its first task encodes before its gate searches) and a build worker
    reading an append's memories do: torch runs on its own OpenMP runtime (a build imports it before
    its numba kernels, `engine.encoder.load_torch`), where bfloat16 is the faster (1.6-2.1x on
    AVX512-BF16), and "auto" takes it."""
    result = subprocess.run([sys.executable, "-c", ENCODER_LAST, order, str(tmp_path)],
                            cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-1] == ("bfloat16" if cpu_has_bfloat16() else "float32")


def test_int8_rows_score_as_their_floats_do_and_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    vectors, query = unit(rng, 300), unit(rng, 1)[0]
    codes, scales = quantize(vectors)
    assert codes.dtype == np.int8 and np.abs(codes).max() == 127  # each row's largest entry uses the range
    index = MeaningIndex(codes, scales)
    assert np.abs(index.scores(query) - vectors @ query).max() < 0.01
    index.save(tmp_path / MEANING_FILE)
    loaded = MeaningIndex.for_build(tmp_path)
    assert np.array_equal(loaded.codes, codes) and np.array_equal(loaded.scales, scales)
    assert loaded.model == "all-MiniLM-L6-v2" and MeaningIndex.for_build(tmp_path / "none") is None
    joined = MeaningIndex.joined([loaded, MeaningIndex(codes[:5], scales[:5])])
    assert joined.count == 305 and np.allclose(
        joined.scores(query)[300:], joined.scores(query)[:5], atol=1e-6
    )


def test_unreadable_or_inconsistent_rows_are_a_clear_error(tmp_path):
    (tmp_path / MEANING_FILE).write_bytes(b"not a zip")
    with pytest.raises(MeaningError, match="not a readable meaning file"):
        MeaningIndex.for_build(tmp_path)
    with pytest.raises(MeaningError, match="int8 rows of 384"):
        MeaningIndex(np.zeros((3, 10), np.int8), np.ones(3, np.float32))
    with pytest.raises(MeaningError, match="one finite scale"):
        MeaningIndex(np.zeros((3, DIMENSIONS), np.int8), np.array([1.0, np.nan, 1.0], np.float32))
    other = MeaningIndex(np.zeros((1, DIMENSIONS), np.int8), np.ones(1, np.float32), model="another")
    with pytest.raises(MeaningError, match="different models"):
        MeaningIndex.joined([other, MeaningIndex(np.zeros((1, DIMENSIONS), np.int8), np.ones(1, np.float32))])


TEXTS = [
    "A small domesticated feline kept as a pet; it purrs and hunts mice.",
    "A motor vehicle with four wheels, used to carry a few people on roads.",
    "The season of the year between spring and autumn, when days are longest.",
    "A program that translates source code into machine instructions before it runs.",
]


def test_the_real_encoder_finds_a_text_by_what_it_means(tmp_path, monkeypatch):
    monkeypatch.setattr(meaning, "WRITE_CHUNK", 3)  # read in chunks: 3 texts, then 1
    seen: list[tuple[int, int]] = []
    written = write_meaning(
        iter(TEXTS), tmp_path, total=len(TEXTS), progress=lambda d, t: seen.append((d, t))
    )
    assert seen == [(3, 4), (4, 4)]
    assert (tmp_path / MEANING_FILE).is_file() and written.count == len(TEXTS)
    channel = MeaningChannel(MeaningIndex.for_build(tmp_path))
    # No content word in common with its text: found by meaning only.
    for query, row in [("Which animal meows and catches rodents?", 0), ("What do you call an automobile?", 1),
                       ("the hottest part of the year", 2), ("a tool that turns code into an executable", 3)]:
        scores = channel.query(query).scores(np.arange(len(TEXTS)))
        assert int(np.argmax(scores)) == row, (query, scores)
        bound = channel.query(query)
        text = bound.text_scores([TEXTS[row]])  # first: the query encoded with the text, in one call
        every = bound.scores(np.arange(len(TEXTS)))
        # The query encoded beside a text (another batch) or alone: the same within the precision's tolerance.
        assert np.allclose(every, scores, atol=PRECISION_TOLERANCE)
        assert text[0] == pytest.approx(scores[row], abs=0.02)
    # Cancelled: nothing written; more or fewer texts than rows: an error, nothing written.
    assert write_meaning(TEXTS, tmp_path / "x", should_cancel=lambda: True) is None
    for total, error in ((3, "more than the 3 texts"), (5, "4 texts for the 5 expected")):
        with pytest.raises(MeaningError, match=error):
            write_meaning(TEXTS, tmp_path / "x", total=total)
    assert not (tmp_path / "x").exists()
    seen = []
    alone = sentence_encoder().encode(TEXTS * 20, progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (80, 80) and len(seen) == 3  # a batch of 32 at a time
    # Batched longest first, returned in the texts' order: each row is its own text's vector (a
    # batch pads to its longest text; under bfloat16 that moves a vector within the tolerance).
    one_by_one = np.stack([sentence_encoder().encode([t])[0] for t in TEXTS])
    assert np.min(np.sum(alone[:4] * one_by_one, axis=1)) >= 1 - PRECISION_TOLERANCE
    # Several users at once (a build's batches and searches' queries): the same vectors as alone.
    with ThreadPoolExecutor(max_workers=4) as pool:
        together = list(pool.map(lambda n: sentence_encoder().encode(TEXTS * 20), range(4)))
    assert all(np.allclose(vectors, alone, atol=1e-5) for vectors in together)


def test_bfloat16_gives_float32s_vectors_within_the_tolerance_and_auto_checks_it(monkeypatch):
    questions = ["Which animal meows and catches rodents?", "What do you call an automobile?"]
    texts = [*TEXTS, *PROBE_TEXTS, *questions]
    exact = SentenceEncoder("float32").encode(texts)
    faster = SentenceEncoder("bfloat16").encode(texts)
    assert not np.array_equal(exact, faster)  # computed otherwise, not float32 again
    cosines = np.sum(exact * faster, axis=1)
    assert np.all(cosines >= 1 - PRECISION_TOLERANCE) and np.all(cosines < 1 + 1e-5), cosines
    assert np.allclose(np.linalg.norm(faster, axis=1), 1, atol=1e-5)
    # The two questions find their texts under either precision.
    for vectors in (exact, faster):
        assert list(np.argmax(vectors[-2:] @ vectors[:4].T, axis=1)) == [0, 1]
    # "auto" measures which is faster here: in this process numba's kernels may have run first (see
    # SentenceEncoder._choose), so either; float32 wherever the CPU lacks bfloat16.
    auto = SentenceEncoder()
    auto.encode(TEXTS[:1])
    assert auto.chosen in (("float32", "bfloat16") if cpu_has_bfloat16() else ("float32",))
    # A probe that disagrees by more than the tolerance keeps float32 (none can agree within 0).
    monkeypatch.setattr(meaning, "PRECISION_TOLERANCE", 0.0)
    strict = SentenceEncoder()
    assert np.allclose(strict.encode(TEXTS), exact[:4], atol=1e-5) and strict.chosen == "float32"
    with pytest.raises(MeaningError, match="precision 'half' is not one of auto, float32, bfloat16"):
        SentenceEncoder("half")
    # The process's encoder takes the deployment's setting.
    monkeypatch.setattr(meaning, "_shared", None)
    monkeypatch.setenv(PRECISION_VARIABLE, "float32")
    assert sentence_encoder().precision == "float32"


class FixedMeaning:
    """A meaning channel of fixed cosines (the encoder's own behaviour is tested above)."""

    name, file, gate = MEANING, MeaningChannel.file, MeaningChannel.gate

    def __init__(self, cosines: np.ndarray, text_score: float = 0.0, fails: bool = False) -> None:
        self.cosines, self.text_score, self.fails, self.asked = cosines, text_score, fails, 0

    def query(self, query: str) -> FixedMeaningQuery:
        return FixedMeaningQuery(self)


class FixedMeaningQuery:
    """`FixedMeaning` bound to a query: its cosines, asked once, and its texts' fixed score."""

    def __init__(self, channel: FixedMeaning) -> None:
        self.channel = channel
        self._cosines: np.ndarray | None = None

    def _all(self) -> np.ndarray:
        if self._cosines is None:
            self.channel.asked += 1
            if self.channel.fails:
                raise ChannelUnavailable("the sentence encoder cannot be loaded: gone")
            self._cosines = self.channel.cosines.copy()
        return self._cosines

    def scores(self, rows: np.ndarray) -> np.ndarray:
        return rows_of(self._all(), rows)

    def best(self, k: int, keep: RowFilter | None = None) -> np.ndarray:
        return best_rows(self._all(), k, keep)

    def text_scores(self, texts: list[str]) -> np.ndarray:
        return np.full(len(texts), self.channel.text_score)


def meaning_channel(channel: FixedMeaning, rule: str | None = None, word_index: WordIndex | None = None,
                    word_rule: str | None = None) -> dict:
    """SearchTarget keyword arguments: the meaning channel under `rule`, beside a word channel under
    `word_rule` where one is given (None: unmeasured)."""
    channels = {MEANING: channel} | ({WORDS: word_index} if word_index is not None else {})
    rules = {name: FusionChoice(r) for name, r in ((MEANING, rule), (WORDS, word_rule)) if r is not None}
    return {"channels": channels, "rules": rules}


def test_the_second_stage_brings_the_channels_own_rows_and_keeps_the_filter(tmp_path):
    retriever, targets, q, rows, query = constructed_case(tmp_path, min_context=3)
    retriever.query_vector = lambda corpus, query, blend=None: q
    hdc_scores = rows @ query.astype(np.int64)
    outside = int(np.lexsort((np.arange(len(hdc_scores)), -hdc_scores))[-1])  # HDC's last row
    cosines = np.zeros(len(rows))
    cosines[outside] = 0.9
    base = targets[0]
    plain = retriever.rank_rows("q", base)
    assert outside not in plain
    off = SearchTarget(base.corpus, base.store, "case", **meaning_channel(FixedMeaning(cosines), "hdc"))
    assert np.array_equal(retriever.rank_rows("q", off), plain)
    assert off.channels[MEANING].asked == 0  # not asked
    alone = SearchTarget(base.corpus, base.store, "case", **meaning_channel(FixedMeaning(cosines), "late"))
    found = retriever.search("q", [alone])
    assert found[0].memory.hdv_idx == outside and found[0].hdc_score == float(hdc_scores[outside])
    ranked = retriever.rank_rows("q", alone)
    assert ranked[0] == outside and len(set(ranked.tolist())) == ranked.size == plain.size + 1
    equal = SearchTarget(base.corpus, base.store, "case", **meaning_channel(FixedMeaning(cosines)))  # no rule
    assert outside in retriever.rank_rows("q", equal)[:MEANING_CANDIDATES]
    # A row of a dataset the search leaves out is not added; an encoder that fails keeps the order.
    sources = np.zeros(len(rows), np.int32)
    sources[outside] = 1
    filtered = SearchTarget(make_corpus(tmp_path, "filtered", rows, source_ids=sources), base.store, "case",
                            enabled_sources=frozenset({0}), **meaning_channel(FixedMeaning(cosines), "late"))
    assert outside not in retriever.rank_rows("q", filtered)
    down = SearchTarget(base.corpus, base.store, "case",
                        **meaning_channel(FixedMeaning(cosines, fails=True), "late"))
    assert np.array_equal(retriever.rank_rows("q", down), plain)
    assert [r.memory.hdv_idx for r in retriever.search("q", [down])] == \
        [r.memory.hdv_idx for r in retriever.search("q", [base])]


def test_the_second_stage_fuses_the_channels_whole_ranking_to_its_depth(tmp_path):
    """RRF at weight 1 of the first stage's order and the channel's ranking of every row: a candidate
    counts at its rank among all rows, and for nothing past `Gate.ranks`, not at its rank among the
    pool's few (which would lift a row the channel puts far down)."""
    retriever, targets, q, rows, _ = constructed_case(tmp_path, min_context=3)
    retriever.query_vector = lambda corpus, query, blend=None: q
    base = targets[0]
    cosines = np.random.default_rng(5).uniform(0.1, 0.9, len(rows))
    plain = retriever.rank_rows("q", base)
    depth = 120
    channel = FixedMeaning(cosines)
    channel.gate = replace(MEANING_GATE, ranks=depth)
    target = SearchTarget(base.corpus, base.store, "case", **meaning_channel(channel))
    ranked = retriever.rank_rows("q", target)
    whole = best_rows(cosines, depth).tolist()
    pool = [*plain.tolist(), *(row for row in whole[:MEANING_CANDIDATES] if row not in plain)]
    at = {row: rank for rank, row in enumerate(whole, start=1)}
    fused = [1 / (61 + i) + (1 / (60 + at[row]) if row in at else 0.0) for i, row in enumerate(pool)]
    assert ranked.tolist() == [pool[i] for i in np.argsort(-np.array(fused), kind="stable")]
    pooled = FixedMeaning(cosines)
    pooled.gate = replace(MEANING_GATE, ranks=0)  # ranks among the pool: another order
    assert retriever.rank_rows("q", SearchTarget(base.corpus, base.store, "case",
                                                 **meaning_channel(pooled))).tolist() != ranked.tolist()


def test_a_question_hdc_finds_nothing_for_is_ranked_by_the_channel(tmp_path):
    """No word of the question in the corpus's vocabulary: HDC has no candidate, and the channel's
    own best rows are the answer, in the search and in what a known-item benchmark scores."""
    retriever, targets, q, rows, _ = constructed_case(tmp_path, min_context=3)
    retriever.query_vector = lambda corpus, query, blend=None: (np.zeros_like(q[0]), np.zeros_like(q[1]))
    base = targets[0]
    cosines = np.random.default_rng(6).uniform(0.1, 0.9, len(rows))
    assert retriever.rank_rows("q", base).size == 0 and retriever.search("q", [base]) == []
    target = SearchTarget(base.corpus, base.store, "case", **meaning_channel(FixedMeaning(cosines)))
    ranked = retriever.rank_rows("q", target)
    assert ranked.tolist() == best_rows(cosines, MEANING_CANDIDATES).tolist()
    found = [r.memory.hdv_idx for r in retriever.search("q", [target])]
    assert found and found[0] == ranked[0] and set(found) <= set(ranked.tolist())


def test_rows_not_read_yet_are_absent_from_the_channel_and_keep_their_first_stage_places(tmp_path):
    """A state whose later segment waits for the background task: its rows have no cosine (nan),
    are never the channel's own best, and keep the places the first stage gave them."""
    rng = np.random.default_rng(1)
    vectors, query = unit(rng, 10), unit(rng, 1)[0]
    read = MeaningIndex.of_vectors(vectors[:6])
    state = MeaningIndex.partial([read, None], [6, 4])
    scores = state.scores(query)
    assert state.count == 10 and np.isnan(scores[6:]).all() and np.allclose(scores[:6], read.scores(query))
    assert set(best_rows(np.abs(scores), 10).tolist()) == set(range(6))
    assert MeaningIndex.partial([None, None], [6, 4]) is None
    assert MeaningIndex.partial([read], [6]).missing is None  # whole: nothing missing
    with pytest.raises(MeaningError, match="6 for a segment of 5"):
        MeaningIndex.partial([read], [5])
    retriever, targets, q, rows, _ = constructed_case(tmp_path, min_context=3)
    retriever.query_vector = lambda corpus, query, blend=None: q
    base, half = targets[0], len(rows) // 2
    plain = retriever.rank_rows("q", base).tolist()
    cosines = np.full(len(rows), np.nan)
    cosines[:half] = rng.uniform(0.1, 0.9, half)
    for rule in ("late", "rrf:1"):
        target = SearchTarget(base.corpus, base.store, "case", **meaning_channel(FixedMeaning(cosines), rule))
        found = retriever.search("q", [target])
        assert found and all((r.meaning_score is None) == (r.memory.hdv_idx >= half) for r in found)
        ranked = retriever.rank_rows("q", target).tolist()
        # Each row not read keeps its place in the order HDC and the words gave; the rest are reordered.
        assert all(ranked.index(row) == plain.index(row) for row in plain if row >= half)
        if rule == "late":  # the encoder alone orders the rows it has read, by their cosines
            assert np.all(np.diff(cosines[[row for row in ranked if row < half]]) <= 1e-9)


def test_the_gate_keeps_equal_weight_without_evidence_and_moves_for_a_channel_that_finds(tmp_path):
    corpus, retriever, texts = _random_word_corpus(tmp_path)
    words = WordIndex.build(texts)
    flat = SearchTarget(corpus, DictStore(texts), "e", **meaning_channel(
        FixedMeaning(np.full(60, 0.5), 0.5), word_index=words, word_rule="z:1"))
    choice = channel_evidence(retriever=retriever, target=flat, channel=MEANING, samples=20)
    assert choice.rule == MEANING_FALLBACK == "rrf:1" and choice.evidence["queries"] == 20  # held-out only
    # A channel that rates each held-out text above every row finds every held-out target.
    oracle = SearchTarget(corpus, DictStore(texts), "e", **meaning_channel(
        FixedMeaning(np.zeros(60), 1.0), word_index=words, word_rule="z:1"))
    choice = channel_evidence(retriever=retriever, target=oracle, channel=MEANING, samples=20)
    assert choice.evidence["mrr_by_kind"]["heldout"]["late"] == 1.0
    assert choice.evidence["mrr"][choice.rule] > choice.evidence["mrr"]["hdc"]
    # Texts whose held-out sentences share their words with the rest: HDC and words find them, and a
    # channel that ranks every target last is left out (the first stage alone significantly better).
    corpus, retriever, texts = _random_word_corpus(tmp_path / "topics", topics=True)
    worst = SearchTarget(corpus, DictStore(texts), "t", **meaning_channel(
        FixedMeaning(np.linspace(1.0, 0.9, 60), -1.0), word_index=WordIndex.build(texts), word_rule="z:1"))
    choice = channel_evidence(retriever=retriever, target=worst, channel=MEANING, samples=20)
    assert choice.rule == "hdc" and choice.evidence["mrr"]["hdc"] > 0.5 > choice.evidence["mrr"]["rrf:1"]
    with pytest.raises(ValueError, match="meaning channel needs a target that has it"):
        channel_evidence(retriever=retriever, target=SearchTarget(corpus, DictStore(texts), "e",
                                                                  channels={WORDS: words}), channel=MEANING)
    with pytest.raises(ValueError, match="needs a first-stage channel"):
        alone = SearchTarget(corpus, DictStore(texts), "e", **meaning_channel(FixedMeaning(np.zeros(60))))
        channel_evidence(retriever=retriever, target=alone, channel=MEANING)


def test_the_search_path_does_not_import_the_builder():
    """`engine.retrieval` imports this module for a search's second stage; the build-time writer's
    helpers (`engine.build`, its vocabulary writer and dataset readers) load only when a build writes."""
    probe = (
        "import sys, engine.retrieval; "
        "print(sorted(m for m in ('engine.build', 'engine.vocab_writer', 'engine.datasets') if m in "
        "sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                            cwd=Path(__file__).resolve().parents[2]).stdout.strip()
    assert loaded == "[]"


def test_a_question_quoting_a_memory_finds_it_first_where_the_channel_ranks_it_last(tmp_path):
    """A sentence pasted from a document: the memory holding it word for word, among text on other
    things, is ranked last by meaning, so the fused order puts it below rows HDC ranks under it, past
    the first rows the rule reads of that order; it comes first, found in the first stage's order.
    A question of a few words that the memory also holds is ranked as the channels rank it
    (`engine.query_names.quoted`)."""
    retriever, targets, q, rows, _ = constructed_case(tmp_path, min_context=3)
    retriever.query_vector = lambda corpus, query, blend=None: q
    sentence = "The narwhal census on Baffin counted 1074 cartographers trading walrus ivory."
    base = targets[0]
    texts = list(base.store.texts)
    texts[3] = "Of other things first.\nthe narwhal census on Baffin  counted 1074\ncartographers trading " \
               "walrus ivory. And more of other things."
    cosines = np.linspace(0.9, 0.1, len(rows))
    cosines[3] = -0.5  # the channel's last
    target = SearchTarget(base.corpus, DictStore(texts), "case", **meaning_channel(FixedMeaning(cosines)))
    unquoted = retriever.rank_rows("census on Baffin", target).tolist()
    assert unquoted.index(3) >= DEFINER_DEPTH  # RRF of whole rankings: the channel ranks it past its depth
    assert retriever.rank_rows(sentence, target).tolist()[0] == 3
    assert retriever.rank_rows(f"\u201c{sentence}\u201d", target).tolist()[0] == 3
    # One word changed: no memory holds it, the channels' order stands.
    assert retriever.rank_rows(sentence.replace("1074", "1075"), target).tolist() == unquoted
