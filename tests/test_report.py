"""The weekly review (pipeline/report.py) and `python -m pipeline report`, on a small store written in the test."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipeline import contract, report, store
from pipeline.cli import EXIT_BAD_INPUT, EXIT_OK, main
from pipeline.metrics import HEADLINE

WEEK, PREVIOUS = "2026-W47", "2026-W46"  # 2026-11-16..22 and 2026-11-09..15
HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def write_history(data_dir: Path) -> None:
    days = {"2026-11-10": 0.8, "2026-11-12": 0.8, "2026-11-17": 0.5, "2026-11-19": 0.7}
    for day, value in days.items():
        store.replace_date(data_dir, contract.RUNS, day, [{
            "run_date": day, "run_id": "r", "started_at": "", "finished_at": "", "status": "ok", "feeds_ok": 1,
            "feeds_failed": 0, "docs_new": 2, "docs_updated": 0, "docs_deleted": 0, "docs_total": 10,
            "chunks_total": 20, "chunks_embedded": 2, "seconds": 1.0, "model": "m", "config_hash": "h",
            "events": HOSTILE if day == "2026-11-17" else ""}])
        store.replace_date(data_dir, contract.METRICS, day, [
            {"run_date": day, "pipeline": p, "k": 5, "metric": m, "value": value, "n_questions": 2}
            for p in ("bm25", "dense") for m in ("hit", "recall", "mrr", "ndcg", "unjudged")])
        store.replace_date(data_dir, contract.PER_QUESTION, day, [
            {"run_date": day, "pipeline": "bm25", "k": 5, "question_id": q, "hit": 1.0, "recall": r, "precision": 0.2,
             "rr": 1.0, "ndcg": r, "unjudged": 0.0, "first_relevant_rank": 1, "top1_score": 1.0, "retrieved": "d1",
             "gold_missing": 0}
            for q, r in (("q1", 1.0 if day < "2026-11-16" else 0.0), ("q2", 1.0))])
        alerts = [] if day != "2026-11-17" else [{
            "run_date": day, "rule": "drop", "pipeline": "bm25", "metric": "recall@5", "value": 0.5, "baseline": 0.8,
            "change_pct": -37.5, "threshold": 10.0, "severity": "alert", "message": f"recall fell {HOSTILE}",
            "since": "2026-11-17", "p_value": 0.001}]
        store.replace_date(data_dir, contract.ALERTS, day, alerts)


@pytest.fixture
def data_dir(tmp_path) -> Path:
    write_history(tmp_path / "store")
    return tmp_path / "store"


def test_review_contents(data_dir):
    review = report.weekly_review(store.read_runs(data_dir), store.read_metrics(data_dir),
                                  store.read_per_question(data_dir), store.read(data_dir, contract.ALERTS), WEEK)
    assert (review.previous, review.k, len(review.run_dates)) == (PREVIOUS, 5, 2)
    recall = review.summary.query("pipeline == 'bm25' and metric == 'recall'").iloc[0]
    assert recall["mean"] == pytest.approx((0.5 + 0.7) / 2) and recall["previous"] == pytest.approx(0.8)
    assert review.summary["metric"].tolist()[:5] == list(HEADLINE)  # in the review's order
    assert review.regressions["question_id"].tolist() == ["q1"]
    assert review.alerts["rule"].tolist() == ["drop"]
    assert (review.corpus.runs, review.corpus.docs_new, review.corpus.docs_start) == (2, 4, 10)


def test_html_is_self_contained_and_escapes_stored_text(data_dir):
    page = report.weekly_review_html(data_dir, WEEK)
    assert page.startswith("<!DOCTYPE html>") and "<title>driftwatch weekly review 2026-W47</title>" in page
    assert "<script" not in page and "<img" not in page  # the hostile note and message stay text
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    assert not re.search(r'(src|href)="', page)  # nothing to fetch: inline CSS and SVG only
    assert "<svg" in page and "<polyline" in page
    assert "q1" in page and "recall fell" in page
    assert page == report.weekly_review_html(data_dir, WEEK)  # the same files give the same bytes


@pytest.mark.parametrize("week, message", [("2026-W48", "no runs in 2026-W48 (weeks with runs: 2026-W46, 2026-W47)"),
                                           ("2026-48", "not an ISO week")])
def test_a_week_without_runs_or_malformed_is_refused(data_dir, week, message):
    with pytest.raises(report.ReportError, match=re.escape(message)):
        report.weekly_review_html(data_dir, week)


def test_cli_writes_the_review(data_dir, tmp_path, capsys):
    out = tmp_path / "out" / "review.html"
    assert main(["report", "--week", WEEK, "--out", str(out), "--data-dir", str(data_dir)]) == EXIT_OK
    assert out.read_text(encoding="utf-8") == report.weekly_review_html(data_dir, WEEK)
    assert "weekly review of 2026-W47" in capsys.readouterr().out


def test_cli_defaults_to_the_latest_week_and_refuses_a_bad_one(data_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DRIFTWATCH_DATA_DIR", str(data_dir))
    assert main(["report"]) == EXIT_OK
    written = data_dir / "reports" / f"review-{WEEK}.html"  # beside the history, not in the current directory
    assert written.read_text() == report.weekly_review_html(data_dir, WEEK)
    assert [p.name for p in tmp_path.iterdir()] == ["store"]  # the current directory gained nothing
    assert main(["report", "--week", "2026-W48"]) == EXIT_BAD_INPUT
    assert "no runs in 2026-W48" in capsys.readouterr().err


def test_week_csv_is_the_weeks_metrics_rows(data_dir):
    lines = report.week_csv(store.read_metrics(data_dir), WEEK).splitlines()
    assert lines[0] == ",".join(contract.METRICS_COLUMNS)
    assert len(lines) == 1 + 2 * 2 * 5 and all(line.startswith(("2026-11-17", "2026-11-19")) for line in lines[1:])


def test_the_chart_marks_alerts_and_run_notes(data_dir):
    store.replace_date(data_dir, contract.ALERTS, "2026-11-12", [{  # a corpus-wide warning in the previous week
        "run_date": "2026-11-12", "rule": "drift", "pipeline": "", "metric": "corpus", "value": 0.4,
        "baseline": 0.2, "change_pct": None, "threshold": 0.25, "severity": "warning", "message": "corpus drift",
        "since": "2026-11-12", "p_value": 0.01}])
    page = report.weekly_review_html(data_dir, WEEK)
    svg = page[page.index("<svg"):page.index("</svg>")]
    marks = re.findall(r'<g class="alert-mark (\w+)"><title>([^<]*)</title><circle cx="([\d.]+)" cy="([\d.]+)"', svg)
    assert [(severity, title.split(" ")[0]) for severity, title, _, _ in marks] == [
        ("warning", "2026-11-12"), ("alert", "2026-11-17")]
    assert marks[0][1] == "2026-11-12 corpus: [warning / drift] corpus drift"
    assert marks[1][1].startswith("2026-11-17 bm25: [alert / drop] recall fell &lt;script&gt;")
    # bm25's mark sits on its line at 2026-11-17 (the third of four run dates), the corpus-wide one above the plot
    line = re.findall(r'<polyline fill="none" stroke="[^"]+" stroke-width="2" points="([^"]+)"/>', svg)[0]
    assert line.split()[2] == f"{marks[1][2]},{marks[1][3]}"
    assert float(marks[0][3]) == 14 - 8  # above the plot's top
    events = re.findall(r'<g class="event"><title>([^<]*)</title>', svg)
    assert events == ["2026-11-17: &lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;"]
