"""engine.index: pruned search against the exact scan and an int8 reference, file handling."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine import bits
from engine.index import BitmapIndex, IndexFileError


def random_ternary(rng: np.random.Generator, n: int, dims: int) -> np.ndarray:
    return rng.integers(-1, 2, size=(n, dims)).astype(np.int8)


def reference_top_k(values: np.ndarray, query: np.ndarray, k: int, allowed: np.ndarray | None = None):
    scores = values.astype(np.int64) @ query.astype(np.int64)
    rows = np.arange(values.shape[0]) if allowed is None else np.flatnonzero(allowed)
    order = np.lexsort((rows, -scores[rows]))[:k]
    return rows[order], scores[rows][order]


def build(path: Path, values: np.ndarray, *, sources: np.ndarray | None = None, batch: int = 300,
          finalize: bool = True, chunk_words: int = 4) -> BitmapIndex:
    index = BitmapIndex.create(path, values.shape[1])
    pos, neg = bits.pack_ternary(values)
    for first in range(0, values.shape[0], batch):
        last = first + batch
        index.append(pos[first:last], neg[first:last],
                     token_counts=np.arange(first, min(last, values.shape[0])),
                     source_ids=None if sources is None else sources[first:last])
    if finalize:
        index.finalize(chunk_words)
    return index


def planted(rng: np.random.Generator, n: int, dims: int, flip: float = 0.03):
    """Random corpus with 10 near-duplicates of the query at rows 17, 17 + n//10, ..."""
    values = random_ternary(rng, n, dims)
    query = random_ternary(rng, 1, dims)[0]
    rows = (17 + np.arange(10) * (n // 10)) % n
    for row in rows:
        flips = rng.random(dims) < flip
        values[row] = np.where(flips, -query, query)
    return values, query, rows


def assert_same(result, expected) -> None:
    rows, scores = result
    assert rows.dtype == np.int64 and scores.dtype == np.int32
    np.testing.assert_array_equal(rows, expected[0])
    np.testing.assert_array_equal(scores, expected[1])


@pytest.mark.parametrize("dims", [1, 63, 64, 65, 127, 10000])
@pytest.mark.parametrize("n", [0, 1, 7, 1000])
def test_pruned_equals_exact_and_reference_on_random_data(tmp_path: Path, dims: int, n: int) -> None:
    rng = np.random.default_rng(dims * 11 + n)
    values = random_ternary(rng, n, dims)
    index = build(tmp_path / "c.idx", values)
    for query in (random_ternary(rng, 1, dims)[0], values[n // 2] if n else np.ones(dims, np.int8)):
        qp, qn = bits.pack_ternary(query)
        for k in (1, 10, 2000):
            expected = reference_top_k(values, query, k)
            assert_same(index.search_exact(qp, qn, k), expected)
            assert_same(index.search(qp, qn, k), expected)


@pytest.mark.parametrize("chunk_words", [1, 4, 7, 200])
@pytest.mark.parametrize("k", [1, 10, 50])
def test_pruned_finds_planted_near_duplicates(tmp_path: Path, chunk_words: int, k: int) -> None:
    rng = np.random.default_rng(chunk_words * 100 + k)
    values, query, planted_rows = planted(rng, 3000, 2000)
    index = build(tmp_path / "p.idx", values, chunk_words=chunk_words)
    qp, qn = bits.pack_ternary(query)
    expected = reference_top_k(values, query, k)
    assert_same(index.search(qp, qn, k), expected)
    top = index.search(qp, qn, 10)[0]
    assert set(top.tolist()) == set(planted_rows.tolist())


def test_interleaved_and_finalized_layouts_score_identically(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    values, query, _ = planted(rng, 1500, 1000)
    interleaved = build(tmp_path / "i.idx", values, finalize=False)
    finalized = build(tmp_path / "f.idx", values, chunk_words=3)
    assert not interleaved.finalized and finalized.finalized
    qp, qn = bits.pack_ternary(query)
    for k in (1, 10, 1500):
        a, b = interleaved.search_exact(qp, qn, k), finalized.search_exact(qp, qn, k)
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])
        assert_same(interleaved.search(qp, qn, k), a)
    rows = rng.integers(0, 1500, size=40)
    for got in (interleaved.get_bitmaps(rows), finalized.get_bitmaps(rows)):
        np.testing.assert_array_equal(bits.unpack_ternary(*got, 1000), values[rows])


@pytest.mark.parametrize("fraction", [0.02, 0.5])
def test_filter_is_applied_before_pruning(tmp_path: Path, fraction: float) -> None:
    rng = np.random.default_rng(int(fraction * 100))
    n, dims = 4000, 1500
    values, query, planted_rows = planted(rng, n, dims)
    sources = np.where(rng.random(n) < fraction, 2, rng.integers(0, 2, size=n)).astype(np.int32)
    sources[planted_rows[:5]] = 0  # half of the best rows live in a source that is filtered out
    sources[planted_rows[5:]] = 2
    index = build(tmp_path / "s.idx", values, sources=sources)
    qp, qn = bits.pack_ternary(query)
    allowed = sources == 2
    for k in (1, 10, 40):
        expected = reference_top_k(values, query, k, allowed)
        by_source = index.search(qp, qn, k, allowed_sources=[2])
        assert_same(by_source, expected)
        assert np.all(sources[by_source[0]] == 2)
        assert_same(index.search(qp, qn, k, row_mask=allowed), expected)
        assert_same(index.search_exact(qp, qn, k, allowed_sources={2}), expected)
    assert index.search(qp, qn, 10, allowed_sources=[9])[0].shape == (0,)
    both = index.search(qp, qn, 10, allowed_sources=[2], row_mask=np.arange(n) % 2 == 0)
    assert_same(both, reference_top_k(values, query, 10, allowed & (np.arange(n) % 2 == 0)))


def test_candidates_cap_is_a_tournament(tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    values, query, planted_rows = planted(rng, 5000, 1000)
    index = build(tmp_path / "t.idx", values)
    qp, qn = bits.pack_ternary(query)
    rows, scores = index.search(qp, qn, 10, candidates=50)
    assert set(rows.tolist()) == set(planted_rows.tolist())
    assert np.all(np.diff(scores) <= 0)
    with pytest.raises(ValueError, match="candidates"):
        index.search(qp, qn, 10, candidates=5)


def test_edge_cases_empty_index_one_row_big_k_empty_query(tmp_path: Path) -> None:
    empty = build(tmp_path / "e.idx", np.zeros((0, 100), dtype=np.int8))
    q = bits.pack_ternary(np.ones(100, dtype=np.int8))
    for result in (empty.search(*q, 5), empty.search_exact(*q, 5)):
        assert result[0].shape == (0,) and result[1].shape == (0,)
    assert empty.sparsity() == {"pos": 0.0, "zero": 0.0, "neg": 0.0}
    assert empty.sample_similarities(10).shape == (0,)
    assert empty.get_bitmaps([])[0].shape == (0, 2)
    one = build(tmp_path / "o.idx", np.array([[1, -1] * 50], dtype=np.int8))
    assert_same(one.search(*q, 5), (np.array([0]), np.array([0])))
    rng = np.random.default_rng(2)
    values = random_ternary(rng, 500, 300)
    index = build(tmp_path / "z.idx", values)
    zero = np.zeros(bits.words(300), dtype=np.uint64)
    rows, scores = index.search(zero, zero, 7)
    np.testing.assert_array_equal(rows, np.arange(7))
    assert not scores.any()
    assert index.search(zero, zero, 0)[0].shape == (0,)


def test_bad_queries_and_rows_raise(tmp_path: Path) -> None:
    index = build(tmp_path / "b.idx", random_ternary(np.random.default_rng(0), 20, 130))
    good = np.zeros(3, dtype=np.uint64)
    with pytest.raises(ValueError, match=r"q_pos/q_neg: expected shape \(3,\)"):
        index.search(good[:2], good[:2], 1)
    with pytest.raises(ValueError, match="uint64"):
        index.search(good.astype(np.int64), good, 1)
    with pytest.raises(ValueError, match="k must be"):
        index.search(good, good, -1)
    with pytest.raises(ValueError, match="row_mask"):
        index.search(good, good, 1, row_mask=np.ones(19, dtype=bool))
    with pytest.raises(ValueError, match="rows"):
        index.get_bitmaps([20])
    with pytest.raises(ValueError, match="read-only"):
        index.append(np.zeros((1, 3), np.uint64), np.zeros((1, 3), np.uint64))


def test_append_validates_rows(tmp_path: Path) -> None:
    index = BitmapIndex.create(tmp_path / "v.idx", 65)
    both = np.ones((1, 2), dtype=np.uint64)
    with pytest.raises(ValueError, match="both bitmaps"):
        index.append(both, both)
    padded = np.array([[0, 2]], dtype=np.uint64)
    with pytest.raises(ValueError, match="padding"):
        index.append(padded, np.zeros_like(padded))
    with pytest.raises(ValueError, match=r"\(m, 2\)"):
        index.append(np.zeros((1, 3), np.uint64), np.zeros((1, 3), np.uint64))
    with pytest.raises(ValueError, match="source_ids"):
        index.append(np.zeros((2, 2), np.uint64), np.zeros((2, 2), np.uint64), source_ids=[1])
    with pytest.raises(FileExistsError, match="v.idx"):
        BitmapIndex.create(tmp_path / "v.idx", 65)


def test_file_round_trip_and_diagnostics(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    dims = 200
    values = random_ternary(rng, 700, dims)
    values[:, :10] = 1  # a fully active block to check per-dimension frequencies
    sources = rng.integers(0, 4, size=700).astype(np.int32)
    path = tmp_path / "r.idx"
    build(path, values, sources=sources, batch=250, chunk_words=2).close()
    assert not (tmp_path / "r.idx.finalizing").exists()
    index = BitmapIndex.open(path)
    assert (index.count, index.dims, index.finalized, index.chunk_words) == (700, dims, True, 2)
    np.testing.assert_array_equal(index.token_counts, np.arange(700))
    np.testing.assert_array_equal(index.source_ids, sources)
    np.testing.assert_array_equal(bits.unpack_ternary(*index.get_bitmaps(np.arange(700)), dims), values)
    sparsity = index.sparsity()
    assert sparsity["pos"] == pytest.approx(np.mean(values == 1))
    assert sparsity["neg"] == pytest.approx(np.mean(values == -1))
    assert sparsity["zero"] == pytest.approx(np.mean(values == 0))
    pos_freq, neg_freq = index.dimension_activation()
    np.testing.assert_allclose(pos_freq, np.mean(values == 1, axis=0))
    np.testing.assert_allclose(neg_freq, np.mean(values == -1, axis=0))
    sims = index.sample_similarities(50, seed=3)
    pairs = np.random.default_rng(3)
    first = pairs.integers(0, 700, size=50)
    second = (first + pairs.integers(1, 700, size=50)) % 700
    a, b = values[first].astype(np.int64), values[second].astype(np.int64)
    expected = (a * b).sum(1) / np.sqrt((a != 0).sum(1) * (b != 0).sum(1))
    np.testing.assert_allclose(sims, expected)


def test_corrupt_and_truncated_files_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.idx"
    build(path, random_ternary(np.random.default_rng(1), 50, 100)).close()
    raw = path.read_bytes()
    path.write_bytes(raw[:-8])
    with pytest.raises(IndexFileError, match=r"bad\.idx.*bytes"):
        BitmapIndex.open(path)
    path.write_bytes(b"NOTANIDX" + raw[8:])
    with pytest.raises(IndexFileError, match=r"bad\.idx.*magic"):
        BitmapIndex.open(path)
    path.write_bytes(raw)
    side = tmp_path / "bad.idx.source_ids"
    side.write_bytes(side.read_bytes()[:-4])
    with pytest.raises(IndexFileError, match=r"source_ids.*49"):
        BitmapIndex.open(path)
    with pytest.raises(IndexFileError, match=r"missing\.idx"):
        BitmapIndex.open(tmp_path / "missing.idx")


def test_search_falls_back_to_the_exact_scan_where_pruning_gives_up_and_probes_again(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    values = random_ternary(rng, 2000, 1024)  # random rows: the bound never closes in
    index = build(tmp_path / "r.idx", values)
    queries = [random_ternary(rng, 1, 1024)[0] for _ in range(40)]
    for query in queries:  # same answers whichever way each search went
        qp, qn = bits.pack_ternary(query)
        assert_same(index.search(qp, qn, 10), reference_top_k(values, query, 10))
    # The strategy itself is internal; these counters are how it is observable.
    assert index._gave_up >= 4 and index._since_probe >= 36
    # An index where pruning works keeps pruning: planted near-duplicates reset the streak.
    planted_values, query, _ = planted(rng, 3000, 2000)
    planted_index = build(tmp_path / "p.idx", planted_values)
    planted_index._gave_up = 4
    qp, qn = bits.pack_ternary(query)
    for _ in range(16):
        assert_same(planted_index.search(qp, qn, 10), reference_top_k(planted_values, query, 10))
    assert planted_index._gave_up == 0


@pytest.mark.parametrize("sample_chunks", [1, 3, 40])
def test_sampled_search_scores_exactly_and_finds_planted_rows(tmp_path: Path, sample_chunks: int) -> None:
    rng = np.random.default_rng(sample_chunks)
    values, query, planted_rows = planted(rng, 3000, 1000)
    index = build(tmp_path / "s.idx", values)  # 1000 dims, 4-word chunks: 4 chunks
    qp, qn = bits.pack_ternary(query)
    rows, scores = index.search_sampled(qp, qn, 10, sample_chunks=sample_chunks, shortlist=50)
    assert rows.dtype == np.int64 and scores.dtype == np.int32
    assert set(rows.tolist()) == set(planted_rows.tolist())  # near-duplicates stand out on any subset
    np.testing.assert_array_equal(scores, index.score_rows(rows, qp, qn))  # the re-rank is exact
    assert_same((rows, scores), reference_top_k(values, query, 10))
    # With a shortlist of every row, or a subset of every chunk, it is the exact search.
    assert_same(
        index.search_sampled(qp, qn, 25, sample_chunks=1, shortlist=3000), index.search_exact(qp, qn, 25)
    )
    allowed = rng.random(3000) < 0.5
    assert_same(index.search_sampled(qp, qn, 10, sample_chunks=2, shortlist=2000, row_mask=allowed),
                reference_top_k(values, query, 10, allowed))
    with pytest.raises(ValueError, match="shortlist"):
        index.search_sampled(qp, qn, 10, shortlist=5)


def test_search_auto_is_exact_below_the_threshold_and_sampled_above(tmp_path: Path, monkeypatch) -> None:
    from engine import index_search

    rng = np.random.default_rng(5)
    values = random_ternary(rng, 3000, 1000)
    index = build(tmp_path / "a.idx", values, sources=np.arange(3000) % 3)
    query = values[16].copy()
    query[rng.random(1000) < 0.3] = 0  # a related query: row 16 (source 1) is its best match
    qp, qn = bits.pack_ternary(query)
    assert index.count < index_search.SAMPLED_SEARCH_MIN_ROWS
    assert_same(index.search_auto(qp, qn, 50, allowed_sources=[0, 1]),
                reference_top_k(values, query, 50, np.arange(3000) % 3 != 2))
    monkeypatch.setattr(index_search, "SAMPLED_SEARCH_MIN_ROWS", 3000)
    calls = []
    monkeypatch.setattr(BitmapIndex, "search_sampled",
                        lambda self, *args, **kw: calls.append(kw) or BitmapIndex.search_exact(
                            self, *args, **kw))
    rows, _ = index.search_auto(qp, qn, 50, allowed_sources=[0, 1])
    assert calls == [{"allowed_sources": [0, 1]}] and rows[0] == 16
    monkeypatch.undo()
    # The default shortlist grows with k: asking for 600 rows re-ranks 1,200.
    rows, scores = index.search_sampled(qp, qn, 600, sample_chunks=1)
    np.testing.assert_array_equal(scores, index.score_rows(rows, qp, qn))
    assert rows.shape == (600,) and rows[0] == 16
