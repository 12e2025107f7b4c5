"""Persistence per pipeline, as LongEval (CLEF) measures it: each pipeline's relative drop of nDCG and recall
against the slow-drift rule's reference period, ranked beside effectiveness."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date

import pandas as pd

from pipeline import contract, series, store
from pipeline.config import AlertsConfig
from pipeline.metrics import REGISTRY, default_k

# The metrics whose relative drop is measured: LongEval's nDCG (RnD) and the same for recall (RrD).
PERSISTENCE_METRICS = ("ndcg", "recall")
RANKED_BY = "ndcg"  # both ranks (effectiveness, persistence) are by nDCG, as LongEval ranks systems


def relative_drop(reference: float, now: float) -> float:
    """LongEval's relative drop (reference - now) / reference: 0.25 is a quarter lost, a negative drop a gain;
    undefined (NaN) from a reference of 0 (nothing to lose)."""
    return (reference - now) / reference if reference else math.nan


@dataclass(frozen=True)
class Level:
    """One metric of one pipeline: its mean on the latest run and over the reference period, and the drop."""

    now: float
    reference: float
    drop: float  # relative_drop(reference, now)


@dataclass(frozen=True)
class PipelinePersistence:
    pipeline: str
    levels: dict[str, Level]  # by metric name, for PERSISTENCE_METRICS
    n_questions: int  # questions answered on the latest run and every reference run (those the means are over)
    effectiveness_rank: int  # 1: the highest nDCG on the latest run
    persistence_rank: int  # 1: the smallest relative nDCG drop (the steadiest)


@dataclass(frozen=True)
class Persistence:
    """Every pipeline's persistence at cutoff k on `latest`, against the reference period `reference`."""

    k: int
    reference: tuple[date, ...]  # the reference period's run dates; empty until it is complete
    latest: date | None  # the run compared with it; None until a run after the reference period exists
    pipelines: tuple[PipelinePersistence, ...]  # in order of effectiveness
    reference_runs: int  # alerts.reference_runs: how many runs the reference period holds

    @property
    def ready(self) -> bool:
        return bool(self.pipelines)

    def reference_label(self) -> str:
        """The reference period named, e.g. "the reference period (20 runs, 2026-10-01 to 2026-10-20)"."""
        if not self.reference:
            return f"the reference period (the first {self.reference_runs} runs: not complete yet)"
        return (f"the reference period ({len(self.reference)} runs, {self.reference[0]:%Y-%m-%d} to "
                f"{self.reference[-1]:%Y-%m-%d})")

    def waiting(self) -> str:
        """Why there is no table yet."""
        return f"No persistence yet: it needs {self.reference_label()} and a run after it."

    def describe(self) -> str:
        """What the table compares, in a sentence for a page's caption or the weekly review."""
        ranked = REGISTRY[RANKED_BY].label
        return (f"Each pipeline's run of {self.latest} against {self.reference_label()}, at k = {self.k}: LongEval's "
                "relative drop, (reference − now) / reference, negative for a gain. Ranked by "
                f"{ranked} on that run (effectiveness) and by its drop (persistence): the most effective pipeline is "
                "not always the steadiest.")

    def table(self) -> pd.DataFrame:
        """One row per pipeline: nDCG and recall now, on the reference period and their relative drops, and the
        two ranks (columns named by the metric, e.g. ndcg, ndcg_reference, ndcg_drop)."""
        rows = []
        for p in self.pipelines:
            row: dict = {contract.PIPELINE: p.pipeline}
            for metric, level in p.levels.items():
                row |= {metric: level.now, f"{metric}_reference": level.reference, f"{metric}_drop": level.drop}
            rows.append(row | {"n_questions": p.n_questions, "effectiveness_rank": p.effectiveness_rank,
                               "persistence_rank": p.persistence_rank})
        return pd.DataFrame(rows, columns=TABLE_COLUMNS)


TABLE_COLUMNS = (contract.PIPELINE, *(f"{m}{part}" for m in PERSISTENCE_METRICS for part in ("", "_reference", "_drop")),
                 "n_questions", "effectiveness_rank", "persistence_rank")


def _ranks(values: Sequence[float], descending: bool) -> list[int]:
    """Competition ranks from 1 ("1224"); NaN ranks last."""
    ranked = pd.Series(values, dtype=float).rank(method="min", ascending=not descending, na_option="bottom")
    return [int(r) for r in ranked]


def persistence(per_question: pd.DataFrame, config: AlertsConfig, k: int | None = None,
                today: date | None = None) -> Persistence:
    """Each pipeline's LongEval persistence at k (default: `metrics.default_k`) on its latest run up to `today`.

    RnD = (nDCG_ref - nDCG_now) / nDCG_ref, LongEval's "relative nDCG drop" (Alkhalifa et al., Extended Overview
    of the CLEF-2023 LongEval Lab on Longitudinal Evaluation of Model Performance, CEUR-WS Vol-3497, 2023; the
    lab's evaluation code computes it as `(score - score_rep) / score`, `rc` in clef-longeval/longeval-code's
    evaluate-robustness.py), and the same for recall (RrD). ref is the mean over the slow-drift rule's reference
    period (`series.reference_days`: the first `alerts.reference_runs` runs, from `alerts.reference_start` when
    pinned); now is the latest run after it: a snapshot, as LongEval compares snapshots (the slow-drift rule's
    moving mean is the test of whether a drop is real; this is the level beside effectiveness). Both means are
    over the questions answered on every one of those runs (`series.contrast`, as the rule pairs them), so a
    question added to the gold set later moves neither. A pipeline without a run after its reference period is
    left out; the ranks (1 = best) are by nDCG now and by its drop (smallest first)."""
    ks = sorted(int(x) for x in per_question[contract.K].unique()) if len(per_question) else []
    k = k if k is not None else (default_k(ks) if ks else 0)
    rows = per_question[per_question[contract.K] == k] if len(per_question) else per_question
    if today is not None and len(rows):
        rows = rows[store.as_days(rows[contract.RUN_DATE]) <= pd.Timestamp(today)]
    start = series.reference_start(config)
    found = [(p, measured) for p in (list(dict.fromkeys(rows[contract.PIPELINE])) if len(rows) else [])
             if (measured := _measure(rows, p, k, config, start)) is not None]
    effective = _ranks([m.levels[RANKED_BY].now for _, m in found], descending=True)
    steady = _ranks([m.levels[RANKED_BY].drop for _, m in found], descending=False)
    pipelines = sorted((PipelinePersistence(p, m.levels, m.n_questions, e, s)
                        for (p, m), e, s in zip(found, effective, steady)), key=lambda p: p.effectiveness_rank)
    reference = max((m.reference for _, m in found), default=(), key=len)
    latest = max((m.latest for _, m in found), default=None)
    return Persistence(k, reference, latest, tuple(pipelines), config.reference_runs)


@dataclass(frozen=True)
class _Measured:
    levels: dict[str, Level]
    n_questions: int
    reference: tuple[date, ...]
    latest: date


def _measure(rows: pd.DataFrame, pipeline: str, k: int, config: AlertsConfig,
             start: pd.Timestamp | None) -> _Measured | None:
    """One pipeline's levels, or None until its reference period is complete and a run follows it."""
    levels, test, days = {}, None, []
    for metric in PERSISTENCE_METRICS:
        info = REGISTRY[metric]
        matrix = series.question_matrix(rows, series.SeriesKey(pipeline, info, k))
        days = series.reference_days(matrix, config, start)
        after = [d for d in series.run_days(matrix) if days and d > days[-1]]
        test = series.contrast(matrix, after[-1:], [1.0], days, info.higher_is_better) if after else None
        if test is None:
            return None
        levels[metric] = Level(test.value, test.baseline, relative_drop(test.baseline, test.value))
    return _Measured(levels, test.n_questions, tuple(d.date() for d in days), test.tested[-1].date())
