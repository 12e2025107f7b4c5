"""The CI gate and its regression lab: broken settings fail the gate with the drop in the table;
restoring them gives the baseline numbers back."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.config import Bm25Config, Config, EmbedderConfig
from pipeline.demo import FEEDS_DIR, GOLD_FILE
from pipeline.gate import GateError, evaluate_documents, judge, load_report, table

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted(p for p in FEEDS_DIR.iterdir() if p.is_dir())
BASE = Config(data_dir=Path(), gold=Path())
MAX_DROP = 0.01


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """One corpus and embedding cache for the module: only the degraded embedder embeds again."""
    return tmp_path_factory.mktemp("gate-work")


@pytest.fixture(scope="module")
def baseline(work) -> dict:
    return evaluate_documents(BASE, GOLD_FILE, DOCS, 5, work)


def test_report_shape(baseline):
    assert baseline["k"] == 5 and baseline["docs_total"] == 420
    assert set(baseline["pipelines"]) == {"bm25", "dense", "hybrid"}
    dense = baseline["pipelines"]["dense"]
    assert len(dense["questions"]) == 50
    recalls = [q["recall"] for q in dense["questions"].values()]
    assert dense["means"]["recall"] == pytest.approx(sum(recalls) / len(recalls))


@pytest.mark.parametrize("broken, k, pipeline, metric", [
    (BASE.replace(embedder=EmbedderConfig(truncate_dim=32)), 5, "dense", "recall"),  # a degraded embedder
    (BASE.replace(bm25=Bm25Config(k1=15.0)), 5, "bm25", "ndcg"),  # BM25 k1 raised tenfold
    (BASE.replace(retrieval=dataclasses.replace(BASE.retrieval, fusion_depth=2)), 10, "hybrid", "recall"),
], ids=["embedder-truncated-to-32", "bm25-k1-x10", "fusion-of-top-2"])
def test_broken_setting_fails_the_gate_and_restoring_it_passes(work, broken, k, pipeline, metric):
    reference = evaluate_documents(BASE, GOLD_FILE, DOCS, k, work)
    report = evaluate_documents(broken, GOLD_FILE, DOCS, k, work)
    verdict = judge(report, min_recall=None, max_drop=MAX_DROP, baseline=reference)
    assert not verdict.passed
    old = reference["pipelines"][pipeline]["means"][metric]
    new = report["pipelines"][pipeline]["means"][metric]
    assert old - new > MAX_DROP
    assert any(r.startswith(f"{metric}@{k} of {pipeline} dropped") for r in verdict.reasons)
    row = next(line for line in table(report, reference).splitlines()
               if line.startswith(pipeline) and f" {metric}@{k} " in line)
    assert f"{new - old:+.4f}" in row  # the drop is visible in the table
    restored = evaluate_documents(BASE, GOLD_FILE, DOCS, k, work)
    assert restored["pipelines"] == reference["pipelines"]
    assert judge(restored, min_recall=None, max_drop=MAX_DROP, baseline=reference).passed


def test_minimum_recall(baseline):
    best = max(v["means"]["recall"] for v in baseline["pipelines"].values())
    assert judge(baseline, min_recall=best, max_drop=None, baseline=None).passed
    verdict = judge(baseline, min_recall=best + 0.01, max_drop=None, baseline=None)
    assert not verdict.passed and "below the minimum" in verdict.reasons[0]


def test_baseline_errors(tmp_path, baseline):
    with pytest.raises(GateError, match="not found"):
        load_report(tmp_path / "none.json")
    (tmp_path / "x.json").write_text("[1, 2]")
    with pytest.raises(GateError, match="not a driftwatch eval report"):
        load_report(tmp_path / "x.json")
    with pytest.raises(GateError, match="made at k=10"):
        judge(baseline, min_recall=None, max_drop=0.1, baseline={**baseline, "k": 10})


def gate(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "pipeline", "eval", "--gold", str(GOLD_FILE),
                           "--docs", *map(str, DOCS), *args], capture_output=True, text=True, env=env, timeout=600)


def test_cli_gate_exits_1_on_a_drop_and_0_once_restored(tmp_path, work, baseline):
    (tmp_path / "main.json").write_text(json.dumps(baseline))
    broken = tmp_path / "broken.toml"
    broken.write_text(f'data_dir = "{tmp_path}"\ngold = "{GOLD_FILE}"\n[embedder]\ntruncate_dim = 32\n')
    common = ["--k", "5", "--min-recall-at-k", "0.5", "--max-drop", "0.03", "--baseline", str(tmp_path / "main.json"),
              "--work-dir", str(work)]
    done = gate(*common, "--config", str(broken), "--out", str(tmp_path / "pr.json"))
    assert done.returncode == 1, done.stderr
    assert "FAIL: recall@5 of dense dropped" in done.stdout and "gate failed" in done.stdout
    assert json.loads((tmp_path / "pr.json").read_text())["k"] == 5
    plain = tmp_path / "plain.toml"
    plain.write_text(f'data_dir = "{tmp_path}"\ngold = "{GOLD_FILE}"\n')
    done = gate(*common, "--config", str(plain))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "gate passed" in done.stdout
    done = gate("--k", "5", "--baseline", str(tmp_path / "missing.json"), "--config", str(plain))
    assert done.returncode == 2 and "baseline report not found" in done.stderr
