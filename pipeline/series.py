"""The retrieval series and what the rules compare them with: per-question matrices, the baseline window,
the reference period, the paired contrast test with its null, and the bands the charts draw.

One test serves every rule. A series is a matrix of per-question values (questions x run dates). A rule
compares some tested runs with some baseline runs through a contrast c over those runs (tested runs weigh
+w, baseline runs -1/n_baseline, the weights of each side summing to 1). Its null is the permutation null
of the run dates within each question: when nothing changed, a question's values are exchangeable across
the runs, so shuffling them gives the statistic's distribution at the actual number of questions and runs.
Its mean is 0 and its variance has a closed form (the finite-population permutation variance):

    Var(T) = sum_q S_q * sum_t c_t**2 / (n - 1) / Q**2,   S_q = sum_t (x_qt - mean_q)**2

so the noise comes from how much each question varies from run to run, not from a handful of daily means,
and a question that never changes adds no noise. The p-value is the normal tail of T / sd (a sum over
questions: the central limit theorem); the bench measures how close that is at 20, 50 and 200 questions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import special  # scipy.stats costs 1.5 s to import; norm's sf and isf are these

from pipeline import contract, store
from pipeline.config import CRITICALITY, AlertsConfig
from pipeline.metrics import MetricInfo, parse_series

MIN_BASELINE = 3  # the drop rule needs this many earlier runs (or the whole window if smaller)
PERMUTATION_CHUNK = 500  # Monte Carlo draws shuffled at once, bounding memory on large question sets


@dataclass(frozen=True)
class SeriesKey:
    pipeline: str
    metric: MetricInfo
    k: int

    @property
    def name(self) -> str:
        return self.metric.series(self.k)


@dataclass(frozen=True)
class Contrast:
    """A contrast of tested runs against baseline runs over the questions answered on all of them."""

    value: float  # weighted mean of the tested runs (the mean over the questions)
    baseline: float  # mean of the baseline runs
    sd: float  # the permutation null's sd of value - baseline
    n_questions: int
    tested: tuple[pd.Timestamp, ...]
    baseline_days: tuple[pd.Timestamp, ...]
    higher_is_better: bool
    # The questions x runs values and the contrast weights, kept for the Monte Carlo null (not compared).
    block: np.ndarray = field(default=None, repr=False, compare=False)
    weights: np.ndarray = field(default=None, repr=False, compare=False)

    @property
    def difference(self) -> float:
        return self.value - self.baseline

    @property
    def harm(self) -> float:
        """The difference, positive when it goes the harmful way."""
        return -self.difference if self.higher_is_better else self.difference

    @property
    def change(self) -> float:
        """Relative change (value - baseline) / baseline; +-inf from a zero baseline, 0 for no change."""
        return relative_change(self.value, self.baseline)

    @property
    def relative_harm(self) -> float:
        return -self.change if self.higher_is_better else self.change

    @property
    def z(self) -> float:
        """Null sds in the harmful direction; +inf for any harm when the null has no spread."""
        if self.sd > 0:
            return self.harm / self.sd
        return 0.0 if math.isclose(self.harm, 0.0, abs_tol=1e-12) else math.copysign(math.inf, self.harm)

    @property
    def p_value(self) -> float:
        """One-sided p of a change at least this harmful under the permutation null (normal tail)."""
        return float(special.ndtr(-self.z))  # scipy.stats.norm.sf

    def permutation_p(self, draws: int, seed: int, stop_above: float | None = None) -> float:
        """The same null drawn, not approximated: each question's runs shuffled `draws` times (seeded);
        (1 + draws at least as harmful) / (1 + draws). Exact where the normal tail is not: few questions,
        values that are mostly 0 or 1, far tails. With `stop_above`, the draws stop once the p of all
        `draws` is sure to exceed it, and the p of the draws made so far is returned (also above it): a
        decision at a level up to `stop_above` is the same, at a fraction of the draws."""
        rng = np.random.default_rng(seed)
        sign = -1.0 if self.higher_is_better else 1.0
        n_questions = self.block.shape[0]
        # A question with the same value on every run adds exactly 0 to every shuffle (the weights sum to
        # 0): only the others are shuffled.
        live = self.block[np.ptp(self.block, axis=1) > 0]
        observed = sign * float(live.sum(axis=0) @ self.weights) / n_questions
        extreme = drawn = 0
        for start in range(0, draws, PERMUTATION_CHUNK):
            rows = min(PERMUTATION_CHUNK, draws - start)
            shuffled = rng.permuted(np.broadcast_to(live, (rows, *live.shape)), axis=2)
            harm = sign * (shuffled.sum(axis=1) @ self.weights) / n_questions
            extreme += int(np.count_nonzero(harm >= observed - 1e-12))
            drawn += rows
            if stop_above is not None and (extreme + 1) / (draws + 1) > stop_above:
                break  # the full draw's p can only be larger: above `stop_above` whatever follows
        return (extreme + 1) / (drawn + 1)


def relative_change(today: float, baseline: float) -> float:
    """(today - baseline) / baseline; from a zero baseline any rise is +inf and no change is 0."""
    if baseline == 0:
        return 0.0 if today == 0 else math.copysign(math.inf, today)
    return (today - baseline) / abs(baseline)


def drop_threshold(config: AlertsConfig, series: str) -> float:
    """The relative change that counts as practically large for a metric@k: its own `drop` setting, else
    the criticality preset."""
    return config.drop.get(series, CRITICALITY[config.criticality])


def keys(config: AlertsConfig, ks: Sequence[int], pipelines: Sequence[str]) -> list[SeriesKey]:
    """The watched series, pipeline by pipeline."""
    parsed = [parse_series(name) for name in config.watched(tuple(ks))]
    return [SeriesKey(p, info, k) for p in pipelines for info, k in parsed]


@dataclass(frozen=True)
class Matrix:
    """One series' per-question values: questions x run dates (oldest first), NaN where a question has none."""

    values: np.ndarray
    days: tuple[pd.Timestamp, ...]

    @property
    def empty(self) -> bool:
        return self.values.size == 0

    def position(self, days: Sequence[pd.Timestamp]) -> list[int]:
        where = {d: i for i, d in enumerate(self.days)}
        return [where[d] for d in days]

    @classmethod
    def of(cls, frame: pd.DataFrame) -> Matrix:
        """From a questions x dates frame (columns are the run dates)."""
        frame = frame.sort_index(axis=1)
        return cls(frame.to_numpy(dtype=float), tuple(pd.Timestamp(c) for c in frame.columns))


def question_matrix(per_question: pd.DataFrame, key: SeriesKey, rows: pd.DataFrame | None = None) -> Matrix:
    """Questions x run dates of one series' per-question values (from `rows`, the series' rows of
    per_question already selected, when given)."""
    if rows is None:
        rows = per_question[(per_question[contract.PIPELINE] == key.pipeline) & (per_question[contract.K] == key.k)]
    if rows.empty:
        return Matrix(np.empty((0, 0)), ())
    # A pivot by hand (pandas' pivot_table costs most of a run's alert evaluation): questions and dates
    # sorted, the last row of a (question, date) winning, NaN where a question has no row.
    questions, q = np.unique(rows[contract.QUESTION_ID].to_numpy().astype(str), return_inverse=True)
    dates, d = np.unique(store.as_days(rows[contract.RUN_DATE]).to_numpy(), return_inverse=True)
    values = np.full((len(questions), len(dates)), np.nan)
    values[q, d] = rows[key.metric.column].to_numpy(dtype=float)
    return Matrix(values, tuple(pd.Timestamp(x) for x in dates))


def contrast(matrix: Matrix, tested: Sequence[pd.Timestamp], weights: Sequence[float],
             baseline: Sequence[pd.Timestamp], higher_is_better: bool) -> Contrast | None:
    """The contrast of `tested` runs (weights summing to 1) against the mean of `baseline` runs, over the
    questions with a value on every one of those runs; None when no question has."""
    tested, baseline = list(tested), list(baseline)
    if not tested or not baseline:
        return None
    block = matrix.values[:, matrix.position(tested + baseline)]
    block = block[~np.isnan(block).any(axis=1)]
    if block.shape[0] == 0:
        return None
    w = np.asarray(weights, dtype=float) / float(np.sum(weights))
    c = np.concatenate([w, np.full(len(baseline), -1.0 / len(baseline))])
    n_questions, n_runs = block.shape
    means = block.mean(axis=0)
    value = float(means[:len(tested)] @ w)
    base = float(means[len(tested):].mean())
    # Equal values have no spread even when their float mean differs from them by a rounding.
    flat = np.ptp(block, axis=1) == 0
    spread = float(((block[~flat] - block[~flat].mean(axis=1, keepdims=True)) ** 2).sum())
    sd = math.sqrt(spread * float(c @ c) / (n_runs - 1)) / n_questions if n_runs > 1 else math.nan
    return Contrast(value, base, sd, n_questions, tuple(tested), tuple(baseline), higher_is_better, block, c)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error control over the tests given, any dependence)."""
    p = np.asarray(p_values, dtype=float)
    m = p.size
    order = np.argsort(p, kind="stable")
    adjusted = np.empty(m)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adjusted[i] = running
    return adjusted.tolist()


def critical_z(alpha: float, n_tests: int) -> float:
    """The z a single test must reach to be significant at Holm's first step (Bonferroni) over n tests."""
    return float(-special.ndtri(alpha / max(1, n_tests)))  # scipy.stats.norm.isf


# --- the windows the rules use ---------------------------------------------------------------------------


def run_days(matrix: Matrix) -> list[pd.Timestamp]:
    return list(matrix.days)


def question_matrices(per_question: pd.DataFrame, keys: Sequence[SeriesKey]) -> dict[SeriesKey, Matrix]:
    """question_matrix of every key, splitting per_question by pipeline and k once."""
    groups = {name: rows for name, rows in per_question.groupby([contract.PIPELINE, contract.K], sort=False)}
    empty = per_question.iloc[:0]
    return {key: question_matrix(per_question, key, groups.get((key.pipeline, key.k), empty)) for key in keys}


def drop_contrast(matrix: Matrix, today: pd.Timestamp, config: AlertsConfig, higher_is_better: bool,
                  block: int = 1) -> Contrast | None:
    """The last `block` runs up to `today` (equal weights) against the `window` runs before them.

    The baseline never contains a tested run. None until MIN_BASELINE baseline runs exist (or the whole
    window, if smaller) or when today has no run."""
    days = [d for d in run_days(matrix) if d <= today]
    if not days or days[-1] != today or len(days) < block + min(MIN_BASELINE, config.window):
        return None
    tested = days[-block:]
    baseline = days[:-block][-config.window:]
    return contrast(matrix, tested, [1.0] * len(tested), baseline, higher_is_better)


def reference_start(config: AlertsConfig) -> pd.Timestamp | None:
    """The reference period's pinned first run date (alerts.reference_start), else None: from the first run."""
    return pd.Timestamp(config.reference_start) if config.reference_start else None


def reference_days(matrix: Matrix, config: AlertsConfig, start: pd.Timestamp | None = None) -> list[pd.Timestamp]:
    """The reference period of the slow-drift rule: the first `reference_runs` runs (from `start` when the
    reference is pinned); empty until that many runs exist."""
    days = [d for d in run_days(matrix) if start is None or d >= start]
    return days[:config.reference_runs] if len(days) >= config.reference_runs else []


def ewma_weights(n: int, smoothing: float) -> np.ndarray:
    """Weights of an exponentially weighted mean of n runs, oldest first, summing to 1."""
    w = smoothing * (1 - smoothing) ** np.arange(n - 1, -1, -1, dtype=float)
    return w / w.sum()


EWMA_SPAN = 4.0  # runs older than this many "memories" (1 / smoothing) weigh under 2% and are left out


def slow_contrast(matrix: Matrix, today: pd.Timestamp, config: AlertsConfig, higher_is_better: bool,
                  start: pd.Timestamp | None = None) -> Contrast | None:
    """The exponentially weighted mean of the runs after the reference period, up to today, against the
    reference period; None until the reference is complete and today lies after it."""
    reference = reference_days(matrix, config, start)
    if not reference:
        return None
    after = [d for d in run_days(matrix) if reference[-1] < d <= today]
    if not after or after[-1] != today:
        return None
    after = after[-max(1, math.ceil(EWMA_SPAN / config.ewma_smoothing)):]
    return contrast(matrix, after, ewma_weights(len(after), config.ewma_smoothing), reference, higher_is_better)


def fires(test: Contrast | None, threshold: float, adjusted_p: float, alpha: float) -> bool:
    """The rule's condition: practically large (relative harm above the threshold) and significant."""
    return test is not None and test.relative_harm > threshold and adjusted_p < alpha


# --- bands for the charts ------------------------------------------------------------------------------


def band_edge(test: Contrast, threshold: float, z: float) -> float:
    """The value the tested mean must pass for the rule to fire against this baseline: beyond both the
    relative threshold and z null sds (at Holm's first step), on the harmful side."""
    if test.higher_is_better:
        return min(test.baseline * (1 - threshold), test.baseline - z * test.sd)
    return max(test.baseline * (1 + threshold), test.baseline + z * test.sd)


def bands(per_question: pd.DataFrame, key: SeriesKey, config: AlertsConfig, n_tests: int) -> pd.DataFrame:
    """Per run of one series: the drop rule's baseline and the edge a run must pass to fire it, and the
    slow-drift rule's reference mean, its EWMA and edge. The same functions as the rules, at Holm's first
    step over `n_tests` watched series (a run inside the edge can still fire when several series move
    together: Holm then lowers the bar for the others)."""
    matrix = question_matrix(per_question, key)
    threshold = drop_threshold(config, key.name)
    z = critical_z(config.alpha, n_tests)
    start = reference_start(config)
    rows = []
    for day in run_days(matrix):
        drop = drop_contrast(matrix, day, config, key.metric.higher_is_better)
        slow = slow_contrast(matrix, day, config, key.metric.higher_is_better, start)
        rows.append({
            contract.RUN_DATE: day, contract.PIPELINE: key.pipeline,
            "baseline": drop.baseline if drop else math.nan,
            "edge": band_edge(drop, threshold, z) if drop else math.nan,
            "reference": slow.baseline if slow else math.nan,
            "ewma": slow.value if slow else math.nan,
            "reference_edge": band_edge(slow, threshold, z) if slow else math.nan,
        })
    return pd.DataFrame(rows, columns=[contract.RUN_DATE, contract.PIPELINE, "baseline", "edge", "reference", "ewma",
                                       "reference_edge"])
