"""Retrieval metrics as trec_eval computes them: per question (scalar functions) and per question set (`evaluate`).
Questions without a relevant doc (grade > 0) get NaN relevance metrics, left out of means; unjudged@k stays defined."""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from numbers import Integral
from typing import NamedTuple

import numpy as np

METRICS = ("hit", "recall", "precision", "rr", "ndcg", "unjudged")
MEAN_NAMES = {
    "hit": "hit",
    "recall": "recall",
    "precision": "precision",
    "rr": "mrr",
    "ndcg": "ndcg",
    "unjudged": "unjudged",
}


@dataclass(frozen=True)
class MetricInfo:
    """One metric of the registry: its metrics.csv name, per_question.csv column, label and direction."""

    name: str  # metrics.csv's metric name, e.g. "mrr"
    column: str  # per_question.csv's column, e.g. "rr"
    label: str  # how pages, the report and messages name it, e.g. "MRR"
    higher_is_better: bool = True

    def series(self, k: int) -> str:
        """The series name of this metric at k, as alerts.csv and the config write it: "mrr@5"."""
        return series_name(self.name, k)


def series_name(metric: str, k: int) -> str:
    """"recall", 5 -> "recall@5", the name alerts.csv and the config give a series."""
    return f"{metric}@{k}"


REGISTRY: dict[str, MetricInfo] = {info.name: info for info in (
    MetricInfo("hit", "hit", "hit rate"),
    MetricInfo("recall", "recall", "recall"),
    MetricInfo("precision", "precision", "precision"),
    MetricInfo("mrr", "rr", "MRR"),
    MetricInfo("ndcg", "ndcg", "nDCG"),
    MetricInfo("unjudged", "unjudged", "unjudged share", higher_is_better=False),
    # The answer layer's per-answer scores (per_answer.csv's columns; pipeline/answers/), watched by the same
    # drop and slow-drift rules; they have no k.
    MetricInfo("faithfulness", "faithfulness", "faithfulness"),
    MetricInfo("answer_relevance", "answer_relevance", "answer relevance"),
    MetricInfo("k_precision", "k_precision", "K-precision"),
)}
ANSWER_WATCHED = ("faithfulness", "answer_relevance", "k_precision")
RETRIEVAL_METRICS = tuple(MEAN_NAMES.values())  # the retrieval metrics' names in metrics.csv, in the pages' order
# What a summary shows (the run summary of `run`, the weekly review's table): quality, then coverage.
HEADLINE = ("hit", "recall", "mrr", "ndcg", "unjudged")
# The headline's quality metrics (unjudged is coverage: shown, never alerted on): watched by the drop and slow-drift
# rules unless alerts.metrics says otherwise (at `default_k`), and the Overview's cards.
DEFAULT_WATCHED = tuple(m for m in HEADLINE if REGISTRY[m].higher_is_better)
# What `eval` (the CI gate, pipeline/gate.py) gates: every retrieval metric where higher is better.
GATED = tuple(m for m in RETRIEVAL_METRICS if REGISTRY[m].higher_is_better)
DEFAULT_METRIC = "recall"  # the metric a chart or a metric picker shows first
CONTEXT_K = 5  # about the passages a RAG prompt takes: see default_k


def default_k(ks: Iterable[int]) -> int:
    """The cutoff shown and watched unless one is asked for: the largest k not above CONTEXT_K (5), else the smallest.

    A generator reads about the top 5 passages, so the largest cutoff within them is the one closest to what it
    sees; when every cutoff is above 5 (k = (10, 20)), the smallest is the closest. The alerts' default watched
    series (config.AlertsConfig.watched), the command line's summaries, every page's "Cutoff k", the weekly review
    and the signals all take it from here, so they never disagree."""
    ks = sorted({int(k) for k in ks})
    if not ks:
        raise ValueError("no k to choose from")
    return max([k for k in ks if k <= CONTEXT_K] or [ks[0]])


def metric_info(name: str) -> MetricInfo:
    """The registry entry of a metrics.csv name; the error lists the valid names."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown metric {name!r} (valid: {', '.join(REGISTRY)})") from None


def parse_series(name: str) -> tuple[MetricInfo, int]:
    """"recall@5" -> (recall's entry, 5)."""
    metric, _, k = name.partition("@")
    if metric not in REGISTRY or not k.isdigit() or int(k) < 1:
        raise ValueError(f"{name!r} is not metric@k with a metric in {', '.join(REGISTRY)}")
    return REGISTRY[metric], int(k)


RELEVANCE_METRICS = METRICS[:-1]  # undefined (NaN) for a question without relevant docs
NO_RELEVANT_RANK = 0  # first_relevant_rank when no relevant doc was retrieved

Ranking = Sequence[str]  # doc ids, best first, no duplicates
Qrels = Mapping[str, int]  # doc id -> grade; > 0 relevant, 0 judged non-relevant, absent unjudged


def _check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, Integral) or k < 1:
        raise ValueError(f"k must be a positive int, got {k!r}")


def num_relevant(qrels: Qrels) -> int:
    """Relevant docs in the qrels, retrieved or not: the recall denominator."""
    return sum(grade > 0 for grade in qrels.values())


def _relevant_in_top(ranking: Ranking, qrels: Qrels, k: int) -> int:
    _check_k(k)
    return sum(qrels.get(doc, 0) > 0 for doc in ranking[:k])


def hit_at_k(ranking: Ranking, qrels: Qrels, k: int) -> float:
    """1.0 if a relevant doc is in the top k, else 0.0 (trec_eval `success`)."""
    hits = _relevant_in_top(ranking, qrels, k)
    return float(hits > 0) if num_relevant(qrels) else math.nan


def recall_at_k(ranking: Ranking, qrels: Qrels, k: int) -> float:
    """Relevant docs in the top k / relevant docs in the qrels."""
    hits = _relevant_in_top(ranking, qrels, k)
    relevant = num_relevant(qrels)
    return hits / relevant if relevant else math.nan


def precision_at_k(ranking: Ranking, qrels: Qrels, k: int) -> float:
    """Relevant docs in the top k / k, even when fewer than k docs were retrieved (trec_eval `P`)."""
    hits = _relevant_in_top(ranking, qrels, k)
    return hits / k if num_relevant(qrels) else math.nan


def first_relevant_rank(ranking: Ranking, qrels: Qrels) -> int:
    """1-based rank of the first relevant doc in the whole ranking, or NO_RELEVANT_RANK (0) if none."""
    return next((rank for rank, doc in enumerate(ranking, 1) if qrels.get(doc, 0) > 0), NO_RELEVANT_RANK)


def reciprocal_rank(ranking: Ranking, qrels: Qrels, k: int | None = None) -> float:
    """1 / rank of the first relevant doc, 0.0 if it is beyond k (or absent); its mean is MRR@k."""
    if k is not None:
        _check_k(k)
    rank = first_relevant_rank(ranking, qrels)
    if not num_relevant(qrels):
        return math.nan
    return 1 / rank if rank != NO_RELEVANT_RANK and (k is None or rank <= k) else 0.0


def _dcg(grades: Sequence[int]) -> float:
    return sum((2**grade - 1) / math.log2(rank + 1) for rank, grade in enumerate(grades, 1))


def ndcg_at_k(ranking: Ranking, qrels: Qrels, k: int) -> float:
    """DCG of the top k (gain 2^grade - 1, discount log2(rank + 1)) over the DCG of the k best grades in the qrels."""
    _check_k(k)
    ideal = sorted((grade for grade in qrels.values() if grade > 0), reverse=True)[:k]
    if not ideal:
        return math.nan
    return _dcg([qrels.get(doc, 0) for doc in ranking[:k]]) / _dcg(ideal)


def unjudged_at_k(ranking: Ranking, qrels: Qrels, k: int) -> float:
    """Share of the retrieved top-k docs absent from the qrels (grade 0 is judged); 0.0 if nothing was retrieved."""
    _check_k(k)
    top = ranking[:k]
    return sum(doc not in qrels for doc in top) / len(top) if top else 0.0


def ranking_from_scores(scores: Mapping[str, float]) -> list[str]:
    """Doc ids in trec_eval's order: score descending, ties broken by doc id descending (lexicographic).

    trec_eval keeps scores as 32-bit floats, so scores that are equal at that precision tie too.
    """
    single_precision = array("f", scores.values())
    return [doc for _, doc in sorted(zip(single_precision, scores), reverse=True)]


class Mean(NamedTuple):
    """A metric's mean over the questions where it is defined."""

    value: float  # NaN when no question entered the mean
    count: int  # questions for which the metric is defined


@dataclass(frozen=True, eq=False)
class Evaluation:
    """Per-question metrics: values[k][metric] is a float64 array over questions, NaN where undefined."""

    ks: tuple[int, ...]
    values: Mapping[int, Mapping[str, np.ndarray]]
    first_relevant_rank: np.ndarray  # int, NO_RELEVANT_RANK where no relevant doc was retrieved
    num_relevant: np.ndarray  # int, relevant docs in each question's qrels

    def mean(self, metric: str, k: int) -> Mean:
        """Mean of a metric at cutoff k over the questions where it is defined."""
        if metric not in METRICS:
            raise ValueError(f"unknown metric {metric!r}; valid: {', '.join(METRICS)}")
        if k not in self.values:
            raise ValueError(f"cutoff {k!r} not evaluated; evaluated: {', '.join(map(str, self.ks))}")
        column = self.values[k][metric]
        defined = column[~np.isnan(column)]
        return Mean(float(defined.mean()) if defined.size else math.nan, int(defined.size))


def mean_rows(result: Evaluation, run_date: str, pipeline: str, ks: Sequence[int] | None = None) -> list[dict]:
    """metrics.csv's rows of one evaluation: each metric's mean and its n at each k (`ks`, else the evaluated)."""
    return [{"run_date": run_date, "pipeline": pipeline, "k": k, "metric": MEAN_NAMES[name], "value": mean.value,
             "n_questions": mean.count}
            for k in (result.ks if ks is None else ks) for name in METRICS for mean in (result.mean(name, k),)]


def _left_aligned(flat: np.ndarray, lengths: np.ndarray, width: int) -> np.ndarray:
    """Ragged rows, concatenated in flat, left-aligned in a (len(lengths), width) matrix padded with 0."""
    matrix = np.zeros((len(lengths), width))
    matrix[np.arange(width) < lengths[:, None]] = flat
    return matrix


def _cumulative_dcg(grades: np.ndarray) -> np.ndarray:
    """Column j: DCG of each row's first j + 1 grades."""
    # libm's log2, as trec_eval and _dcg use: numpy's vectorised log2 can differ in the last bit.
    discounts = np.array([math.log2(rank + 1) for rank in range(1, grades.shape[1] + 1)])
    gains = np.exp2(grades) - 1
    gains /= discounts
    return gains.cumsum(axis=1, out=gains)


def _ideal_dcg(qrels: Sequence[Qrels], ks: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Each question's ideal DCG at each k (columns in the order of ks) and its number of relevant docs."""
    sizes = np.fromiter(map(len, qrels), dtype=np.intp, count=len(qrels))
    grades = np.fromiter(chain.from_iterable(q.values() for q in qrels), dtype=np.float64, count=int(sizes.sum()))
    relevant = grades > 0
    n_relevant = np.bincount(np.repeat(np.arange(len(qrels)), sizes)[relevant], minlength=len(qrels))
    width = int(n_relevant.max(initial=0))
    best = np.sort(_left_aligned(grades[relevant], n_relevant, width), axis=1)[:, ::-1][:, : max(ks)]
    cumulative = np.pad(_cumulative_dcg(best), ((0, 0), (1, 0)))  # column j: ideal DCG of the top j
    return cumulative[:, np.minimum(ks, best.shape[1])], n_relevant


def evaluate(rankings: Sequence[Ranking], qrels: Sequence[Qrels], ks: Sequence[int]) -> Evaluation:
    """Every metric at every cutoff for a question set; equal to the scalar functions, question by question."""
    if len(rankings) != len(qrels):
        raise ValueError(f"{len(rankings)} rankings but {len(qrels)} qrels")
    for k in ks:
        _check_k(k)
    ks = tuple(dict.fromkeys(map(int, ks)))
    if not ks:
        raise ValueError("ks must name at least one cutoff")
    lengths = np.fromiter(map(len, rankings), dtype=np.intp, count=len(rankings))
    width = max(max(ks), int(lengths.max(initial=0)))

    # The one pass of dict lookups, run by map/chain in C; NaN marks an unjudged doc.
    lookups = chain.from_iterable(map(q.get, r, repeat(math.nan)) for r, q in zip(rankings, qrels))
    grades = _left_aligned(np.fromiter(lookups, dtype=np.float64, count=int(lengths.sum())), lengths, width)
    unjudged = np.isnan(grades)
    np.copyto(grades, 0.0, where=unjudged)
    relevant = grades > 0
    columns = np.array(ks) - 1
    hits = np.cumsum(relevant, axis=1, dtype=np.int32)[:, columns]
    unjudged_counts = np.cumsum(unjudged, axis=1, dtype=np.int32)[:, columns]
    dcg = _cumulative_dcg(grades[:, : max(ks)])[:, columns]
    ideal_dcg, n_relevant = _ideal_dcg(qrels, ks)
    first = np.where(relevant.any(axis=1), relevant.argmax(axis=1) + 1, NO_RELEVANT_RANK)
    defined = n_relevant > 0

    values = {}
    for j, k in enumerate(ks):
        shown = np.minimum(lengths, k)
        relevance = {
            "hit": (hits[:, j] > 0).astype(np.float64),
            "recall": hits[:, j] / np.maximum(n_relevant, 1),
            "precision": hits[:, j] / k,
            "rr": np.where((first != NO_RELEVANT_RANK) & (first <= k), 1.0 / np.maximum(first, 1), 0.0),
            "ndcg": dcg[:, j] / np.where(defined, ideal_dcg[:, j], 1.0),
        }
        values[k] = {name: np.where(defined, relevance[name], np.nan) for name in RELEVANCE_METRICS}
        values[k]["unjudged"] = np.divide(unjudged_counts[:, j], shown, out=np.zeros(len(shown)), where=shown > 0)
    return Evaluation(ks=ks, values=values, first_relevant_rank=first, num_relevant=n_relevant)
