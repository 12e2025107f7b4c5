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

import pandas as pd
import pytest

from pipeline import contract, store
from pipeline.config import AlertsConfig, Config, DriftConfig, RetrievalConfig
from pipeline.contract import CONTEXT, DRIFT_FAMILY, DRIFTED, DUPLICATE_SHARE, NOT_ENOUGH_DATA, STABLE, VERDICT
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
    header = (data / contract.DRIFT).read_text().splitlines()[0].split(",")
    assert header == list(contract.DRIFT_COLUMNS)
    assert (data / contract.ALERTS).read_text().splitlines()[0].split(",") == list(contract.ALERTS_COLUMNS)
    drift = store.read(data, contract.DRIFT)
    assert not (data / store.REFERENCE_FILE).exists()  # rolling by default: nothing is pinned
    last = drift[drift["run_date"] == "2026-11-04"].set_index("statistic")
    # A few documents a day: too little new text for any verdict, said so, never a number that looks like drift.
    family = last.loc[list(DRIFT_FAMILY)]
    assert set(family["verdict"]) == {NOT_ENOUGH_DATA} and family["value"].isna().all()
    assert family["detail"].str.startswith("not enough new data").all()
    # top-1 cosine as context, only where it can fall (not dense: new documents can only raise its top-1)
    assert last.loc["top1_cosine_hybrid", "verdict"] == CONTEXT
    assert "top1_cosine_dense" not in last.index and "top1_cosine_bm25" not in last.index
    # The current window grew back max_window_days (7) looking for enough new chunks; the reference lies before it.
    assert set(last["current_start"]) == {"2026-10-29"} and set(last["reference_date"]) == {"2026-10-28"}


def test_windows_hold_what_entered_in_them(e2e_config, embedder):
    """With small minimums the window statistics run: the current window is the run's day, the reference the
    days before it, disjoint, with the chunk counts of what entered in each."""
    config = e2e_config.replace(drift=DriftConfig(min_current=2, min_reference=2, max_window_days=1, permutations=99,
                                                  evidently=False))
    results = backfill(config, DAYS[0], DAYS[-1])
    last = pd.DataFrame(results[-1].drift).set_index("statistic")
    entered = [r.run["docs_new"] + r.run["docs_updated"] for r in results]
    assert set(last["n_current"]) == {entered[2]} and set(last["n_reference"]) == {entered[0] + entered[1]}
    assert set(last["current_start"]) == {"2026-11-04"} and set(last["reference_date"]) == {"2026-11-03"}
    assert set(last.loc[[s for s in DRIFT_FAMILY if s != DUPLICATE_SHARE], VERDICT]) <= {STABLE, DRIFTED}


def test_an_alert_reaches_the_webhook_and_sets_the_exit_code(tmp_path, e2e_config, embedder, receiver):
    url, bodies = receiver
    config = e2e_config.replace(alerts=AlertsConfig(floors={"recall@5": 0.99}, webhook_url=url))
    result = run_day(config, DAYS[0], embedder=embedder)  # 2 of 4 answers are not published yet: recall 0.5
    assert result.notified is True
    # the floor for each pipeline, and the two answers missing from the corpus
    assert sorted(a.rule for a in result.alerts) == ["floor"] * 3 + ["gold_missing"]
    assert len(bodies) == 1 and "recall@5 of bm25 is 0.500, below its configured limit 0.990" in bodies[0]["text"]
    assert "2 relevant documents of the gold set are missing" in bodies[0]["text"]
    rows = store.read(config.data_dir, contract.ALERTS)
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
    assert len(store.read(config.data_dir, contract.ALERTS)) == 4


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
    assert done.returncode == 0, done.stderr
    assert "pinned to the documents new from 2026-10-21 to 2026-11-03 (5 documents)" in done.stdout
    assert store.read_reference(e2e_config.data_dir) == date(2026, 11, 3)
    done = cli("rebaseline", "--config", str(path), "--date", "2026-10-01")
    assert done.returncode == 2 and "no documents entered the corpus" in done.stderr


def test_demo_drift_event_alerts_and_the_stable_period_does_not(tmp_path):
    """A shortened demo history: 12 stable runs, then the drift packs flow in."""
    drift_day = demo_date(FIRST_RUN_DAY + 12)
    # A short history: the slow-drift reference is the first 10 of its 12 stable runs (the default is 20).
    config = Config(data_dir=Path(), gold=Path(), retrieval=RetrievalConfig(k=(1, 5, 10), candidate_depth=20),
                    alerts=AlertsConfig(reference_runs=10))
    results = build_demo(config, tmp_path / "demo", days=12 + DRIFT_SPREAD + 1, drift_day=drift_day)
    stable = [a for r in results if r.run_date < drift_day for a in r.alerts]
    assert stable == []
    on_the_day = [a for r in results if r.run_date == drift_day for a in r.alerts if a.severity == "alert"]
    assert [a.rule for a in on_the_day] == ["drift"], "the drift event was not flagged on its day"
    assert "sports" in on_the_day[0].message  # it names what is new
    event = [a for r in results if r.run_date > drift_day for a in r.alerts]
    assert {a.rule for a in event} & {"drop", "slow_drift"}, "retrieval rules missed the decline that followed"
    runs = store.read_runs(tmp_path / "demo")
    assert runs.loc[runs["run_date"] == str(drift_day), "events"].str.startswith("drift event").all()
