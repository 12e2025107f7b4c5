"""Evidently where teams already use it: a run's drift window as an Evidently report (its embedding score the run's
own evidently_model_auc, opened in Chromium, offered by the Drift page, linked by the weekly review), the history
as snapshots in an Evidently workspace (read back with Evidently's API, served by `evidently ui`), and a daily job
that never imports Evidently without them. One short demo history (four runs, the drift packs from the third)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from datetime import date
from pathlib import Path

import pandas as pd
import pytest
from playwright.sync_api import expect

from pipeline import contract, evidently_report, exporters, store
from pipeline.cli import EXIT_BAD_INPUT, main
from pipeline.config import Config, ConfigError, EvidentlyExportConfig, ExportConfig, load_config
from pipeline.demo import DRIFT_DAY as DEMO_DRIFT_DAY
from pipeline.demo import FIRST_RUN_DAY, demo_date
from pipeline.job import run_day
from pipeline.report import weekly_review_html
from pipeline.views import settings
from pipeline.views.weekly import weeks
from tests.browser_support import LOCAL_HOST, ROOT, chromium, demo_store, free_port
from tests.test_app import open_app, visit  # noqa: F401 (open_app: a fixture)

DRIFT_DAY = demo_date(FIRST_RUN_DAY + 2)  # 2026-10-26: the drift packs start flowing in
DAYS = [demo_date(FIRST_RUN_DAY + i) for i in range(4)]
UI_TIMEOUT = 90  # seconds for `evidently ui` to answer (it imports Evidently first)


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> Path:
    return demo_store(tmp_path_factory, "evidently", days=4, drift_day=DRIFT_DAY)


@pytest.fixture(scope="module")
def built(history) -> evidently_report.EvidentlyReport:
    return evidently_report.render(settings(history), DRIFT_DAY)


def test_the_reports_embedding_drift_is_the_runs_evidently_model_auc(built, history):
    """Evidently's own EmbeddingsDrift (ModelDriftMethod, bootstrap) on the rows and vectors the run gave its
    classifier: the snapshot's score is drift.csv's evidently_model_auc of that day, exactly."""
    metrics = json.loads(built.drift.json())["metrics"]  # Evidently's serialised snapshot, not our formula
    stored = store.read(history, contract.DRIFT)
    stored = stored[(stored[contract.RUN_DATE] == pd.Timestamp(DRIFT_DAY))
                    & (stored[contract.STATISTIC] == contract.EVIDENTLY_MODEL_AUC)][contract.VALUE]
    assert metrics[0]["config"]["type"] == "evidently:metric_v2:EmbeddingsDrift"
    assert metrics[0]["config"]["drift_method"]["bootstrap"] is True
    assert metrics[0]["value"] == float(stored.iloc[0]) == built.embedding_score()
    assert metrics[0]["value"] > 0.7  # the drift packs: the classifier tells the windows apart
    assert [m["config"]["column"] for m in metrics[1:]] == list(evidently_report.COMPOSITION)
    assert f"Drift score: {round(metrics[0]['value'], 3)}" in built.html  # Evidently's own counter, rendered


def test_the_demos_drift_day_report_opens_in_chromium_with_the_runs_score(demo_history, tmp_path):
    """The month-long demo (tests/conftest.py's session history): the report of its drift day, 2026-11-13, holds
    the run's evidently_model_auc and shows the drifted embeddings and the retrieval metrics in Chromium."""
    day = demo_date(DEMO_DRIFT_DAY)
    report = evidently_report.render(settings(demo_history), day)
    score = json.loads(report.drift.json())["metrics"][0]["value"]
    assert score == evidently_report.stored_score(demo_history, day)
    page = tmp_path / evidently_report.file_name(day)
    page.write_text(report.html, encoding="utf-8")
    with chromium() as browser:
        tab = browser.new_page()
        errors: list[str] = []
        tab.on("pageerror", lambda exc: errors.append(str(exc)))
        tab.route("http*://**", lambda route: route.abort())  # the page is self-contained: nothing is fetched
        tab.goto(page.as_uri())
        expect(tab.get_by_text(f"Drift in embeddings '{evidently_report.EMBEDDINGS}'").first).to_be_visible(
            timeout=60_000)
        expect(tab.get_by_text(f"Data drift detected. Drift detection method: model. Drift score: {round(score, 3)}")
               .first).to_be_visible()
        expect(tab.get_by_text("Retrieval metrics of the run on").first).to_be_visible()
        assert errors == []


def test_the_reports_retrieval_metrics_are_the_runs_against_the_week_before(built, history):
    values = {m["config"]["column"]: m["value"] for m in json.loads(built.metrics.json())["metrics"]}
    rows = store.read_metrics(history)
    day = rows[rows[contract.RUN_DATE] == pd.Timestamp(DRIFT_DAY)].dropna(subset=[contract.VALUE])
    assert len(values) == len(day) > 0
    for r in day.itertuples():
        assert values[f"{r.pipeline} {r.metric}@{r.k}"] == pytest.approx(r.value, abs=1e-12)


def test_the_command_writes_the_report_and_the_weekly_review_links_it(history, capsys):
    assert main(["evidently-report", "--date", DRIFT_DAY.isoformat(), "--data-dir", str(history)]) == 0
    written = evidently_report.default_path(history, DRIFT_DAY)
    assert written == history / "reports" / f"evidently-{DRIFT_DAY}.html" and written.stat().st_size > 100_000
    assert "Drift in embeddings" in written.read_text(encoding="utf-8")
    out = capsys.readouterr().out
    assert str(written) in out and f"{evidently_report.stored_score(history, DRIFT_DAY):.4f}" in out
    week = weeks(store.read_runs(history))[-1]
    review = weekly_review_html(history, week)
    assert f'<a href="evidently-{DRIFT_DAY}.html">{DRIFT_DAY}</a>' in review  # beside the review in reports/
    other = DAYS[-1]
    assert f"{other}: not built; <code>driftwatch evidently-report --date {other}</code>" in review


@pytest.mark.parametrize("args, message", [
    (["--date", "2026-09-01"], "no run on 2026-09-01 in {data_dir} (runs from 2026-10-24 to 2026-10-27)"),
    (["--date", "2026-10-26", "--data-dir", "{empty}"], "{empty}/runs.csv: no such file"),
    (["--date", "2026-13-01"], "not a date (YYYY-MM-DD): '2026-13-01'"),
], ids=["no-run-that-day", "no-store", "bad-date"])
def test_the_command_refuses_bad_input_with_exit_2_naming_it(history, tmp_path, capsys, args, message):
    empty = tmp_path / "empty"
    empty.mkdir()
    args = [a.format(empty=empty) for a in args]
    argv = ["evidently-report", *args] + ([] if "--data-dir" in args else ["--data-dir", str(history)])
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own exit for a value it cannot parse
        code = exc.code
    assert code == EXIT_BAD_INPUT
    assert message.format(data_dir=history, empty=empty) in capsys.readouterr().err
    assert not (empty / "reports").exists() and not list(tmp_path.glob("**/*.html"))


def test_a_report_of_windows_other_than_the_runs_is_refused(history, tmp_path, capsys):
    """A reference pinned after the run: the rebuilt windows are not those drift.csv names, so no report."""
    data_dir = tmp_path / "store"
    shutil.copytree(history, data_dir, ignore=shutil.ignore_patterns("reports"))  # another test's report
    assert main(["rebaseline", "--date", DAYS[0].isoformat(), "--data-dir", str(data_dir)]) == 0
    capsys.readouterr()
    assert main(["evidently-report", "--date", DRIFT_DAY.isoformat(), "--data-dir", str(data_dir)]) == EXIT_BAD_INPUT
    error = capsys.readouterr().err
    assert f"the run on {DRIFT_DAY} compared" in error and "rebaseline" in error and str(data_dir / "drift.csv") in error
    assert not (data_dir / "reports").exists()


def test_the_drift_page_builds_the_report_on_demand_and_offers_it(history, open_app):  # noqa: F811
    at = visit(open_app(history), "pages/drift.py")
    at.selectbox(key="drift_run").set_value(DRIFT_DAY).run()
    assert not at.exception, [e.value for e in at.exception]
    assert evidently_report.offer(DRIFT_DAY) in [c.value for c in at.caption]
    assert "drift_evidently_download" not in at.session_state and "drift_evidently" not in at.session_state
    at.button(key="drift_evidently_build").click().run()
    assert not at.exception, [e.value for e in at.exception]
    report = at.session_state["drift_evidently"]
    assert report.run_date == DRIFT_DAY and report.embedding_score() == evidently_report.stored_score(history, DRIFT_DAY)
    assert at.get_by_key("drift_evidently_download") is not None


# --- the workspace ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def exported(history, tmp_path_factory) -> tuple[Config, Path]:
    """A copy of the history (runs write) exported whole to a workspace beside it."""
    base = tmp_path_factory.mktemp("workspace")
    data_dir = base / "store"
    shutil.copytree(history, data_dir)
    config = settings(data_dir).replace(export=ExportConfig(evidently=EvidentlyExportConfig(workspace=base / "ws")))
    [outcome] = exporters.export(config, DAYS)
    assert outcome.ok, outcome.error
    return config, base / "ws"


def _snapshots(folder: Path) -> dict[str, tuple[str, dict[str, float], list[str]]]:
    """run date -> (snapshot id, values by column, tags), read with Evidently's own workspace API."""
    from evidently.core.report import Snapshot
    from evidently.ui.workspace import Workspace

    workspace = Workspace(str(folder))
    [project] = workspace.list_projects()
    assert project.name == "driftwatch"
    found = {}
    for snapshot_id in workspace.list_runs(project.id):
        model = workspace.get_run(project.id, snapshot_id)
        values = {m["config"]["column"]: m["value"] for m in Snapshot.load_model(model).dict()["metrics"]}
        day = model.metadata[exporters.EVIDENTLY_DATE]
        assert day not in found, f"two snapshots of {day}"
        found[day] = (str(snapshot_id), values, list(model.tags))
    return found


def _assert_equal_to_the_store(found: dict, data_dir: Path) -> None:
    metrics, drift = store.read_metrics(data_dir), store.read(data_dir, contract.DRIFT)
    assert sorted(found) == [d.isoformat() for d in DAYS]
    for day, (_, values, tags) in found.items():
        rows = metrics[(metrics[contract.RUN_DATE] == pd.Timestamp(day))].dropna(subset=[contract.VALUE])
        assert len(rows) > 0
        for r in rows.itertuples():
            assert values[f"{r.pipeline}.{r.metric}_at_{r.k}"] == pytest.approx(r.value, abs=1e-12)
        auc = drift[(drift[contract.RUN_DATE] == pd.Timestamp(day))
                    & (drift[contract.STATISTIC] == contract.EVIDENTLY_MODEL_AUC)][contract.VALUE]
        if len(auc) and auc.notna().all():
            assert values[f"drift.{contract.EVIDENTLY_MODEL_AUC}"] == pytest.approx(float(auc.iloc[0]), abs=1e-12)
        drifted = drift[(drift[contract.RUN_DATE] == pd.Timestamp(day)) & (drift[contract.VERDICT] == contract.DRIFTED)]
        assert {f"drifted:{s}" for s in drifted[contract.STATISTIC]} <= set(tags)
        assert f"run_date:{day}" in tags


def test_the_workspace_holds_one_snapshot_per_run_equal_to_the_store(exported):
    config, folder = exported
    _assert_equal_to_the_store(_snapshots(folder), config.data_dir)


def test_a_rerun_replaces_its_dates_snapshot_and_a_failing_workspace_never_stops_a_run(exported, tmp_path, caplog):
    config, folder = exported
    before = _snapshots(folder)
    run_day(config, DAYS[-1])  # the daily job exports its run
    after = _snapshots(folder)
    assert sorted(after) == sorted(before)
    assert after[DAYS[-1].isoformat()][0] != before[DAYS[-1].isoformat()][0]  # replaced, not added
    assert {d: v[0] for d, v in after.items() if d != DAYS[-1].isoformat()} == \
        {d: v[0] for d, v in before.items() if d != DAYS[-1].isoformat()}
    _assert_equal_to_the_store(after, config.data_dir)

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    metrics = store.read_metrics(config.data_dir)
    broken = config.replace(export=ExportConfig(evidently=EvidentlyExportConfig(workspace=blocker)))
    with caplog.at_level(logging.WARNING, logger="pipeline.exporters"):
        result = run_day(broken, DAYS[-1])
    assert result.run["status"] == contract.STATUS_OK
    assert f"export evidently failed: {blocker}" in store.read_runs(config.data_dir)["events"].iloc[-1]
    assert any(f"export evidently failed: {blocker}" in r.getMessage() for r in caplog.records)
    pd.testing.assert_frame_equal(store.read_metrics(config.data_dir), metrics)  # the run wrote its rows


def test_evidently_ui_serves_the_workspace(exported, tmp_path):
    """`evidently ui --workspace FOLDER` (Evidently's own server) lists the project and its snapshots, serves its
    page, and gives its dashboards a driftwatch series equal to metrics.csv's."""
    config, folder = exported
    port = free_port()
    env = {**os.environ, "DO_NOT_TRACK": "1"}
    log = (tmp_path / "ui.log").open("w")
    server = subprocess.Popen([str(Path(sys.executable).parent / "evidently"), "ui", "--workspace", str(folder),
                               "--host", LOCAL_HOST, "--port", str(port)], stdout=log, stderr=subprocess.STDOUT, env=env)
    base = f"http://{LOCAL_HOST}:{port}"
    try:
        deadline = time.monotonic() + UI_TIMEOUT
        projects = None
        while projects is None:
            assert server.poll() is None, (tmp_path / "ui.log").read_text()
            assert time.monotonic() < deadline, f"evidently ui did not answer in {UI_TIMEOUT} s"
            try:
                with urllib.request.urlopen(f"{base}/api/projects", timeout=5) as answer:
                    projects = json.load(answer)
            except OSError:
                time.sleep(0.5)
        [project] = [p for p in projects if p["name"] == "driftwatch"]
        with urllib.request.urlopen(f"{base}/api/projects/{project['id']}/snapshots", timeout=30) as answer:
            snapshots = json.load(answer)
        assert sorted(s["metadata"][exporters.EVIDENTLY_DATE] for s in snapshots) == [d.isoformat() for d in DAYS]
        with urllib.request.urlopen(f"{base}/projects/{project['id']}", timeout=30) as answer:
            assert answer.status == 200 and b"<html" in answer.read().lower()
        series = {"tags": [], "metadata": {}, "metric": "evidently:metric_v2:MeanValue",
                  "metric_labels": {"column": "hybrid.recall_at_5"}}
        asked = urllib.request.Request(f"{base}/api/v2/snapshots/{project['id']}/data_series_batch", method="POST",
                                       data=json.dumps({"series_filter": [series]}).encode(),
                                       headers={"content-type": "application/json"})
        with urllib.request.urlopen(asked, timeout=30) as answer:
            plotted = json.load(answer)
        metrics = store.read_metrics(config.data_dir)
        recall = metrics[(metrics[contract.PIPELINE] == "hybrid") & (metrics[contract.METRIC] == "recall")
                         & (metrics[contract.K] == 5)].sort_values(contract.RUN_DATE)[contract.VALUE].tolist()
        assert [s["timestamp"][:10] for s in plotted["sources"]] == [d.isoformat() for d in DAYS]
        assert plotted["series"][0]["values"] == pytest.approx(recall, abs=1e-12)
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


# --- configuration and imports ------------------------------------------------------------------------------


def test_the_section_is_off_by_default_and_its_folder_is_relative_to_the_config_file(tmp_path):
    config_file = tmp_path / "monitor.toml"
    config_file.write_text('data_dir = "store"\ngold = "gold.jsonl"\n')
    assert load_config(config_file).export.evidently is None
    assert "evidently" not in exporters.enabled(load_config(config_file))
    config_file.write_text('data_dir = "store"\ngold = "gold.jsonl"\n\n[export.evidently]\n')
    section = load_config(config_file).export.evidently
    assert section == EvidentlyExportConfig(workspace=tmp_path / "evidently-workspace", project="driftwatch")
    config_file.write_text('data_dir = "store"\ngold = "gold.jsonl"\n\n[export.evidently]\nworkspace = "ws"\n'
                           'project = " "\n')
    with pytest.raises(ConfigError, match=r"export\.evidently\.project: must not be empty"):
        load_config(config_file)


def test_a_day_without_the_features_imports_no_evidently(exported):
    """The no-op day (a re-run of an unchanged day, the run memo's) and the modules the features live in."""
    config, _ = exported
    quiet = config.replace(export=ExportConfig())
    code = ("import sys\nfrom datetime import date\nfrom pathlib import Path\nfrom pipeline.config import load_config\n"
            "from pipeline.job import run_day\nimport pipeline.cli, pipeline.evidently_report, pipeline.exporters\n"
            f"config = load_config(Path({str(config.data_dir / 'demo.toml')!r}), data_dir={str(quiet.data_dir)!r})\n"
            f"run_day(config, date.fromisoformat({DAYS[-1].isoformat()!r}))\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'evidently'))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
    assert store.read_runs(config.data_dir)[contract.RUN_DATE].max().date() == DAYS[-1]


def test_the_report_needs_a_run_that_day_before_anything_is_read(history):
    with pytest.raises(evidently_report.EvidentlyReportError, match=r"no run on 2026-10-23"):
        evidently_report.window_frames(settings(history), date(2026, 10, 23))
