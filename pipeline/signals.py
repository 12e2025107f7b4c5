"""Label-free early warnings of every target, per question and per run (signals.csv): signals that move before a
gold metric does. Pure functions over rankings and the stored per-question history; no I/O."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from pipeline import contract, store
from pipeline.gold import GoldQuestion
from pipeline.metrics import default_k
from pipeline.retrieval import Ranking

# Signal names, as signals.csv's `signal` column writes them.
GOLD_MARGIN = "gold_margin"  # score of the first gold document minus that of the k-th result (mean per run)
NEW_DOCS = "new_docs"  # top-k documents never in this question's top k on an earlier run
QUESTIONS_WITH_NEW = "questions_with_new_docs"  # per run: questions whose top k gained such a document
TOP1_SHIFT = "top1_shift"  # top-1 score minus its mean over the previous runs (mean per run)
TOP1_KS = "top1_ks"  # per run: KS distance of today's top-1 scores from those of the previous runs
TOP1_KS_P = "top1_ks_p"  # its two-sample p-value (descriptive: the earlier runs hold the same questions)
HNSW_RECALL = "hnsw_recall"  # top-k overlap of the HNSW dense index with exact search (mean per run)
TOP1_SIGNALS = (TOP1_SHIFT, TOP1_KS, TOP1_KS_P)  # at TOP1_K, whatever the configured ks
SIGNALS = (GOLD_MARGIN, NEW_DOCS, QUESTIONS_WITH_NEW, TOP1_SHIFT, TOP1_KS, TOP1_KS_P, HNSW_RECALL)
TOP1_K = 1  # the k of the top-1 signals' rows
PER_RUN = ""  # the question_id of a per-run row


def gold_margin(ranking: Ranking, relevant: Sequence[str], k: int) -> float:
    """Score of the best-ranked relevant document minus the score of the k-th result: positive while the
    answer sits above the cut, shrinking as it is pushed towards it, negative once below. NaN when no relevant
    document was retrieved, fewer than k were, or the target gives no scores."""
    if len(ranking.doc_ids) < k:
        return math.nan
    wanted = set(relevant)
    first = next((i for i, d in enumerate(ranking.doc_ids) if d in wanted), None)
    if first is None:
        return math.nan
    return float(ranking.scores[first] - ranking.scores[k - 1])


def seen_before(history: pd.DataFrame, pipeline: str) -> dict[tuple[int, str], set[str]]:
    """Per (k, question) the documents in its top k on any stored run of `pipeline` (per_question.csv rows of
    earlier dates only)."""
    rows = history[history[contract.PIPELINE] == pipeline]
    seen: dict[tuple[int, str], set[str]] = {}
    # Each distinct (k, question, top k) once: on most days a question's top k is the one of the day before.
    for k, qid, retrieved in set(zip(rows[contract.K].tolist(), rows[contract.QUESTION_ID], rows[contract.RETRIEVED])):
        seen.setdefault((int(k), qid), set()).update(store.split_ids(retrieved))
    return seen


def _row(day: str, pipeline: str, k: int, question_id: str, signal: str, value: float) -> dict:
    return {"run_date": day, "pipeline": pipeline, "k": k, "question_id": question_id, "signal": signal,
            "value": value}


def _mean(values: Sequence[float]) -> float:
    defined = [v for v in values if not math.isnan(v)]
    return float(np.mean(defined)) if defined else math.nan


def top1_ks(current: Sequence[float], reference: Sequence[float]) -> tuple[float, float]:
    """Two-sample KS distance and p-value of the top-1 scores (NaN scores left out; NaN with too few)."""
    from scipy.stats import ks_2samp

    cur = [v for v in current if not math.isnan(v)]
    ref = [v for v in reference if not math.isnan(v)]
    if len(cur) < 2 or len(ref) < 2:
        return math.nan, math.nan
    result = ks_2samp(cur, ref)
    return float(result.statistic), float(result.pvalue)


def signal_rows(day: str, pipeline: str, rankings: Sequence[Ranking], gold: Sequence[GoldQuestion],
                ks: Sequence[int], history: pd.DataFrame, window: int,
                ks_test: Callable[[list[float], list[float]], tuple[float, float]] = top1_ks) -> list[dict]:
    """signals.csv rows of one pipeline on one run: per question and per run. `history` is per_question.csv
    before this run's date; the top-1 reference is the pipeline's last `window` runs in it. `ks_test`: `top1_ks`,
    or a function giving what it gives (such as its memo)."""
    rows: list[dict] = []
    seen = seen_before(history, pipeline)
    has_history = bool(seen)
    for k in ks:
        margins, news = [], []
        for q, r in zip(gold, rankings):
            margin = gold_margin(r, q.relevant_ids, k)
            earlier = seen.get((k, q.id))
            new = float(len([d for d in r.doc_ids[:k] if d not in earlier])) if earlier is not None else math.nan
            margins.append(margin)
            news.append(new)
            rows += [_row(day, pipeline, k, q.id, GOLD_MARGIN, margin), _row(day, pipeline, k, q.id, NEW_DOCS, new)]
        with_new = float(sum(1 for n in news if n > 0)) if has_history else math.nan
        rows += [_row(day, pipeline, k, PER_RUN, GOLD_MARGIN, _mean(margins)),
                 _row(day, pipeline, k, PER_RUN, QUESTIONS_WITH_NEW, with_new)]
    mine = history[(history[contract.PIPELINE] == pipeline) & (history[contract.K] == history[contract.K].min())]
    dates = sorted(mine[contract.RUN_DATE].unique())[-window:]
    reference = mine[mine[contract.RUN_DATE].isin(dates)]
    means = reference.groupby(contract.QUESTION_ID)["top1_score"].mean().to_dict()
    shifts = []
    for q, r in zip(gold, rankings):
        shift = r.top1_score - means[q.id] if q.id in means else math.nan
        shifts.append(float(shift))
        rows.append(_row(day, pipeline, TOP1_K, q.id, TOP1_SHIFT, float(shift)))
    statistic, p = ks_test([r.top1_score for r in rankings], reference["top1_score"].astype(float).tolist())
    rows += [_row(day, pipeline, TOP1_K, PER_RUN, TOP1_SHIFT, _mean(shifts)),
             _row(day, pipeline, TOP1_K, PER_RUN, TOP1_KS, statistic),
             _row(day, pipeline, TOP1_K, PER_RUN, TOP1_KS_P, p)]
    return rows


def hnsw_recall_rows(day: str, approximate: Sequence[Ranking], exact: Sequence[Ranking],
                     gold: Sequence[GoldQuestion], ks: Sequence[int], pipeline: str = "dense") -> list[dict]:
    """Per question and k, the share of exact search's top k that the HNSW index also returns in its top k (so
    an index problem is not mistaken for drift); the mean per run."""
    rows = []
    for k in ks:
        values = []
        for q, a, e in zip(gold, approximate, exact):
            truth = set(e.doc_ids[:k])
            value = len(truth & set(a.doc_ids[:k])) / len(truth) if truth else math.nan
            values.append(value)
            rows.append(_row(day, pipeline, k, q.id, HNSW_RECALL, value))
        rows.append(_row(day, pipeline, k, PER_RUN, HNSW_RECALL, _mean(values)))
    return rows


def latest(signals: pd.DataFrame) -> pd.DataFrame:
    """The per-run signals of the latest run, one row per pipeline and k, a column per signal (for a table)."""
    if signals.empty:
        return pd.DataFrame()
    last = signals[(signals[contract.RUN_DATE] == signals[contract.RUN_DATE].max())
                   & (signals[contract.QUESTION_ID].fillna(PER_RUN) == PER_RUN)]
    table = last.pivot_table(index=[contract.PIPELINE, contract.K], columns="signal", values=contract.VALUE,
                             dropna=False)
    return table.reindex(columns=[s for s in SIGNALS if s in table.columns]).reset_index()


def summary(rows: Sequence[dict]) -> Mapping[str, dict[str, float]]:
    """Per pipeline, this run's per-run signals at the default k (and the top-1 ones): for the CLI."""
    frame = pd.DataFrame(list(rows))
    if frame.empty:
        return {}
    frame = frame[frame["question_id"] == PER_RUN]
    top1 = frame["signal"].isin(TOP1_SIGNALS)
    k = default_k(frame.loc[~top1, "k"]) if (~top1).any() else TOP1_K  # the top-1 rows' k is no configured k
    keep = frame[(frame["k"] == k) | top1]
    return {p: dict(zip(g["signal"], g["value"])) for p, g in keep.groupby("pipeline", sort=False)}
