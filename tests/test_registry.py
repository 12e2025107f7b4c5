"""The metric registry (pipeline/metrics.py): labels, the headline and gated lists, and the one `default_k` that
the alerts, the command line, the views, the signals and the weekly review all use."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from pipeline import contract, metrics, report, signals, store, views
from pipeline.cli import _summary, main
from pipeline.config import AlertsConfig

RUN = {"run_date": "2026-11-17", "status": "ok", "feeds_ok": 1, "feeds_failed": 0, "docs_new": 1, "docs_updated": 0,
       "docs_deleted": 0, "docs_total": 1, "chunks_total": 1, "chunks_embedded": 1, "seconds": 1.0, "events": ""}


@pytest.mark.parametrize("ks, k", [([1, 3, 5, 10], 5), ([1, 3], 3), ([10, 20], 10), ([20, 10], 10), ([5], 5),
                                   ([7], 7), ([6, 50, 8], 6), ((k for k in (2, 9)), 2)])
def test_default_k_is_the_largest_up_to_five_else_the_smallest(ks, k):
    assert metrics.default_k(ks) == k


def test_default_k_of_nothing_is_an_error():
    with pytest.raises(ValueError, match="no k"):
        metrics.default_k([])


def _summary_k(ks) -> int:
    """The k of the metrics table that `run` prints, read from its header ("recall@10")."""
    rows = [{"pipeline": "bm25", "k": k, "metric": m, "value": k / 100} for k in ks for m in metrics.RETRIEVAL_METRICS]
    result = SimpleNamespace(run=RUN, metrics=rows, mean=lambda p, m, k: next(
        r["value"] for r in rows if (r["pipeline"], r["metric"], r["k"]) == (p, m, k)))
    header = _summary(result).splitlines()[1]
    found = {int(k) for k in re.findall(r"recall@(\d+)", header)}
    assert len(found) == 1, header
    return found.pop()


def _watched_k(ks) -> int:
    found = {metrics.parse_series(name)[1] for name in AlertsConfig().watched(tuple(ks))}
    assert len(found) == 1
    return found.pop()


def _signals_k(ks) -> int:
    """The k of the early warnings `run` prints: each row's value is its k, so the value says which k was chosen."""
    rows = [{"run_date": RUN["run_date"], "pipeline": "bm25", "k": k, "question_id": signals.PER_RUN,
             "signal": signals.GOLD_MARGIN, "value": float(k)} for k in ks]
    return int(signals.summary(rows)["bm25"][signals.GOLD_MARGIN])


def _report_k(ks, data_dir: Path) -> int:
    day = "2026-11-17"  # in 2026-W47
    store.replace_date(data_dir, contract.RUNS, day, [{
        **RUN, "run_id": "r", "started_at": "", "finished_at": "", "model": "m", "config_hash": "h"}])
    store.replace_date(data_dir, contract.METRICS, day, [
        {"run_date": day, "pipeline": "bm25", "k": k, "metric": m, "value": 0.5, "n_questions": 1}
        for k in ks for m in metrics.RETRIEVAL_METRICS])
    store.replace_date(data_dir, contract.PER_QUESTION, day, [
        {"run_date": day, "pipeline": "bm25", "k": k, "question_id": "q1", "hit": 1.0, "recall": 0.5,
         "precision": 0.1, "rr": 1.0, "ndcg": 0.5, "unjudged": 0.0, "first_relevant_rank": 1, "top1_score": 1.0,
         "retrieved": "d1", "gold_missing": 0} for k in ks])
    review = report.weekly_review(store.read_runs(data_dir), store.read_metrics(data_dir),
                                  store.read_per_question(data_dir), store.read(data_dir, contract.ALERTS), "2026-W47")
    return review.k


def test_alerts_and_the_run_summary_watch_the_same_k_when_every_k_is_above_five():
    # The bug this registry fixed: with k = (10, 20) the alerts watched @10 while `run` printed @20.
    assert AlertsConfig().watched((10, 20)) == ("hit@10", "recall@10", "mrr@10", "ndcg@10")
    assert _summary_k((10, 20)) == 10


@pytest.mark.parametrize("ks", [(1, 3, 5, 10), (10, 20), (3,), (7, 6), (1, 20)])
def test_every_user_of_default_k_gives_the_same_answer(ks, tmp_path):
    expected = metrics.default_k(ks)
    assert _watched_k(ks) == expected  # the alert rules (config.AlertsConfig.watched)
    assert _summary_k(ks) == expected  # `run`'s printed table
    assert _signals_k(ks) == expected  # `run`'s early-warning line
    assert _report_k(ks, tmp_path / "store") == expected  # the weekly review (report and pages/weekly.py)
    assert views.default_k is metrics.default_k  # every page's "Cutoff k" select calls views.default_k


def test_the_gated_and_watched_lists_hold_only_metrics_where_higher_is_better():
    assert metrics.GATED == ("hit", "recall", "precision", "mrr", "ndcg")
    assert metrics.DEFAULT_WATCHED == ("hit", "recall", "mrr", "ndcg")
    assert metrics.HEADLINE == ("hit", "recall", "mrr", "ndcg", "unjudged")  # unjudged shown, never gated nor watched
    assert set(metrics.HEADLINE) <= set(metrics.RETRIEVAL_METRICS) and metrics.DEFAULT_METRIC in metrics.HEADLINE


def test_labels_come_from_the_registry():
    assert views.metric_label("ndcg", 5) == "nDCG@5" and views.metric_label("hit") == "hit rate"
    assert views.metric_label("unjudged", 10) == "unjudged share@10"
    assert views.metric_label("psi_mean") == "psi_mean"  # not a metric of the registry: as it is
    assert all(info.label for info in metrics.REGISTRY.values())


class _Stop(Exception):
    pass


@pytest.mark.parametrize("ks, asked, k", [("[10, 20]", [], 10), ("[1, 3, 5, 10]", [], 5), ("[10, 20]", ["--k", "20"], 20)])
def test_eval_gates_at_the_default_k_unless_asked(tmp_path, monkeypatch, ks, asked, k):
    config = tmp_path / "monitor.toml"
    config.write_text(f'data_dir = "{tmp_path}"\ngold = "gold.jsonl"\n\n[retrieval]\nk = {ks}\n')
    seen = []

    def evaluate_documents(config, gold, docs, k, *args, **kwargs):
        seen.append(k)
        raise _Stop  # what is gated at k is test_gate's matter

    monkeypatch.setattr("pipeline.gate.evaluate_documents", evaluate_documents)
    with pytest.raises(_Stop):
        main(["eval", "--gold", str(tmp_path / "gold.jsonl"), "--docs", str(tmp_path), "--config", str(config), *asked])
    assert seen == [k]
