"""End to end: real feed files through the real embedding model into the CSV series, and the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest

from pipeline import contract, store
from pipeline.config import SourceConfig
from pipeline.corpus import Corpus
from pipeline.job import backfill, run_day
from pipeline.metrics import MEAN_NAMES
from pipeline.sources import FeedError

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"
DAYS = [date(2026, 11, 2), date(2026, 11, 3), date(2026, 11, 4)]


def rows(data_dir: Path, name: str, day: str):
    frame = store.read(data_dir, name)
    return frame[frame["run_date"] == day]


def test_daily_runs_write_sensible_series(e2e_config, embedder):
    results = backfill(e2e_config, DAYS[0], DAYS[-1])
    data = e2e_config.data_dir
    runs = store.read_runs(data)
    assert runs["run_date"].dt.date.tolist() == DAYS
    assert runs["docs_total"].tolist() == [3, 5, 7]
    assert runs["docs_new"].tolist() == [3, 2, 2]
    assert runs["feeds_ok"].tolist() == [1, 1, 1]  # the file dated that day; older ones are replayed
    assert runs["status"].tolist() == ["ok"] * 3
    assert runs["chunks_embedded"].tolist() == runs["docs_new"].tolist()  # only new text is embedded
    assert runs["config_hash"].nunique() == 1

    metrics = store.read_metrics(data)
    assert len(metrics) == 3 * len(e2e_config.retrieval.pipelines) * len(e2e_config.retrieval.k) * len(MEAN_NAMES)
    assert metrics["value"].between(0, 1).all()

    per_q = rows(data, contract.PER_QUESTION, "2026-11-04")
    assert len(per_q) == 4 * 3 * 3
    at5 = per_q[per_q["k"] == 5]
    # every question's answer is in the corpus on the last day: some pipeline finds each at k=5
    assert at5.groupby("question_id")["hit"].max().tolist() == [1.0] * 4
    assert (at5["gold_missing"] == 0).all()
    q1 = at5[(at5["question_id"] == "q1") & (at5["pipeline"] == "dense")].iloc[0]
    assert q1["first_relevant_rank"] >= 1 and len(store.split_ids(q1["retrieved"])) == 5
    assert 0 < q1["top1_score"] <= 1  # a cosine similarity
    # on the first day, the shark article (published on day 2) is missing from the corpus
    first = rows(data, contract.PER_QUESTION, "2026-11-02")
    assert set(first[first["gold_missing"] == 1]["question_id"]) == {"q3", "q4"}
    assert results[-1].mean("bm25", "recall", 5) == pytest.approx(
        metrics[(metrics["run_date"] == "2026-11-04") & (metrics["pipeline"] == "bm25") & (metrics["k"] == 5)
                & (metrics["metric"] == "recall")]["value"].iloc[0])


def test_deleted_answer_becomes_a_miss_and_past_dates_rerun_identically(e2e_config, embedder):
    backfill(e2e_config, DAYS[0], DAYS[-1])
    data = e2e_config.data_dir
    before = rows(data, contract.METRICS, "2026-11-04").reset_index(drop=True)
    with Corpus.in_dir(data) as corpus:
        assert corpus.delete(["e2e-ferry-strike"], "2026-11-05", reason="test") == 1
    result = run_day(e2e_config, date(2026, 11, 5), embedder=embedder)
    q1 = [r for r in result.per_question if r["question_id"] == "q1"]
    assert all(r["hit"] == 0.0 and r["gold_missing"] == 1 for r in q1)
    assert result.run["docs_deleted"] == 1 and result.run["docs_total"] == 6
    # re-running an earlier date rebuilds that day's corpus: identical metrics, no new embedding
    again = run_day(e2e_config, DAYS[-1], embedder=embedder)
    assert again.run["chunks_embedded"] == 0
    after = rows(data, contract.METRICS, "2026-11-04").reset_index(drop=True)
    assert after.equals(before)
    assert store.read_runs(data)["run_date"].dt.date.tolist() == DAYS + [date(2026, 11, 5)]


def test_a_failing_feed_does_not_stop_the_run(e2e_config, embedder):
    broken = DATA / "feeds" / "truncated-head.xml"
    config = e2e_config.replace(sources=e2e_config.sources + (
        SourceConfig(name="down", url="http://127.0.0.1:9/rss.xml"),
        SourceConfig(name="broken", path=broken)))
    result = run_day(config, DAYS[0], embedder=embedder)
    # A past date replays the corpus for the URL instead of fetching it: not counted among the feeds.
    assert (result.run["feeds_ok"], result.run["feeds_failed"], result.run["status"]) == (1, 1, "degraded")
    assert result.run["docs_total"] == 3
    assert [o.location for o in result.failed_feeds] == [str(broken)]


def test_a_missing_source_path_stops_the_run_before_anything_is_written(e2e_config, embedder):
    missing = e2e_config.data_dir.parent / "nope.xml"
    config = e2e_config.replace(sources=e2e_config.sources + (SourceConfig(name="missing", path=missing),))
    with pytest.raises(FeedError, match=f"source 'missing': {missing}: no such file or directory"):
        run_day(config, DAYS[0], embedder=embedder)
    assert not (config.data_dir / contract.RUNS).exists()


def write_config(tmp_path: Path, e2e_config, extra: str = "") -> Path:
    path = tmp_path / "monitor.toml"
    path.write_text(f"""
data_dir = "{e2e_config.data_dir}"
gold = "{e2e_config.gold}"
[[sources]]
name = "ledger"
path = "{e2e_config.sources[0].path}"
[retrieval]
k = [1, 3, 5]
candidate_depth = 10
{extra}""")
    return path


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "pipeline", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)


def test_cli_run_prints_a_summary_and_writes_the_series(tmp_path, e2e_config):
    done = cli("run", "--config", str(write_config(tmp_path, e2e_config)), "--date", "2026-11-03")
    assert done.returncode == 0, done.stderr
    assert "2026-11-03: ok" in done.stdout and "hybrid" in done.stdout
    assert store.read_runs(e2e_config.data_dir)["docs_total"].tolist() == [5]


def test_cli_bad_input_exits_2_naming_the_problem(tmp_path, e2e_config):
    bad = write_config(tmp_path, e2e_config, "rrf = 3\n")
    done = cli("run", "--config", str(bad), "--date", "2026-11-03")
    assert done.returncode == 2 and "unknown key retrieval.rrf" in done.stderr
    e2e_config.gold.write_text('{"id": "q1", "question": "ok?", "relevant": ["a"]}\n{"id": "q1"\n')
    done = cli("run", "--config", str(write_config(tmp_path, e2e_config)), "--date", "2026-11-03")
    assert done.returncode == 2 and f"{e2e_config.gold}:2: not valid JSON" in done.stderr
    assert not e2e_config.data_dir.exists()  # nothing was written
    done = cli("backfill", "--config", str(bad), "--start", "2026-11-03", "--end", "2026-11-01")
    assert done.returncode == 2 and "before --start" in done.stderr
    done = cli("run", "--config", str(tmp_path / "absent.toml"))
    assert done.returncode == 2 and "config file not found" in done.stderr


def test_cli_second_run_is_refused_while_one_holds_the_lock(tmp_path, e2e_config):
    with store.run_lock(e2e_config.data_dir):
        done = cli("run", "--config", str(write_config(tmp_path, e2e_config)), "--date", "2026-11-03")
    assert done.returncode == 3 and "another driftwatch run holds the lock" in done.stderr
