"""bench.search's dataset filter comparison: on a small synthetic index, the filtered search's top 10
are all allowed rows and the filter leaves about half of them."""

from __future__ import annotations

from bench.search import build_corpus, filter_comparison, half_sources


def test_filter_comparison_keeps_only_allowed_rows(tmp_path, capsys):
    index, qp, qn, _ = build_corpus(tmp_path, 4000, 1024, 4, 0.03, 0)
    allowed = half_sources(index)
    assert len(allowed) == 2  # four sources of equal size: two of them are half
    filter_comparison(index, qp, qn, k=50)
    out = capsys.readouterr().out
    assert "leaving 50.0% of 4000 rows" in out
    assert "all allowed rows: True" in out
