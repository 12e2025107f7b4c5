"""Benchmark pipeline.metrics.evaluate against pytrec_eval and ranx: speed and per-question agreement.
Run: python bench/metrics.py (it puts the repo root on sys.path itself)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytrec_eval
import ranx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pipeline.metrics import Evaluation, evaluate, ranking_from_scores  # noqa: E402

N_QUESTIONS = 10_000
DEPTH = 100
KS = (1, 3, 5, 10, 100)
CORPUS_SIZE = 50_000
REPEATS = 3
SEED = 0
# our metric -> (pytrec_eval measure, ranx metric), "{k}" standing for the cutoff
REFERENCE_NAMES = {
    "hit": ("success_{k}", "hit_rate@{k}"),
    "recall": ("recall_{k}", "recall@{k}"),
    "precision": ("P_{k}", "precision@{k}"),
    "rr": ("recip_rank", "mrr@{k}"),
    "ndcg": ("ndcg_cut_{k}", "ndcg_burges@{k}"),
}
TREC_MEASURES = {f"{measure}.{','.join(map(str, KS))}" for measure in ("success", "recall", "P", "ndcg_cut")} | {
    "recip_rank"  # no cutoff: MRR@DEPTH here, MRR@k needs the run truncated to its top k
}

Runs = dict[str, dict[str, float]]
Judgements = dict[str, dict[str, int]]


def synthetic_questions() -> tuple[Runs, Judgements]:
    """Runs of DEPTH docs and graded qrels (0..3) over 10 retrieved and 5 random docs per question."""
    rng = np.random.default_rng(SEED)
    runs, qrels = {}, {}
    for i in range(N_QUESTIONS):
        qid = f"q{i:05d}"  # zero-padded: ranx reports questions in sorted id order
        retrieved = rng.choice(CORPUS_SIZE, size=DEPTH, replace=False)
        # distinct and exact as 32-bit floats (trec_eval's precision), so all three tools rank alike
        scores = np.sort(rng.choice(2**24, size=DEPTH, replace=False))[::-1] / 2**24
        runs[qid] = {f"d{doc}": score for doc, score in zip(retrieved, scores.tolist())}
        judged = np.concatenate([rng.choice(retrieved, size=10, replace=False), rng.integers(CORPUS_SIZE, size=5)])
        grades = rng.choice(4, size=len(judged), p=[0.55, 0.25, 0.1, 0.1])
        qrels[qid] = {f"d{doc}": int(grade) for doc, grade in zip(judged, grades)}
    return runs, qrels


def best_time(task: Callable[[], object]) -> tuple[float, object]:
    """Fastest wall time of REPEATS runs, and the result."""
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        result = task()
        times.append(time.perf_counter() - start)
    return min(times), result


def run_ranx(runs: Runs, qrels: Judgements) -> dict[str, np.ndarray]:
    metrics = [ranx_name.format(k=k) for _, ranx_name in REFERENCE_NAMES.values() for k in KS]
    judgements, run = ranx.Qrels.from_dict(qrels), ranx.Run.from_dict(runs)
    return ranx.evaluate(judgements, run, metrics, return_mean=False, save_results_in_run=False)


def max_difference(ours: Evaluation, reference: Callable[[str, int], np.ndarray]) -> float:
    """Largest |ours - reference| over questions with a relevant doc, every metric and cutoff."""
    defined = ours.num_relevant > 0
    return max(
        float(np.abs(ours.values[k][name] - reference(name, k))[defined].max()) for name in REFERENCE_NAMES for k in KS
    )


def main() -> None:
    runs, qrels = synthetic_questions()
    qids = list(runs)
    rankings = [ranking_from_scores(run) for run in runs.values()]
    # pytrec_eval's inputs are built outside its timers, which favours it: gain 2^grade - 1, and MRR@k's truncated runs
    gains = {qid: {doc: 2**grade - 1 for doc, grade in q.items()} for qid, q in qrels.items()}
    truncated = {
        k: {qid: {doc: runs[qid][doc] for doc in r[:k]} for qid, r in zip(qids, rankings)} for k in KS if k < DEPTH
    }

    judgements = list(qrels.values())
    ours_time, ours = best_time(lambda: evaluate(rankings, judgements, KS))
    scores_time, _ = best_time(lambda: evaluate([ranking_from_scores(run) for run in runs.values()], judgements, KS))
    trec_time, trec = best_time(lambda: pytrec_eval.RelevanceEvaluator(gains, TREC_MEASURES).evaluate(runs))
    mrr_time, trec_mrr = best_time(
        lambda: {k: pytrec_eval.RelevanceEvaluator(gains, {"recip_rank"}).evaluate(run) for k, run in truncated.items()}
    )
    ranx_time, ranx_scores = best_time(lambda: run_ranx(runs, qrels))

    def trec_values(name: str, k: int) -> np.ndarray:
        results = trec_mrr[k] if name == "rr" and k < DEPTH else trec
        return np.array([results[qid][REFERENCE_NAMES[name][0].format(k=k)] for qid in qids])

    print(f"{N_QUESTIONS:,} questions x {DEPTH} results, ks {KS}, best of {REPEATS}")
    print(f"{int((ours.num_relevant > 0).sum()):,} questions have a relevant doc (compared; the others are NaN for us)")
    for label, seconds in [
        ("ours: evaluate(rankings)", ours_time),
        ("ours: ranking_from_scores + evaluate", scores_time),
        (f"pytrec_eval: one call (MRR@{DEPTH} only)", trec_time),
        (f"pytrec_eval: + MRR@k<{DEPTH} on truncated runs", trec_time + mrr_time),
        ("ranx: Qrels/Run.from_dict + evaluate", ranx_time),
    ]:
        print(f"{label:<44} {N_QUESTIONS / seconds:>9,.0f} questions/s {seconds * 1000:>6.0f} ms")
    with_mrr = (trec_time + mrr_time) / ours_time
    print(f"speed-up over pytrec_eval: {trec_time / ours_time:.1f}x one call, {with_mrr:.1f}x with MRR@k")
    print(f"speed-up over ranx:        {ranx_time / ours_time:.1f}x (ranx runs numba on every core)")
    ranx_diff = max_difference(ours, lambda name, k: ranx_scores[REFERENCE_NAMES[name][1].format(k=k)])
    print(f"max |ours - pytrec_eval| per question: {max_difference(ours, trec_values):.3g}")
    print(f"max |ours - ranx| per question:        {ranx_diff:.3g}")


if __name__ == "__main__":
    main()
