"""build_index on the real Gemma model and tokenizer, at small dims: counts, sink, cancel, verify."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from engine.build import BuildCancelled, BuildError, BuildVerificationError, build_index, verify_build
from engine.config import Config
from engine.loaded_build import CorpusError, load_corpus

CONFIG = Config(hdc_dimensions=256, hdc_ngram=3)
PARAGRAPHS = [
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "A binary search halves the remaining interval at every comparison step.",
    "The French revolution began in 1789 with the storming of the Bastille.",
    "Mitochondria are the membrane-bound organelles that produce most of the cell's ATP.",
]


def write_jsonl(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    return path


def build(tmp_path, gemma_gguf, tokenizer, embedding_cache, **options):
    first = write_jsonl(tmp_path / "first.jsonl", PARAGRAPHS + PARAGRAPHS[:2])       # 2 duplicates inside
    second = write_jsonl(tmp_path / "second.jsonl", [PARAGRAPHS[3], "Only here: tides follow the moon."])
    datasets = [(4, "first", first), (9, "second", second)]
    return build_index(datasets=datasets, out_dir=tmp_path / "out", gguf_path=gemma_gguf, tokenizer=tokenizer,
                       config=CONFIG, cache_dir=embedding_cache, batch_docs=2, **options)


def test_build_counts_duplicates_once_and_writes_manifest_last(
    tmp_path, gemma_gguf, tokenizer, embedding_cache
):
    out = tmp_path / "out"
    phases = []

    def progress(phase, done, total):
        assert not (out / "manifest.json").exists()
        phases.append(phase)

    result = build(tmp_path, gemma_gguf, tokenizer, embedding_cache, progress=progress)
    assert result.documents == 6 and result.duplicates == 3
    assert {"tokenize", "embeddings", "vocabulary", "encode", "verify"} <= set(phases)
    manifest = json.loads((out / "manifest.json").read_text())
    assert [(s["name"], s["documents"], s["duplicates"]) for s in manifest["sources"]] == \
        [("first", 5, 2), ("second", 1, 1)]
    assert manifest["dims"] == 256 and manifest["ngram"] == 3 and manifest["seed"] == 42
    assert set(manifest["timings"]) == {"tokenize", "embeddings", "vocabulary", "encode", "verify"}
    assert len(manifest["model"]["fingerprint"]) > 8
    newest_other = max(p.stat().st_mtime_ns for p in out.iterdir() if p.name != "manifest.json")
    assert (out / "manifest.json").stat().st_mtime_ns >= newest_other
    assert not (out / ".spool").exists()
    corpus = load_corpus(out)
    assert corpus.count == 6 and corpus.source_counts() == {"first": 5, "second": 1}
    np.testing.assert_array_equal(corpus.index.source_ids, [4, 4, 4, 4, 4, 9])
    memories = corpus.store.get_memories([0, 5])
    assert memories[5].text == "Only here: tides follow the moon." and memories[5].source_id == 9
    assert memories[0].metadata["source"] == "first" and memories[0].hdv_idx == 0
    assert memories[0].token_count == len(tokenizer.tokenize(PARAGRAPHS[0])) == corpus.index.token_counts[0]
    assert verify_build(out)["documents"] == 6


def test_sink_receives_records_instead_of_sqlite(tmp_path, gemma_gguf, tokenizer, embedding_cache):
    batches = []
    build(tmp_path, gemma_gguf, tokenizer, embedding_cache, sink=batches.append)
    records = [r for batch in batches for r in batch]
    assert [r["hdv_idx"] for r in records] == list(range(6))
    assert all(set(r) == {"id", "hdv_idx", "text", "source_id", "metadata", "token_count"} for r in records)
    assert len({r["id"] for r in records}) == 6 and len(records[0]["id"]) == 32
    assert not (tmp_path / "out" / "memories.sqlite").exists()


def test_cancel_raises_and_leaves_no_manifest(tmp_path, gemma_gguf, tokenizer, embedding_cache):
    calls = []

    def should_cancel():
        calls.append(1)
        return len(calls) > 2

    with pytest.raises(BuildCancelled, match="cancelled"):
        build(tmp_path, gemma_gguf, tokenizer, embedding_cache, should_cancel=should_cancel)
    assert not (tmp_path / "out" / "manifest.json").exists()
    with pytest.raises(CorpusError, match="no manifest"):
        load_corpus(tmp_path / "out")


def test_out_dir_must_be_new_or_empty(tmp_path, gemma_gguf, tokenizer, embedding_cache):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("someone else's file")
    with pytest.raises(BuildError, match="must be new or an empty directory"):
        build(tmp_path, gemma_gguf, tokenizer, embedding_cache)
    assert (tmp_path / "out" / "keep.txt").read_text() == "someone else's file"


def test_verify_catches_a_corrupted_bitmap_file(tmp_path, gemma_gguf, tokenizer, embedding_cache):
    build(tmp_path, gemma_gguf, tokenizer, embedding_cache)
    index_file = tmp_path / "out" / "corpus.idx"
    raw = bytearray(index_file.read_bytes())
    for i in range(4096, len(raw)):
        raw[i] ^= 0x5A
    index_file.write_bytes(bytes(raw))
    with pytest.raises(BuildVerificationError, match="differs from the manifest"):
        verify_build(tmp_path / "out")
    with pytest.raises(BuildVerificationError, match="re-encoded rows"):
        verify_build(tmp_path / "out", check_hashes=False)


def test_sqlite_store_holds_every_row(tmp_path, gemma_gguf, tokenizer, embedding_cache):
    build(tmp_path, gemma_gguf, tokenizer, embedding_cache)
    with sqlite3.connect(tmp_path / "out" / "memories.sqlite") as db:
        rows = db.execute("SELECT hdv_idx, source_id FROM memories ORDER BY hdv_idx").fetchall()
    assert rows == [(0, 4), (1, 4), (2, 4), (3, 4), (4, 4), (5, 9)]


@pytest.mark.slow
def test_formats_1_and_4_give_identical_bitmaps_and_searches(
    tmp_path, gemma_gguf, tokenizer, embedding_cache
):
    # Format 4 stores the model's Q8_0 rows and derives what format 1 stores: same corpus, same results.
    # Formats 2 and 3 (the previous derived formats) still build, verify and load.
    config = Config(hdc_dimensions=2048, hdc_ngram=3, hdc_drop_components=2)
    data = write_jsonl(
        tmp_path / "docs.jsonl", PARAGRAPHS + ["Tides follow the moon.", "Glucose stores energy."]
    )
    corpora = {}
    for version in (1, 2, 3, 4):
        out = tmp_path / f"v{version}"
        build_index(datasets=[(1, "docs", data)], out_dir=out, gguf_path=gemma_gguf, tokenizer=tokenizer,
                    config=config, cache_dir=embedding_cache, format_version=version)
        corpora[version] = load_corpus(out)
        assert corpora[version].manifest["format_version"] == version
        assert verify_build(out)["documents"] == 7
    old, new = corpora[1], corpora[4]
    assert corpora[2].encoder.vocab.projection is None and new.encoder.vocab.projection is not None
    assert new.encoder.vocab.header["rows_type"] == "Q8_0" and new.encoder.vocab.unigram is None
    sizes = {version: (corpus.build_dir / "vocab.idx").stat().st_size for version, corpus in corpora.items()}
    assert sizes[2] * 5 < sizes[1]
    # Format 3 is format 2 plus the int8 projection (emb_dim x dims) and its float64 column scales,
    # format 4 format 2 plus the float32 projection.
    assert sizes[3] == sizes[2] + new.encoder.emb_dim * 2048 + 8 * 2048
    assert sizes[4] == sizes[2] + new.encoder.emb_dim * 2048 * 4
    for got, want in zip(
        new.index.get_bitmaps(np.arange(7)), old.index.get_bitmaps(np.arange(7)), strict=True
    ):
        np.testing.assert_array_equal(got, want)
    for query in ("What does photosynthesis convert?", "storming of the Bastille", "halves the interval"):
        tokens = tokenizer.tokenize(query)
        (p1, n1), (p2, n2) = old.encoder.encode([tokens]), new.encoder.encode([tokens])
        np.testing.assert_array_equal(p1, p2)
        np.testing.assert_array_equal(n1, n2)
        rows1, scores1 = old.index.search(p1[0], n1[0], 7)
        rows2, scores2 = new.index.search(p2[0], n2[0], 7)
        np.testing.assert_array_equal(rows1, rows2)
        np.testing.assert_array_equal(scores1, scores2)


def _tokenize(tmp_path, tokenizer, datasets, name):
    from engine.build import _Spool, _tokenize_pass
    from engine.readers import ReadOptions

    spool_dir = tmp_path / name
    spool_dir.mkdir()
    spool = _Spool(spool_dir / "tokens.i32", spool_dir / "records.jsonl")
    tokenized = _tokenize_pass(datasets, tokenizer, 64, spool, 2, lambda *a: None, lambda: None,
                               options=ReadOptions(max_rows=20))
    return spool, tokenized


def test_a_sheet_over_the_row_cap_found_at_build_skips_that_document_only(tmp_path, tokenizer):
    from tests.office_files import xlsx_file

    # The first sheet is read and spooled (several batches) before the second is found over the cap.
    first = [["Region", "Units"]] + [[f"Region {i}", i] for i in range(15)]
    long = [["Id", "Name"]] + [[i, f"row {i}"] for i in range(30)]
    workbook = xlsx_file(tmp_path / "book.xlsx", {"Short": first, "Long": long})
    before = write_jsonl(tmp_path / "before.jsonl", PARAGRAPHS[:2])
    # Its text is one of the refused workbook's: not a duplicate, since that workbook was taken out.
    after = write_jsonl(tmp_path / "after.jsonl", ["Region: Region 3; Units: 3", PARAGRAPHS[4]])
    spool, tokenized = _tokenize(tmp_path, tokenizer, [(1, "before", before), (2, "book.xlsx", workbook),
                                                       (3, "after", after)], "with")
    [issue] = tokenized.skipped
    assert issue.kind == "document" and str(issue).startswith(str(workbook))
    assert "'Long' of the Excel (XLSX) file has more than 20 rows" in issue.message
    assert [(s["name"], s["documents"], s["duplicates"]) for s in tokenized.sources] == \
        [("before", 2, 0), ("book.xlsx", 0, 0), ("after", 2, 0)]
    # The spool is as if the workbook had never been given: same rows, tokens and frequencies.
    plain, expected = _tokenize(tmp_path, tokenizer, [(1, "before", before), (3, "after", after)], "without")
    assert spool.offsets == plain.offsets and len(spool.offsets) == 5
    assert spool.tokens_path.read_bytes() == plain.tokens_path.read_bytes()
    assert spool.records_path.read_text() == plain.records_path.read_text()
    assert np.array_equal(tokenized.document_frequency, expected.document_frequency)
