"""A dashboard a team can trust at a glance (issue 27): how old the history is, one vocabulary of counts, the next
step from the runbook, acknowledgement per condition, the answer layer's distrusted heuristics and the run summary
of mixed sources. Pipeline-level; tests/test_browser_trust.py drives the same through the pages."""

from __future__ import annotations

import json
import shutil
from datetime import date
from pathlib import Path

import pandas as pd
import pytest

from pipeline import answers, contract, docgen, exporters, freshness, notify, report, store
from pipeline.alerts import RUNBOOK, RUNBOOK_URL, Alert, answer_alerts
from pipeline.check import check, table
from pipeline.cli import main
from pipeline.config import Config, SourceConfig, load_config
from pipeline.job import run_day
from pipeline.views import alerts as alerts_views
from pipeline.views import open_alerts, open_conditions

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).resolve().parents[1]


def runs_frame(days: list[str]) -> pd.DataFrame:
    return pd.DataFrame({contract.RUN_DATE: pd.to_datetime(days)})


# --- freshness ------------------------------------------------------------------------------------------------


def test_the_cadence_is_the_median_gap_between_run_dates():
    assert freshness.cadence(runs_frame(["2026-01-01", "2026-01-02", "2026-01-03", "2026-01-10"])) == 1.0  # 1, 1, 7
    assert freshness.cadence(runs_frame(["2026-01-01", "2026-01-08", "2026-01-15", "2026-01-16"])) == 7.0  # 7, 7, 1
    assert freshness.cadence(runs_frame(["2026-01-01"])) == freshness.DEFAULT_CADENCE_DAYS


@pytest.mark.parametrize("days, today, stale, line", [
    (["2026-01-01", "2026-01-02"], date(2026, 1, 2), False, "last run 2026-01-02 (today)"),
    (["2026-01-01", "2026-01-02"], date(2026, 1, 3), False, "last run 2026-01-02 (yesterday)"),
    # 2 days > 1.5 x 1 day
    (["2026-01-01", "2026-01-02"], date(2026, 1, 4), True, "no run since 2026-01-02 (expected daily, 2 days ago)"),
    # weekly: 10 days <= 1.5 x 7 = 10.5, 11 days past it
    (["2026-01-01", "2026-01-08"], date(2026, 1, 18), False, "last run 2026-01-08 (10 days ago)"),
    (["2026-01-01", "2026-01-08"], date(2026, 1, 19), True,
     "no run since 2026-01-08 (expected every 7 days, 11 days ago)"),
])
def test_a_history_is_stale_past_one_and_a_half_cadences(days, today, stale, line):
    fresh = freshness.freshness(runs_frame(days), today)
    assert fresh.stale is stale and fresh.line == line


def test_a_recorded_demo_history_is_never_stale_and_an_empty_one_has_no_run():
    fresh = freshness.freshness(runs_frame(["2020-01-01", "2020-01-02"]), date(2026, 1, 1), recorded=True)
    assert not fresh.stale and fresh.line == "recorded history (the demo): last run 2020-01-02"
    assert freshness.freshness(runs_frame([]), date(2026, 1, 1)).line == "no run yet"


def stale_store(data_dir: Path, days: list[str]) -> Path:
    store.write_table(data_dir, contract.RUNS, [{"run_date": d, "run_id": f"r{i}", "status": "ok", "feeds_ok": 1,
                                                 "feeds_failed": 0, "docs_new": 0, "docs_updated": 0,
                                                 "docs_deleted": 0, "docs_total": 1, "chunks_total": 1,
                                                 "chunks_embedded": 0, "seconds": 1.0, "model": "m",
                                                 "config_hash": "h", "events": "", "started_at": f"{d}T06:00:00+00:00",
                                                 "finished_at": f"{d}T06:01:00+00:00"} for i, d in enumerate(days)])
    return data_dir


def test_the_prometheus_export_has_the_age_the_cadence_and_stale(tmp_path):
    days = ["2025-08-01", "2025-08-02", "2025-08-03"]
    text = exporters.exposition(exporters.metric_families(exporters.History.read(stale_store(tmp_path, days))))
    values = {line.split()[0]: float(line.split()[1]) for line in text.decode().splitlines()
              if line and not line.startswith("#")}
    assert values["driftwatch_run_age_days"] == (date.today() - date(2025, 8, 3)).days
    assert values["driftwatch_run_cadence_days"] == 1.0
    assert values["driftwatch_run_stale"] == 1.0


def test_check_reports_a_stale_history_as_a_problem_and_exits_1(tmp_path, capsys):
    shutil.copytree(DATA / "e2e", tmp_path / "e2e")
    stale_store(tmp_path / "store", ["2025-08-01", "2025-08-02"])
    config = tmp_path / "monitor.toml"
    config.write_text('data_dir = "store"\ngold = "e2e/gold.jsonl"\n[[sources]]\nname = "ledger"\npath = "e2e/feeds"\n',
                      encoding="utf-8")
    capsys.readouterr()
    assert main(["check", "--config", str(config)]) == 1
    out = capsys.readouterr().out
    assert "history  no run since 2025-08-02 (expected daily" in out and "(STALE)" in out
    assert "check failed: 1 problem(s)" in out
    # the same directory, checked the day after its last run: fresh, and the check passes
    fresh = check(load_config(config), today=date(2025, 8, 3))
    assert fresh.ok and "history  last run 2025-08-02 (yesterday)" in table(fresh)


# --- one vocabulary of counts -------------------------------------------------------------------------------


def alert(day: str, rule: str, pipeline: str, metric: str, severity: str = "alert", since: str = "") -> dict:
    return Alert(day, rule, pipeline, metric, 0.5, 0.6, -10.0, 10.0, severity, f"{rule} {pipeline} {metric}",
                 since or day).row()


@pytest.fixture
def log(tmp_path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Three runs. bm25's slow drift since day 1 on two series (one condition, four rows); a drop on dense on
    day 1 only (an incident that ended); a corpus-wide feed warning on day 3."""
    rows = [alert("2026-11-02", "slow_drift", "bm25", "mrr@5"), alert("2026-11-02", "drop", "dense", "hit@5"),
            alert("2026-11-03", "slow_drift", "bm25", "mrr@5", since="2026-11-02"),
            alert("2026-11-04", "slow_drift", "bm25", "mrr@5", since="2026-11-02"),
            alert("2026-11-04", "slow_drift", "bm25", "ndcg@5", since="2026-11-02"),
            alert("2026-11-04", "feeds_failed", "", "feeds_failed", severity="warning")]
    frame = pd.DataFrame(rows).astype({contract.RUN_DATE: "datetime64[ns]"})
    return frame, store.read_runs(stale_store(tmp_path / "runs", ["2026-11-02", "2026-11-03", "2026-11-04"]))


def test_one_function_counts_open_conditions_incidents_and_alert_rows(log):
    alerts, runs = log
    counts = alerts_views.count_alerts(alerts, runs)
    assert [c.condition for c in counts.conditions] == [("slow_drift", "bm25"), ("feeds_failed", "", "feeds_failed")]
    assert counts.incidents == 3  # bm25's slow drift, dense's drop, the feeds warning
    assert counts.alert_rows == 6 and counts.open_rows == 3
    assert counts.open_phrase == "2 open conditions on 2026-11-04 (1 alert, 1 warning)"
    assert counts.sentence("the history") == ("2 open conditions on 2026-11-04 (1 alert, 1 warning); 3 incidents and "
                                              "6 alert rows in the history")
    # the open conditions are the ongoing incidents: the two units agree on the latest run
    assert int(alerts_views.incidents(alerts, runs)["ongoing"].sum()) == len(counts.conditions)


def test_the_weekly_review_and_its_html_count_in_the_same_words(log):
    alerts, runs = log
    metrics = pd.DataFrame({contract.RUN_DATE: runs[contract.RUN_DATE], "pipeline": "bm25", "k": 5, "metric": "mrr",
                            "value": [0.7, 0.6, 0.5], "n_questions": 10})
    per_question = store._empty(contract.PER_QUESTION)
    review = report.weekly_review(runs, metrics, per_question, alerts, "2026-W45")
    sentence = alerts_views.count_alerts(alerts, runs).sentence("the week")
    assert review.counts.sentence("the week") == sentence
    assert sentence in report.summary_paragraph(review) and sentence in report.render_html(review)


# --- the next step: the runbook -----------------------------------------------------------------------------


def test_the_runbook_has_one_entry_per_rule_and_the_page_is_current():
    assert list(RUNBOOK) == list(contract.RULES)
    page = (ROOT / "docs" / "runbook.md").read_text(encoding="utf-8")
    assert page == docgen.runbook_markdown(), f"docs/runbook.md is stale: regenerate it with `{docgen.COMMAND}`"
    for rule, entry in RUNBOOK.items():
        assert f"\n## {rule}\n" in page and entry.next_step in page  # the heading the link's anchor names
        assert entry.url == f"{RUNBOOK_URL}#{rule}"
    assert "runbook.md" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert docgen.main(["--check"]) == 0


def test_every_open_condition_carries_its_rules_next_step(log):
    alerts, runs = log
    for condition in open_conditions(open_alerts(alerts, runs)):
        assert condition.runbook is RUNBOOK[condition.rule]


# --- acknowledgement per condition --------------------------------------------------------------------------


def test_an_acknowledgement_covers_the_condition_on_every_series_with_a_name(log, tmp_path):
    alerts, runs = log
    # made on one series (ndcg@5) of bm25's slow drift: it acknowledges the condition, whichever series fires
    notify.add_silence(tmp_path, notify.Silence(notify.ACKNOWLEDGE, "slow_drift", "bm25", "ndcg@5", "reindexing",
                                                since="2026-11-02", by="ana"))
    silences = notify.read_silences(tmp_path)
    counts = alerts_views.count_alerts(alerts, runs, silences)
    (condition, silence), = counts.acknowledged
    assert condition.condition == ("slow_drift", "bm25")
    assert silence.statement == f"acknowledged by ana at {silence.created}, until the condition ends: reindexing"
    assert counts.open_phrase == "2 open conditions on 2026-11-04 (1 warning, 1 acknowledged)"
    assert counts.unacknowledged("alert") == []
    mrr = Alert("2026-11-04", "slow_drift", "bm25", "mrr@5", 0.5, 0.6, -10.0, 10.0, "alert", "m", "2026-11-02")
    assert notify.silenced_by(mrr, silences) is silence  # the notifier honours it on the other series too
    # a new condition (the same rule starting again later) still pages
    again = Alert("2026-11-20", "slow_drift", "bm25", "mrr@5", 0.5, 0.6, -10.0, 10.0, "alert", "m", "2026-11-20")
    assert notify.silenced_by(again, silences) is None
    # acknowledging again on another series of the same incident replaces it: one acknowledgement per condition
    notify.add_silence(tmp_path, notify.Silence(notify.ACKNOWLEDGE, "slow_drift", "bm25", "mrr@5", "on it",
                                                since="2026-11-02", by="bo"))
    assert [s.by for s in notify.read_silences(tmp_path)] == ["bo"]


def test_a_mutes_file_written_before_names_is_still_read(tmp_path):
    (tmp_path / notify.MUTES_FILE).write_text(json.dumps([
        {"kind": "acknowledge", "rule": "drop", "pipeline": "bm25", "metric": "mrr@5", "note": "on it",
         "since": "2026-11-02", "until": "", "created": "2026-11-02T08:00:00Z"}]), encoding="utf-8")
    silence, = notify.read_silences(tmp_path)
    assert silence.by == "" and silence.statement == ("acknowledged at 2026-11-02T08:00:00Z, until the condition "
                                                      "ends: on it")


def test_the_weekly_review_lists_the_acknowledgement(log, tmp_path):
    alerts, runs = log
    notify.add_silence(tmp_path, notify.Silence(notify.ACKNOWLEDGE, "slow_drift", "bm25", "mrr@5", "reindexing",
                                                since="2026-11-02", by="ana"))
    metrics = pd.DataFrame({contract.RUN_DATE: runs[contract.RUN_DATE], "pipeline": "bm25", "k": 5, "metric": "mrr",
                            "value": [0.7, 0.6, 0.5], "n_questions": 10})
    review = report.weekly_review(runs, metrics, store._empty(contract.PER_QUESTION), alerts, "2026-W45",
                                  silences=notify.read_silences(tmp_path))
    assert "slow_drift on bm25 since 2026-11-02: acknowledged by ana at" in report.summary_paragraph(review)


# --- the answer layer: a heuristic below its gate is never an alert condition ---------------------------------


def test_k_precision_is_not_an_alert_condition_while_its_heuristics_fail_their_kappa_gate():
    days = pd.date_range("2026-11-02", periods=12)
    # 20 questions: 0.9 for ten runs, then 0.3 on the last two (a large, significant drop)
    per_answer = pd.DataFrame([{contract.RUN_DATE: d, "pipeline": answers.LOGGED, "question_id": f"q{q}",
                                "faithfulness": float("nan"), "answer_relevance": float("nan"),
                                "k_precision": (0.9 if i < 10 else 0.3) + 0.01 * ((q + i) % 3)}
                               for i, d in enumerate(days) for q in range(20)])
    from pipeline.config import AlertsConfig

    today = days[-1]
    fired = answer_alerts(f"{today:%Y-%m-%d}", today, per_answer, AlertsConfig(), {"k_precision": True})
    assert {a.metric for a in fired} == {"k_precision"}  # what a trusted heuristic does
    assert answer_alerts(f"{today:%Y-%m-%d}", today, per_answer, AlertsConfig(), {"k_precision": False}) == []
    below = pd.DataFrame([{"run_date": pd.Timestamp("2026-11-12"), "metric": "faithfulness", "judge": "heuristic",
                           "level": "answer", "kappa": 0.57, "trusted": 0}])
    ok, why = answers.heuristic_trust(below)
    assert not ok and "kappa 0.57" in why and "hint" in why
    assert answers.heuristic_trust(below.iloc[:0])[0] is True  # no labels: it has failed no gate


# --- the run summary of mixed sources ------------------------------------------------------------------------


def mixed_config(tmp_path: Path, sources: tuple[SourceConfig, ...]) -> Config:
    shutil.copytree(DATA / "e2e", tmp_path / "e2e")
    return Config(data_dir=tmp_path / "store", gold=tmp_path / "e2e" / "gold.jsonl", sources=sources)


def feed_alerts(config: Config) -> list[tuple[str, str]]:
    rows = store.read(config.data_dir, contract.ALERTS)
    rows = rows[rows["rule"] == contract.FEEDS_FAILED]
    return list(zip(rows["severity"], rows["message"]))


def test_a_folder_beside_a_failing_url_is_not_every_feed_failed(tmp_path, embedder):
    config = mixed_config(tmp_path, (SourceConfig(name="ledger", path=tmp_path / "e2e" / "feeds"),
                                     SourceConfig(name="gone", url="http://127.0.0.1:9/feed.xml")))
    result = run_day(config, date.today(), embedder=embedder, notify=False)
    assert result.run["docs_new"] > 0  # the folder's dated files (all before today) were ingested
    assert (result.run["status"], result.run["feeds_ok"], result.run["feeds_failed"]) == (
        contract.STATUS_DEGRADED, 1, 1)
    assert feed_alerts(config) == [("warning", "1 of 2 feeds failed; today's corpus lacks their new documents")]


def test_a_url_beside_a_failing_folder_is_degraded(tmp_path, embedder, httpserver):
    feed = (DATA / "e2e" / "feeds" / "2026-11-04.xml").read_bytes()
    httpserver.expect_request("/feed.xml").respond_with_data(feed, content_type="application/rss+xml")
    (tmp_path / "empty").mkdir()
    config = mixed_config(tmp_path, (SourceConfig(name="wire", url=httpserver.url_for("/feed.xml")),
                                     SourceConfig(name="folder", path=tmp_path / "empty")))
    result = run_day(config, date.today(), embedder=embedder, notify=False)
    assert result.run["docs_new"] > 0
    assert (result.run["status"], result.run["feeds_ok"], result.run["feeds_failed"]) == (
        contract.STATUS_DEGRADED, 1, 1)
    assert feed_alerts(config) == [("warning", "1 of 2 feeds failed; today's corpus lacks their new documents")]
