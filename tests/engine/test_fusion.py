"""reciprocal_rank_fusion against hand-computed scores, tie-breaks and bad arguments."""

from __future__ import annotations

import random

import pytest

from engine.fusion import (
    WEIGHT_GRID,
    FusionWeights,
    choose_fusion_weights,
    mrr_at,
    reciprocal_rank_fusion,
    self_queries,
)


def test_scores_match_a_hand_computed_reference():
    # a: 1/(60+1) + 1/(60+3); b: 1/(60+2) + 1/(60+1); c: 1/(60+3); d: 1/(60+2)
    fused = reciprocal_rank_fusion([["a", "b", "c"], ["b", "d", "a"]])
    expected = {"a": 1 / 61 + 1 / 63, "b": 1 / 62 + 1 / 61, "c": 1 / 63, "d": 1 / 62}
    assert [key for key, _ in fused] == ["b", "a", "d", "c"]
    for key, score in fused:
        assert score == pytest.approx(expected[key], rel=1e-12)


def test_weights_and_k_scale_contributions():
    fused = dict(reciprocal_rank_fusion([[1, 2], [2, 1]], k=1, weights=[3.0, 1.0]))
    assert fused == pytest.approx({1: 3 / 2 + 1 / 3, 2: 3 / 3 + 1 / 2})
    assert [key for key, _ in reciprocal_rank_fusion([[1, 2], [2, 1]], k=1, weights=[0.0, 1.0])] == [2, 1]


def test_ties_break_by_best_rank_then_first_appearance():
    # k = 2: "a" at rank 2 twice = 1/4 + 1/4; "b" at ranks 4 and 1 = 1/6 + 1/3: equal sums (exact in
    # binary). "a" appears first, but "b" has the better best rank, so "b" leads.
    fused = reciprocal_rank_fusion([["x", "a", "y", "b"], ["b", "a"]], k=2)
    scores = dict(fused)
    assert scores["a"] == scores["b"] == 0.5
    assert [key for key, _ in fused][:2] == ["b", "a"]
    # Equal score and best rank: the earlier first appearance leads.
    fused = reciprocal_rank_fusion([["x", "y"], ["y", "x"]])
    assert fused[0][1] == fused[1][1]
    assert [key for key, _ in fused] == ["x", "y"]
    assert [key for key, _ in reciprocal_rank_fusion([["m"], ["n"]])] == ["m", "n"]
    assert [key for key, _ in reciprocal_rank_fusion([["n"], ["m"]])] == ["n", "m"]


def test_result_does_not_depend_on_input_hash_order():
    rng = random.Random(3)
    keys = [(i % 7, f"row{i}") for i in range(50)]
    rankings = [rng.sample(keys, 30) for _ in range(3)]
    first = reciprocal_rank_fusion(rankings)
    again = reciprocal_rank_fusion([list(r) for r in rankings])
    assert first == again
    assert len(first) == len({key for ranking in rankings for key in ranking})
    scores = [score for _, score in first]
    assert scores == sorted(scores, reverse=True)


def test_a_repeated_key_counts_once_at_its_best_position():
    fused = dict(reciprocal_rank_fusion([["a", "b", "a"]]))
    assert fused == pytest.approx({"a": 1 / 61, "b": 1 / 62})


def test_empty_inputs():
    assert reciprocal_rank_fusion([]) == []
    assert reciprocal_rank_fusion([[], []]) == []


@pytest.mark.parametrize("k", [0, -1, float("nan"), True, "60"])
def test_bad_k_is_refused(k):
    with pytest.raises(ValueError, match="k must be"):
        reciprocal_rank_fusion([["a"]], k=k)


def test_bad_weights_are_refused():
    with pytest.raises(ValueError, match="one weight per ranking"):
        reciprocal_rank_fusion([["a"], ["b"]], weights=[1.0])
    with pytest.raises(ValueError, match="weights must be >= 0"):
        reciprocal_rank_fusion([["a"]], weights=[-1.0])


def _known_item_rankings(seed: int, queries: int, good: float) -> tuple[list[list[int]], list[int]]:
    """Rankings of 200 keys where the relevant key is near the top with probability `good`,
    anywhere (or absent) otherwise."""
    rng = random.Random(seed)
    rankings, relevant = [], []
    for query in range(queries):
        ranking = rng.sample(range(200), 100)
        target = query % 200
        if target in ranking:
            ranking.remove(target)
        if rng.random() < good:
            ranking.insert(rng.randrange(3), target)
        rankings.append(ranking)
        relevant.append(target)
    return rankings, relevant


@pytest.mark.parametrize(("hdc_good", "late_good"), [(0.9, 0.1), (0.1, 0.9), (0.6, 0.6), (0.0, 0.0)])
def test_chosen_weights_are_never_worse_than_hdc_and_never_let_late_lead(hdc_good, late_good):
    hdc, relevant = _known_item_rankings(1, 120, hdc_good)
    late, _ = _known_item_rankings(2, 120, late_good)
    weights = choose_fusion_weights(hdc, late, relevant)
    fused = [[key for key, _ in reciprocal_rank_fusion([h, x], weights=[weights.hdc, weights.late])
              if (weights.hdc and key in h) or (weights.late and key in x)] for h, x in zip(hdc, late, strict=True)]
    assert mrr_at(fused, relevant) >= mrr_at(hdc, relevant)
    assert weights.evidence["queries"] == 120 and len(weights.evidence["mrr"]) == len(WEIGHT_GRID)
    assert weights.late <= weights.hdc / 2
    if hdc_good > late_good:
        assert weights.late == 0.0  # a useless late ranker is switched off
    if late_good > hdc_good:
        assert weights.late > 0.0  # a better one reorders HDC's ranking
    if hdc_good == late_good == 0.0:
        assert (weights.hdc, weights.late) == (1.0, 0.0)  # no evidence either way: HDC alone, the cheapest
    assert FusionWeights.from_dict(weights.to_dict()) == weights


def test_choose_fusion_weights_rejects_mismatched_rankings():
    with pytest.raises(ValueError, match="one ranking per query"):
        choose_fusion_weights([[1]], [[1], [2]], [1])


def test_self_queries_take_a_lead_and_a_span_from_long_enough_texts():
    texts = ["too short", " ".join(f"w{i}" for i in range(40)), " ".join(f"v{i}" for i in range(10))]
    queries = self_queries(texts, seed=3)
    assert [number for number, _ in queries] == [1, 1, 2, 2]
    assert queries[0][1] == " ".join(f"w{i}" for i in range(8))
    span = queries[1][1].split()
    first = int(span[0][1:])
    assert first >= 8 and span == [f"w{i}" for i in range(first, first + 12)]
    # A short text: half of it leads, the rest is the span.
    assert queries[2][1] == "v0 v1 v2 v3 v4" and queries[3][1] == "v5 v6 v7 v8 v9"
    assert self_queries(texts, seed=3) == queries
