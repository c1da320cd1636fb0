"""The search trace: how many candidates each pipeline stage kept (the search page shows it)."""

from __future__ import annotations

import numpy as np

from engine.bits import adaptive_threshold
from tests.engine.test_retrieval import constructed_case


def test_trace_counts_each_stage_of_the_constructed_case(tmp_path):
    retriever, targets, q, rows, query = constructed_case(tmp_path)
    trace: dict = {}
    results = retriever.search_vectors([q], targets, trace=trace)
    top = np.sort(rows @ query.astype(np.int64))[::-1][:100]
    cut = adaptive_threshold(top.astype(np.float64))
    above = int(sum(1 for s in top if s >= cut and s > 0))
    assert trace["candidates"] == 100
    assert trace["threshold"] == max(above, 0) and trace["cut"] >= cut
    # Rows 1 and 2 (duplicate and contained text) are removed by dedup.
    assert trace["dedup"] == trace["threshold"] - 2
    assert trace["selected"] == len(results) <= trace["dedup"]


def test_trace_of_top_document_reports_one(tmp_path):
    retriever, targets, q, _, _ = constructed_case(tmp_path)
    trace: dict = {}
    assert len(retriever.search_vectors([q], targets, top_document=True, trace=trace)) == 1
    assert trace["candidates"] == 100 and trace["selected"] == 1
