"""Embedding drift between a reference and a current sample: PSI, KL and KS on the reference's principal
components, Evidently's domain-classifier test, the dense top-1 cosine, and the query-log reader."""

from __future__ import annotations

from pipeline.errors import DriftwatchError

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import NamedTuple

import numpy as np
from threadpoolctl import threadpool_limits
from scipy import stats

from pipeline.config import DriftConfig

EVIDENTLY_SAMPLE_CAP = 2000  # rows per side given to Evidently's classifier (it trains one per call)
EVIDENTLY_METHOD = "model(bootstrap)"
SMALL_SAMPLE_PSI = 0.1  # psi_expected at or above this: the 0.1 / 0.2 PSI thresholds mean little
QUERY_PREFIX = "query_"  # statistic-name prefix for the query-log drift rows


class DriftError(DriftwatchError):
    """Samples or a query log that drift cannot be measured on; the message says which and why."""


@dataclass(frozen=True)
class Statistic:
    """A statistic's descriptor: its name in drift.csv and the default level that signals drift."""

    name: str
    threshold: float | None = None  # None: context for the other statistics, no drift signal on its own
    drift_below: bool = False  # p-values (and similarity) signal drift when low

    def drifted(self, value: float) -> bool | None:
        """Whether `value` crosses the default threshold (>= it, or < it when `drift_below`); None without one."""
        if self.threshold is None:
            return None
        return value < self.threshold if self.drift_below else value >= self.threshold


# One-dimensional statistics (the pure functions below).
PSI = Statistic("psi", 0.2)  # the usual reading: < 0.1 stable, 0.1-0.2 moderate, >= 0.2 significant shift
KL = Statistic("kl", 0.1)  # Evidently's default for its KL stattest
KS = Statistic("ks_pvalue", 0.05, drift_below=True)

# The rows of drift.csv (names are fixed: the dashboard and the alert rules read them).
PSI_MEAN = Statistic("psi_mean", 0.1)
PSI_MAX = Statistic("psi_max", PSI.threshold)
PSI_EXPECTED = Statistic("psi_expected")
KL_MEAN = Statistic("kl_mean", KL.threshold)
KL_MAX = Statistic("kl_max", KL.threshold)
KS_MAX = Statistic("ks_max")  # its meaning depends on the sample sizes; the p-value below is the test
KS_MIN_P = Statistic("ks_min_p_bonferroni", KS.threshold, drift_below=True)
EVIDENTLY_SCORE = Statistic("evidently_model_auc", 0.55)  # Evidently's threshold when not bootstrapping
EVIDENTLY_DRIFTED = Statistic("evidently_drifted", 0.5)  # 1.0 drifted, 0.0 not (its bootstrap verdict)
TOP1_COSINE = Statistic("top1_cosine", drift_below=True)  # compared against its own history, no fixed level

EMBEDDING_STATISTICS = (PSI_MEAN, PSI_MAX, PSI_EXPECTED, KL_MEAN, KL_MAX, KS_MAX, KS_MIN_P)
STATISTICS = EMBEDDING_STATISTICS + (EVIDENTLY_SCORE, EVIDENTLY_DRIFTED, TOP1_COSINE)

Row = tuple[str, float]  # (statistic, value) as written to drift.csv


class KsResult(NamedTuple):
    statistic: float
    pvalue: float


class QueryWindow(NamedTuple):
    reference: list[str]
    current: list[str]


@dataclass(frozen=True)
class EmbeddingDrift:
    psi_mean: float
    psi_max: float
    psi_expected: float  # PSI's expected value with no drift at these sample sizes and bins
    kl_mean: float
    kl_max: float
    ks_max: float
    ks_min_p: float  # smallest KS p-value over the components, Bonferroni-adjusted
    n_reference: int  # rows after sampling
    n_current: int
    n_components: int  # components actually used (n_components clipped to the reference's rank bound)

    @property
    def small_sample(self) -> bool:
        """True when the no-drift PSI alone reaches SMALL_SAMPLE_PSI: then the PSI thresholds mean little."""
        return self.psi_expected >= SMALL_SAMPLE_PSI

    def rows(self, prefix: str = "") -> list[Row]:
        """(statistic, value) pairs for drift.csv, in EMBEDDING_STATISTICS order; `prefix` e.g. QUERY_PREFIX."""
        values = (self.psi_mean, self.psi_max, self.psi_expected, self.kl_mean, self.kl_max,
                  self.ks_max, self.ks_min_p)
        return [(prefix + stat.name, float(v)) for stat, v in zip(EMBEDDING_STATISTICS, values, strict=True)]


@dataclass(frozen=True)
class EvidentlyDrift:
    score: float  # ROC AUC of a classifier telling reference from current rows; 0.5 = indistinguishable
    drifted: bool  # AUC above the 95th percentile of random-guess AUCs on the same test split
    method: str

    def rows(self, prefix: str = "") -> list[Row]:
        return [(prefix + EVIDENTLY_SCORE.name, float(self.score)),
                (prefix + EVIDENTLY_DRIFTED.name, float(self.drifted))]


def _matrix(values: np.ndarray, side: str) -> np.ndarray:
    matrix = np.asarray(values, dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape[0] == 0 or matrix.shape[1] == 0:
        raise DriftError(f"{side}: expected a non-empty 2-D matrix of embeddings, got shape {matrix.shape}")
    if not np.isfinite(matrix).all():
        raise DriftError(f"{side}: embeddings contain NaN or infinite values")
    return matrix


def _sample(values: Sequence[float] | np.ndarray, side: str) -> np.ndarray:
    sample = np.asarray(values, dtype=np.float64)
    if sample.ndim != 1 or sample.size == 0:
        raise DriftError(f"{side}: expected a non-empty 1-D sample, got shape {sample.shape}")
    if not np.isfinite(sample).all():
        raise DriftError(f"{side}: sample contains NaN or infinite values")
    return sample


def _sampled(values: np.ndarray, cap: int, seed: int, side: str) -> np.ndarray:
    """Sample before converting to float64: a whole corpus of float32 embeddings would double in memory."""
    values = np.asarray(values)
    if values.ndim != 2:
        raise DriftError(f"{side}: expected a non-empty 2-D matrix of embeddings, got shape {values.shape}")
    return _matrix(sample_rows(values, cap, seed), side)


def sample_rows(matrix: np.ndarray, cap: int, seed: int) -> np.ndarray:
    """At most `cap` rows drawn without replacement by `seed`, kept in their original order; `matrix` itself
    when it has no more than `cap` rows. Two matrices of the same length sampled with one seed keep the same rows."""
    if cap < 1:
        raise ValueError(f"cap must be >= 1, got {cap}")
    if matrix.shape[0] <= cap:
        return matrix
    keep = np.random.default_rng(seed).choice(matrix.shape[0], size=cap, replace=False)
    return matrix[np.sort(keep)]


def project(reference: np.ndarray, current: np.ndarray, n_components: int,
            *, pooled: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Both sides on the reference's top principal components: centred with the reference mean, projected on
    the first right-singular vectors of the centred reference; n_components clipped to [1, min(n_ref - 1, d)].

    The reference's own top components overstate its spread along them (in-sample fit), so with a few hundred
    rows and a flat spectrum the reference-only fit shows drift between two samples of one distribution.
    `pooled=True` fits mean and components on both sides stacked (n_ref + n_cur rows), treating them alike."""
    ref, cur = _matrix(reference, "reference"), _matrix(current, "current")
    if ref.shape[1] != cur.shape[1]:
        raise DriftError(f"reference has dimension {ref.shape[1]} but current has {cur.shape[1]}")
    fit = np.vstack([ref, cur]) if pooled else ref
    k = max(1, min(n_components, fit.shape[0] - 1, fit.shape[1]))
    mean = fit.mean(axis=0)
    # One BLAS thread: on two cores OpenBLAS's spinning workers contend with torch's OpenMP pool and a
    # small SVD takes seconds instead of milliseconds.
    with threadpool_limits(limits=1, user_api="blas"):
        _, _, vt = np.linalg.svd(fit - mean, full_matrices=False)
    components = vt[:k].T
    return (ref - mean) @ components, (cur - mean) @ components


def _bin_edges(reference: np.ndarray, bins: int) -> np.ndarray:
    """Inner edges: the reference's quantiles at 1/bins .. (bins-1)/bins, duplicates collapsed. A value
    repeated there is a point mass spanning a whole bin; it gets a bin of its own, [v, nextafter(v)), so a
    constant reference still tells "the same constant" from "another value"."""
    quantiles = np.quantile(reference, np.arange(1, bins) / bins)
    edges, counts = np.unique(quantiles, return_counts=True)
    masses = edges[counts > 1]
    return np.union1d(edges, np.nextafter(masses, np.inf))


def _shares(reference: np.ndarray, current: np.ndarray, bins: int, epsilon: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-bin shares of both samples, bins [a, b) between the edges plus -inf / +inf outer edges; an empty
    bin's share becomes `epsilon`, then each side is renormalised to sum to 1."""
    if bins < 2:
        raise ValueError(f"bins must be >= 2, got {bins}")
    if not 0 < epsilon < 1:
        raise ValueError(f"epsilon must be within (0, 1), got {epsilon}")
    ref, cur = _sample(reference, "reference"), _sample(current, "current")
    edges = _bin_edges(ref, bins)

    def shares(sample: np.ndarray) -> np.ndarray:
        counts = np.bincount(np.searchsorted(edges, sample, side="right"), minlength=edges.size + 1)
        share = np.where(counts == 0, epsilon, counts / sample.size)
        return share / share.sum()

    return shares(ref), shares(cur)


def psi(reference: Sequence[float] | np.ndarray, current: Sequence[float] | np.ndarray,
        bins: int = 10, epsilon: float = 1e-4) -> float:
    """Population stability index sum((cur - ref) * ln(cur / ref)) over the shares of `_shares` (reference
    quantile bins, empty bins at `epsilon`, renormalised). Identical samples give exactly 0; it equals
    KL(current || reference) + KL(reference || current)."""
    ref, cur = _shares(reference, current, bins, epsilon)
    return float(np.sum((cur - ref) * np.log(cur / ref)))


def kl_divergence(reference: Sequence[float] | np.ndarray, current: Sequence[float] | np.ndarray,
                  bins: int = 10, epsilon: float = 1e-4) -> float:
    """KL(current || reference) = sum(cur * ln(cur / ref)) on PSI's bins and shares: how surprising the
    current sample is to a model fitted on the reference."""
    ref, cur = _shares(reference, current, bins, epsilon)
    return float(np.sum(cur * np.log(cur / ref)))


def expected_psi_no_drift(bins: int, n_reference: int, n_current: int) -> float:
    """PSI's expected value when both samples come from one distribution (its small-sample bias):
    (bins - 1) * (1/n_reference + 1/n_current), from PSI ~ (1/n_ref + 1/n_cur) * chi2(bins - 1)."""
    if n_reference < 1 or n_current < 1:
        raise ValueError(f"sample sizes must be >= 1, got {n_reference} and {n_current}")
    return (bins - 1) * (1 / n_reference + 1 / n_current)


def ks_test(reference: Sequence[float] | np.ndarray, current: Sequence[float] | np.ndarray) -> KsResult:
    """Two-sided two-sample Kolmogorov-Smirnov test (scipy.stats.ks_2samp, method "auto")."""
    result = stats.ks_2samp(_sample(reference, "reference"), _sample(current, "current"),
                            alternative="two-sided")
    return KsResult(float(result.statistic), float(result.pvalue))


def bonferroni(pvalue: float, n_tests: int) -> float:
    """The smallest of `n_tests` p-values adjusted for having looked at all of them: min(1, p * n_tests)."""
    return min(1.0, pvalue * n_tests)


def embedding_drift(reference: np.ndarray, current: np.ndarray, config: DriftConfig,
                    *, pooled: bool = False) -> EmbeddingDrift:
    """PSI, KL and KS per reference principal component (see `project` for `pooled`), after sampling each
    side to `config.sample_cap` rows with `config.seed`; summarised as means, maxima and the
    Bonferroni-adjusted smallest KS p-value."""
    ref = _sampled(reference, config.sample_cap, config.seed, "reference")
    cur = _sampled(current, config.sample_cap, config.seed, "current")
    ref_proj, cur_proj = project(ref, cur, config.n_components, pooled=pooled)
    k = ref_proj.shape[1]
    psis = [psi(ref_proj[:, j], cur_proj[:, j], config.bins, config.epsilon) for j in range(k)]
    kls = [kl_divergence(ref_proj[:, j], cur_proj[:, j], config.bins, config.epsilon) for j in range(k)]
    ks = [ks_test(ref_proj[:, j], cur_proj[:, j]) for j in range(k)]
    return EmbeddingDrift(
        psi_mean=float(np.mean(psis)),
        psi_max=max(psis),
        psi_expected=expected_psi_no_drift(config.bins, ref.shape[0], cur.shape[0]),
        kl_mean=float(np.mean(kls)),
        kl_max=max(kls),
        ks_max=max(r.statistic for r in ks),
        ks_min_p=bonferroni(min(r.pvalue for r in ks), k),
        n_reference=ref.shape[0],
        n_current=cur.shape[0],
        n_components=k,
    )


def evidently_embedding_drift(reference: np.ndarray, current: np.ndarray, seed: int,
                              sample_cap: int = EVIDENTLY_SAMPLE_CAP) -> EvidentlyDrift:
    """Evidently's domain-classifier embedding drift (legacy `ModelDriftMethod(bootstrap=True)`): an
    SGD logistic classifier learns to tell reference rows from current ones on half the rows; its ROC AUC
    on the other half is the score, drift when it beats the 95th percentile of 100 random-guess AUCs.
    Each side is first sampled to `sample_cap` rows with `seed`; the method's own randomness is fixed
    (random_state=42, np.random.seed(0..99)), so a run is reproducible."""
    # Imported here: Evidently takes seconds to import and only this statistic needs it.
    import pandas as pd
    from evidently.legacy.metrics.data_drift.embedding_drift_methods import ModelDriftMethod

    ref = _sampled(reference, sample_cap, seed, "reference")
    cur = _sampled(current, sample_cap, seed, "current")
    if ref.shape[1] != cur.shape[1]:
        raise DriftError(f"reference has dimension {ref.shape[1]} but current has {cur.shape[1]}")
    columns = [f"e{i}" for i in range(ref.shape[1])]
    # The method reseeds NumPy's global generator (np.random.seed in its bootstrap): put it back afterwards.
    state = np.random.get_state()
    try:
        # Its argument order is (current, reference); it adds a "target" column to both frames.
        score, drifted, _ = ModelDriftMethod(bootstrap=True)(pd.DataFrame(cur, columns=columns),
                                                            pd.DataFrame(ref, columns=columns))
    finally:
        np.random.set_state(state)
    return EvidentlyDrift(score=float(score), drifted=bool(drifted), method=EVIDENTLY_METHOD)


def query_top1_cosine(top1_scores: Sequence[float]) -> float:
    """Mean cosine between each gold question and its top-1 document (a dense pipeline's per-question
    top1_score), NaN entries ignored; NaN when no score is left."""
    scores = np.asarray(top1_scores, dtype=np.float64)
    scores = scores[~np.isnan(scores)]
    return float(scores.mean()) if scores.size else math.nan


def _query_date(value: object, where: str) -> date:
    if not isinstance(value, str):
        raise DriftError(f"{where}: 'timestamp' must be an ISO date or datetime string, got {value!r}")
    try:
        return date.fromisoformat(value) if len(value) == 10 else datetime.fromisoformat(value).date()
    except ValueError:
        raise DriftError(f"{where}: 'timestamp' {value!r} is not an ISO date or datetime") from None


def parse_query_log(lines: Iterable[str], source: str, window_end: date, window_days: int) -> QueryWindow:
    """Split logged queries into a reference and a current window. Blank lines are skipped.

    JSONL (the first non-blank line starts with "{"): one {"query": ..., "timestamp": ...} per line; the
    current window is the `window_days` days ending on `window_end` (inclusive, by the timestamp's own
    calendar date), the reference every earlier query, later ones are left out. Plain text: one query per
    line, no dates: the first half is the reference, the second half (the larger, for an odd count) current."""
    if window_days < 1:
        raise ValueError(f"window_days must be >= 1, got {window_days}")
    numbered = [(n, line.strip()) for n, line in enumerate(lines, start=1) if line.strip()]
    if not numbered or not numbered[0][1].startswith("{"):
        queries = [text for _, text in numbered]
        half = len(queries) // 2
        return QueryWindow(reference=queries[:half], current=queries[half:])
    start = window_end - timedelta(days=window_days - 1)
    window = QueryWindow(reference=[], current=[])
    for lineno, text in numbered:
        where = f"{source}:{lineno}"
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DriftError(f"{where}: not valid JSON: {exc.msg} (column {exc.colno})") from None
        if not isinstance(obj, dict):
            raise DriftError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        query = obj.get("query")
        if not isinstance(query, str) or not query.strip():
            raise DriftError(f"{where}: 'query' must be a non-empty string")
        day = _query_date(obj.get("timestamp"), where)
        if day < start:
            window.reference.append(query.strip())
        elif day <= window_end:
            window.current.append(query.strip())
    return window


def read_query_log(path: Path | str, window_end: date, window_days: int) -> QueryWindow:
    """`parse_query_log` on a UTF-8 file; errors name the file (and line)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise DriftError(f"{path}: query log not found") from None
    lines = []
    for lineno, line in enumerate(raw.splitlines(), start=1):
        try:
            lines.append(line.decode("utf-8-sig" if lineno == 1 else "utf-8"))
        except UnicodeDecodeError as exc:
            raise DriftError(f"{path}:{lineno}: not UTF-8 text: {exc.reason}") from None
    return parse_query_log(lines, str(path), window_end, window_days)
