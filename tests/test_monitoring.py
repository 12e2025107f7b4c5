"""Drift statistics and alerts written by the daily job: contract columns, the demo's drift event,
webhook delivery to a receiver on localhost, --fail-on-alert and rebaseline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from datetime import date
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from pipeline import store
from pipeline.config import AlertsConfig, Config, RetrievalConfig
from pipeline.demo import DRIFT_SPREAD, FIRST_RUN_DAY, build_demo, demo_date
from pipeline.job import backfill, run_day

ROOT = Path(__file__).resolve().parents[1]
DAYS = [date(2026, 11, 2), date(2026, 11, 3), date(2026, 11, 4)]


@pytest.fixture()
def receiver():
    """A webhook receiver on localhost recording the JSON bodies it gets."""
    bodies: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/hook", bodies
    server.shutdown()


def test_every_run_writes_drift_and_alerts_per_the_contract(e2e_config, embedder):
    backfill(e2e_config, DAYS[0], DAYS[-1])
    data = e2e_config.data_dir
    header = (data / store.DRIFT).read_text().splitlines()[0].split(",")
    assert header == list(store.DRIFT_COLUMNS)
    assert (data / store.ALERTS).read_text().splitlines()[0].split(",") == list(store.ALERTS_COLUMNS)
    drift = store.read(data, store.DRIFT)
    assert set(drift["reference_date"]) == {"2026-11-02"}  # the first run pins the reference
    first = drift[drift["run_date"] == "2026-11-02"].set_index("statistic")["value"]
    assert first["psi_mean"] == 0 and first["psi_max"] == 0  # the reference against itself
    last = drift[drift["run_date"] == "2026-11-04"].set_index("statistic")
    assert last.loc["psi_expected", "value"] == pytest.approx(9 * (1 / 3 + 1 / 7))  # (bins - 1)(1/n_ref + 1/n_cur)
    assert {"top1_cosine_dense", "top1_cosine_hybrid", "evidently_model_auc", "ks_min_p_bonferroni"} <= set(last.index)
    assert "top1_cosine_bm25" not in last.index
    assert (last["n_reference"] == 3).all() and (last["n_current"] == 7).all()


def test_an_alert_reaches_the_webhook_and_sets_the_exit_code(tmp_path, e2e_config, embedder, receiver):
    url, bodies = receiver
    config = e2e_config.replace(alerts=AlertsConfig(floors={"recall@5": 0.99}, webhook_url=url))
    result = run_day(config, DAYS[0], embedder=embedder)  # 2 of 4 answers are not published yet: recall 0.5
    assert result.notified is True
    # the floor for each pipeline, and the two answers missing from the corpus
    assert sorted(a.rule for a in result.alerts) == ["floor"] * 3 + ["gold_missing"]
    assert len(bodies) == 1 and "recall@5 of bm25 is 0.500, below its configured floor 0.990" in bodies[0]["text"]
    assert "2 relevant documents of the gold set are missing" in bodies[0]["text"]
    rows = store.read(config.data_dir, store.ALERTS)
    assert len(rows) == 4 and set(rows["severity"]) == {"alert"}
    # re-running the date rewrites its rows but does not notify them twice
    again = run_day(config, DAYS[0], embedder=embedder)
    assert again.notified is None and len(bodies) == 1 and len(again.alerts) == 4
    # the same condition the next day is ongoing: written again, not notified again
    result = run_day(config, DAYS[1], embedder=embedder)
    assert [a.new for a in result.alerts if a.rule == "floor"] == [False] * 3
    assert all("floor" not in body["text"] for body in bodies[1:])


def test_a_failing_webhook_never_fails_the_run_or_loses_the_alert(e2e_config, embedder):
    config = e2e_config.replace(alerts=AlertsConfig(floors={"recall@5": 0.99}, webhook_url="http://127.0.0.1:9/hook",
                                                    webhook_retries=1, webhook_timeout=0.5))
    result = run_day(config, DAYS[0], embedder=embedder)
    assert result.notified is False
    assert len(store.read(config.data_dir, store.ALERTS)) == 4


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)


def test_fail_on_alert_and_rebaseline_from_the_command_line(tmp_path, e2e_config):
    path = tmp_path / "monitor.toml"
    path.write_text(f'data_dir = "{e2e_config.data_dir}"\ngold = "{e2e_config.gold}"\n'
                    f'[[sources]]\nname = "ledger"\npath = "{e2e_config.sources[0].path}"\n'
                    '[retrieval]\nk = [1, 5]\ncandidate_depth = 10\n[alerts]\nfloors = {"recall@5" = 0.99}\n')
    done = cli("run", "--config", str(path), "--date", "2026-11-02")
    assert done.returncode == 0 and "ALERT [floor]" in done.stdout  # alerts alone do not fail the run
    done = cli("run", "--config", str(path), "--date", "2026-11-03", "--fail-on-alert")
    assert done.returncode == 1, done.stderr
    done = cli("rebaseline", "--config", str(path), "--date", "2026-11-03")
    assert done.returncode == 0 and "pinned to 2026-11-03 (5 documents)" in done.stdout
    assert store.read_reference(e2e_config.data_dir) == date(2026, 11, 3)
    done = cli("rebaseline", "--config", str(path), "--date", "2026-10-01")
    assert done.returncode == 2 and "held no documents on 2026-10-01" in done.stderr


def test_demo_drift_event_alerts_and_the_stable_period_does_not(tmp_path):
    """A shortened demo history: 12 stable runs, then the drift packs flow in."""
    drift_day = demo_date(FIRST_RUN_DAY + 12)
    config = Config(data_dir=Path(), gold=Path(), retrieval=RetrievalConfig(k=(1, 5, 10), candidate_depth=20))
    results = build_demo(config, tmp_path / "demo", days=12 + DRIFT_SPREAD + 1, drift_day=drift_day)
    stable = [a for r in results if r.run_date < drift_day for a in r.alerts]
    assert stable == []
    event = [a for r in results if r.run_date >= drift_day for a in r.alerts if a.severity == "alert"]
    assert event, "the drift event raised no alert"
    assert {a.rule for a in event} & {"drop", "sigma"}
    runs = store.read_runs(tmp_path / "demo")
    assert runs.loc[runs["run_date"] == str(drift_day), "events"].str.startswith("drift event").all()
