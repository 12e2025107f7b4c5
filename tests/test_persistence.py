"""Persistence per pipeline (pipeline/persistence.py): LongEval's relative nDCG and recall drop against the reference
period, by hand and against pytrec_eval; on the Trends page and in the weekly review (HTML and page)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
import pytest
import pytrec_eval

from pipeline import contract, report, store
from pipeline.config import AlertsConfig
from pipeline.metrics import evaluate, ranking_from_scores
from pipeline.persistence import persistence, relative_drop
from tests.test_app import fresh_caches, open_app, table, visit  # noqa: F401 (fixtures)

DAYS = ("2026-11-10", "2026-11-11", "2026-11-12", "2026-11-13")  # all in 2026-W46
WEEK = "2026-W46"
RULES = AlertsConfig(reference_runs=2)  # the reference period: the first two runs, Nov 10 and 11
# Per pipeline and question, a value per day in DAYS. dense is the more effective and the less persistent:
#   dense nDCG: reference (1.0 + 1.0 + 0.6 + 0.8) / 4 = 0.85, now (0.9 + 0.6) / 2 = 0.75, RnD = 0.10 / 0.85
#   dense recall: reference (1 + 1 + .5 + .5) / 4 = 0.75, now (.5 + .5) / 2 = 0.5, RrD = 0.25 / 0.75 = 1/3
#   bm25 nDCG: 0.6 throughout, RnD = 0; bm25 recall: reference 0.75, now 1.0, RrD = -0.25 / 0.75 = -1/3
# Nov 12 (0.2 everywhere for dense) is neither the reference nor the latest run: it moves nothing.
NDCG = {"dense": {"q1": (1.0, 1.0, 0.2, 0.9), "q2": (0.6, 0.8, 0.2, 0.6)},
        "bm25": {"q1": (0.7, 0.7, 0.7, 0.7), "q2": (0.5, 0.5, 0.5, 0.5)}}
RECALL = {"dense": {"q1": (1.0, 1.0, 0.0, 0.5), "q2": (0.5, 0.5, 0.0, 0.5)},
          "bm25": {"q1": (1.0, 1.0, 1.0, 1.0), "q2": (0.5, 0.5, 0.5, 1.0)}}


def row(day: str, pipeline: str, question: str, ndcg: float, recall: float, k: int = 5) -> dict:
    return {"run_date": day, "pipeline": pipeline, "k": k, "question_id": question, "hit": float(recall > 0),
            "recall": recall, "precision": recall / k, "rr": 1.0, "ndcg": ndcg, "unjudged": 0.0,
            "first_relevant_rank": 1, "top1_score": 1.0, "retrieved": "d1", "gold_missing": 0}


def hand_rows() -> list[dict]:
    return [row(day, p, q, NDCG[p][q][i], RECALL[p][q][i]) for p in NDCG for q in NDCG[p] for i, day in enumerate(DAYS)]


def frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows).assign(run_date=lambda f: pd.to_datetime(f["run_date"]))


def test_relative_drop_is_longevals():
    assert relative_drop(0.8, 0.6) == pytest.approx(0.25)  # a quarter lost
    assert relative_drop(0.5, 0.6) == pytest.approx(-0.2)  # a gain is a negative drop
    assert relative_drop(0.7, 0.7) == 0.0 and math.isnan(relative_drop(0.0, 0.3))  # nothing to lose: undefined


def test_persistence_by_hand():
    result = persistence(frame(hand_rows()), RULES)
    assert (result.k, str(result.latest), [str(d) for d in result.reference]) == (5, DAYS[3], list(DAYS[:2]))
    dense, bm25 = result.pipelines  # in order of effectiveness
    assert (dense.pipeline, bm25.pipeline) == ("dense", "bm25")
    assert dense.levels["ndcg"].now == pytest.approx((0.9 + 0.6) / 2)
    assert dense.levels["ndcg"].reference == pytest.approx((1.0 + 1.0 + 0.6 + 0.8) / 4)
    assert dense.levels["ndcg"].drop == pytest.approx(0.10 / 0.85)
    assert dense.levels["recall"].drop == pytest.approx(0.25 / 0.75)
    assert bm25.levels["ndcg"].drop == pytest.approx(0.0, abs=1e-12)
    assert bm25.levels["recall"].drop == pytest.approx(-0.25 / 0.75)
    # The most effective is not the steadiest.
    assert (dense.effectiveness_rank, dense.persistence_rank) == (1, 2)
    assert (bm25.effectiveness_rank, bm25.persistence_rank) == (2, 1)
    assert dense.n_questions == bm25.n_questions == 2
    table_ = result.table()
    assert table_["ndcg_drop"].tolist() == pytest.approx([0.10 / 0.85, 0.0])
    assert result.reference_label() == "the reference period (2 runs, 2026-11-10 to 2026-11-11)"


def test_a_question_added_after_the_reference_moves_neither_level():
    added = [row(day, "dense", "q3", 0.0, 0.0) for day in DAYS[2:]]  # new in the gold set on Nov 12, never found
    dense = next(p for p in persistence(frame(hand_rows() + added), RULES).pipelines if p.pipeline == "dense")
    assert dense.n_questions == 2 and dense.levels["ndcg"].now == pytest.approx(0.75)


def test_the_reference_period_is_the_slow_drift_rules_pinned_one_and_today_cuts_the_history():
    # Pinned from Nov 11: reference Nov 11 and 12 (dense nDCG (1.0 + 0.2 + 0.8 + 0.2) / 4 = 0.55), now Nov 13 (0.75).
    pinned = persistence(frame(hand_rows()), AlertsConfig(reference_runs=2, reference_start="2026-11-11"))
    dense = pinned.pipelines[0]
    assert [str(d) for d in pinned.reference] == list(DAYS[1:3])
    assert dense.levels["ndcg"].reference == pytest.approx(0.55)
    assert dense.levels["ndcg"].drop == pytest.approx((0.55 - 0.75) / 0.55)
    # Up to Nov 12: that run is the latest (dense nDCG 0.2: (0.85 - 0.2) / 0.85).
    earlier = persistence(frame(hand_rows()), RULES, today=pd.Timestamp(DAYS[2]).date())
    assert str(earlier.latest) == DAYS[2]
    assert earlier.pipelines[0].pipeline == "bm25"  # 0.6 against dense's 0.2
    assert next(p for p in earlier.pipelines if p.pipeline == "dense").levels["ndcg"].drop == pytest.approx(0.65 / 0.85)


@pytest.mark.parametrize("rows, runs", [(hand_rows()[:0], 0), ([r for r in hand_rows() if r["run_date"] <= DAYS[1]], 2),
                                        ([r for r in hand_rows() if r["run_date"] == DAYS[0]], 1)])
def test_no_persistence_until_the_reference_is_complete_and_a_run_follows(rows, runs):
    result = persistence(frame(rows) if rows else store._empty(contract.PER_QUESTION), RULES)
    assert not result.ready and result.pipelines == ()
    assert "No persistence yet" in result.waiting()


def test_persistence_matches_pytrec_eval_on_a_run_pair():
    """A reference run and a later one, scored by pipeline.metrics into per_question rows; RnD and RrD equal those
    of the means pytrec_eval (trec_eval's ndcg_cut.5 and recall.5) computes from the same runs."""
    qrels = {"q1": {"a": 1, "b": 1, "c": 0}, "q2": {"d": 1}, "q3": {"e": 1, "f": 1, "g": 1}}
    runs = {  # doc -> score, per question; the later run pushes gold documents down or out
        "2026-11-10": {"q1": {"a": 3, "x": 2, "b": 1}, "q2": {"d": 2, "y": 1}, "q3": {"e": 4, "f": 3, "z": 2, "g": 1}},
        "2026-11-11": {"q1": {"x": 3, "y": 2, "a": 1}, "q2": {"y": 2, "d": 1},
                       "q3": {"z": 6, "w": 5, "v": 4, "u": 3, "e": 2, "f": 1}},
    }
    rows, expected = [], {}
    for day, run in runs.items():
        qids = list(qrels)
        scored = evaluate([ranking_from_scores(run[q]) for q in qids], [qrels[q] for q in qids], [5])
        rows += [row(day, "hybrid", q, scored.values[5]["ndcg"][i], scored.values[5]["recall"][i])
                 for i, q in enumerate(qids)]
        trec = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.5", "recall.5"}).evaluate(run)
        expected[day] = {m: sum(trec[q][m] for q in qids) / len(qids) for m in ("ndcg_cut_5", "recall_5")}
    result = persistence(frame(rows), AlertsConfig(reference_runs=1)).pipelines[0]
    before, after = expected["2026-11-10"], expected["2026-11-11"]
    assert result.levels["ndcg"].drop == pytest.approx((before["ndcg_cut_5"] - after["ndcg_cut_5"]) / before["ndcg_cut_5"])
    assert result.levels["recall"].drop == pytest.approx((before["recall_5"] - after["recall_5"]) / before["recall_5"])
    # By hand: recall@5 is 1 for every question on Nov 10; on Nov 11 q1 1/2 (b fell out), q2 1, q3 1/3 (e only).
    assert result.levels["recall"].drop == pytest.approx((1 - (1 / 2 + 1 + 1 / 3) / 3) / 1)
    assert 0 < result.levels["ndcg"].drop < 1


def write_store(data_dir: Path) -> None:
    """hand_rows as a store: per_question.csv, its means in metrics.csv, a runs.csv row per day, no alerts."""
    rows = hand_rows()
    for day in DAYS:
        today = [r for r in rows if r["run_date"] == day]
        store.replace_date(data_dir, contract.PER_QUESTION, day, today)
        means = pd.DataFrame(today).groupby("pipeline", sort=False)[["hit", "recall", "precision", "rr", "ndcg",
                                                                      "unjudged"]].mean()
        store.replace_date(data_dir, contract.METRICS, day, [
            {"run_date": day, "pipeline": p, "k": 5, "metric": "mrr" if column == "rr" else column, "value": value,
             "n_questions": 2} for p, values in means.iterrows() for column, value in values.items()])
        store.replace_date(data_dir, contract.RUNS, day, [{
            "run_date": day, "run_id": "r", "started_at": "", "finished_at": "", "status": "ok", "feeds_ok": 1,
            "feeds_failed": 0, "docs_new": 1, "docs_updated": 0, "docs_deleted": 0, "docs_total": 5,
            "chunks_total": 5, "chunks_embedded": 1, "seconds": 1.0, "model": "m", "config_hash": "h", "events": ""}])
        store.replace_date(data_dir, contract.ALERTS, day, [])


@pytest.fixture
def hand_store(tmp_path) -> tuple[Path, Path]:
    data_dir = tmp_path / "store"
    write_store(data_dir)
    config = tmp_path / "monitor.toml"
    config.write_text(f'data_dir = "{data_dir}"\ngold = "gold.jsonl"\n\n[alerts]\nreference_runs = 2\n')
    return data_dir, config


def cells(html: str, section: str) -> list[list[str]]:
    """The body cells of the first table after heading `section`."""
    part = html.split(f"<h2>{section}</h2>", 1)[1].split("<h2>", 1)[0]
    body = part.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    return [re.findall(r"<td[^>]*>(.*?)</td>", tr) for tr in body.split("</tr>") if "<td" in tr]


def test_the_weekly_review_ranks_the_pipelines_by_effectiveness_and_by_persistence(hand_store, monkeypatch):
    data_dir, config = hand_store
    monkeypatch.setenv("DRIFTWATCH_CONFIG", str(config))
    page = report.weekly_review_html(data_dir, WEEK)
    assert "the reference period (2 runs, 2026-11-10 to 2026-11-11)" in page
    rows = cells(page, "Persistence")
    # pipeline, rank by effectiveness, rank by persistence, then nDCG@5 now / reference / drop, recall@5 alike
    assert rows == [["dense", "1", "2", "0.750", "0.850", f"{100 * 0.10 / 0.85:+.1f}%", "0.500", "0.750", "+33.3%"],
                    ["bm25", "2", "1", "0.600", "0.600", "+0.0%", "1.000", "0.750", "-33.3%"]]


def test_the_weekly_review_says_when_the_reference_is_not_complete(hand_store, monkeypatch):
    data_dir, _ = hand_store
    monkeypatch.delenv("DRIFTWATCH_CONFIG", raising=False)  # the default reference period: 20 runs
    monkeypatch.chdir(data_dir)  # no monitor.toml here
    page = report.weekly_review_html(data_dir, WEEK)
    assert "No persistence yet: it needs the reference period (the first 20 runs: not complete yet)" in page


@pytest.mark.parametrize("page, key", [("pages/trends.py", "trends_persistence"),
                                       ("pages/weekly.py", "weekly_persistence")])
def test_trends_and_the_weekly_page_show_the_persistence(hand_store, open_app, page, key):  # noqa: F811 (fixture)
    data_dir, config = hand_store
    at = visit(open_app(data_dir, config=config), page)
    shown = table(at, key)
    assert shown["pipeline"].tolist() == ["dense", "bm25"]
    assert shown["rank by effectiveness"].tolist() == [1, 2] and shown["rank by persistence"].tolist() == [2, 1]
    assert shown["nDCG@5 now"].tolist() == pytest.approx([0.75, 0.6])
    assert shown["nDCG@5 reference"].tolist() == pytest.approx([0.85, 0.6])
    assert shown["relative nDCG drop (%)"].tolist() == pytest.approx([100 * 0.10 / 0.85, 0.0], abs=1e-9)
    assert shown["relative recall drop (%)"].tolist() == pytest.approx([100 / 3, -100 / 3])
    captions = " ".join(c.value for c in at.caption)
    assert "2026\\-11\\-10 to 2026\\-11\\-11" in captions and "LongEval" in captions
