"""The CI gate and its regression lab: broken settings fail the gate with the drop in the table;
restoring them gives the baseline numbers back."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import feedparser
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
    assert set(baseline["fingerprint"]) == {"gold", "documents", "config"}
    assert baseline["fingerprint"]["config"] == BASE.config_hash()
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
    assert any(n.startswith("settings differ from the baseline's") for n in verdict.notes)  # compared, not refused
    row = next(line for line in table(report, reference).splitlines()
               if line.startswith(pipeline) and f" {metric}@{k} " in line)
    assert f"{new - old:+.4f}" in row  # the drop is visible in the table
    restored = evaluate_documents(BASE, GOLD_FILE, DOCS, k, work)
    assert restored["pipelines"] == reference["pipelines"]
    assert judge(restored, min_recall=None, max_drop=MAX_DROP, baseline=reference).passed


def test_minimum_holds_for_every_gated_pipeline(baseline):
    recall = {p: v["means"]["recall"] for p, v in baseline["pipelines"].items()}
    best, worst = max(recall, key=recall.get), min(recall, key=recall.get)
    assert judge(baseline, min_recall=recall[worst], max_drop=None, baseline=None).passed
    verdict = judge(baseline, min_recall=recall[best], max_drop=None, baseline=None)  # by default: every pipeline
    assert not verdict.passed
    assert sorted(r.split()[2] for r in verdict.reasons) == sorted(p for p in recall if recall[p] < recall[best])
    assert f"recall@5 of {worst} is {recall[worst]:.4f}, below the minimum {recall[best]:.4f}" in verdict.reasons
    only_best = judge(baseline, min_recall=recall[best], max_drop=None, baseline=None, pipelines=[best])
    assert only_best.passed and only_best.checked == (
        f"recall@5 of {best} is {recall[best]:.4f}, at least the minimum {recall[best]:.4f}",)
    assert not judge(baseline, min_recall=recall[best], max_drop=None, baseline=None, pipelines=[worst]).passed


def with_value(report: dict, pipeline: str, metric: str, value: float) -> dict:
    changed = copy.deepcopy(report)
    changed["pipelines"][pipeline]["means"][metric] = value
    return changed


@pytest.mark.parametrize("where", ["report", "baseline"])
@pytest.mark.parametrize("metric", ["recall", "ndcg"])
def test_a_nan_metric_fails_the_gate(baseline, where, metric):
    nan = with_value(baseline, "dense", metric, math.nan)
    report, before = (nan, baseline) if where == "report" else (baseline, nan)
    verdict = judge(report, min_recall=None, max_drop=MAX_DROP, baseline=before)
    place = "this report" if where == "report" else "the baseline"
    assert verdict.reasons == (f"{metric}@5 of dense is undefined (NaN) in {place}: the drop cannot be checked",)
    if where == "report" and metric == "recall":
        verdict = judge(report, min_recall=0.1, max_drop=None, baseline=None)
        assert verdict.reasons == ("recall@5 of dense is undefined (NaN): it cannot be held to the minimum 0.1000",)


def test_a_pipeline_missing_from_the_report_fails(baseline):
    report = copy.deepcopy(baseline)
    del report["pipelines"]["hybrid"]
    verdict = judge(report, min_recall=None, max_drop=MAX_DROP, baseline=baseline)
    assert verdict.reasons == ("hybrid is gated but was not evaluated (evaluated: bm25, dense)",)
    verdict = judge(report, min_recall=0.1, max_drop=None, baseline=None, pipelines=["hybrid"])
    assert verdict.reasons == ("hybrid is gated but was not evaluated (evaluated: bm25, dense)",)
    new = judge(baseline, min_recall=None, max_drop=MAX_DROP, baseline=report)  # a new pipeline: noted, not failed
    assert new.passed and "hybrid is not in the baseline: its drop was not checked" in new.notes


def test_work_dir_scores_only_the_documents_given_and_other_documents_are_refused(tmp_path, work, baseline):
    folder = DOCS[0]
    entries = {e.id for f in folder.glob("*.xml") for e in feedparser.parse(f.read_bytes()).entries}
    gold = tmp_path / "gold-part.jsonl"
    gold.write_text("".join(GOLD_FILE.read_text(encoding="utf-8").splitlines(keepends=True)[:10]), encoding="utf-8")
    report = evaluate_documents(BASE, gold, [folder], 5, work)  # `work` holds every document of DOCS before
    assert report["docs_total"] == len(entries) < baseline["docs_total"]
    assert all(len(v["questions"]) == 10 for v in report["pipelines"].values())
    with pytest.raises(GateError, match="made with another gold set and document set"):
        judge(report, min_recall=None, max_drop=MAX_DROP, baseline=baseline)
    for part, label in (("gold", "gold set"), ("documents", "document set")):
        other = copy.deepcopy(baseline)
        other["fingerprint"][part] = report["fingerprint"][part]
        with pytest.raises(GateError, match=f"made with another {label} \\("):
            judge(baseline, min_recall=None, max_drop=MAX_DROP, baseline=other)


def test_work_dir_holding_other_data_is_refused(tmp_path):
    (tmp_path / "runs.csv").write_text("run_date\n")
    with pytest.raises(GateError, match="did not build"):
        evaluate_documents(BASE, GOLD_FILE, DOCS, 5, tmp_path)
    assert (tmp_path / "runs.csv").read_text() == "run_date\n"


def test_baseline_errors(tmp_path, baseline):
    with pytest.raises(GateError, match="not found"):
        load_report(tmp_path / "none.json")
    (tmp_path / "x.json").write_text("[1, 2]")
    with pytest.raises(GateError, match="not a driftwatch eval report"):
        load_report(tmp_path / "x.json")
    (tmp_path / "v1.json").write_text(json.dumps({**baseline, "version": 1}))
    with pytest.raises(GateError, match="version 1, this driftwatch reads version 2: make the baseline again"):
        load_report(tmp_path / "v1.json")
    (tmp_path / "bare.json").write_text(json.dumps({k: v for k, v in baseline.items() if k != "fingerprint"}))
    with pytest.raises(GateError, match="no fingerprint"):
        load_report(tmp_path / "bare.json")
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
    dense = baseline["pipelines"]["dense"]["means"]["recall"]
    assert f"ok: recall@5 of dense is {dense:.4f}, at least the minimum 0.5000" in done.stdout  # what was checked
    assert re.search(r"^ok: no metric@5 of hybrid dropped more than 0\.0300 \(the worst change: ", done.stdout, re.M)
    assert "gate passed (6 checks passed, 0 failed)" in done.stdout
    done = gate("--k", "5", "--baseline", str(tmp_path / "missing.json"), "--config", str(plain))
    assert done.returncode == 2 and "baseline report not found" in done.stderr


def docs_block(language: str) -> str:
    """The first fenced block of `language` on the documentation's CI gate page."""
    text = (ROOT / "docs" / "gate.md").read_text(encoding="utf-8")
    start = text.index(f"```{language}\n") + len(language) + 4
    return text[start:text.index("```\n", start)]


def test_the_documented_gate_command_passes_on_a_fresh_clone(tmp_path):
    """The documentation's command, run as written by a shell in a checkout without reports/ (no baseline yet)."""
    for name in ("data", "monitor.toml"):
        (tmp_path / name).symlink_to(ROOT / name)
    command = docs_block("bash")
    done = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT),
                               "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "note: no baseline report at reports/main.json (--baseline-optional)" in done.stdout
    assert "gate passed (3 checks passed, 0 failed)" in done.stdout
    assert json.loads((tmp_path / "reports" / "pr.json").read_text())["docs_total"] == 420


def test_the_workflow_file_is_the_documented_one():
    assert (ROOT / ".github/workflows/retrieval-gate.yml").read_text() == docs_block("yaml")
    assert docs_block("bash").replace("\\\n    ", "") in docs_block("yaml").replace("\\\n            ", "")
