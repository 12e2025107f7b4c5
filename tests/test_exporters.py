"""The exporters against real MLflow (a local file store), real Prometheus parsing and a real scrape, real whylogs
profiles; the only fakes are tracking servers that refuse or never answer, on localhost."""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from datetime import date, datetime
from pathlib import Path

import pandas as pd
import pytest
from prometheus_client.parser import text_string_to_metric_families

from pipeline import contract, exporters, store
from pipeline.cli import main
from pipeline.config import (
    ChunkingConfig,
    Config,
    ConfigError,
    ExportConfig,
    MlflowExportConfig,
    PrometheusExportConfig,
    RetrievalConfig,
    SourceConfig,
    WhylogsExportConfig,
    load_config,
)
from pipeline.exporters import History, mlflow_client, read_profile, step_of
from pipeline.job import backfill, run_day

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"
DAYS = [date(2026, 11, 2), date(2026, 11, 3), date(2026, 11, 4)]


def _exports(tmp: Path, name: str = "mlruns") -> ExportConfig:
    return ExportConfig(mlflow=MlflowExportConfig(tracking_uri=str(tmp / name), experiment="e2e", timeout=60),
                        prometheus=PrometheusExportConfig(path=tmp / "textfile" / "driftwatch.prom"),
                        whylogs=WhylogsExportConfig(projection_dims=8))


@pytest.fixture(scope="module")
def built(tmp_path_factory, embedder) -> Config:
    """Three daily runs of the small end-to-end feeds with every exporter on (the job wiring exports each)."""
    tmp = tmp_path_factory.mktemp("exports")
    shutil.copytree(DATA / "e2e", tmp / "e2e")
    config = Config(data_dir=tmp / "store", gold=tmp / "e2e" / "gold.jsonl",
                    sources=(SourceConfig(name="ledger", path=tmp / "e2e" / "feeds"),),
                    retrieval=RetrievalConfig(pipelines=("bm25", "dense", "hybrid"), k=(1, 3, 5), candidate_depth=10),
                    export=_exports(tmp))
    backfill(config, DAYS[0], DAYS[-1], embedder=embedder)
    return config


def _active_runs(config: Config) -> tuple:
    client = mlflow_client(config.export.mlflow)
    experiment = client.get_experiment_by_name(config.export.mlflow.experiment)
    return client, client.search_runs([experiment.experiment_id])


def _assert_mlflow_equals_store(config: Config, dates: list[date]) -> None:
    """Every metrics.csv value of `dates` is in the run, once, at its date's step; nothing else is logged."""
    client, runs = _active_runs(config)
    assert len(runs) == 1
    run = runs[0]
    metrics = store.read_metrics(config.data_dir)
    metrics = metrics[metrics["run_date"].dt.date.isin(dates)]
    assert len(metrics) == len(dates) * 3 * 3 * 6  # pipelines x k x metrics
    histories: dict[str, dict[int, list[float]]] = {}
    for row in metrics.itertuples():
        key = f"{row.pipeline}.{row.metric}_at_{row.k}"
        if key not in histories:
            histories[key] = {}
            for point in client.get_metric_history(run.info.run_id, key):
                histories[key].setdefault(point.step, []).append(point.value)
        assert histories[key][step_of(row.run_date.date())] == [row.value], key  # one point, the store's value
    assert all(set(h) == {step_of(d) for d in dates} for h in histories.values())
    runs_csv = store.read_runs(config.data_dir)
    assert run.data.params["config_hash"] == runs_csv["config_hash"].iloc[-1]
    assert run.data.params["model"] == runs_csv["model"].iloc[-1]
    assert run.data.tags["driftwatch.last_date"] == max(dates).isoformat()


def test_mlflow_holds_the_metrics_and_a_rerun_adds_no_point(built, embedder):
    _assert_mlflow_equals_store(built, DAYS)
    import mlflow

    with exporters._mlflow_settings("file:", 10):
        mlflow.set_tracking_uri(exporters.tracking_uri(built.export.mlflow))
        frame = mlflow.search_runs(experiment_names=["e2e"])
    assert len(frame) == 1
    assert frame["metrics.hybrid.recall_at_5"].iloc[0] == store.read_metrics(built.data_dir).query(
        "pipeline == 'hybrid' and metric == 'recall' and k == 5")["value"].iloc[-1]
    assert frame["metrics.alerts.alert"].iloc[0] == 0

    run_day(built, DAYS[1], embedder=embedder)  # re-running a date replaces its points, never adds to them
    _assert_mlflow_equals_store(built, DAYS)
    assert store.read_runs(built.data_dir)["events"].fillna("").eq("").all()  # no export failed


def test_a_config_change_starts_a_new_mlflow_run(built, tmp_path, embedder):
    """Params are immutable in MLflow: another config hash is another run, with its own params."""
    config = dataclasses.replace(built, data_dir=tmp_path / "store", export=_exports(tmp_path))
    shutil.copytree(built.data_dir, config.data_dir)
    exporters.export(config, DAYS)
    changed = config.replace(chunking=ChunkingConfig(size=64, overlap=16))
    run_day(changed, date(2026, 11, 5), embedder=embedder)
    client, runs = _active_runs(config)
    assert sorted(r.data.params["config_hash"] for r in runs) == sorted([built.config_hash(), changed.config_hash()])
    by_hash = {r.data.params["config_hash"]: r for r in runs}
    assert [m.step for m in client.get_metric_history(by_hash[changed.config_hash()].info.run_id, "bm25.hit_at_1")] \
        == [step_of(date(2026, 11, 5))]


def _samples(text: str) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _assert_prometheus_equals_store(text: str, data_dir: Path) -> None:
    samples = _samples(text)
    runs = store.read_runs(data_dir)
    last = runs.iloc[-1]
    day = last["run_date"]
    metrics = store.read_metrics(data_dir)
    latest = metrics[metrics["run_date"] == day]
    assert len(latest) == 3 * 3 * 6
    for row in latest.itertuples():
        labels = (("k", str(row.k)), ("metric", row.metric), ("pipeline", row.pipeline))
        assert samples[("driftwatch_retrieval_metric", labels)] == row.value
    alerts = store.read(data_dir, contract.ALERTS)
    for severity in ("alert", "warning"):
        expected = int((alerts[alerts["run_date"] == day]["severity"] == severity).sum())
        assert samples[("driftwatch_alerts_open", (("severity", severity),))] == expected
    assert samples[("driftwatch_last_run_timestamp_seconds", ())] == datetime.fromisoformat(
        last["finished_at"]).timestamp()
    assert samples[("driftwatch_run_seconds", ())] == last["seconds"]
    assert samples[("driftwatch_corpus_documents", ())] == last["docs_total"] == 7
    assert samples[("driftwatch_run_info", (("config_hash", last["config_hash"]), ("model", last["model"]),
                                            ("run_date", "2026-11-04"), ("status", "ok")))] == 1
    drift = store.read(data_dir, contract.DRIFT)
    for row in drift[(drift["run_date"] == day) & drift["value"].notna()].itertuples():
        assert samples[("driftwatch_drift_statistic", (("statistic", row.statistic),))] == row.value


def test_the_textfile_holds_the_latest_run(built):
    path = built.export.prometheus.path
    text = path.read_text()
    assert "# HELP driftwatch_retrieval_metric " in text and "# TYPE driftwatch_alerts_open gauge" in text
    _assert_prometheus_equals_store(text, built.data_dir)
    assert [p.name for p in path.parent.iterdir()] == ["driftwatch.prom"]  # no temporary file left beside it


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_metrics_answers_a_scrape_from_the_store(built):
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen([sys.executable, "-m", "pipeline", "serve-metrics", "--port", str(port),
                               "--data-dir", str(built.data_dir)], cwd=ROOT, env=env, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                    text = response.read().decode()
                break
            except OSError:
                assert server.poll() is None, server.stderr.read().decode()
                assert time.monotonic() < deadline, "serve-metrics did not come up within 60 s"
                time.sleep(0.2)
        _assert_prometheus_equals_store(text, built.data_dir)
        assert _samples(text) == _samples(built.export.prometheus.path.read_text())  # the same as the textfile
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_whylogs_profiles_read_back(built):
    day = DAYS[-1]
    history = History.read(built.data_dir)
    embeddings = read_profile(built.data_dir / "profiles" / f"{day}-embeddings.bin")
    columns = embeddings.get_columns()
    assert sorted(c for c in columns if c.startswith("proj_")) == [f"proj_{i}" for i in range(8)]
    runs = store.read_runs(built.data_dir)
    new_docs = int(runs[runs["run_date"] == pd.Timestamp(day)]["docs_new"].iloc[0])
    assert columns["norm"].get_metric("counts").n.value == new_docs == 2  # each e2e item is one chunk
    assert math.isclose(columns["norm"].get_metric("distribution").mean.value, 1.0, rel_tol=1e-5)  # unit vectors
    assert embeddings.dataset_timestamp.date() == day
    metrics = history.on(history.metrics, day)
    for pipeline in ("bm25", "dense", "hybrid"):
        questions = read_profile(built.data_dir / "profiles" / f"{day}-questions-{pipeline}.bin")
        recall = questions.get_column("recall@5").get_metric("distribution")
        expected = metrics.query(f"pipeline == '{pipeline}' and metric == 'recall' and k == 5")["value"].iloc[0]
        assert math.isclose(recall.mean.value, expected, rel_tol=1e-9)
        assert recall.n == metrics["n_questions"].iloc[0]


def test_the_export_command_pushes_a_history(built, tmp_path):
    config_file = tmp_path / "monitor.toml"
    config_file.write_text(f'data_dir = "{built.data_dir}"\ngold = "gold.jsonl"\n\n[export.mlflow]\n'
                           'tracking_uri = "pushed"\nexperiment = "e2e"\n')
    assert main(["export", "--config", str(config_file), "--start", "2026-11-03"]) == 0
    config = load_config(config_file)
    assert config.export.mlflow.tracking_uri == str(tmp_path / "pushed")  # relative to the config file
    _assert_mlflow_equals_store(config, DAYS[1:])
    assert main(["export", "--config", str(config_file)]) == 0  # earlier dates too: rebuilt, no duplicate
    _assert_mlflow_equals_store(config, DAYS)


def test_failing_exporters_leave_every_row_and_are_noted_in_events(built, tmp_path, embedder):
    config = dataclasses.replace(built, data_dir=tmp_path / "store")
    shutil.copytree(built.data_dir, config.data_dir)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    closed = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    config = config.replace(export=ExportConfig(
        mlflow=MlflowExportConfig(tracking_uri=closed, timeout=5),
        prometheus=PrometheusExportConfig(path=blocker / "driftwatch.prom")))
    before = {name: store.read(config.data_dir, name) for name in (contract.METRICS, contract.PER_QUESTION)}
    run_day(config, DAYS[-1], embedder=embedder)
    runs = store.read_runs(config.data_dir)
    assert runs["run_date"].dt.date.tolist() == DAYS
    events = runs["events"].iloc[-1]
    assert f"export mlflow failed: {closed}" in events
    assert f"export prometheus failed: {blocker / 'driftwatch.prom'}" in events
    for name, frame in before.items():
        pd.testing.assert_frame_equal(store.read(config.data_dir, name).drop(columns=[]), frame)


def test_an_mlflow_server_that_never_answers_is_cut_at_the_deadline(built, drip_server):
    config = built.replace(export=ExportConfig(mlflow=MlflowExportConfig(
        tracking_uri=drip_server.url.rsplit("/", 1)[0], timeout=1.5)))
    started = time.monotonic()
    [outcome] = exporters.export(config, DAYS)
    assert time.monotonic() - started < 4
    assert not outcome.ok and "no answer within the deadline of 1.5 s" in outcome.error


def test_an_exporter_without_its_package_is_a_config_error_naming_the_key(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "whylogs" else real(name, *a))
    config_file = tmp_path / "monitor.toml"
    config_file.write_text('data_dir = "store"\ngold = "gold.jsonl"\n\n[export.whylogs]\n')
    with pytest.raises(ConfigError, match=r"export\.whylogs: needs the whylogs package.*driftwatch\[whylogs\]"):
        load_config(config_file)
    config_file.write_text('data_dir = "store"\ngold = "gold.jsonl"\n\n[export.prometheus]\npath = "m.txt"\n')
    with pytest.raises(ConfigError, match=r"export\.prometheus\.path: must end in \.prom"):
        load_config(config_file)


def test_the_answer_layer_is_exported_beside_retrieval(built, tmp_path):
    """generation.csv's rows of the latest run reach Prometheus and MLflow; an undefined mean is left out."""
    data_dir = tmp_path / "store"
    shutil.copytree(built.data_dir, data_dir)
    rows = [{"run_date": "2026-11-04", "pipeline": "logged", "source": "judge", "metric": "faithfulness",
             "value": 0.75, "n": 8, "undetermined": 2},
            {"run_date": "2026-11-04", "pipeline": "logged", "source": "heuristic", "metric": "k_precision",
             "value": 0.5, "n": 10, "undetermined": 0},
            {"run_date": "2026-11-04", "pipeline": "logged", "source": "judge", "metric": "answer_relevance",
             "value": None, "n": 0, "undetermined": 10}]
    store.replace_date(data_dir, contract.GENERATION, date(2026, 11, 4), rows)
    samples = _samples(exporters.exposition(exporters.metric_families(History(data_dir))).decode())
    labels = lambda source, metric: (("metric", metric), ("pipeline", "logged"), ("source", source))  # noqa: E731
    assert samples[("driftwatch_answer_metric", labels("judge", "faithfulness"))] == 0.75
    assert samples[("driftwatch_answer_metric", labels("heuristic", "k_precision"))] == 0.5
    assert ("driftwatch_answer_metric", labels("judge", "answer_relevance")) not in samples
    assert samples[("driftwatch_answer_undetermined", labels("judge", "answer_relevance"))] == 10
    assert samples[("driftwatch_answer_undetermined", labels("judge", "faithfulness"))] == 2
    points = exporters.mlflow_points(History(data_dir), date(2026, 11, 4))
    assert points["answers.logged.judge.faithfulness"] == 0.75
    assert points["answers.logged.heuristic.k_precision"] == 0.5
    assert "answers.logged.judge.answer_relevance" not in points
    assert not any(k.startswith("answers.") for k in exporters.mlflow_points(History(data_dir), date(2026, 11, 3)))
