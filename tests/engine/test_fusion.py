"""reciprocal_rank_fusion against hand-computed scores, tie-breaks and bad arguments."""

from __future__ import annotations

import random

import pytest

from engine.fusion import reciprocal_rank_fusion


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
