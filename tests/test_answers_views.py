"""The Answers page's derived tables (pipeline/views/answers.py) on constructed rows read back through the real
store, expected values written out by hand. No Streamlit."""

from __future__ import annotations

import math
from datetime import date

import pandas as pd
import pytest

from pipeline import contract, store
from pipeline.answers import Label
from pipeline.views import answers as answers_views
from tests.test_views import stored

D1, D2 = "2026-11-02", "2026-11-03"


def answer(day, qid, layer, gold=1, pipeline="logged", **scores) -> dict:
    return {"run_date": day, "pipeline": pipeline, "question_id": qid, "gold_in_context": gold, "layer": layer,
            "faithfulness_state": "not_judged", "refusal": 0, **scores}


@pytest.fixture
def per_answer(tmp_path) -> pd.DataFrame:
    return stored(tmp_path, contract.PER_ANSWER, [
        answer(D1, "q1", "both_fine", k_precision=0.9),
        answer(D1, "q2", "retrieval_miss", gold=0, unsupported=store.join_ids(["4,000", "CVK 9"])),
        answer(D1, "q3", "", gold=""),  # no gold known for q3: not in the share
        answer(D1, "q4", "both_fine"),
        answer(D2, "q1", "generation_miss", citations_invalid="pol-021"),
        answer(D2, "q2", "retrieval_miss", gold=0),
        answer(D2, "q1", "both_fine", pipeline="hybrid"),
    ])


def test_retrieval_layer_is_hit_at_k_and_the_share_of_contexts_holding_gold(tmp_path, per_answer):
    metrics = stored(tmp_path, contract.METRICS, [
        {"run_date": d, "pipeline": p, "k": k, "metric": m, "value": v, "n_questions": 2}
        for d, p, k, m, v in [(D1, "hybrid", 5, "hit", 0.8), (D2, "hybrid", 5, "hit", 0.6),
                              (D1, "hybrid", 3, "hit", 0.5), (D1, "dense", 5, "hit", 0.1),
                              (D1, "hybrid", 5, "recall", 0.2)]])
    frame = answers_views.retrieval_layer(metrics, per_answer, "hybrid", 5, "logged")
    by = {(s, d.strftime("%Y-%m-%d")): v for s, d, v in zip(frame["series"], frame["run_date"], frame["value"])}
    assert by == {("hit@5 (hybrid)", D1): 0.8, ("hit@5 (hybrid)", D2): 0.6,
                  ("gold in the answers' context (logged)", D1): (1 + 0 + 1) / 3,  # q3's unknown gold left out
                  ("gold in the answers' context (logged)", D2): (1 + 0) / 2}
    assert answers_views.retrieval_layer(metrics, per_answer, None, 5, None).empty


def test_generation_layer_draws_defined_values_in_its_order_and_leaves_undefined_runs_out(tmp_path):
    generation = stored(tmp_path, contract.GENERATION, [
        {"run_date": D1, "pipeline": "logged", "source": "heuristic", "metric": "k_precision", "value": 0.8, "n": 20,
         "undetermined": 0},
        {"run_date": D1, "pipeline": "logged", "source": "judge", "metric": "faithfulness", "value": 0.7, "n": 20,
         "undetermined": 3},
        {"run_date": D2, "pipeline": "logged", "source": "judge", "metric": "faithfulness", "value": "", "n": 20,
         "undetermined": 20},
        {"run_date": D1, "pipeline": "hybrid", "source": "heuristic", "metric": "k_precision", "value": 0.1, "n": 20,
         "undetermined": 0},
        {"run_date": D1, "pipeline": "logged", "source": "heuristic", "metric": "retrieval_miss", "value": 0.2,
         "n": 20, "undetermined": 0},
    ])
    frame = answers_views.generation_layer(generation, "logged")
    assert list(zip(frame["series"], frame["value"])) == [("faithfulness (judge)", 0.7),  # GENERATION_SERIES' order
                                                          ("K-precision (heuristic)", 0.8)]
    summary = answers_views.run_summary(generation, date.fromisoformat(D2), "logged")
    assert summary.to_dict("records")[0]["undetermined"] == 20 and math.isnan(summary["value"][0])


def test_attribution_puts_misses_first_and_decodes_the_unsupported_ids(per_answer):
    table = answers_views.attribution(per_answer, date.fromisoformat(D1), "logged", {"q1": "Who?"})
    assert table[["question_id", "question", "layer"]].values.tolist() == [
        ["q2", "", "retrieval miss"], ["q1", "Who?", "both fine"], ["q4", "", "both fine"], ["q3", "", "unknown"]]
    assert table["unsupported"][0] == "4,000, CVK 9"  # an id with a space survives the round trip
    assert answers_views.layer_counts(table) == {"retrieval miss": 1, "generation miss": 0, "both fine": 2,
                                                 "unknown": 1}
    later = answers_views.attribution(per_answer, date.fromisoformat(D2), "logged")
    assert later[["question_id", "layer", "citations_invalid"]].values.tolist() == [
        ["q2", "retrieval miss", ""], ["q1", "generation miss", "pol-021"]]


RECORD = {"question_id": "q1", "run_date": D1, "question": "How much?", "answer": "CVK 5 [d1] [d9]",
          "contexts": [{"id": "d1", "text": "CVK 4"}, {"id": "d2", "text": "other"}], "citations": ["d1", "d9"],
          "claims": [], "unsupported": ["CVK 5"], "citations_invalid": ["d9"], "layer": "generation_miss",
          "k_precision": 0.5, "faithfulness": None}
LABELS = [Label("q1", D1, "faithfulness", "", "unfaithful", "5 for 4"),
          Label("q1", D1, "faithfulness", "It costs CVK 5", "contradicted", ""),
          Label("q1", D1, "faithfulness", "It is sourced", "supported", ""),
          Label("q1", D2, "faithfulness", "Another day's claim", "supported", ""),
          Label("q1", "", "refusal", "", "answer", ""),  # undated: every run date
          Label("q2", D1, "refusal", "", "refusal", "")]


def test_an_answer_without_judge_claims_shows_the_humans_claims_worst_first():
    view = answers_views.answer_view(RECORD, gold=["d2"], labels=LABELS)
    assert view.claims_by == "human"
    assert [(c.claim, c.verdict) for c in view.claims] == [("It costs CVK 5", "contradicted"),
                                                           ("It is sourced", "supported")]
    assert view.human == {"faithfulness": "unfaithful (5 for 4)", "refusal": "answer"}
    assert view.contexts[["rank", "doc_id", "gold", "cited"]].values.tolist() == [[1, "d1", False, True],
                                                                                 [2, "d2", True, False]]
    assert view.unsupported == ("CVK 5",) and view.citations_invalid == ("d9",)
    scores = dict(answers_views.scores_table(view).values.tolist())
    assert scores["k_precision"] == "0.500" and scores["faithfulness"] == "–" and scores["layer"] == "generation_miss"


def test_the_judges_claims_win_over_the_humans_and_are_ordered_by_verdict():
    claims = [{"claim": "a", "verdict": "supported", "reason": "r1"},
              {"claim": "b", "verdict": "undetermined", "reason": "r2"},
              {"claim": "c", "verdict": "contradicted", "reason": "r3"}]
    view = answers_views.answer_view({**RECORD, "claims": claims}, labels=LABELS)
    assert view.claims_by == "judge" and [c.claim for c in view.claims] == ["c", "b", "a"]
    assert answers_views.answer_view({**RECORD, "question_id": "q9"}, labels=LABELS).claims_by == ""


def agreement_row(day, metric, judge, kappa, trusted, tp=3, fp=1, fn=2, tn=4, level="answer") -> dict:
    return {"run_date": day, "metric": metric, "judge": judge, "level": level, "n": tp + fp + fn + tn,
            "agreement": (tp + tn) / (tp + fp + fn + tn), "kappa": kappa, "tpr": tp / (tp + fn), "fpr": fp / (fp + tn),
            "tp": tp, "fp": fp, "fn": fn, "tn": tn, "trusted": trusted, "labels_file": "labels.csv"}


def test_the_agreement_table_keeps_the_latest_row_per_metric_judge_and_level(tmp_path):
    frame = stored(tmp_path, contract.AGREEMENT, [
        agreement_row(D1, "faithfulness", "heuristic", 0.7, 1), agreement_row(D2, "faithfulness", "heuristic", 0.5, 0),
        agreement_row(D1, "faithfulness", "m", 0.8, 1), agreement_row(D2, "faithfulness", "m", 0.4, 0),
        agreement_row(D2, "faithfulness", "m", "", 0, level="claim"), agreement_row(D2, "refusal", "m", 0.9, 1)])
    first = answers_views.agreement_table(frame, date.fromisoformat(D1))
    assert first[["judge", "kappa"]].values.tolist() == [["heuristic", 0.7], ["m", 0.8]]
    latest = answers_views.agreement_table(frame)
    assert latest[["metric", "judge", "level"]].values.tolist() == [
        ["faithfulness", "heuristic", "answer"], ["faithfulness", "m", "answer"], ["faithfulness", "m", "claim"],
        ["refusal", "m", "answer"]]
    assert answers_views.trust_notes(latest, 0.6) == [
        ("faithfulness by heuristic (answer level, 10 labels): kappa 0.50 is below generation.min_kappa (0.6); "
         "read the heuristic's values as hints, not verdicts."),
        ("faithfulness by m (answer level, 10 labels): kappa 0.40 is below generation.min_kappa (0.6): recorded, "
         "cannot alert or fail the gate."),
        ("faithfulness by m (claim level, 10 labels): kappa undefined (one label only) is below "
         "generation.min_kappa (0.6): recorded, cannot alert or fail the gate.")]
    matrix = answers_views.confusion(latest.iloc[0])
    assert matrix.values.tolist() == [["flagged", 3, 2], ["passed", 1, 4]]  # rows human, columns the heuristic
