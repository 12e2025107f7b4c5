"""Simulated retrieval streams for the alert calibration bench: stationary (or slowly declining)
per-question outcomes, scored by the job's own row builder and replayed through the real alert rules."""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from pipeline import contract, store
from pipeline.alerts import Alert, alerts_frame, evaluate_alerts
from pipeline.config import AlertsConfig, Config
from pipeline.gold import GoldQuestion
from pipeline.job import evaluate_pipelines
from pipeline.retrieval import Ranking

FIRST_DAY = date(2025, 1, 1)
DEPTH = 50  # documents per ranked list, as retrieval.candidate_depth
HIT_K = 5  # the cutoff whose mean hit rate a stream is built to have
# Beta concentration of the per-question hit rates: 2 makes many questions nearly always or nearly
# never answered in the top 5, a few in between, as on a real gold set.
CONCENTRATION = 2.0
# Each pipeline's mean hit@5 relative to the stream's p (clipped to RATE_BOUNDS): three retrievers
# of slightly different quality watched together, as in one data directory.
PIPELINE_OFFSETS = {"bm25": -0.05, "dense": 0.0, "hybrid": 0.03}
RATE_BOUNDS = (0.02, 0.98)
# Where the relevant document sits when it is not in the top 5: ranks 6..10, 11..DEPTH, or absent.
MISS_SHARES = (0.4, 0.4, 0.2)
DECLINE_START = 100  # slow decline: the first day (1-based) whose hit rates are multiplied by DECLINE_FACTOR
DECLINE_FACTOR = 0.99  # per day, about -1%/day
DECLINE_CROSSING = 0.10  # the delay is counted from the day the mean has fallen this far


@dataclass(frozen=True)
class StreamSpec:
    """One simulated data directory: `n_questions` questions, mean hit@5 `p` (of the middle pipeline)."""

    n_questions: int
    p: float
    days: int = 365
    decline: bool = False  # from DECLINE_START every question's hit rate falls by DECLINE_FACTOR a day
    seed: int = 0

    @property
    def label(self) -> str:
        return f"n={self.n_questions} p={self.p:g}"


def question_hit_rates(n: int, p: float, rng: np.random.Generator) -> np.ndarray:
    """Per-question P(relevant doc in the top 5): stratified quantiles of a Beta with mean p, shuffled,
    so their mean is p up to the quadrature error."""
    if not 0 < p < 1 or n < 1:
        raise ValueError(f"need 0 < p < 1 and n >= 1, got p={p}, n={n}")
    quantiles = (np.arange(n) + 0.5) / n
    rates = stats.beta.ppf(quantiles, p * CONCENTRATION, (1 - p) * CONCENTRATION)
    return rng.permutation(rates)


def decline_multiplier(day_index: int) -> float:
    """Factor on every hit rate on day `day_index` (0-based) of a declining stream."""
    return DECLINE_FACTOR ** max(0, day_index - DECLINE_START + 2)


def crossing_day() -> int:
    """The first day index (0-based) on which the declining mean is DECLINE_CROSSING below the reference."""
    days = math.ceil(math.log(1 - DECLINE_CROSSING) / math.log(DECLINE_FACTOR))
    return DECLINE_START - 2 + days


def draw_first_ranks(hit_rates: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One day's 1-based rank of each question's relevant document, 0 where it was not retrieved.

    A hit lands on rank r in 1..5 with probability proportional to 1/r; a miss on 6..10, 11..DEPTH or
    nowhere with MISS_SHARES, uniformly within the band."""
    n = len(hit_rates)
    top = 1 / np.arange(1, HIT_K + 1)
    hit_rank = rng.choice(np.arange(1, HIT_K + 1), size=n, p=top / top.sum())
    band = rng.choice(3, size=n, p=MISS_SHARES)
    miss_rank = np.select([band == 0, band == 1],
                          [rng.integers(HIT_K + 1, 11, size=n), rng.integers(11, DEPTH + 1, size=n)], 0)
    return np.where(rng.random(n) < hit_rates, hit_rank, miss_rank)


def relevant_id(question: int) -> str:
    return f"rel-{question}"


def ranked_list(question: int, rank: int) -> tuple[str, ...]:
    """DEPTH document ids with question's relevant document at `rank` (absent when rank is 0)."""
    docs = [f"other-{question}-{i}" for i in range(DEPTH)]
    if rank:
        docs[rank - 1] = relevant_id(question)
    return tuple(docs)


class _ScriptedRetriever:
    """Stands in for pipeline.retrieval.Retriever: returns the day's scripted ranking per pipeline."""

    def __init__(self, ranks: dict[str, np.ndarray]):
        self.ranks = ranks

    def search(self, pipeline: str, questions: Sequence[str], query_vectors: np.ndarray,
               cache: dict) -> list[Ranking]:
        scores = tuple(1.0 - i / DEPTH for i in range(DEPTH))
        return [Ranking(ranked_list(q, int(r)), scores, ()) for q, r in enumerate(self.ranks[pipeline])]


def gold_set(n: int) -> list[GoldQuestion]:
    return [GoldQuestion(f"q{i:03d}", f"question {i}", {relevant_id(i): 1}) for i in range(n)]


def run_dates(days: int) -> list[date]:
    return [FIRST_DAY + timedelta(days=i) for i in range(days)]


def pipeline_rates(spec: StreamSpec, rng: np.random.Generator) -> dict[str, np.ndarray]:
    low, high = RATE_BOUNDS
    return {name: question_hit_rates(spec.n_questions, min(high, max(low, spec.p + offset)), rng)
            for name, offset in PIPELINE_OFFSETS.items()}


def simulate_rows(spec: StreamSpec, config: Config) -> tuple[list[dict], list[dict]]:
    """metrics.csv and per_question.csv rows of every day, built by job.evaluate_pipelines."""
    rng = np.random.default_rng(spec.seed)
    rates = pipeline_rates(spec, rng)
    gold = gold_set(spec.n_questions)
    present = {relevant_id(i) for i in range(spec.n_questions)}
    no_vectors = np.zeros((spec.n_questions, 1))
    metric_rows: list[dict] = []
    question_rows: list[dict] = []
    for index, day in enumerate(run_dates(spec.days)):
        factor = decline_multiplier(index) if spec.decline else 1.0
        ranks = {name: draw_first_ranks(r * factor, rng) for name, r in rates.items()}
        metrics, questions = evaluate_pipelines(config, _ScriptedRetriever(ranks), gold, no_vectors, present, day)
        metric_rows += metrics
        question_rows += questions
    return metric_rows, question_rows


def runs_rows(days: Sequence[date]) -> list[dict]:
    """runs.csv rows of healthy runs: status ok, one feed fetched, none failed."""
    return [{**{c: "" for c in contract.RUNS_COLUMNS}, "run_date": d.isoformat(), "run_id": f"sim{i}",
             "status": contract.STATUS_OK, "feeds_ok": 1, "feeds_failed": 0, "docs_new": 0, "docs_updated": 0,
             "docs_deleted": 0, "docs_total": 0, "chunks_total": 0, "chunks_embedded": 0, "seconds": 0.0}
            for i, d in enumerate(days)]


@dataclass(frozen=True)
class History:
    """A data directory's series as store.read returns them, sorted by run date."""

    metrics: pd.DataFrame
    per_question: pd.DataFrame
    drift: pd.DataFrame
    runs: pd.DataFrame

    @classmethod
    def read(cls, data_dir: Path) -> History:
        return cls(store.read_metrics(data_dir), store.read_per_question(data_dir),
                   store.read(data_dir, contract.DRIFT), store.read_runs(data_dir))

    def until(self, day: date, history: HistoryWindow | None = None) -> History:
        """The rows up to and including `day`, all of them or only those of `history`'s run dates."""
        stamp = pd.Timestamp(day)
        frames = [f.iloc[: int(f[contract.RUN_DATE].searchsorted(stamp, side="right"))]
                  for f in (self.metrics, self.per_question, self.drift, self.runs)]
        if history is not None:
            dates = frames[3][contract.RUN_DATE]
            kept = pd.concat([dates.iloc[: history.first_runs], dates.iloc[-history.last_runs:]]).unique()
            frames = [f[f[contract.RUN_DATE].isin(kept)] for f in frames]
        return History(*frames)


@dataclass(frozen=True)
class HistoryWindow:
    """The runs handed to the rules each day when the whole history is too slow to scan: the first
    `first_runs` (a reference period) and the last `last_runs` (trailing windows), today included."""

    first_runs: int = 30
    last_runs: int = 60


def simulated_history(spec: StreamSpec) -> History:
    """The stream written through the real store (write_table) and read back with its dtypes."""
    config = Config(data_dir=Path("."), gold=Path("."))
    metric_rows, question_rows = simulate_rows(spec, config)
    with tempfile.TemporaryDirectory(prefix="bench-alerts-") as tmp:
        data_dir = Path(tmp)
        store.write_table(data_dir, contract.METRICS, metric_rows)
        store.write_table(data_dir, contract.PER_QUESTION, question_rows)
        store.write_table(data_dir, contract.RUNS, runs_rows(run_dates(spec.days)))
        store.write_table(data_dir, contract.DRIFT, [])
        return History.read(data_dir)


def replay_alerts(history: History, days: Sequence[date], config: AlertsConfig, ks: tuple[int, ...],
                  stop: Callable[[Alert], bool] | None = None, window: HistoryWindow | None = None) -> list[Alert]:
    """Every alert of every day, from the real rules, each day seeing only the rows up to it and the
    alerts of the days before it (as alerts.csv would hold them); with `window`, only those runs' rows.
    Stops after the first day on which `stop` holds for one of the day's alerts."""
    fired: list[Alert] = []
    for day in days:
        previous = alerts_frame(fired).astype({contract.RUN_DATE: "datetime64[ns]"})
        seen = history.until(day, window)
        today = evaluate_alerts(day, seen.metrics, seen.per_question, seen.drift, seen.runs, config, ks, previous)
        fired += today
        if stop is not None and any(stop(a) for a in today):
            break
    return fired
