"""Fusion: reciprocal rank fusion and the score rules against hand-computed values, the evidence
gate, self-queries, bad arguments."""

from __future__ import annotations

import random

import numpy as np
import pytest

from engine.fusion import (
    CHOSEN_RULES,
    SIGNIFICANCE_Z,
    FusionChoice,
    choose_fusion,
    fuse_scores,
    reciprocal_rank_fusion,
    reciprocal_ranks,
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


def _known_item_scores(seed: int, queries: int, good: float, pool: int = 50) -> tuple[np.ndarray, np.ndarray]:
    """Scores (queries, pool) where the target (position query % pool) tops the pool with
    probability `good` and sits anywhere otherwise."""
    rng = np.random.default_rng(seed)
    scores = rng.random((queries, pool))
    targets = np.arange(queries) % pool
    lucky = rng.random(queries) < good
    scores[np.arange(queries), targets] = np.where(lucky, 2.0, rng.random(queries))
    return scores, targets


@pytest.mark.parametrize(("hdc_good", "late_good"), [(0.9, 0.1), (0.1, 0.9), (0.6, 0.6), (0.0, 0.0)])
def test_the_chosen_rule_is_never_worse_than_hdc_on_its_evidence(hdc_good, late_good):
    hdc, targets = _known_item_scores(1, 120, hdc_good)
    late, _ = _known_item_scores(2, 120, late_good)
    choice = choose_fusion(hdc, late, targets)
    chosen = reciprocal_ranks(fuse_scores(hdc, late, rule=choice.rule), targets).mean()
    assert chosen >= reciprocal_ranks(hdc, targets).mean()
    assert choice.evidence["queries"] == 120 and set(choice.evidence["mrr"]) == set(CHOSEN_RULES)
    if hdc_good > late_good or hdc_good == late_good == 0.0:
        assert choice.rule == "hdc" and not choice.uses_late  # no significant gain: HDC alone, the cheapest
    else:  # a better late ranker, or an independent one as good: fusing finds more
        assert choice.rule != "hdc" and choice.evidence["z"] > SIGNIFICANCE_Z
    assert FusionChoice.from_dict(choice.to_dict()) == choice


def test_a_kind_that_contradicts_the_gain_vetoes_the_rule_and_late_alone_needs_every_kind():
    # 160 queries: on the first 80 ("lead") the late ranker finds every target and HDC half of
    # them; on the last 80 ("heldout") HDC finds all and the late ranker none.
    hdc, targets = _known_item_scores(4, 160, 0.5)
    late, _ = _known_item_scores(5, 160, 1.0)
    hdc[80:, :] = np.random.default_rng(6).random((80, 50))
    hdc[np.arange(80, 160), targets[80:]] = 2.0
    late[np.arange(80, 160), targets[80:]] = -1.0
    kinds = ["lead"] * 80 + ["heldout"] * 80
    one_group = choose_fusion(hdc, late, targets)
    assert one_group.rule not in (
        "hdc",
        "late",
    )  # together: mixing gains, late alone does not win every group
    guarded = choose_fusion(hdc, late, targets, kinds=kinds)
    by_kind = guarded.evidence["mrr_by_kind"]
    assert (
        set(by_kind) == {"lead", "heldout"}
        and by_kind["lead"]["late"] == 1.0
        and by_kind["heldout"]["late"] == 0.0
    )
    # A chosen mix must not lose on the held-out kind significantly.
    if guarded.rule != "hdc":
        assert by_kind["heldout"][guarded.rule] >= by_kind["heldout"]["hdc"] - 0.05
    assert guarded.rule != "late"
    # HDC misleading on every query (a wrong candidate far ahead, the target last) and the late
    # ranker right: late alone beats every mix on every kind, and is chosen.
    misled = np.random.default_rng(7).random((80, 50))
    misled[np.arange(80), (targets[:80] + 1) % 50] = 100.0
    misled[np.arange(80), targets[:80]] = -1.0
    assert (
        choose_fusion(misled, late[:80], targets[:80], kinds=["lead"] * 40 + ["heldout"] * 40).rule == "late"
    )
    with pytest.raises(ValueError, match="one kind per query"):
        choose_fusion(hdc, late, targets, kinds=kinds[:3])


def test_a_small_gain_on_few_queries_is_not_significant():
    hdc, targets = _known_item_scores(3, 12, 0.5)
    late = hdc.copy()
    late[0, targets[0]] = 9.0  # one query better, eleven the same
    assert choose_fusion(hdc, late, targets).rule == "hdc"


def test_the_fallback_holds_where_the_evidence_shows_no_significant_difference_either_way():
    hdc, targets = _known_item_scores(3, 12, 0.5)
    late = hdc.copy()
    late[0, targets[0]] = 9.0  # as above: one query better, not significant
    choice = choose_fusion(hdc, late, targets, fallback="z:1")
    assert choice.rule == "z:1" and choice.evidence["gain"] >= 0 and choice.evidence["z"] < SIGNIFICANCE_Z
    # A late ranker that misleads on every query: at equal weight it loses to HDC alone
    # significantly, so HDC alone is kept whatever the fallback.
    hdc, targets = _known_item_scores(8, 120, 0.9)
    late = np.random.default_rng(9).random(hdc.shape)
    late[np.arange(120), targets] = -1.0
    assert choose_fusion(hdc, late, targets, fallback="z:1").rule == "hdc"
    assert reciprocal_ranks(fuse_scores(hdc, late, rule="z:1"), targets).mean() < \
        reciprocal_ranks(hdc, targets).mean()
    # A significant winner is chosen as before, whatever the fallback.
    late, _ = _known_item_scores(10, 120, 1.0)
    assert choose_fusion(hdc, late, targets, fallback="z:1").rule == choose_fusion(hdc, late, targets).rule
    with pytest.raises(ValueError, match="fallback 'z:3' must be one of the rules"):
        choose_fusion(hdc, late, targets, fallback="z:3")


def test_fuse_scores_rules():
    hdc = np.array([[5.0, 4.0, 3.0, -np.inf]])
    late = np.array([[0.1, np.nan, 0.9, 0.5]])
    assert fuse_scores(hdc, late, rule="hdc").tolist() == [[5.0, 4.0, 3.0, -np.inf]]
    # Late alone: scored candidates by late score, the unscored one after them; never a non-candidate.
    assert np.argsort(-fuse_scores(hdc, late, rule="late")[0])[:3].tolist() == [2, 0, 1]
    # RRF over the pool: HDC ranks 1, 2, 3; late ranks 2, -, 1.
    rrf = fuse_scores(hdc, late, rule="rrf:0.5", k=1)[0]
    assert rrf[:3] == pytest.approx([1 / 2 + 0.5 / 3, 1 / 3, 1 / 4 + 0.5 / 2]) and rrf[3] == -np.inf
    # z: HDC z over (5, 4, 3) is (1.22, 0, -1.22); late over (0.1, 0.9) is (-1, 1), the unscored
    # candidate takes the lowest.
    z = fuse_scores(hdc, late, rule="z:2")[0]
    assert z[:3] == pytest.approx([1.2247 - 2, 0 - 2, -1.2247 + 2], abs=1e-4)
    with pytest.raises(ValueError, match="unknown fusion rule"):
        fuse_scores(hdc, late, rule="rrf:-1")
    with pytest.raises(ValueError, match="one shape"):
        fuse_scores(hdc, late[:, :2], rule="hdc")


def test_legacy_weights_become_rules():
    assert FusionChoice.from_dict({"hdc": 1.0, "late": 0.0}).rule == "hdc"
    assert FusionChoice.from_dict({"hdc": 1.0, "late": 0.5, "evidence": {"queries": 3}}) == \
        FusionChoice("rrf:0.5", {"queries": 3})
    assert FusionChoice.from_dict({"hdc": 0.0, "late": 1.0}).rule == "late"
    with pytest.raises(ValueError, match="unknown fusion rule"):
        FusionChoice("cosine")


def test_reciprocal_ranks_count_ties_against_the_target():
    scores = np.array([[3.0, 3.0, 1.0], [1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])
    assert reciprocal_ranks(scores, np.array([1, 0, -1])).tolist() == [0.5, 1 / 3, 0.0]
    assert reciprocal_ranks(scores, np.array([1, 0, 2]), depth=2).tolist() == [0.5, 0.0, 1.0]


def test_choose_fusion_rejects_mismatched_scores():
    with pytest.raises(ValueError, match="one target per query"):
        choose_fusion(np.zeros((2, 3)), np.zeros((2, 3)), np.zeros(3, dtype=np.int64))


def test_self_queries_of_each_kind():
    texts = ["too short", " ".join(f"w{i}" for i in range(40)), " ".join(f"v{i}" for i in range(10)),
             "First sentence here. The second one is longer than four words. Third sentence closes it!"]
    queries = self_queries(texts, kinds=("lead", "span", "heldout"), seed=3)
    assert [(q.index, q.kind) for q in queries] == [
        (i, kind) for i in (1, 2, 3) for kind in ("lead", "span", "heldout")
    ]
    lead, span, held = queries[:3]
    assert lead.query == " ".join(f"w{i}" for i in range(8)) and lead.rest is None and span.rest is None
    first = int(span.query.split()[0][1:])
    assert first >= 8 and span.query.split() == [f"w{i}" for i in range(first, first + 12)]
    # One sentence: a span of at most half the words is held out, the rest keeps the others in order.
    assert len(held.query.split()) <= 12 and held.query in texts[1]
    assert sorted(held.query.split() + held.rest.split()) == sorted(texts[1].split())
    # A short text: half of it leads, the rest is the span.
    assert queries[3].query == "v0 v1 v2 v3 v4" and queries[4].query == "v5 v6 v7 v8 v9"
    # Several sentences: a whole sentence of 4+ words is held out.
    sentence = queries[8]
    assert sentence.query in ("The second one is longer than four words.", "Third sentence closes it!")
    assert sentence.query not in sentence.rest and sentence.rest.startswith("First sentence here.")
    assert self_queries(texts, kinds=("lead", "span", "heldout"), seed=3) == queries
    assert self_queries(texts, seed=3) == queries  # every kind by default
    with pytest.raises(ValueError, match="unknown self-query kinds"):
        self_queries(texts, kinds=("title",))


def _weighted_evidence(lifted_by_two: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Self-query evidence over pools of 22 in a first stage's order, where RRF at weight 1 and 2
    both beat the order (20 queries whose target it ranks 11th and the late ranker 1st), 100 queries
    every rule but "late" ranks right, and `lifted_by_two` queries that weight 2 ranks first and
    weight 1 second (the target second in the order, first by the late ranker)."""
    rows = []
    for kind, count in (("both", 20), ("order", 100), ("two", lifted_by_two)):
        for _ in range(count):
            late = np.linspace(0.09, 0.0, 22)  # below every row named next
            if kind == "both":
                target = 10
                late[10], late[11:] = 1.0, np.linspace(0.9, 0.5, 11)
            elif kind == "order":
                target = 0
                late[21], late[0] = 1.0, 0.95  # the late ranker's first is the order's last
            else:
                target = 1
                late[1], late[0] = 1.0, 0.95
            rows.append((late, target))
    late = np.array([late for late, _ in rows])
    order = np.tile(-np.arange(22, dtype=np.float64), (len(rows), 1))
    return order, late, np.array([target for _, target in rows])


def test_a_fallback_that_stays_is_left_only_for_a_rule_significantly_better_than_it():
    rules = ("hdc", "rrf:1", "rrf:2", "late")
    order, late, targets = _weighted_evidence(lifted_by_two=2)
    mrr = {rule: reciprocal_ranks(fuse_scores(order, late, rule=rule), targets) for rule in rules}
    # The premises: weight 2 scores highest, both weights beat the order significantly, and weight 2's
    # gain over weight 1 (two queries of 122) is within the noise.
    assert mrr["rrf:2"].mean() > mrr["rrf:1"].mean() > mrr["hdc"].mean() > mrr["late"].mean()
    assert 0 < (mrr["rrf:2"] - mrr["rrf:1"]).sum() == 1.0
    picked = choose_fusion(order, late, targets, rules=rules, fallback="rrf:1")
    assert picked.rule == "rrf:2"  # the highest of the significant ones
    stays = choose_fusion(order, late, targets, rules=rules, fallback="rrf:1", stays=True)
    assert stays.rule == "rrf:1" and stays.evidence["z"] > SIGNIFICANCE_Z
    # Ten such queries: significantly better than the fallback, so it is left.
    order, late, targets = _weighted_evidence(lifted_by_two=10)
    assert choose_fusion(order, late, targets, rules=rules, fallback="rrf:1", stays=True).rule == "rrf:2"
    # A fallback the order beats significantly does not stay: the order is then the rule to beat.
    assert choose_fusion(order, -late, targets, rules=rules, fallback="rrf:1", stays=True).rule == "hdc"


def test_rrf_with_the_late_rankers_own_ranks_gives_nothing_past_its_depth():
    order = -np.arange(4, dtype=np.float64)
    late = np.array([0.1, 0.2, 0.3, 0.4])
    # Among the pool, the late ranker's ranks are 4, 3, 2, 1; among every row it ranks, the order's
    # first is past the depth it was read to and its second is 40th.
    ranks = np.array([np.inf, 40.0, 2.0, 1.0])
    pooled = fuse_scores(order, late, rule="rrf:1")
    whole = fuse_scores(order, late, rule="rrf:1", late_ranks=ranks)
    assert pooled == pytest.approx([1 / 61 + 1 / 64, 1 / 62 + 1 / 63, 1 / 63 + 1 / 62, 1 / 64 + 1 / 61])
    assert whole == pytest.approx([1 / 61, 1 / 62 + 1 / 100, 1 / 63 + 1 / 62, 1 / 64 + 1 / 61])
    assert fuse_scores(order, late, rule="rrf:2", late_ranks=ranks)[1] == pytest.approx(1 / 62 + 2 / 100)
    # The other rules read scores, not ranks.
    for rule in ("hdc", "late", "z:1"):
        assert np.array_equal(fuse_scores(order, late, rule=rule, late_ranks=ranks),
                              fuse_scores(order, late, rule=rule))
    with pytest.raises(ValueError, match="late_ranks must have the scores' shape"):
        fuse_scores(order, late, rule="rrf:1", late_ranks=ranks[:3])
