"""The dashboard through Streamlit's AppTest: every page file against a short history built by the real pipeline
(four daily runs of the demo with the drift event on the third), the shared frame (sidebar, open-alert banner),
the empty state, and the flows that write (building the demo, a simulation in its sandbox); and every page on an
empty directory, a one-day history and a year-long one."""

from __future__ import annotations

import hashlib
import html
import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
import streamlit as st
from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage
from streamlit.runtime.pages_manager import PagesManager
from streamlit.testing.v1 import AppTest

from pipeline import canary, contract, report, source_health, store, views
from pipeline.alerts import condition_of
from pipeline.views import overview as overview_views
from pipeline.views import questions as questions_views
from pipeline.views import simulate as simulate_views
from pipeline.views import weekly as weekly_views
from pipeline.cli import main
from pipeline.config import Config
from pipeline.demo import FIRST_RUN_DAY, build_demo, demo_date, demo_home
from pipeline.gold import load_gold
from pipeline.metrics import DEFAULT_WATCHED
from pipeline.simulate import catch_verdict, caught, compare, discard_sandbox, results_table
from pipeline.views.simulate import caught_lines

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "app.py"
PAGES = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "pages").glob("*.py") if not p.name.startswith("_"))
TIMEOUT = 180  # seconds per script run: the simulation and the demo build embed text
RED, ORANGE = 0, 3  # streamlit.proto.Metric_pb2.Metric.MetricColor


@pytest.fixture(scope="session")
def history(tmp_path_factory) -> Path:
    """Four daily runs of the bundled demo (2026-10-24 to 10-27), the drift packs starting to flow in on the last."""
    data_dir = tmp_path_factory.mktemp("dashboard") / "store"
    build_demo(Config(data_dir=Path(), gold=Path()), data_dir, days=4, drift_day=demo_date(FIRST_RUN_DAY + 3))
    return data_dir


@pytest.fixture(autouse=True)
def fresh_caches():
    """Streamlit's caches outlive an AppTest: each test starts and ends without them."""
    st.cache_data.clear()
    st.cache_resource.clear()
    yield
    st.cache_data.clear()
    st.cache_resource.clear()


@pytest.fixture
def open_app(monkeypatch):
    """Start the app on a data directory, as a server does after its first request.

    With a pages/ folder beside app.py, Streamlit runs a page file on its own (its older pages-folder mode) until
    app.py has called st.navigation once; a server does that for a session's very first request only, but AppTest
    re-detects the folder before every run. pages/_ui.page_frame handles it (it reruns through app.py), yet a
    button click would be spent on the aborted run, so the tests start from the server's steady state unless
    `first_request` asks for the other case."""
    original = PagesManager.__init__

    def steady(self, *args, **kwargs) -> None:
        original(self, *args, **kwargs)
        PagesManager.uses_pages_directory = False  # what st.navigation leaves behind on a server

    def start(data_dir: Path, first_request: bool = False, config: Path | None = None) -> AppTest:
        monkeypatch.setenv("DRIFTWATCH_DATA_DIR", str(data_dir))
        if config is None:
            monkeypatch.delenv("DRIFTWATCH_CONFIG", raising=False)
        else:
            monkeypatch.setenv("DRIFTWATCH_CONFIG", str(config))
        monkeypatch.setattr(PagesManager, "__init__", original if first_request else steady)
        at = AppTest.from_file(str(APP), default_timeout=TIMEOUT).run()
        assert not at.exception, [e.value for e in at.exception]
        return at
    return start


def visit(at: AppTest, page: str) -> AppTest:
    at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def rerun(at: AppTest) -> AppTest:
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def figure(at: AppTest, key: str) -> dict:
    return json.loads(at.get_by_key(key).proto.spec)


def table(at: AppTest, key: str) -> pd.DataFrame:
    return at.get_by_key(key).dataframe[0].value


def literal(markdown: str) -> str:
    """Markdown escaped by views.escape_markdown, read back as the text it shows."""
    return re.sub(r"\\(.)", r"\1", markdown)


def banner(at: AppTest) -> dict[str, str]:
    """The banner's boxes by kind ("error" for alerts, "warning" for warnings), as the text they show."""
    block = at.get_by_key("alert_banner")
    return {e.type: literal(e.value) for e in [*block.error, *block.warning]}


def latest_alerts(data_dir: Path) -> pd.DataFrame:
    alerts, runs = store.read(data_dir, contract.ALERTS), store.read_runs(data_dir)
    return alerts[alerts["run_date"] == runs["run_date"].max()]


def test_the_short_history_has_open_alerts(history):
    # what the assertions below lean on: the real run of the drift day and the day after fired alerts
    assert len(latest_alerts(history)) > 0


def test_every_page_file_is_routed_by_the_app():
    source = APP.read_text()
    assert PAGES and all(f'"{page}"' in source for page in PAGES)


@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_with_the_shared_sidebar_and_banner(history, open_app, page):
    at = visit(open_app(history), page)
    titles = [t.value for t in at.title]
    assert len(titles) == 1 and (titles != ["Overview"] or page.endswith("overview.py"))  # its own page
    assert at.get("plotly_chart"), "every page draws its main chart"
    assert str(history) in [c.value for c in at.sidebar.code]
    shown = " ".join(banner(at).values())
    for row in latest_alerts(history).itertuples():
        assert row.metric in shown
    # feed text is never rendered as HTML
    assert not any(m.proto.allow_html for m in [*at.markdown, *at.caption])


def test_a_page_opened_by_a_sessions_first_request_gets_the_shared_frame(history, open_app):
    at = visit(open_app(history, first_request=True), "pages/alerts.py")
    assert [t.value for t in at.title] == ["Alerts"]
    assert str(history) in [c.value for c in at.sidebar.code] and banner(at)


def test_overview_shows_the_csv_values_and_a_verdict_per_pipeline(history, open_app):
    at = open_app(history)
    metrics = store.read_metrics(history)
    latest = metrics["run_date"].max()
    cards = {m.label: m for m in at.metric}
    today = metrics[(metrics["run_date"] == latest) & (metrics["k"] == 5)
                    & metrics["metric"].isin(DEFAULT_WATCHED)]
    assert len(today) == 12  # 3 pipelines x 4 metrics
    for row in today.itertuples():
        card = cards[f"{row.pipeline} · {views.metric_label(row.metric, 5)}"]
        assert card.value == f"{row.value:.3f}"
        # four runs: the rules' reference period is not complete, so no change against it, only what fired
        assert card.proto.delta in ("", "alert fired", "warning fired")
    fired = latest_alerts(history)
    for pipeline in overview_views.values_of(metrics, "pipeline"):
        box = at.get_by_key(f"overview_verdict_{pipeline}")
        assert [*box.error, *box.warning, *box.success] == []  # a status, not a second alert box
        text = literal(box.markdown[0].value)
        mine = fired[fired["pipeline"].fillna("") == pipeline]
        status = "alert" if (mine["severity"] == "alert").any() else "warning" if len(mine) else None
        badge = re.match(r":(\w+)-badge\[:material/\w+: (\w+)\] \*\*(\w+)\*\* · ", text)
        assert badge and badge[3] == pipeline, text
        if status:
            assert badge[1:3] == ({"alert": "red", "warning": "orange"}[status], status)
            assert all(f"{rule}" in text for rule in mine["rule"]) and f"since {mine['since'].min()}" in text
            assert not any(m in text for m in mine["message"])  # the messages are the banner's
        else:
            assert badge[2] in ("ok", "warning")
    runs = store.read_runs(history)
    assert cards["Documents"].value == f"{runs['docs_total'].iloc[-1]:,}"
    assert figure(at, "overview_chart")["data"][0]["y"] == runs["docs_total"].tolist()
    sources = store.read(history, contract.SOURCES)  # each source's last new item, from sources.csv
    line = source_health.last_new_line(sources)
    assert line.startswith("Sources' last new item: ") and views.escape_markdown(line) in [c.value for c in at.caption]
    link, = [p.proto.label for p in at.get("page_link") if p.proto.label.startswith("Its ")]
    count = int(link.split()[1])
    assert link == f"Its {count} incident{'' if count == 1 else 's'}"  # not "Its 1 incidents"


def test_overview_and_weekly_review_show_a_candidate_with_its_paired_difference_and_interval(history, open_app,
                                                                                            tmp_path):
    """canary.csv as the job writes it (pipeline/canary.py over the stored per-question rows), dense taken for a
    candidate against hybrid: the Overview's sentence and table, and the weekly review's sentence."""
    data_dir = copy_of(history, tmp_path)
    per_question = store.read_per_question(data_dir)
    for day, rows in per_question.groupby("run_date"):
        store.replace_date(data_dir, contract.CANARY, f"{day:%Y-%m-%d}",
                           canary.canary_rows(f"{day:%Y-%m-%d}", rows, {"dense": "hybrid"}, 5))
    stored = store.read(data_dir, contract.CANARY)
    latest = stored[stored["run_date"] == stored["run_date"].max()].set_index("metric")
    at = open_app(data_dir)
    shown = table(at, "overview_canary").set_index("metric")
    assert list(shown.index) == [views.metric_label(m, 5) for m in canary.METRICS]
    for metric in canary.METRICS:
        row = shown.loc[views.metric_label(metric, 5)]
        assert (row["candidate"], row["against"]) == ("dense", "hybrid")
        assert row[["questions", "difference", "95% low", "95% high", "p"]].tolist() == pytest.approx(
            latest.loc[metric, ["n_questions", "mean_diff", "ci_low", "ci_high", "p_value"]].tolist(), nan_ok=True)
    recall = latest.loc["recall"]
    sentence = canary.sentence({**recall, "metric": "recall"})
    assert sentence.startswith("candidate dense: recall@5 ") and "against hybrid (p " in sentence
    assert f"{int(recall['n_questions'])} questions)" in sentence
    lines = [literal(m.value) for m in at.get_by_key("overview_canary_lines").markdown]
    assert lines == [f"- {sentence}"]
    week = report.latest_week(store.read_runs(data_dir))
    assert html.escape(sentence) in report.weekly_review_html(data_dir, week)


def test_the_banner_gives_one_line_per_open_condition_and_every_message_behind_it(history, open_app, tmp_path):
    def slow_drift(metric: str, change: float) -> dict:
        return {"rule": "slow_drift", "pipeline": "bm25", "metric": metric, "value": 0.6, "baseline": 0.7,
                "change_pct": change, "threshold": 10.0, "severity": "alert", "since": "2026-10-26",
                "message": f"slow drift: the moving mean of {metric} of bm25 fell"}

    drifting = with_alerts(history, tmp_path / "drifting", [slow_drift("mrr@5", -12.5), slow_drift("ndcg@5", -14.0)])
    at = open_app(drifting)
    rows = latest_alerts(drifting)
    conditions = {condition_of(r, p, m): s for r, p, m, s in
                  zip(rows["rule"], rows["pipeline"].fillna(""), rows["metric"], rows["severity"])}
    assert len(conditions) == len(rows) - 1  # bm25's two series: one condition
    boxes = banner(at)
    lines = {kind: [line for line in text.splitlines() if line.startswith("- ")] for kind, text in boxes.items()}
    assert sum(len(found) for found in lines.values()) == len(conditions)
    for (rule, pipeline, *_), severity in conditions.items():
        kind = "error" if severity == "alert" else "warning"
        assert any(line.startswith(f"- {rule} on {pipeline or 'the corpus'} since ") for line in lines[kind])
    assert any(line.startswith("- slow_drift on bm25 since 2026-10-26: nDCG@5 -14.0%, the worst of 2 series · next: ")
               for line in lines["error"])
    details = " ".join(literal(m.value) for m in at.get_by_key("alert_banner_details").markdown)
    assert all(message in details for message in rows["message"])
    assert not any(message in " ".join(boxes.values()) for message in rows["message"])


def with_alerts(history: Path, copy: Path, extra: list[dict]) -> Path:
    """A copy of the history whose latest run has the `extra` alert rows too (alerts.csv columns but run_date)."""
    shutil.copytree(history, copy)
    rows = latest_alerts(copy)
    day = store.read_runs(copy)["run_date"].max().strftime("%Y-%m-%d")
    both = pd.concat([rows.assign(run_date=rows["run_date"].dt.strftime("%Y-%m-%d")),
                      pd.DataFrame([{**row, "run_date": day} for row in extra])])
    store.replace_date(copy, contract.ALERTS, day, both[list(contract.ALERTS_COLUMNS)])
    return copy


@pytest.fixture
def flagged(history, tmp_path) -> Path:
    """A copy of the history with one more alert row on the latest run: a warning on dense's hit@5."""
    value = store.read_metrics(history).query("pipeline == 'dense' and metric == 'hit' and k == 5")["value"].iloc[-1]
    return with_alerts(history, tmp_path / "flagged", [
        {"rule": "floor", "pipeline": "dense", "metric": "hit@5", "value": value, "baseline": value,
         "change_pct": 0.0, "threshold": 1.0, "severity": "warning",
         "message": "hit@5 of dense is below its <b>floor</b> $1 *test*"}])


def test_alert_breaches_are_highlighted_where_the_series_appears(flagged, open_app):
    at = open_app(flagged)
    cards = {m.label: m for m in at.metric}
    assert cards["dense · hit rate@5"].proto.color == ORANGE  # a warning, whatever the direction of the change
    for row in latest_alerts(flagged).query("pipeline != ''").itertuples():
        metric, k = row.metric.split("@")
        expected = RED if row.severity == "alert" else ORANGE
        assert cards[f"{row.pipeline} · {views.metric_label(metric, int(k))}"].proto.color == expected
    details = " ".join(literal(m.value) for m in at.get_by_key("alert_banner_details").markdown)
    assert "below its <b>floor</b> $1 *test*" in details  # shown as literal text

    at = visit(at, "pages/trends.py")
    at.multiselect(key="trends_metrics").set_value(["hit"])
    rerun(at)
    spec = figure(at, "trends_chart_hit")
    last = store.read_metrics(flagged)["run_date"].max()
    dense = [t for t in spec["data"] if t.get("name") == "dense"][0]
    spans = [s for s in spec["layout"]["shapes"] if s["type"] == "rect" and s["xref"] == dense["xaxis"]]
    assert len(spans) == 1 and pd.Timestamp(spans[0]["x0"]) < last < pd.Timestamp(spans[0]["x1"])  # dense's warning


def test_trends_draw_the_chosen_series(history, open_app):
    at = visit(open_app(history), "pages/trends.py")
    at.multiselect(key="trends_metrics").set_value(["ndcg"])
    at.multiselect(key="trends_pipelines").set_value(["bm25", "hybrid"])
    at.selectbox(key="trends_k").set_value(10)
    rerun(at)
    spec = figure(at, "trends_chart_ndcg")
    assert spec["layout"]["title"]["text"] == "nDCG@10 by pipeline"
    metrics = store.read_metrics(history).query("metric == 'ndcg' and k == 10")
    lines = {t["name"]: t for t in spec["data"] if t.get("name") in ("bm25", "hybrid", "dense")}
    assert set(lines) == {"bm25", "hybrid"}
    assert lines["hybrid"]["y"] == metrics.query("pipeline == 'hybrid'")["value"].tolist()
    events = store.read_runs(history).query("events != ''")
    labels = [html.unescape(e["text"]) for e in spec["layout"]["annotations"]]
    assert any(label.startswith(events["events"].iloc[0][:20]) for label in labels)


def test_trends_draw_the_maintained_series_and_the_qrels_versions(history, open_app, tmp_path):
    """Issue 24: once a human judged, the maintained series is drawn dashed beside the frozen one, each qrels version
    as a marker, and unjudged@k under the chosen metrics for both."""
    from pipeline.gold import load_gold
    from pipeline.judging import ledger, qrels
    from pipeline.views import settings

    data_dir = tmp_path / "store"
    shutil.copytree(history, data_dir)
    config = settings(data_dir).replace(data_dir=data_dir)  # (demo.toml names the fixture's directory)
    per_question = store.read_per_question(data_dir).query("k == 5")
    gold = {q.id: q.relevant for q in load_gold(config.gold)}
    pairs = [(q, d) for q, r in zip(per_question["question_id"], per_question["retrieved"])
             for d in store.split_ids(r) if d not in gold[q]][:40]
    ledger.append_judgments(data_dir, [ledger.Judgment(q, d, 1, "ann", ledger.now(), "") for q, d in pairs])
    assert qrels.rescore(config).version == 1
    at = visit(open_app(data_dir), "pages/trends.py")
    at.multiselect(key="trends_metrics").set_value(["recall"])
    at.selectbox(key="trends_k").set_value(5)
    rerun(at)
    maintained = qrels.read_maintained(data_dir).query("metric == 'recall' and k == 5")
    for key in ("trends_chart_recall", "trends_chart_unjudged"):
        spec = figure(at, key)
        dashed = [t for t in spec["data"] if t.get("legendgroup") == "maintained qrels (dashed)"]
        assert dashed and all(t["line"]["dash"] == "dash" for t in dashed)
        assert any(a["text"] == "qrels v1" for a in spec["layout"]["annotations"])
    spec = figure(at, "trends_chart_recall")
    dense = [t for t in spec["data"] if t.get("legendgroup") == "maintained qrels (dashed)" and t["xaxis"] ==
             [u for u in spec["data"] if u.get("name") == "dense"][0]["xaxis"]][0]
    assert dense["y"] == maintained.query("pipeline == 'dense'")["value"].tolist()


def regressions_by_hand(data_dir: Path, pipeline: str, k: int, then, now) -> set[str]:
    """Questions whose recall@k fell, or whose first relevant rank worsened (0: not retrieved), from then to now."""
    per_q = store.read_per_question(data_dir).query("pipeline == @pipeline and k == @k")
    a = per_q[per_q["run_date"] == pd.Timestamp(then)].set_index("question_id")
    b = per_q[per_q["run_date"] == pd.Timestamp(now)].set_index("question_id")
    rank = lambda s: s.astype(float).where(s > 0, float("inf"))  # noqa: E731
    worse = (b["recall"] < a["recall"]) | (rank(b["first_relevant_rank"]) > rank(a["first_relevant_rank"]))
    return set(worse[worse].index)


def test_questions_table_names_the_regressed_questions_and_drills_down(history, open_app):
    at = visit(open_app(history), "pages/questions.py")
    days = sorted(store.read_runs(history)["run_date"].dt.date)
    at.selectbox(key="questions_pipeline").set_value("hybrid")
    at.selectbox(key="questions_then").set_value(days[0])
    at.selectbox(key="questions_now").set_value(days[-1])
    rerun(at)
    expected = regressions_by_hand(history, "hybrid", 5, days[0], days[-1])
    assert expected, "the drift event should make some question regress"
    regressed = table(at, "questions_regressed")
    assert set(regressed["question_id"]) == expected
    heatmap = figure(at, "questions_chart")["data"][0]
    assert heatmap["y"][0] == regressed["question_id"].iloc[0]  # the largest regression on top

    question = regressed["question_id"].iloc[0]
    at.selectbox(key="questions_question").set_value(question)
    rerun(at)
    gold = {q.id: q for q in load_gold(views.settings(history).gold)}[question]
    assert table(at, "questions_gold")["doc_id"].tolist() == list(gold.relevant_ids)
    assert all(not t.startswith("(not") for t in table(at, "questions_gold")["title"])  # titles from the corpus
    per_q = store.read_per_question(history).query("pipeline == 'hybrid' and k == 5 and question_id == @question")
    for key, day in (("questions_then_docs", days[0]), ("questions_now_docs", days[-1])):
        ids = store.split_ids(per_q[per_q["run_date"] == pd.Timestamp(day)]["retrieved"].iloc[0])
        assert table(at, key)["doc_id"].tolist() == ids
    now_ids = table(at, "questions_now_docs")["doc_id"].tolist()
    then_ids = table(at, "questions_then_docs")["doc_id"].tolist()
    place = lambda ids, d: ids.index(d) if d in ids else len(ids) + 1  # noqa: E731 (outside the top k: below all)
    overtook = [d for d in now_ids if d not in gold.relevant_ids and any(
        g in then_ids and place(now_ids, d) < place(now_ids, g) and place(then_ids, d) > place(then_ids, g)
        for g in gold.relevant_ids)]
    if not overtook:
        assert "No document overtook" in " ".join(b.value for b in at.success)
        return
    displacing = table(at, "questions_displacing")
    assert displacing["doc_id"].tolist() == overtook
    info = questions_views.documents_info(history, displacing["doc_id"].tolist())
    assert displacing["feed"].tolist() == [info[d]["source"] for d in displacing["doc_id"]]
    assert displacing["first_seen"].tolist() == [info[d]["first_seen"] for d in displacing["doc_id"]]
    ranks = figure(at, "questions_rank_chart")["data"]
    assert {t["name"] for t in ranks} == {"bm25", "dense", "hybrid"}
    assert len({t["yaxis"] for t in ranks}) == 3  # a panel per pipeline


def test_drift_page_draws_the_stored_statistics(history, open_app):
    at = visit(open_app(history), "pages/drift.py")
    drift = store.read(history, contract.DRIFT)
    psi = {t["name"]: t for t in figure(at, "drift_chart_psi_mean")["data"]}
    rows = drift.query("statistic == 'psi_mean'")
    def values(column: str) -> list:  # NaN (not enough new data) reaches the figure as null
        return [None if pd.isna(v) else v for v in rows[column]]

    assert psi["psi_mean"]["y"] == values("value")
    assert psi["psi_mean, no-drift 95%"]["y"] == values("null_value")
    languages = {t["name"]: t for t in figure(at, "drift_chart_language_share")["data"]}
    rows = drift.query("statistic == 'language_share'")
    assert len(rows) and languages["language_share"]["y"] == values("value")  # the demo's news: all English
    verdicts = table(at, "drift_verdicts")
    latest = drift[(drift["run_date"] == drift["run_date"].max()) & (drift["verdict"] != "context")]
    assert verdicts["statistic"].tolist() == latest["statistic"].tolist()
    assert verdicts["verdict"].tolist() == latest["verdict"].str.replace("_", " ").tolist()
    assert list(verdicts.columns)[0] == "verdict"  # first: a phone shows it without scrolling sideways
    on_scale = (latest["effect_from"] + latest["threshold"]).tolist()  # the threshold on the value's own scale
    assert [None if pd.isna(v) else v for v in verdicts["threshold"]] == [None if pd.isna(v) else pytest.approx(v)
                                                                        for v in on_scale]
    assert latest["effect_from"].notna().any()
    projection = figure(at, "drift_projection_chart")["data"]
    assert [t["name"].split(" ")[0] for t in projection] == ["current", "reference"]  # reference drawn on top
    assert all(len(t["x"]) > 0 for t in projection)
    composition = figure(at, "drift_composition_chart")["data"]
    runs = store.read_runs(history)
    totals = pd.DataFrame([t["y"] for t in composition]).sum().tolist()
    assert totals == runs["docs_total"].tolist()  # every document counted once per date


def test_alerts_page_filters_the_log(history, open_app):
    at = visit(open_app(history), "pages/alerts.py")
    alerts = store.read(history, contract.ALERTS)
    assert len(table(at, "alerts_table")) == len(alerts)
    rule = alerts["rule"].iloc[0]
    at.multiselect(key="alerts_rule").set_value([rule])
    rerun(at)
    shown = table(at, "alerts_table")
    assert len(shown) == (alerts["rule"] == rule).sum() > 0 and set(shown["rule"]) == {rule}
    at.multiselect(key="alerts_rule").set_value([])
    at.multiselect(key="alerts_severity").set_value(["alert"])
    rerun(at)
    assert len(table(at, "alerts_table")) == (alerts["severity"] == "alert").sum()


class RecordingStorage(MemoryMediaFileStorage):
    """The in-memory media storage of AppTest, remembering what download buttons offered."""

    files: dict[str, bytes] = {}

    def load_and_get_id(self, path_or_data, mimetype, kind, filename=None):
        RecordingStorage.files[filename] = path_or_data if isinstance(path_or_data, bytes) else path_or_data.encode()
        return super().load_and_get_id(path_or_data, mimetype, kind, filename)


def test_weekly_review_download_is_the_cli_report(history, open_app, monkeypatch, tmp_path):
    monkeypatch.setattr("streamlit.testing.v1.app_test.MemoryMediaFileStorage", RecordingStorage)
    RecordingStorage.files = {}
    at = visit(open_app(history), "pages/weekly.py")
    week = at.selectbox(key="weekly_week").value
    assert week == weekly_views.weeks(store.read_runs(history))[-1]
    out = tmp_path / "review.html"
    assert main(["report", "--week", week, "--out", str(out), "--data-dir", str(history)]) == 0
    assert RecordingStorage.files[f"driftwatch-review-{week}.html"] == out.read_bytes()
    assert out.read_text() == report.weekly_review_html(history, week)
    csv = RecordingStorage.files[f"driftwatch-metrics-{week}.csv"].decode()
    assert csv == report.week_csv(store.read_metrics(history), week)
    assert csv.splitlines()[0] == ",".join(contract.METRICS_COLUMNS)


def tree_hash(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_simulation_runs_in_a_sandbox_and_is_discarded(history, open_app):
    sandbox = simulate_views.sandbox_dir(history)
    shutil.rmtree(sandbox, ignore_errors=True)
    before = tree_hash(history)
    at = visit(open_app(history), "pages/simulate.py")
    assert [t["name"] for t in figure(at, "sim_chart")["data"]] == ["bm25 original", "dense original",
                                                                       "hybrid original"]
    last = max(store.read_runs(history)["run_date"]).date()
    at.selectbox(key="sim_scenario").set_value("near-duplicates")
    at.selectbox(key="sim_start").set_value(last)
    rerun(at)
    at.slider(key="sim_n").set_value(20)
    at.button(key="sim_run").click()
    rerun(at)
    banner_boxes = {e.proto.body for e in at.get_by_key("alert_banner").error}
    assert [e.value for e in at.error if e.proto.body not in banner_boxes] == []
    assert tree_hash(history) == before  # production series untouched
    assert (sandbox / contract.RUNS).exists()
    names = [t["name"] for t in figure(at, "sim_chart")["data"]]
    assert "hybrid simulated" in names and "hybrid original" in names
    shown = table(at, "sim_table")
    expected = results_table(compare(history, sandbox, "recall", 5), last)
    assert shown["value_simulated"].tolist() == pytest.approx(expected["value_simulated"].tolist())
    assert [str(d)[:10] for d in shown["run_date"]] == [str(d) for d in expected["run_date"]]
    assert "injected 20 near-duplicates" in store.read_runs(sandbox)["events"].iloc[-1]
    # the rules' answer and the delta chart
    assert "Would the alerts catch this?" in [h.value for h in at.subheader]
    compared = caught(history, sandbox, last)
    boxes = at.get_by_key("sim_verdict")
    assert [literal(box.value) for box in (*boxes.info, *boxes.success)] == [catch_verdict(compared, last)]
    shown_lines = [literal(m.value) for m in at.get_by_key("sim_caught").markdown]
    assert shown_lines == (["\n".join(f"- {line}" for line in caught_lines(compared))] if len(compared) else [])
    assert str(sandbox) not in "".join(c.value for c in at.caption)  # no path of the server's machine
    delta = {t["name"]: t["y"] for t in figure(at, "sim_delta_chart")["data"] if t.get("mode") == "lines+markers"}
    hybrid = expected[expected["pipeline"] == "hybrid"]
    assert delta["hybrid"] == pytest.approx(hybrid["change"].tolist())
    at.button(key="sim_discard").click()
    rerun(at)
    assert not sandbox.exists() and tree_hash(history) == before


@pytest.mark.parametrize("page", PAGES)
def test_empty_directory_shows_the_empty_state_on_every_page(tmp_path, open_app, page):
    at = visit(open_app(tmp_path / "empty"), page)
    assert [t.value for t in at.title] == ["driftwatch"]
    assert "No history" in literal(at.info[0].value)
    assert at.button(key="demo_build").label == "Build the demo history"


METRICS_FREE_PAGES = {"pages/alerts.py": "Alerts", "pages/judge.py": "Judge"}  # pages not reading metrics.csv


def copy_of(history: Path, tmp_path: Path) -> Path:
    data_dir = tmp_path / "store"
    shutil.copytree(history, data_dir)
    return data_dir


@pytest.mark.parametrize("page", PAGES)
def test_a_malformed_csv_is_one_message_naming_its_file_and_line(history, tmp_path, open_app, page):
    data_dir = copy_of(history, tmp_path)
    path = data_dir / contract.METRICS
    lines = path.read_bytes().split(b"\n")
    lines[5] = lines[5].replace(lines[5].split(b",")[0], b"2026-02-30", 1)  # not a date; pandas' reader fails
    path.write_bytes(b"\n".join(lines))
    at = visit(open_app(data_dir), page)
    errors = [literal(e.value) for e in at.error]
    if page in METRICS_FREE_PAGES:
        assert not any(contract.METRICS in e for e in errors)
    else:
        assert any(f"{path}:6: run_date '2026-02-30' is not a date" in e for e in errors), errors


@pytest.mark.parametrize("page", PAGES)
def test_without_metrics_csv_every_page_shows_an_empty_state(history, tmp_path, open_app, page):
    data_dir = copy_of(history, tmp_path)
    (data_dir / contract.METRICS).unlink()
    at = visit(open_app(data_dir), page)
    notes = [literal(i.value) for i in at.info]
    if page in METRICS_FREE_PAGES:
        assert [t.value for t in at.title] == [METRICS_FREE_PAGES[page]]
    else:
        assert any(f"{data_dir / contract.METRICS} has no rows" in n for n in notes), notes


PACK_RSS = b"""<?xml version="1.0" encoding="UTF-8"?>
<rss version="2.0"><channel><title>Mine</title><link>https://example.invalid/</link><description>d</description>
<item><guid>up-1</guid><title>Harbour crane contract awarded</title><link>https://example.invalid/1</link>
<description>The port authority awarded the crane contract after a long tender.</description></item>
</channel></rss>
"""


def test_an_uploaded_feed_file_is_injected_and_a_bad_one_named(history, open_app):
    sandbox = simulate_views.sandbox_dir(history)
    shutil.rmtree(sandbox, ignore_errors=True)
    at = visit(open_app(history), "pages/simulate.py")
    at.selectbox(key="sim_scenario").set_value("inject")
    at.selectbox(key="sim_start").set_value(max(store.read_runs(history)["run_date"]).date())
    rerun(at)
    assert at.button(key="sim_run").disabled  # nothing to inject yet
    at.get_by_key("sim_pack").set_value(("notes.xml", b"not a feed", "text/xml"))
    rerun(at)
    at.button(key="sim_run").click()
    rerun(at)
    assert any(re.search(r"notes\.xml: not a valid feed", literal(e.value)) for e in at.error)
    assert not sandbox.exists()
    at.get_by_key("sim_pack").set_value(("mine.xml", PACK_RSS, "text/xml"))
    rerun(at)
    at.button(key="sim_run").click()
    rerun(at)
    assert "simulation: injected the entries of mine.xml" in store.read_runs(sandbox)["events"].iloc[-1]
    assert any("injected the entries of mine.xml" in literal(c.value) for c in at.caption)
    assert at.get_by_key("sim_delta_chart") and at.get_by_key("sim_table")
    discard_sandbox(sandbox)


def test_a_simulation_meeting_a_bad_gold_set_says_so_and_keeps_the_page(history, tmp_path, open_app):
    data_dir = copy_of(history, tmp_path)
    missing = tmp_path / "gone.jsonl"
    settings = data_dir / "demo.toml"
    settings.write_text(re.sub(r'(?m)^gold = .*$', f'gold = "{missing}"', settings.read_text()))
    at = visit(open_app(data_dir), "pages/simulate.py")
    at.button(key="sim_run").click()
    rerun(at)
    assert any(f"{missing}: gold set not found" in literal(e.value) for e in at.error)
    assert at.get_by_key("sim_chart")  # the page goes on: the original series are still drawn


def test_the_empty_state_builds_the_demo_into_a_directory_of_its_own_then_shows_it(tmp_path, open_app):
    data_dir = tmp_path / "new"
    home = demo_home(data_dir)
    at = open_app(data_dir)
    assert str(home) in literal(at.info[0].value)  # where the demo will go, said before the click
    at.number_input(key="demo_days").set_value(1)
    at.button(key="demo_build").click()
    rerun(at)
    assert store.read_runs(data_dir).empty and not (data_dir / contract.RUNS).exists()  # the team's directory
    runs = store.read_runs(home)
    assert len(runs) == 1 and runs["run_date"].iloc[0].date() == demo_date(FIRST_RUN_DAY)
    assert [t.value for t in at.title] == ["Overview"]
    assert len(at.metric) >= 12
    # another session on the still-empty directory: the demo built there is offered, not built again
    again = open_app(data_dir)
    again.button(key="demo_open").click()
    rerun(again)
    assert [t.value for t in again.title] == ["Overview"]


# --- every page on a one-day and a year-long history (the empty one: test_empty_directory_shows_...) ----------

# What each page shows first when it has a history: the element a reader looks for.
KEY_ELEMENTS = {"pages/overview.py": "overview_chart", "pages/trends.py": "trends_k",
                "pages/questions.py": "questions_chart", "pages/drift.py": "drift_composition_chart",
                "pages/simulate.py": "sim_chart", "pages/weekly.py": "weekly_summary", "pages/alerts.py": "alerts_chart",
                "pages/answers.py": "answers_retrieval_chart", "pages/segments.py": "segments_chart",
                "pages/judge.py": "judge_progress"}
YEAR_QUESTIONS = 20  # bench.dashboard's year of history with 20 questions rather than 200: the same shape, faster


@pytest.fixture(scope="session")
def one_day(tmp_path_factory) -> Path:
    """The demo's first run only: no baseline, no week before, no drift reference."""
    data_dir = tmp_path_factory.mktemp("one-day") / "store"
    build_demo(Config(data_dir=Path(), gold=Path()), data_dir, days=1)
    return data_dir


@pytest.fixture(scope="session")
def year(tmp_path_factory) -> Path:
    """365 daily runs x 20 questions x 4 pipelines x 3 k, contract-exact (bench.dashboard's synthetic store, with
    its drift event, feed failures and alerts); its settings in bench.toml beside it."""
    from bench import dashboard

    data_dir = tmp_path_factory.mktemp("year") / "store"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dashboard, "QUESTIONS", YEAR_QUESTIONS)
        dashboard.build_store(data_dir)
    return data_dir


def test_every_page_has_its_key_element():
    assert sorted(KEY_ELEMENTS) == PAGES


def shows_its_page(at: AppTest, page: str, data_dir: Path) -> None:
    """The page rendered: no exception, no red box outside the alert banner, its own title, the shared sidebar and
    its key element."""
    assert not at.exception, [e.value for e in at.exception]
    try:
        banner_boxes = {e.proto.body for e in at.get_by_key("alert_banner").error}
    except KeyError:  # no open alert on the latest run
        banner_boxes = set()
    assert [literal(e.value) for e in at.error if e.proto.body not in banner_boxes] == []
    assert len(at.title) == 1 and at.title[0].value != "driftwatch"  # a page, not the empty state
    assert str(data_dir) in [c.value for c in at.sidebar.code]
    assert at.get_by_key(KEY_ELEMENTS[page])


@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_a_one_day_history(one_day, open_app, page):
    assert len(store.read_runs(one_day)) == 1
    at = visit(open_app(one_day), page)
    shows_its_page(at, page, one_day)


@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_a_year_long_history(year, open_app, page):
    from bench.dashboard import CONFIG_FILE, DAYS

    assert len(store.read_runs(year)) == DAYS
    at = visit(open_app(year, config=year / CONFIG_FILE), page)
    shows_its_page(at, page, year)
    if page == "pages/overview.py":  # the whole year is drawn, not a default window of it
        assert len(figure(at, "overview_chart")["data"][0]["y"]) == DAYS


def test_the_overview_banner_and_the_segments_page_show_a_segment_alert_in_its_words(history, open_app, tmp_path):
    head = "paraphrase questions (12): hit@5 0.70 → 0.30 since 2026-10-24; the other 28 flat"
    flagged = with_alerts(history, tmp_path / "segment", [{
        "rule": contract.SEGMENT_SLOW_DRIFT, "pipeline": "hybrid", "metric": "hit@5 tag:paraphrase", "value": 0.3,
        "baseline": 0.7, "change_pct": -57.1, "threshold": 10.0, "severity": "alert", "since": "2026-10-26",
        "message": f"{head} (hybrid, slow drift against the reference 2026-10-24 to 2026-10-25; threshold 10%)"}])
    at = open_app(flagged)  # the Overview
    assert any(f"- {contract.SEGMENT_SLOW_DRIFT} on hybrid since 2026-10-26: {head} · next: " in line
               for line in banner(at)["error"].splitlines())
    at = visit(at, "pages/segments.py")
    assert f"{contract.SEGMENT_SLOW_DRIFT} on hybrid: {head}" in [literal(w.value) for w in at.warning]
    assert at.get_by_key("segments_chart") and at.selectbox(key="segments_segment").options


def test_the_banner_summarises_several_segment_alerts_in_one_line(history, open_app, tmp_path):
    rows = [{"rule": contract.SEGMENT_SLOW_DRIFT, "pipeline": "hybrid", "metric": f"hit@5 tag:{tag}", "value": 0.3,
             "baseline": 0.7, "change_pct": -57.1, "threshold": 10.0, "severity": "alert", "since": "2026-10-26",
             "message": f"{tag} questions (9): hit@5 0.70 → 0.30 since 2026-10-24; the other 31 flat (hybrid, test)"}
            for tag in ("paraphrase", "stdlib", "syntax")]
    at = open_app(with_alerts(history, tmp_path / "segments", rows))
    lines = banner(at)["error"].splitlines()
    assert any(line.startswith("- 3 segments declined: paraphrase, stdlib, syntax (on hybrid since 2026-10-26; each "
                               "on the Segments page) · next: ") for line in lines), lines
    assert not any("paraphrase questions (9)" in line for line in lines)
