"""Tests for pipeline.metrics: worked examples, edge cases, vectorised vs scalar, differential against pytrec_eval."""

from __future__ import annotations

import math

import numpy as np
import pytest
import pytrec_eval

from pipeline.metrics import (
    MEAN_NAMES,
    METRICS,
    NO_RELEVANT_RANK,
    RELEVANCE_METRICS,
    evaluate,
    first_relevant_rank,
    hit_at_k,
    ndcg_at_k,
    num_relevant,
    precision_at_k,
    ranking_from_scores,
    recall_at_k,
    reciprocal_rank,
    unjudged_at_k,
)

SCALAR = {
    "hit": hit_at_k,
    "recall": recall_at_k,
    "precision": precision_at_k,
    "rr": reciprocal_rank,
    "ndcg": ndcg_at_k,
    "unjudged": unjudged_at_k,
}
BINARY = {"d2": 1, "d4": 1, "d5": 1}


def test_names_are_consistent():
    assert set(SCALAR) == set(METRICS) == set(MEAN_NAMES)
    assert set(evaluate([["d1"]], [BINARY], [1]).values[1]) == set(METRICS)


# The issue quoted recall@1/3/5 = 1/3, 2/3, 1 for d1,d2,d5,d3,d4, but d1 is not relevant, so recall@1 is 0
# there; 1/3, 2/3, 1 holds for d2,d1,d5,d3,d4.
@pytest.mark.parametrize(
    ("ranking", "expected"),
    [
        (["d1", "d2", "d5", "d3", "d4"], {1: 0 / 3, 3: 2 / 3, 5: 3 / 3}),
        (["d2", "d1", "d5", "d3", "d4"], {1: 1 / 3, 3: 2 / 3, 5: 3 / 3}),
    ],
)
def test_recall_worked_example(ranking, expected):
    assert {k: recall_at_k(ranking, BINARY, k) for k in expected} == expected


def test_precision_hit_rr_worked_example():
    ranking = ["d1", "d2", "d5", "d3", "d4"]
    assert [precision_at_k(ranking, BINARY, k) for k in (1, 3, 5)] == [0 / 1, 2 / 3, 3 / 5]
    assert [hit_at_k(ranking, BINARY, k) for k in (1, 3)] == [0.0, 1.0]
    assert [reciprocal_rank(ranking, BINARY, k) for k in (1, 2)] == [0.0, 1 / 2]
    assert reciprocal_rank(ranking, BINARY) == 1 / 2


def test_mrr_of_first_hits_at_ranks_2_1_4():
    rankings = [["d1", "d2"], ["d2", "d1"], ["d1", "d3", "d6", "d4"]]
    evaluation = evaluate(rankings, [BINARY] * 3, [10])
    assert evaluation.first_relevant_rank.tolist() == [2, 1, 4]
    assert evaluation.mean("rr", 10) == ((1 / 2 + 1 + 1 / 4) / 3, 3)
    assert round(evaluation.mean("rr", 10).value, 4) == 0.5833


def test_graded_ndcg_worked_example():
    ranking = ["a", "b", "c", "d"]
    qrels = {"a": 2, "b": 0, "c": 1, "d": 2}
    # gains 2^g - 1 = 3, 0, 1, 3 at discounts log2(2..5); ideal order of grades 2, 2, 1
    expected = (3 + 0 + 1 / 2 + 3 / math.log2(5)) / (3 + 3 / math.log2(3) + 1 / 2)
    assert ndcg_at_k(ranking, qrels, 4) == pytest.approx(expected, rel=1e-12)
    assert round(expected, 3) == 0.889
    assert ndcg_at_k(["a", "d", "c"], qrels, 3) == 1.0


def test_k_larger_than_ranking():
    ranking, qrels = ["d1", "d2"], {"d2": 1}
    assert precision_at_k(ranking, qrels, 5) == 1 / 5  # trec_eval divides by k, not by what was retrieved
    assert recall_at_k(ranking, qrels, 5) == 1 / 1
    assert unjudged_at_k(ranking, qrels, 5) == 1 / 2  # d1 unjudged, out of the 2 retrieved
    assert ndcg_at_k(ranking, qrels, 5) == (1 / math.log2(3)) / 1


def test_empty_ranking():
    for name, metric in SCALAR.items():
        assert metric([], BINARY, 3) == 0.0, name
    assert first_relevant_rank([], BINARY) == NO_RELEVANT_RANK == 0


@pytest.mark.parametrize("qrels", [{}, {"d1": 0, "d2": 0}], ids=["empty", "all-grade-0"])
def test_question_without_relevant_docs_is_undefined(qrels):
    ranking = ["d1", "d3"]
    for name in RELEVANCE_METRICS:
        assert math.isnan(SCALAR[name](ranking, qrels, 2)), name
    assert unjudged_at_k(ranking, qrels, 2) == (2 if not qrels else 1) / 2

    evaluation = evaluate([ranking, ["d2", "d1"]], [qrels, BINARY], [2])
    for name in RELEVANCE_METRICS:
        assert math.isnan(evaluation.values[2][name][0]), name
    assert evaluation.mean("recall", 2) == (1 / 3, 1)  # only the second question enters the mean
    assert evaluation.mean("unjudged", 2).count == 2


def test_mean_of_nothing_is_nan_with_count_zero():
    value, count = evaluate([["d1"]], [{}], [1]).mean("hit", 1)
    assert math.isnan(value) and count == 0


def test_grade_0_counts_as_judged():
    assert unjudged_at_k(["d1", "d2", "d3"], {"d1": 0, "d2": 1}, 3) == 1 / 3


def test_relevant_doc_never_retrieved_counts():
    ranking, qrels = ["d1", "d2"], {"d1": 1, "missing": 3}
    assert recall_at_k(ranking, qrels, 2) == 1 / 2
    assert ndcg_at_k(ranking, qrels, 2) == (1 / 1) / (7 / 1 + 1 / math.log2(3))


def test_first_relevant_rank_looks_past_the_cutoff():
    ranking = [f"n{i}" for i in range(6)] + ["d2"]
    assert first_relevant_rank(ranking, BINARY) == 7
    assert reciprocal_rank(ranking, BINARY, 5) == 0.0
    assert reciprocal_rank(ranking, BINARY) == 1 / 7
    assert evaluate([ranking], [BINARY], [5]).first_relevant_rank.tolist() == [7]


@pytest.mark.parametrize("k", [0, -1, 1.5, True, "3", None])
def test_bad_k_raises(k):
    with pytest.raises(ValueError, match="positive int"):
        recall_at_k(["d1"], BINARY, k)
    with pytest.raises(ValueError, match="positive int"):
        evaluate([["d1"]], [BINARY], [k])


def test_evaluate_rejects_bad_input():
    with pytest.raises(ValueError, match="1 rankings but 2 qrels"):
        evaluate([["d1"]], [BINARY, BINARY], [1])
    with pytest.raises(ValueError, match="at least one cutoff"):
        evaluate([["d1"]], [BINARY], [])
    evaluation = evaluate([["d1"]], [BINARY], [1])
    with pytest.raises(ValueError, match="valid: hit, recall, precision, rr, ndcg, unjudged"):
        evaluation.mean("map", 1)
    with pytest.raises(ValueError, match="not evaluated"):
        evaluation.mean("hit", 3)


def test_ranking_from_scores_breaks_ties_by_doc_id_descending():
    scores = {"a": 1.0, "b": 2.0, "c": 1.0, "d10": 1.0, "d9": 1.0}
    assert ranking_from_scores(scores) == ["b", "d9", "d10", "c", "a"]  # "d9" > "d10" as strings


def test_ranking_from_scores_ties_scores_equal_in_single_precision():
    # 1 + 1e-9 and 1 are the same 32-bit float, the precision trec_eval keeps, so the doc ids decide
    assert ranking_from_scores({"a": 1 + 1e-9, "b": 1.0}) == ["b", "a"]


def random_questions(seed: int, n: int) -> tuple[list[dict[str, float]], list[dict[str, int]]]:
    """Runs with many score ties and graded qrels, some without relevant docs.

    Scores lie on a grid of 5, some nudged by 1e-9: distinct as doubles, tied as trec_eval's 32-bit floats.
    """
    rng = np.random.default_rng(seed)
    docs = [f"d{i}" for i in range(60)]
    runs, qrels = [], []
    for _ in range(n):
        retrieved = rng.choice(docs, size=rng.integers(0, 41), replace=False)
        runs.append({doc: float(1 + rng.integers(0, 5) / 2 + rng.integers(0, 2) * 1e-9) for doc in retrieved})
        never_retrieved = [f"x{i}" for i in range(rng.integers(3))]
        judged = [*rng.choice(docs, size=rng.integers(0, 12), replace=False), *never_retrieved]
        # grade 0 is frequent, so some questions have no relevant doc
        qrels.append({doc: int(rng.choice(4, p=[0.6, 0.2, 0.1, 0.1])) for doc in judged})
    return runs, qrels


def test_evaluate_equals_scalar_functions():
    runs, qrels = random_questions(seed=1, n=200)
    rankings = [ranking_from_scores(run) for run in runs]
    ks = (1, 2, 5, 10, 30)  # rankings reach 40, so some first relevant ranks lie beyond the largest k
    evaluation = evaluate(rankings, qrels, ks)
    assert evaluation.first_relevant_rank.tolist() == [first_relevant_rank(r, q) for r, q in zip(rankings, qrels)]
    assert evaluation.num_relevant.tolist() == [num_relevant(q) for q in qrels]
    # Python >= 3.12 sums floats with compensation, so the scalar nDCG may differ from the cumsum in the last bits.
    tolerance = {"ndcg": 1e-14}
    for k in ks:
        for name, metric in SCALAR.items():
            expected = [metric(r, q, k) for r, q in zip(rankings, qrels)]
            np.testing.assert_allclose(evaluation.values[k][name], expected, rtol=tolerance.get(name, 0), atol=0)


def test_differential_against_pytrec_eval():
    runs, qrels = random_questions(seed=2, n=300)
    rankings = [ranking_from_scores(run) for run in runs]
    ks = (1, 3, 5, 10, 50)
    evaluation = evaluate(rankings, qrels, ks)
    qids = [f"q{i}" for i in range(len(runs))]
    # trec_eval's gain is the qrel value itself, so hand it 2^grade - 1 (>= 1 exactly when grade >= 1)
    gains = {qid: {doc: 2**grade - 1 for doc, grade in q.items()} for qid, q in zip(qids, qrels)}
    cutoffs = ",".join(map(str, ks))
    measures = {f"{measure}.{cutoffs}" for measure in ("success", "recall", "P", "ndcg_cut")}
    results = pytrec_eval.RelevanceEvaluator(gains, measures).evaluate(dict(zip(qids, runs)))
    # MRR@k: trec_eval's recip_rank has no cutoff, so it gets each run truncated to its top k
    rr_evaluator = pytrec_eval.RelevanceEvaluator(gains, {"recip_rank"})
    truncated = {
        k: rr_evaluator.evaluate({qid: {doc: run[doc] for doc in r[:k]} for qid, run, r in zip(qids, runs, rankings)})
        for k in ks
    }
    names = {"hit": "success_{k}", "recall": "recall_{k}", "precision": "P_{k}", "ndcg": "ndcg_cut_{k}"}

    defined = evaluation.num_relevant > 0
    assert 0 < defined.sum() < len(qids)
    for i, qid in enumerate(qids):
        if not defined[i]:
            # trec_eval drops a question with empty qrels and scores one with only grade-0 docs as 0; we say NaN
            assert qid not in results if not qrels[i] else all(v == 0 for v in results[qid].values())
            assert all(math.isnan(evaluation.values[k][name][i]) for k in ks for name in RELEVANCE_METRICS)
            continue
        for k in ks:
            for name, measure in names.items():
                assert evaluation.values[k][name][i] == pytest.approx(results[qid][measure.format(k=k)], abs=1e-9)
            assert evaluation.values[k]["rr"][i] == pytest.approx(truncated[k][qid]["recip_rank"], abs=1e-9)
