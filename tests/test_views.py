"""The dashboard's derived tables (pipeline/views.py): constructed frames whose expected values are obvious, frames
read back through the real store, a real corpus in a temporary directory. No Streamlit."""

from __future__ import annotations

import math
from datetime import date, datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline.config import DriftConfig
from pipeline import contract, series, store, views
from pipeline.views import alerts as alerts_views
from pipeline.views import drift as drift_views
from pipeline.views import overview as overview_views
from pipeline.views import questions as questions_views
from pipeline.views import simulate as simulate_views
from pipeline.views import trends as trends_views
from pipeline.views import weekly as weekly_views
from pipeline.config import AlertsConfig, ChunkingConfig, Config, load_config, to_toml
from pipeline.corpus import Corpus, text_hash
from pipeline.metrics import REGISTRY
from pipeline.embeddings import Embedder
from pipeline.sources import Document

D1, D2, D3, D4, D5 = "2026-11-02", "2026-11-03", "2026-11-04", "2026-11-05", "2026-11-06"


def stored(tmp_path: Path, name: str, rows: list[dict]) -> pd.DataFrame:
    """`rows` written through the store and read back, so the frame has the readers' real dtypes."""
    folder = tmp_path / name.removesuffix(".csv")
    full = [{c: r.get(c, "") for c in contract.SCHEMAS[name]} for r in rows]
    for day in sorted({r["run_date"] for r in full}):
        store.replace_date(folder, name, day, [r for r in full if r["run_date"] == day])
    return store.read(folder, name)


def metric(day, value, pipeline="p", name="recall", k=5):
    return {"run_date": day, "pipeline": pipeline, "k": k, "metric": name, "value": value, "n_questions": 3}


def alert(day, pipeline="p", series="recall@5", severity="alert", rule="drop", message="fell", value=0.5):
    return {"run_date": day, "rule": rule, "pipeline": pipeline, "metric": series, "value": value, "baseline": 0.6,
            "change_pct": -10.0, "threshold": 10.0, "severity": severity, "message": message}


def run(day, total=10, events="", **counts):
    return {"run_date": day, "run_id": "r", "status": "ok", "feeds_ok": 1, "feeds_failed": counts.get("failed", 0),
            "docs_new": counts.get("new", 0), "docs_updated": 0, "docs_deleted": counts.get("deleted", 0),
            "docs_total": total, "seconds": 1.0, "events": events}


def question(day, qid, recall, rank, k=5, pipeline="p", retrieved="", rr=None):
    return {"run_date": day, "pipeline": pipeline, "k": k, "question_id": qid, "hit": float(recall > 0),
            "recall": recall, "precision": 0.0, "rr": recall if rr is None else rr, "ndcg": recall, "unjudged": 0.0,
            "first_relevant_rank": rank, "top1_score": 1.0, "retrieved": retrieved, "gold_missing": 0}


# --- small helpers ------------------------------------------------------------------------------------------


def test_escape_markdown_makes_every_mark_literal():
    assert views.escape_markdown("psi_mean *x* $1 :red[hi] <b>") == r"psi\_mean \*x\* \$1 \:red\[hi\] \<b\>"
    assert views.escape_markdown("two\nlines") == "two lines"


@pytest.mark.parametrize("url, safe", [("https://a.org/x", "https://a.org/x"), ("HTTP://a.org", "HTTP://a.org"),
                                       ("javascript:alert(1)", None), ("data:text/html,x", None), ("", None),
                                       (None, None)])
def test_only_http_links_are_kept(url, safe):
    assert views.safe_url(url) == safe


def test_question_column_maps_mrr_to_rr():
    assert views.question_column("mrr") == "rr" and views.question_column("recall") == "recall"
    with pytest.raises(ValueError, match="unknown metric"):
        views.question_column("map")


def test_threshold_note_follows_the_harmful_direction():
    config = AlertsConfig(drop={"recall@5": 0.05})
    assert trends_views.threshold_note("recall", 5, config) == "5% below the baseline and past its noise"
    assert trends_views.threshold_note("unjudged", 5, config) == "10% above the baseline and past its noise"


# --- where the data is -------------------------------------------------------------------------------------


def test_data_dir_comes_from_the_argument_then_the_environment_then_the_config(tmp_path, monkeypatch):
    config = tmp_path / "monitor.toml"
    config.write_text('data_dir = "store"\ngold = "gold.jsonl"\n')
    monkeypatch.delenv("DRIFTWATCH_DATA_DIR", raising=False)
    assert views.resolve_data_dir(config) == tmp_path / "store"
    monkeypatch.setenv("DRIFTWATCH_DATA_DIR", str(tmp_path / "env"))
    assert views.resolve_data_dir(config) == tmp_path / "env"
    assert views.resolve_data_dir(config, tmp_path / "arg") == tmp_path / "arg"


def test_settings_prefer_the_demo_config_of_the_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no ./monitor.toml here
    monkeypatch.delenv("DRIFTWATCH_CONFIG", raising=False)
    data_dir = tmp_path / "store"
    data_dir.mkdir()
    assert views.settings(data_dir).retrieval.k == (1, 3, 5, 10)  # the defaults
    built = Config(data_dir=data_dir, gold=tmp_path / "gold.jsonl", alerts=AlertsConfig(window=4))
    (data_dir / "demo.toml").write_text(to_toml(built))
    assert views.settings(data_dir).alerts.window == 4
    assert load_config(data_dir / "demo.toml").alerts.window == 4


def test_gold_questions_are_empty_without_a_gold_file(tmp_path):
    assert views.gold_questions(tmp_path / "absent.jsonl") == {} and views.gold_questions(Path()) == {}
    gold = tmp_path / "gold.jsonl"
    gold.write_text('{"id": "q1", "question": "Why?", "relevant": ["d1"]}\n')
    assert views.gold_questions(gold)["q1"].relevant_ids == ("d1",)


# --- runs and alerts -------------------------------------------------------------------------------------


def test_open_alerts_are_the_latest_runs_alert_rows_alerts_first(tmp_path):
    alerts = stored(tmp_path, contract.ALERTS, [alert(D1), alert(D2, rule="psi", pipeline="", series="psi_mean",
                                                                 severity="warning"), alert(D2, pipeline="q")])
    runs = stored(tmp_path, contract.RUNS, [run(D1), run(D2)])
    rows = views.open_alerts(alerts, runs)
    assert rows["severity"].tolist() == ["alert", "warning"] and rows["pipeline"].tolist() == ["q", ""]
    assert (rows["run_date"] == pd.Timestamp(D2)).all()
    later = stored(tmp_path / "later", contract.RUNS, [run(D1), run(D2), run(D3)])
    assert views.open_alerts(alerts, later).empty  # the latest run fired nothing


def test_alert_points_merge_the_rules_of_one_day(tmp_path):
    alerts = stored(tmp_path, contract.ALERTS, [
        alert(D1, severity="warning", rule="floor", message="below floor", value=0.4),
        alert(D1, severity="alert", rule="drop", message="fell 20%", value=0.4),
        alert(D2, pipeline="other"), alert(D2, series="mrr@5")])
    points = views.alert_points(alerts, "recall@5", ["p"])
    assert len(points) == 1
    row = points.iloc[0]
    assert (row["severity"], row["value"]) == ("alert", 0.4)
    assert row["message"] == "[alert / drop] fell 20%\n[warning / floor] below floor"
    assert len(views.alert_points(alerts, "recall@5")) == 2  # without a pipeline filter


def test_filter_alerts_and_counts(tmp_path):
    alerts = stored(tmp_path, contract.ALERTS, [alert(D1), alert(D2, severity="warning", rule="psi", pipeline=""),
                                             alert(D3), alert(D3, pipeline="q")])
    assert len(alerts_views.filter_alerts(alerts)) == 4
    assert alerts_views.filter_alerts(alerts, severities=["warning"])["rule"].tolist() == ["psi"]
    assert alerts_views.filter_alerts(alerts, pipelines=[""])["rule"].tolist() == ["psi"]
    assert alerts_views.filter_alerts(alerts, start=date(2026, 11, 3), end=date(2026, 11, 3))["run_date"].tolist() == [
        pd.Timestamp(D2)]
    newest_first = alerts_views.filter_alerts(alerts, pipelines=["p"])["run_date"].tolist()
    assert newest_first == [pd.Timestamp(D3), pd.Timestamp(D1)]
    counts = alerts_views.alert_counts(alerts)
    assert counts.set_index(["run_date", "severity"])["alerts"].to_dict() == {
        (pd.Timestamp(D1), "alert"): 1, (pd.Timestamp(D2), "warning"): 1, (pd.Timestamp(D3), "alert"): 2}


def test_run_events_and_last_run(tmp_path):
    runs = stored(tmp_path, contract.RUNS, [run(D1), run(D2, events="new chunker"), run(D3, total=12)])
    events = views.run_events(runs)
    assert events["run_date"].tolist() == [pd.Timestamp(D2)] and events["events"].tolist() == ["new chunker"]
    assert views.last_run(runs)["docs_total"] == 12
    assert views.last_run(runs.iloc[0:0]) is None


# --- metric series ---------------------------------------------------------------------------------------


def consecutive_days(days: int) -> list[str]:
    return [(date(2026, 11, 1) + pd.Timedelta(days=i)).isoformat() for i in range(days)]


def test_a_slow_decline_is_not_ok_though_each_run_is_close_to_the_last(tmp_path):
    # 0.90 falling 0.01 a run over 30 runs: the reference period (the rules' first 20 runs) averages 0.805, the
    # last run 0.61 is 24% below it and 0.07 (10%) below a week ago, far past the 10% practical threshold.
    days = consecutive_days(30)
    values = [0.9 - 0.01 * i for i in range(30)]
    metrics = stored(tmp_path, contract.METRICS, [metric(d, v) for d, v in zip(days, values)])
    alerts = stored(tmp_path, contract.ALERTS, [alert(days[0])])  # an old alert does not colour today
    config = AlertsConfig(reference_runs=20)
    verdict = overview_views.verdict(metrics, alerts, "p", 5, config, names=("recall",))
    status = verdict.series[0]
    assert status.reference == pytest.approx(sum(values[:20]) / 20)
    assert status.reference_days == (pd.Timestamp(days[0]), pd.Timestamp(days[19]))
    assert (status.week_ago, status.week_ago_day) == (pytest.approx(values[-8]), pd.Timestamp(days[-8]))
    assert status.against_reference == pytest.approx((sum(values[:20]) / 20 - values[-1]) / (sum(values[:20]) / 20))
    assert verdict.status == "warning" and status.severity == ""
    assert "recall@5 0.610: 24% worse than the reference period" in verdict.reason
    assert "no rule fired" in verdict.reason


def test_an_alert_on_the_latest_run_makes_the_pipeline_red_and_names_the_rule(tmp_path):
    days = consecutive_days(3)
    metrics = stored(tmp_path, contract.METRICS, [metric(d, 0.8) for d in days] + [metric(d, 0.9, pipeline="b")
                                                                               for d in days])
    alerts = stored(tmp_path, contract.ALERTS, [alert(days[-1], rule="floor", series="recall@5")])
    ok, red = (overview_views.verdict(metrics, alerts, p, 5, AlertsConfig(), names=("recall",)) for p in ("b", "p"))
    assert (red.status, ok.status) == ("alert", "ok")
    assert red.reason == f"floor on recall@5 since {days[-1]}." and red.series[0].severity == "alert"
    assert math.isnan(ok.series[0].reference)  # 3 runs: the reference period is not complete yet
    assert "level with" not in ok.reason and "0.900 on the first run" in ok.reason


def test_one_condition_is_one_incident_with_its_daily_values(tmp_path):
    runs = stored(tmp_path, contract.RUNS, [run(D1, events="injected 40 documents"), run(D2), run(D3), run(D4)])
    rows = [alert(D1, rule="drift", pipeline="", series="corpus", value=0.4),
            *(alert(d, value=v) | {"since": D2} for d, v in ((D2, 0.5), (D3, 0.45), (D4, 0.4))),
            alert(D2, series="mrr@5", severity="warning") | {"since": D2}]
    alerts = stored(tmp_path, contract.ALERTS, [{**r, "since": r.get("since", r["run_date"])} for r in rows])
    table = alerts_views.incidents(alerts, runs)
    assert len(table) == 2  # the drift, and p's drop whichever of its series showed it (alerts.condition_of)
    drop = table[table["rule"] == "drop"].iloc[0]
    assert (drop["metric"], drop["metrics"], drop["severity"]) == ("recall@5", "recall@5, mrr@5", "alert")
    assert (drop["start"], drop["last"], drop["runs"], drop["days"], drop["ongoing"]) == (
        pd.Timestamp(D2), pd.Timestamp(D4), 3, 3, True)
    assert drop["values"] == {D2: 0.5, D3: 0.45, D4: 0.4}  # the starting series' values
    story, = alerts_views.episodes(table, runs)  # the drift on D1 and what followed from D2 chain into one
    assert (story.start, story.first["rule"], story.note) == (pd.Timestamp(D1), "drift", "injected 40 documents")
    sentence = overview_views.incident_sentence(story)
    assert sentence.startswith(f"Ongoing since {D1} (4 days): drift on the corpus (fell)")
    assert "Run note: injected 40 documents" in sentence and overview_views.most_hurt(story) == "p"


def test_trend_draws_the_rules_own_band_for_watched_series(tmp_path):
    days = (D1, D2, D3, D4, D5)
    values = {"q1": (1, 1, 1, 1, 0), "q2": (1, 0, 1, 1, 0), "q3": (0, 1, 1, 0, 0)}
    per_question = stored(tmp_path, contract.PER_QUESTION, [question(d, q, v[i], 1) for q, v in values.items()
                                                          for i, d in enumerate(days)])
    means = [sum(v[i] for v in values.values()) / 3 for i in range(5)]
    metrics = stored(tmp_path, contract.METRICS, [metric(d, m) for d, m in zip(days, means)])
    config = AlertsConfig(window=3, floors={"recall@5": 0.4}, metrics=("recall@5",))
    trend = trends_views.trend(metrics, per_question, "recall", 5, ["p"], config, ks=(1, 5)).set_index("run_date")
    key = series.SeriesKey("p", REGISTRY["recall"], 5)
    expected = series.bands(per_question, key, config, n_tests=1).set_index("run_date")
    # the drop rule needs MIN_BASELINE (3) earlier runs: from D4 on, with the very contrast the rule tests
    assert trend["edge"].isna().tolist() == [True, True, True, False, False]
    matrix = series.question_matrix(per_question, key)
    test = series.drop_contrast(matrix, pd.Timestamp(D5), config, True)
    assert trend.loc[pd.Timestamp(D5), "baseline"] == pytest.approx(test.baseline)
    assert trend.loc[pd.Timestamp(D5), "edge"] == pytest.approx(
        min(test.baseline * 0.9, test.baseline - series.critical_z(config.alpha, 1) * test.sd))
    assert trend["edge"].equals(expected["edge"])
    assert (trend["floor"] == 0.4).all() and trend["watched"].all()
    cut = trends_views.trend(metrics, per_question, "recall", 5, ["p"], config, (1, 5), start=date(2026, 11, 5))
    assert cut["run_date"].tolist() == [pd.Timestamp(D4), pd.Timestamp(D5)]
    assert cut["baseline"].tolist() == pytest.approx(trend["baseline"].tolist()[3:])  # computed before the cut


def test_trend_of_an_unwatched_series_draws_no_band(tmp_path):
    metrics = stored(tmp_path, contract.METRICS, [metric(d, 0.5, name="unjudged") for d in (D1, D2, D3, D4)])
    per_question = stored(tmp_path, contract.PER_QUESTION, [question(d, "q1", 0.5, 1) for d in (D1, D2, D3, D4)])
    trend = trends_views.trend(metrics, per_question, "unjudged", 5, ["p"], AlertsConfig(window=3), ks=(5,))
    assert trend["edge"].isna().all() and trend["baseline"].isna().all()
    assert not trend["watched"].any()  # the default watched series are hit, recall, mrr, ndcg


# --- questions ------------------------------------------------------------------------------------------


@pytest.fixture
def questions(tmp_path) -> pd.DataFrame:
    #        then (D1)      now (D2)
    # q1     recall 1 @1    recall 0, not retrieved      -> regressed (metric)
    # q2     recall .5 @3   recall 1 @1                  -> improved
    # q3     recall 1 @1    recall 1 @2                  -> regressed (rank)
    # q4     recall 1 @2    recall 1 @2                  -> unchanged
    rows = [question(D1, "q1", 1.0, 1, retrieved="g1 x y"), question(D2, "q1", 0.0, 0, retrieved="x z y"),
            question(D1, "q2", 0.5, 3), question(D2, "q2", 1.0, 1),
            question(D1, "q3", 1.0, 1, retrieved="g3 x"), question(D2, "q3", 1.0, 2, retrieved="x g3"),
            question(D1, "q4", 1.0, 2), question(D2, "q4", 1.0, 2),
            question(D1, "q1", 1.0, 1, k=1, retrieved="g1"), question(D2, "q1", 0.0, 0, k=1, retrieved="x")]
    return stored(tmp_path, contract.PER_QUESTION, rows)


def test_regressed_questions_worst_first(questions):
    table = questions_views.regressed_questions(questions, "p", 5, "recall", date(2026, 11, 2), date(2026, 11, 3),
                                      {"q1": "Who?"})
    assert table["question_id"].tolist() == ["q1", "q3"]
    assert table["question"].tolist() == ["Who?", ""]
    assert table["change"].tolist() == [-1.0, 0.0]
    assert table["rank_then"].tolist() == [1, 1] and table["rank_now"].tolist() == [0, 2]


def test_question_changes_read_the_per_question_column_of_a_metric(questions):
    changes = questions_views.question_changes(questions, "p", 5, "mrr", date(2026, 11, 2), date(2026, 11, 3))
    assert changes.loc["q2", "change"] == pytest.approx(0.5)  # rr, which the fixture sets to the recall
    assert changes.loc["q1", "harm"] == 1.0


def test_heatmap_rows_are_ordered_by_regression(questions):
    matrix = questions_views.question_heatmap(questions, "p", 5, "recall", date(2026, 11, 2), date(2026, 11, 3))
    assert matrix.index.tolist() == ["q1", "q3", "q4", "q2"]
    assert list(matrix.columns) == [pd.Timestamp(D1), pd.Timestamp(D2)]
    assert matrix.loc["q1"].tolist() == [1.0, 0.0]
    assert questions_views.question_heatmap(questions, "p", 5, "recall", date(2026, 11, 2), date(2026, 11, 3),
                                  start=date(2026, 11, 3)).columns.tolist() == [pd.Timestamp(D2)]


def test_rank_history_reads_one_k_and_leaves_gaps(questions):
    history = questions_views.rank_history(questions, "q1")
    assert history["rank"].tolist()[0] == 1.0 and math.isnan(history["rank"].tolist()[1])
    assert len(history) == 2  # the k=1 and k=5 rows give the same rank: one is read
    assert questions_views.rank_history(questions, "nope").empty


def test_displacing_documents_are_those_that_overtook_a_gold_document(questions):
    rows = questions_views.question_rows(questions, "q3")
    assert set(rows["question_id"]) == {"q3"}
    assert questions_views.retrieved(rows, "q3", "p", 5, date(2026, 11, 3)) == ["x", "g3"]
    table = questions_views.displacing(rows, "q3", "p", 5, date(2026, 11, 2), date(2026, 11, 3), ["g3"])
    assert table.to_dict("list") == {"rank": [1], "doc_id": ["x"], "rank_then": [2], "displaced": ["g3"]}
    # gold gone from the top k: every document now in it was below it then or absent
    q1 = questions_views.displacing(questions, "q1", "p", 5, date(2026, 11, 2), date(2026, 11, 3), ["g1"])
    assert q1["doc_id"].tolist() == ["x", "z", "y"] and q1["rank_then"].tolist() == [2, pd.NA, 3]
    stay = questions_views.displacing(questions, "q3", "p", 5, date(2026, 11, 3), date(2026, 11, 3), ["g3"])
    assert stay.empty


def test_a_second_gold_document_pushed_out_below_the_first_is_displaced(tmp_path):
    # the demo's q19 on dense: eco-007 stays first, eco-011 (5th) leaves the top 5 when dup-207 and eco-071 come in
    rows = stored(tmp_path, contract.PER_QUESTION, [
        question(D1, "q19", 1.0, 1, retrieved="eco-007 eco-021 pol-001 eco-011 tech-015"),
        question(D2, "q19", 0.5, 1, retrieved="eco-007 dup-207 eco-071 eco-021 pol-001")])
    table = questions_views.displacing(rows, "q19", "p", 5, date(2026, 11, 2), date(2026, 11, 3),
                                       ["eco-007", "eco-011"])
    assert table["doc_id"].tolist() == ["dup-207", "eco-071"]  # eco-021 and pol-001 were above eco-011 already
    assert table["displaced"].tolist() == ["eco-011", "eco-011"] and table["rank_then"].isna().all()


def test_ids_with_spaces_survive_the_store():
    assert store.split_ids(store.join_ids(["a b", "c%d"])) == ["a b", "c%d"]


def test_document_table_keeps_titles_as_text_and_only_http_links():
    info = {"d1": {"title": "<script>alert(1)</script>", "url": "javascript:alert(1)", "source": "feed",
                   "first_seen": D1, "deleted_at": None},
            "d2": {"title": "Fine", "url": "https://x.org/d2", "source": "feed", "first_seen": D2, "deleted_at": D3}}
    table = questions_views.document_table(["d1", "d2", "d3"], info, gold=["d2"])
    assert table["title"].tolist() == ["<script>alert(1)</script>", "Fine", "(not in the corpus)"]
    assert table["link"].tolist() == [None, "https://x.org/d2", None]
    assert table["gold"].tolist() == [False, True, False] and table["rank"].tolist() == [1, 2, 3]
    assert table["deleted_at"].tolist() == ["", D3, ""]


# --- corpus -------------------------------------------------------------------------------------------------


def doc(doc_id: str, source: str, categories: tuple[str, ...], text: str = "words of a short text") -> Document:
    return Document(id=doc_id, title=f"title {doc_id}", text=text, url=f"https://x.org/{doc_id}",
                    published=datetime(2026, 11, 1, tzinfo=timezone.utc), source=source, categories=categories)


def test_composition_counts_documents_present_on_each_date(tmp_path):
    with Corpus.in_dir(tmp_path) as corpus:
        corpus.ingest([doc("a", "s1", ("x",)), doc("b", "s1", ("y", "x")), doc("c", "s2", ("x",))], D1)
        corpus.ingest([doc("d", "s2", ())], D2)
        corpus.delete(["a"], D3, reason="test")
        totals = [corpus.counts(d).total for d in (D1, D2, D3)]
    documents = drift_views.corpus_documents(tmp_path)
    assert sorted(documents["doc_id"]) == ["a", "b", "c", "d"]
    assert documents.set_index("doc_id")["category"].to_dict() == {"a": "x", "b": "y", "c": "x", "d": "(none)"}
    days = [date(2026, 11, 2), date(2026, 11, 3), date(2026, 11, 4)]
    by_source = drift_views.composition(documents, days, "source").pivot(index="run_date", columns="source",
                                                                   values="documents")
    assert by_source["s1"].tolist() == [2, 2, 1] and by_source["s2"].tolist() == [1, 2, 2]
    assert by_source.sum(axis=1).tolist() == totals
    by_category = drift_views.composition(documents, days, "category").pivot(index="run_date", columns="category",
                                                                       values="documents")
    assert by_category["x"].tolist() == [2, 2, 1] and by_category["(none)"].tolist() == [0, 1, 1]
    assert drift_views.corpus_documents(tmp_path / "absent").empty
    assert drift_views.composition(drift_views.corpus_documents(tmp_path / "absent"), days, "source").empty


def test_documents_info_reads_the_corpus_read_only(tmp_path):
    with Corpus.in_dir(tmp_path) as corpus:
        corpus.ingest([doc("a", "s1", ("x",))], D1)
    info = questions_views.documents_info(tmp_path, ["a", "missing"])
    assert info == {"a": {"title": "title a", "url": "https://x.org/a", "source": "s1", "first_seen": D1,
                          "deleted_at": None}}
    assert questions_views.documents_info(tmp_path / "absent", ["a"]) == {}


def test_embedding_projection_uses_only_cached_vectors(tmp_path):
    config = Config(data_dir=tmp_path, gold=Path(), chunking=ChunkingConfig(size=50, overlap=10))
    rng = np.random.default_rng(0)
    texts = [" ".join(f"w{i}{j}" for j in range(20)) for i in range(9)]
    with Corpus.in_dir(tmp_path) as corpus:
        corpus.ingest([doc(f"d{i}", "s", ("x",), texts[i]) for i in range(6)], D1)
        corpus.ingest([doc(f"d{i}", "s", ("x",), texts[i]) for i in range(6, 9)], D2)
        key = Embedder(config.embedder).key
        from pipeline.chunking import chunk_documents

        chunks = chunk_documents(config, corpus.snapshot(D2))
        assert len(chunks) == 9  # one chunk per document at this size
        vectors = rng.normal(size=(len(chunks), 8)).astype(np.float32)
        corpus.cache_embeddings(key, {text_hash(c.text): v for c, v in zip(chunks[:-1], vectors[:-1])})
    projection = drift_views.embedding_projection(tmp_path, config, drift_views.Window(date(2026, 11, 2),
                                                                                      date(2026, 11, 2)),
                                                  drift_views.Window(date(2026, 11, 3), date(2026, 11, 3)))
    sides = projection.points.groupby("side").size().to_dict()
    # each side is its window's new documents: d0-d5 against d6-d8, of which d8 has no cached vector
    assert sides == {"reference": 6, "current": 2} and projection.n_missing == 1
    reference = projection.points[projection.points["side"] == "reference"]
    assert reference["x"].mean() == pytest.approx(0, abs=1e-6)  # centred on the reference
    first, second = projection.explained
    assert 0 < second <= first <= 1
    assert set(projection.points["doc_id"]) == {f"d{i}" for i in range(8)}


# --- drift --------------------------------------------------------------------------------------------------


def test_drift_series_keep_the_requested_order_and_find_the_reference(tmp_path):
    rows = [{"run_date": d, "statistic": s, "value": v, "reference_date": D1, "n_reference": 10, "n_current": 10}
            for d in (D1, D2) for s, v in (("psi_mean", 0.1), ("psi_max", 0.3), ("top1_cosine_dense", 0.6),
                                           ("top1_cosine_hybrid", 0.5))]
    drift = stored(tmp_path, contract.DRIFT, rows)
    series = drift_views.drift_series(drift, ["psi_max", "psi_mean"])
    assert series["statistic"].tolist() == ["psi_max", "psi_max", "psi_mean", "psi_mean"]
    assert drift_views.top1_statistics(drift) == {"top1_cosine_dense": "dense", "top1_cosine_hybrid": "hybrid"}
    assert drift_views.reference_date(drift) == date(2026, 11, 2)
    store.write_reference(tmp_path, date(2026, 11, 1))
    assert drift_views.reference_date(drift.iloc[0:0], tmp_path) == date(2026, 11, 1)


def test_the_drift_conclusion_says_whether_the_rule_pages(tmp_path):
    """A drift on one day is "drifted, not confirmed" (the rule's warning); the next disjoint window drifted too
    confirms it (the rule's alert), by the rule's own test on the rows read back from drift.csv."""
    def row(day, verdict, p=0.01):
        return {"run_date": day, "statistic": "novel_share", "value": 0.5, "reference_date": "2026-10-31",
                "n_reference": 300, "n_current": 40, "reference_start": "2026-10-18", "current_start": day,
                "p_value": p, "null_value": 0.1, "threshold": 0.3, "verdict": verdict, "detail": "40 novel chunks"}

    config = DriftConfig()
    drift = stored(tmp_path, contract.DRIFT, [row(D1, "drifted"), row(D2, "drifted")])
    tones = []
    for day in (D1, D2):
        tone, sentence = drift_views.conclusion(drift_views.drift_verdicts(drift, date.fromisoformat(day)),
                                                drift_views.confirmation(drift, day, config), config)
        tones.append(tone)
    assert tones == [drift_views.DRIFTED_NOT_CONFIRMED, drift_views.DRIFTED_CONFIRMED]
    assert "Confirmed: drifted in 2 of the last 2 disjoint windows" in sentence
    alone = stored(tmp_path / "alone", contract.DRIFT, [row(D1, "drifted", p=0.001)])
    tone, sentence = drift_views.conclusion(drift_views.drift_verdicts(alone), drift_views.confirmation(alone, D1, config),
                                            config)
    assert tone == drift_views.DRIFTED_CONFIRMED and "Confirmed on its own day" in sentence


def test_side_by_side_joins_original_and_simulated(tmp_path):
    original = stored(tmp_path / "a", contract.METRICS, [metric(D1, 0.5), metric(D2, 0.6)])
    simulated = stored(tmp_path / "b", contract.METRICS, [metric(D1, 0.5), metric(D2, 0.4)])
    table = simulate_views.side_by_side(views.metric_series(original, "recall", 5), views.metric_series(simulated, "recall", 5),
                               "pipeline")
    assert table["change"].tolist() == pytest.approx([0.0, -0.2])
    alone = simulate_views.side_by_side(views.metric_series(original, "recall", 5), None, "pipeline")
    assert alone["value_original"].tolist() == [0.5, 0.6] and alone["value_simulated"].isna().all()


def test_sandbox_lies_outside_the_data_directory(tmp_path):
    sandbox = simulate_views.sandbox_dir(tmp_path / "store")
    assert tmp_path not in sandbox.parents and sandbox == simulate_views.sandbox_dir(tmp_path / "store")
    assert sandbox != simulate_views.sandbox_dir(tmp_path / "other" / "store")
    assert simulate_views.sandbox_info(tmp_path / "nothing", tmp_path / "store") is None


def test_sandbox_info_describes_the_scenario(tmp_path):
    from pipeline.simulate import Scenario, prepare_sandbox

    source = tmp_path / "store"
    store.replace_date(source, contract.RUNS, D1,
                       [run(D1) | {c: "" for c in contract.RUNS_COLUMNS if c not in run(D1)}])
    Corpus.in_dir(source).close()
    sandbox = tmp_path / "sandbox"
    prepare_sandbox(source, sandbox, Scenario("delete", date(2026, 11, 2), before=date(2026, 11, 1)))
    info = simulate_views.sandbox_info(sandbox, source)
    assert info.start == date(2026, 11, 2) and "published before 2026-11-01" in info.description
    assert simulate_views.sandbox_info(sandbox, tmp_path / "another") is None


# --- weeks --------------------------------------------------------------------------------------------------


def test_iso_weeks():
    assert weekly_views.iso_week(date(2026, 11, 23)) == "2026-W48"
    assert weekly_views.week_bounds("2026-W48") == (date(2026, 11, 23), date(2026, 11, 29))
    assert weekly_views.previous_week("2026-W01") == "2025-W52"  # 2026-W01 starts on Monday 2025-12-29
    for bad in ("2026-48", "2026-W54", "W48", ""):
        with pytest.raises(ValueError):
            weekly_views.week_bounds(bad)


WEEK = "2026-W47"  # Monday 2026-11-16 to Sunday 2026-11-22; the previous week is 2026-W46


def test_weekly_means_against_the_previous_week(tmp_path):
    metrics = stored(tmp_path, contract.METRICS, [
        metric("2026-11-10", 0.8), metric("2026-11-16", 0.4), metric("2026-11-22", 0.6), metric("2026-11-23", 0.0),
        metric("2026-11-10", 0.5, name="unjudged"), metric("2026-11-17", 0.4, name="unjudged"),
        metric("2026-11-17", 0.9, pipeline="new")])
    weekly = weekly_views.weekly_means(metrics, WEEK).set_index(["pipeline", "metric"])
    recall = weekly.loc[("p", "recall")]
    assert recall["mean"] == pytest.approx(0.5) and recall["previous"] == 0.8
    assert recall["change"] == pytest.approx(-0.3) and recall["change_pct"] == pytest.approx(-37.5)
    assert recall["better"] is False or recall["better"] == False  # noqa: E712 (numpy bool)
    assert bool(weekly.loc[("p", "unjudged"), "better"])  # unjudged fell: better
    assert weekly.loc[("new", "recall"), "better"] is None and math.isnan(weekly.loc[("new", "recall"), "previous"])
    runs = stored(tmp_path, contract.RUNS, [run("2026-11-10"), run("2026-11-16"), run("2026-11-22")])
    assert weekly_views.weeks(runs) == ["2026-W46", "2026-W47"]


def test_week_regressions_and_corpus(tmp_path):
    per_question = stored(tmp_path, contract.PER_QUESTION, [
        question("2026-11-10", "q1", 1.0, 1), question("2026-11-11", "q1", 1.0, 1),
        question("2026-11-17", "q1", 0.0, 0),
        question("2026-11-10", "q2", 0.5, 2), question("2026-11-17", "q2", 1.0, 1),
        question("2026-11-10", "q3", 1.0, 1), question("2026-11-17", "q3", 0.5, 3),
        question("2026-11-17", "q4", 0.0, 0)])  # q4 has no previous week: no change to rank
    table = weekly_views.week_regressions(per_question, WEEK, 5)
    assert table["question_id"].tolist() == ["q1", "q3"] and table["change"].tolist() == [-1.0, -0.5]
    assert weekly_views.week_regressions(per_question, WEEK, 5, top=1)["question_id"].tolist() == ["q1"]
    runs = stored(tmp_path, contract.RUNS, [run("2026-11-15", total=100), run("2026-11-16", total=110, new=10),
                                         run("2026-11-18", total=105, new=5, deleted=10, failed=1)])
    week = weekly_views.week_corpus(runs, WEEK)
    assert (week.runs, week.docs_new, week.docs_deleted, week.docs_start, week.docs_end) == (2, 15, 10, 100, 105)
    assert (week.degraded_runs, week.feeds_failed) == (1, 1)
    assert weekly_views.week_corpus(runs, "2026-W46").docs_start is None


def test_alerts_display_has_dates_and_no_none():
    rows = pd.DataFrame({"run_date": pd.to_datetime(["2024-01-02"]), "rule": ["psi"], "pipeline": [None],
                         "metric": ["psi_mean"], "value": [0.123456], "baseline": [np.nan], "change_pct": [None],
                         "threshold": [0.2], "severity": ["warning"], "message": ["m"]})
    shown = views.alerts_display(rows).iloc[0]
    assert shown["run_date"] == date(2024, 1, 2) and shown["value"] == 0.1235
    assert (shown["pipeline"], shown["baseline"], shown["change_pct"], shown["threshold"]) == ("", "–", "–", "0.2")


def test_open_alerts_are_one_line_per_condition_with_since_and_the_worst_series(tmp_path):
    def row(rule, pipeline, series, change, since, severity="alert", message=None):
        return {**alert(D5, pipeline=pipeline, series=series, severity=severity, rule=rule,
                        message=message or f"{rule} {pipeline} {series}"), "change_pct": change, "since": since}

    rows = stored(tmp_path, contract.ALERTS, [
        row("slow_drift", "bm25", "mrr@5", -13.8, D1), row("slow_drift", "bm25", "ndcg@5", -15.0, D1),
        row("slow_drift", "bm25", "recall@5", 11.1, D2, severity="warning"),  # |change| decides, not the sign
        row("slow_drift", "dense", "hit@5", -10.2, D4, severity="warning"),
        row("floor", "dense", "recall@5", "", ""),  # no change, no since (a store from before since): the run date
        row("drift", "", "corpus", "", D3), row("config_change", "", "model", "", D5),
        row("drop", "logged", "k_precision", -20.6, D5), row("drop", "logged", "faithfulness", -12.0, D5)])
    conditions = views.open_conditions(rows)
    assert [c.line for c in conditions] == [
        f"slow_drift on bm25 since {D1}: nDCG@5 -15.0%, the worst of 3 series",
        f"slow_drift on dense since {D4}: hit rate@5 -10.2%",
        f"floor on dense since {D5}: recall@5",
        f"drift on the corpus since {D3}",
        f"config_change on the corpus since {D5}: model",
        f"drop on logged (your system's logged answers) since {D5}: k_precision -20.6%",  # answer metrics: each its own condition
        f"drop on logged (your system's logged answers) since {D5}: faithfulness -12.0%"]
    bm25 = conditions[0]
    assert (bm25.severity, bm25.since, bm25.worst, bm25.change_pct) == ("alert", pd.Timestamp(D1), "ndcg@5", -15.0)
    assert bm25.messages == (("mrr@5", "slow_drift bm25 mrr@5"), ("ndcg@5", "slow_drift bm25 ndcg@5"),
                             ("recall@5", "slow_drift bm25 recall@5"))
    assert conditions[1].severity == "warning"
    assert [c.short for c in conditions[:3]] == [f"slow_drift since {D1}", f"slow_drift since {D4}",
                                                 f"floor on recall@5 since {D5}"]
    assert views.open_conditions(rows.iloc[0:0]) == []


def test_the_drift_table_shows_each_threshold_on_the_values_scale_verdict_first(tmp_path):
    """The threshold column is effect_from + the effect line (pipeline.drift.value_line), said how it is made; a row
    of a run before effect_from was recorded keeps its verdict and says the base was not recorded."""
    def row(statistic, value, effect_from, verdict):
        return {"run_date": D1, "statistic": statistic, "value": value, "reference_date": "2026-10-31",
                "n_reference": 300, "n_current": 40, "reference_start": "2026-10-18", "current_start": D1,
                "p_value": 0.01, "null_value": 0.555, "threshold": 0.4, "verdict": verdict, "detail": "",
                "effect_from": effect_from}

    drift = stored(tmp_path, contract.DRIFT, [row("classifier_accuracy", 0.689, 0.5, "stable"),
                                              row("duplicate_share", 0.9, 0.02, "drifted"),
                                              row("psi_mean", 0.3, math.nan, "stable")])
    table = drift_views.drift_verdicts(drift)
    assert list(table.columns)[:4] == ["verdict", "statistic", "value", "threshold"]
    assert table["threshold"].tolist()[:2] == [pytest.approx(0.9), pytest.approx(0.42)]
    assert math.isnan(table["threshold"].iloc[2])
    assert table["threshold is"].tolist() == [
        "null mean 0.500 + effect line 0.4", "reference share 0.020 + effect line 0.4",
        "null mean + effect line 0.4 (the run did not record its null mean)"]
    assert (table["value"] >= table["threshold"]).tolist()[:2] == [False, True]  # by eye, as the verdicts say
