"""Drift of what changed: the chunks new in the current window against those of a reference window (disjoint
samples), by PSI and KS on principal components fitted on both, a kNN domain classifier, novel content,
near copies, new categories or sources and the documents' languages, each with its null at the actual sample sizes
(a permutation null over whole documents, or Fisher's exact test on documents: the document is the unit) and a
verdict after Holm's correction and an effect-size line; Evidently's classifier and the top-1 cosine as context; the
query-log reader."""

from __future__ import annotations

from pipeline.errors import DriftwatchError

import dataclasses
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from pipeline import contract, jsonl
from pipeline.config import DriftConfig
from pipeline.contract import DRIFTED, STABLE

EVIDENTLY_SAMPLE_CAP = 2000  # rows per side given to Evidently's classifier (it trains one per call)
EVIDENTLY_METHOD = "model(bootstrap)"


class DriftError(DriftwatchError):
    """Samples or a query log that drift cannot be measured on; the message says which and why."""


@dataclass(frozen=True)
class Statistic:
    """A statistic's descriptor: its name in drift.csv."""

    name: str


class QueryWindow(NamedTuple):
    reference: list[str]
    current: list[str]


@dataclass(frozen=True)
class EvidentlyDrift:
    score: float  # ROC AUC of a classifier telling reference from current rows; 0.5 = indistinguishable
    drifted: bool  # AUC above the 95th percentile of random-guess AUCs on the same test split
    method: str

    def rows(self, prefix: str = "") -> list[tuple[str, float]]:
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
    return matrix if matrix.shape[0] <= cap else matrix[kept_rows(np.ones(matrix.shape[0], np.int64), cap, seed)]


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


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """ROC AUC as the Mann-Whitney statistic: (sum of the positives' ranks - n1 (n1 + 1) / 2) / (n1 n0), ties
    at their average rank (scikit-learn's roc_auc_score, without its per-call validation, 100 times a run)."""
    labels = np.asarray(labels).astype(bool)
    n1, n0 = int(labels.sum()), int((~labels).sum())
    if not n1 or not n0:
        raise DriftError("ROC AUC needs both classes in the test half")
    from scipy import stats  # only here: its import costs 1.5 s

    ranks = stats.rankdata(scores)
    return float((ranks[labels].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def evidently_embedding_drift(reference: np.ndarray, current: np.ndarray, seed: int,
                              sample_cap: int = EVIDENTLY_SAMPLE_CAP) -> EvidentlyDrift:
    """Evidently's domain-classifier embedding drift (legacy `ModelDriftMethod(bootstrap=True)`), computed
    here step for step with scikit-learn: reference rows (label 1) then current rows (label 0), split in
    halves (`train_test_split(test_size=0.5, random_state=42, shuffle=True)`), an SGD logistic classifier
    (`random_state=42`) fitted on one half, its ROC AUC on the other is the score, drift when it beats the
    95th percentile of 100 random-guess AUCs (uniform scores seeded 0..99). Each side is first sampled to
    `sample_cap` rows with `seed`. Evidently itself takes 5-10 s to import, more than a whole no-op run;
    `test_drift` checks these numbers against Evidently's own method. NumPy's global generator is untouched."""
    from sklearn.linear_model import SGDClassifier
    from sklearn.model_selection import train_test_split

    ref = _sampled(reference, sample_cap, seed, "reference")
    cur = _sampled(current, sample_cap, seed, "current")
    if ref.shape[1] != cur.shape[1]:
        raise DriftError(f"reference has dimension {ref.shape[1]} but current has {cur.shape[1]}")
    data = np.vstack([ref, cur])
    target = np.concatenate([np.ones(len(ref), np.int64), np.zeros(len(cur), np.int64)])
    x_train, x_test, y_train, y_test = train_test_split(data, target, test_size=0.5, random_state=42, shuffle=True)
    classifier = SGDClassifier(loss="log_loss", random_state=42).fit(x_train, y_train)
    score = roc_auc(y_test, classifier.predict_proba(x_test)[:, 1])
    random_scores = [roc_auc(y_test, np.random.RandomState(i).rand(len(y_test))) for i in range(100)]
    return EvidentlyDrift(score=float(score), drifted=bool(score > np.percentile(random_scores, 95)),
                          method=EVIDENTLY_METHOD)


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
    lines = list(lines)
    numbered = [(n, line.strip()) for n, line in enumerate(lines, start=1) if line.strip()]
    if not numbered or not numbered[0][1].startswith("{"):
        queries = [text for _, text in numbered]
        half = len(queries) // 2
        return QueryWindow(reference=queries[:half], current=queries[half:])
    start = window_end - timedelta(days=window_days - 1)
    window = QueryWindow(reference=[], current=[])
    for _, where, obj in jsonl.objects(lines, source, DriftError):
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
    except (IsADirectoryError, NotADirectoryError):
        raise DriftError(f"{path}: the query log must be a file (this is a directory, or under a file)") from None
    lines = []
    for lineno, line in enumerate(raw.splitlines(), start=1):
        try:
            lines.append(line.decode("utf-8-sig" if lineno == 1 else "utf-8"))
        except UnicodeDecodeError as exc:
            raise DriftError(f"{path}:{lineno}: not UTF-8 text: {exc.reason}") from None
    return parse_query_log(lines, str(path), window_end, window_days)


# --- drift of what changed: the window's new chunks against a reference window ---------------------------

# The statistics with a null (the family a run's verdicts are corrected over), in drift.csv order, and the context
# ones; their names are the contract's. Effect-size lines are settings (config.DriftConfig, see `effect_thresholds`):
# PSI and KS above their null means, the classifier's balanced accuracy (kNN, leave one out) above its null mean,
# novel content (no close neighbour in the reference), near copies elsewhere in the corpus, new categories or sources.
FAMILY = tuple(Statistic(name) for name in contract.DRIFT_FAMILY)
PSI_MEAN, KS_MAX, CLASSIFIER, NOVELTY, DUPLICATES, NEW_CATEGORIES, NEW_SOURCES, LANGUAGES = FAMILY
EVIDENTLY_SCORE = Statistic(contract.EVIDENTLY_MODEL_AUC)  # context: Evidently's own bootstrap decides its flag
EVIDENTLY_DRIFTED = Statistic(contract.EVIDENTLY_DRIFTED)
TOP1_COSINE = Statistic(contract.TOP1_COSINE)  # context, per dense pipeline

NOVELTY_QUANTILE = 0.05  # a chunk is novel below the reference's own 5% leave-one-out nearest-neighbour cosine
NEIGHBOURS = 5  # the kNN domain classifier's k
MAX_EXAMPLES = 3  # titles named in a detail


@dataclass(frozen=True)
class Sample:
    """The chunks of one side: embeddings (unit length) and, per chunk, its document's primary category,
    source and title (empty lists when unknown, e.g. for query logs), and its document. The document is the
    unit: a document's chunks are alike and enter together, so they stay on one side in every permutation,
    never neighbour each other, and are sampled together."""

    vectors: np.ndarray
    categories: Sequence[str] = ()
    sources: Sequence[str] = ()
    titles: Sequence[str] = ()
    duplicate: np.ndarray | None = None  # per chunk: has a near copy elsewhere in the corpus (bool)
    # A side of `n` chunks of which only the rows `rows` (ascending) are held: those its samples keep (see
    # `kept_rows`), so a large window is not read whole. None: every row is held.
    rows: np.ndarray | None = None
    n: int | None = None
    # Per held row, the id of its document; empty: every chunk is a document of its own (a logged query).
    documents: Sequence[str] = ()
    # The chunks of each document of the whole side, in row order (its rows numbered document after document);
    # None: the runs of one id in `documents`, which needs every row held.
    counts: Sequence[int] | None = None
    # Per held row, its document's language (pipeline/shifts.py `language`); empty: unknown (no language_share).
    languages: Sequence[str] = ()

    def __len__(self) -> int:
        return int(self.vectors.shape[0]) if self.n is None else self.n

    def held(self, keep: np.ndarray) -> np.ndarray:
        """The positions in the held rows of the rows `keep` (row numbers of the whole side)."""
        if self.rows is None:
            return keep
        at = np.searchsorted(self.rows, keep)
        if len(keep) and (at.max() >= len(self.rows) or not np.array_equal(self.rows[at], keep)):
            raise DriftError("a sample asks for rows its side does not hold")
        return at

    def document_counts(self) -> np.ndarray:
        """The chunks of each document of the whole side, in row order."""
        if self.counts is not None:
            counts = np.asarray(self.counts, np.int64)
            if counts.sum() != len(self):
                raise DriftError(f"the documents' chunk counts add up to {counts.sum()}, the side has {len(self)}")
            return counts
        if self.rows is not None:
            raise DriftError("a side holding only some of its rows needs its documents' chunk counts")
        if not len(self.documents):
            return np.ones(len(self), np.int64)
        return run_lengths(self.documents)

    def groups(self) -> np.ndarray:
        """Per held row, its document as an integer (0, 1, ... in order of appearance)."""
        if not len(self.documents):
            return np.arange(self.vectors.shape[0])
        runs = run_lengths(self.documents)
        return np.repeat(np.arange(len(runs)), runs)


def run_lengths(documents: Sequence[str]) -> np.ndarray:
    """The lengths of the runs of one id in `documents`; a document's chunks must be consecutive."""
    ids = np.asarray(documents, dtype=object)
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    if len(starts) != len(set(ids.tolist())):
        raise DriftError("a document's chunks must be consecutive rows of its side")
    return np.diff(np.r_[starts, len(ids)])


@dataclass(frozen=True)
class Verdict:
    """One drift.csv row's numbers: the statistic's value, its permutation null at these sample sizes (the
    null's 95% quantile and mean), the effect compared with the effect-size line, the p-value and verdict."""

    statistic: str
    value: float
    null_q95: float
    null_mean: float
    threshold: float
    p_value: float  # raw; Holm-adjusted in `adjusted_p` once the family is known
    effect: float
    detail: str = ""
    adjusted_p: float = math.nan
    verdict: str = STABLE

    @property
    def effect_from(self) -> float:
        """The value the effect is measured from: the null's mean (for duplicates, the reference's share)."""
        return self.value - self.effect


def value_line(effect_from: float, line: float) -> float:
    """The effect-size line on the statistic's own scale: a value at or above it has an effect at or above the
    line (what `decide` requires, with the Holm-adjusted p below alpha)."""
    return effect_from + line


def threshold_phrase(statistic: str, effect_from: float, line: float) -> str:
    """How a statistic's threshold on its own scale is made ("null mean 0.500 + effect line 0.4"): the value the
    effect is measured from plus the effect-size line. A row of a run before effect_from was recorded says the line
    is a margin above its base, without the number."""
    if math.isnan(line):
        return ""
    base = "reference share" if statistic == DUPLICATES.name else "null mean"
    if math.isnan(effect_from):
        return f"{base} + effect line {line:g} (the run did not record its {base})"
    return f"{base} {effect_from:.3f} + effect line {line:g}"


def _permutation_p(observed: float, null: np.ndarray) -> float:
    """(1 + draws at least as large) / (1 + draws): never 0, exact under exchangeability."""
    return float((1 + np.count_nonzero(null >= observed - 1e-12)) / (1 + null.size))


def _verdict(stat: Statistic, observed: float, null: np.ndarray, effect: float | None = None,
             detail: str = "") -> Verdict:
    """A statistic against its null; the effect is the value above the null's mean unless given."""
    mean = float(null.mean())
    return Verdict(stat.name, float(observed), float(np.quantile(null, 0.95)), mean, math.nan,
                   _permutation_p(observed, null), float(observed - mean if effect is None else effect), detail)


def _labels(groups: np.ndarray, n_ref_documents: int, permutations: int, rng: np.random.Generator) -> np.ndarray:
    """Boolean "is current" labels per chunk: row 0 the observed split, then `permutations` random splits of
    the DOCUMENTS (a document's chunks always on one side). `groups`: per pooled chunk its document, numbered
    0.. with the reference's documents first; with one chunk per document these are the chunks' permutations."""
    n_documents = int(groups.max()) + 1 if len(groups) else 0
    observed = np.r_[np.zeros(n_ref_documents, bool), np.ones(n_documents - n_ref_documents, bool)]
    draws = np.array([rng.permutation(observed) for _ in range(permutations)]).reshape(permutations, -1)
    return np.vstack([observed, draws])[:, groups]


def _psi_rows(proj: np.ndarray, labels: np.ndarray, bins: int, epsilon: float) -> np.ndarray:
    """Mean PSI over the components for every label row (see `_psi_ks_rows`)."""
    return _psi_ks_rows(proj, labels, bins, epsilon)[0]


def _ks_rows(proj: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """The largest two-sample KS distance over the components for every label row (see `_psi_ks_rows`)."""
    return _psi_ks_rows(proj, labels, 2, 0.5, psi=False)[1]


def _psi_ks_rows(proj: np.ndarray, labels: np.ndarray, bins: int, epsilon: float, *, psi: bool = True
                 ) -> tuple[np.ndarray, np.ndarray]:
    """For every label row: the mean PSI over the components (`psi`'s reference quantile bins, numpy's linear
    quantile, and empty-bin shares) and the largest two-sample KS distance over them (the empirical CDFs compared
    only where the pooled value changes, so ties count as scipy counts them). The sides' sizes may differ from
    row to row (whole documents move). Per component the pooled values are sorted once and every row's running
    count of current values taken once: a row's reference quantiles are read at its reference ranks, its counts
    below each edge from the running counts, and its CDF gap n * C_i - (i + 1) * n_cur in exact integers."""
    rows, n = labels.shape
    n_cur = labels.sum(axis=1)
    n_ref = n - n_cur
    levels = np.arange(1, bins) / bins
    virtual = (n_ref[:, None] - 1) * levels[None, :]  # numpy's "linear" quantile position among the reference
    low = np.floor(virtual).astype(np.int64)
    frac = virtual - low
    high = np.minimum(low + 1, n_ref[:, None] - 1)
    # Row r's running counts lifted above row r - 1's, for one searchsorted over every row; int32 while the
    # flat counts fit (a third of int64's memory traffic, which is what these passes cost).
    wide = np.int64 if rows * (n + 1) >= 2 ** 31 or n * n >= 2 ** 31 else np.int32
    offset = (np.arange(rows, dtype=wide) * (n + 1))[:, None]
    row_start = (np.arange(rows, dtype=np.int64) * n)[:, None]
    position = np.arange(1, n + 1, dtype=wide)
    zeros = np.zeros((rows, 1), wide)
    n_cur_wide = n_cur.astype(wide)[:, None]
    psi_total, ks = np.zeros(rows), np.zeros(rows)
    for j in range(proj.shape[1]):
        order = np.argsort(proj[:, j], kind="stable")
        x = proj[order, j]
        # Current values among the first i + 1 (np.take: C order, which cumsum scans fast).
        running_cur = np.cumsum(np.take(labels, order, axis=1), axis=1, dtype=wide)
        last_of_tie = np.r_[x[1:] != x[:-1], True]
        gap = n * running_cur - position * n_cur_wide
        if not last_of_tie.all():
            gap = gap[:, last_of_tie]
        ks = np.maximum(ks, np.abs(gap).max(axis=1) / (n_cur * n_ref))
        if not psi:
            continue
        flat = (position - running_cur + offset).ravel()  # running reference counts, increasing across rows
        at_low = np.searchsorted(flat, low + 1 + offset) - row_start  # where the (low+1)-th reference value sits
        at_high = np.searchsorted(flat, high + 1 + offset) - row_start
        a, b = x[at_low], x[at_high]
        edges = np.where(frac < 0.5, a + (b - a) * frac, b - (b - a) * (1 - frac))  # numpy's _lerp
        below = np.searchsorted(x, edges, side="left")  # pooled values under each edge
        cur_below = np.take_along_axis(np.concatenate([zeros, running_cur], axis=1), below, axis=1)
        cur_counts = np.diff(np.concatenate([zeros, cur_below, n_cur[:, None]], axis=1))
        ref_counts = np.diff(np.concatenate([zeros, below - cur_below, n_ref[:, None]], axis=1))

        def shares(counts: np.ndarray, size: np.ndarray) -> np.ndarray:
            share = np.where(counts == 0, epsilon, counts / size[:, None])
            return share / share.sum(axis=1, keepdims=True)

        ref_share, cur_share = shares(ref_counts, n_ref), shares(cur_counts, n_cur)
        psi_total += np.sum((cur_share - ref_share) * np.log(cur_share / ref_share), axis=1)
    return psi_total / proj.shape[1], ks


def _other_documents(similarity: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """The similarities with every pair of chunks of one document (a chunk and itself included) at -inf: a
    chunk's neighbours are other documents' chunks, or its own document would vouch for it."""
    sim = similarity.copy()
    sim[groups[:, None] == groups[None, :]] = -np.inf
    return sim


def _classifier_rows(similarity: np.ndarray, labels: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Balanced leave-one-document-out accuracy of a kNN classifier telling current from reference chunks:
    each chunk's NEIGHBOURS most similar chunks of OTHER documents vote, weighted by the inverse of their side's
    size in that row."""
    sim = _other_documents(similarity, groups)
    k = min(NEIGHBOURS, sim.shape[0] - int(np.bincount(groups).max()))
    if k < 1:
        raise DriftError("the domain classifier needs chunks of at least two documents")
    neighbours = np.argpartition(-sim, k - 1, axis=1)[:, :k]
    n_cur = labels.sum(axis=1)
    n_ref = labels.shape[1] - n_cur
    votes_cur = labels[:, neighbours].sum(axis=2) / n_cur[:, None]  # (rows, n, k) -> weighted votes per chunk
    votes_ref = (~labels[:, neighbours]).sum(axis=2) / n_ref[:, None]
    predicted_cur = votes_cur > votes_ref
    right_cur = (predicted_cur & labels).sum(axis=1) / n_cur
    right_ref = (~predicted_cur & ~labels).sum(axis=1) / n_ref
    return (right_cur + right_ref) / 2


NO_NEIGHBOUR = -2.0  # the nearest cosine of a chunk with no other document on that side (below any cosine)


def _novel(similarity: np.ndarray, is_cur: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Per current chunk: whether its nearest reference chunk of another document is farther than the
    reference's own NOVELTY_QUANTILE nearest-other-document cosine (the definition; `Neighbours.novel` computes
    it for every permutation at once)."""
    sim = _other_documents(similarity, groups)
    nearest_ref = np.maximum(np.where(~is_cur[None, :], sim, -np.inf).max(axis=1), NO_NEIGHBOUR)
    level = np.quantile(nearest_ref[~is_cur], NOVELTY_QUANTILE)
    return nearest_ref[is_cur] < level


class Neighbours:
    """Every chunk's chunks of other documents sorted by similarity (the nearest `top`), so that a chunk's
    nearest neighbour on one side, under any labelling, is the first of its list on that side: O(n top) a
    permutation instead of copying the (n, n) similarities. Rows whose `top` nearest all lie on the other side
    fall back to a full scan, so the result is `_novel`'s exactly."""

    def __init__(self, similarity: np.ndarray, groups: np.ndarray, top: int = 32) -> None:
        self.sim = _other_documents(similarity, groups)
        n = len(self.sim)
        t = max(1, min(top, n - 1))
        part = np.argpartition(-self.sim, t - 1, axis=1)[:, :t] if n > 1 else np.zeros((n, 1), np.int64)
        order = np.argsort(-np.take_along_axis(self.sim, part, axis=1), axis=1, kind="stable")
        self.order = np.take_along_axis(part, order, axis=1)
        self.sorted = np.take_along_axis(self.sim, self.order, axis=1)
        self.valid = np.isfinite(self.sorted)  # a list shorter than `top` (few other documents) ends in -inf

    def nearest_in(self, side: np.ndarray) -> np.ndarray:
        """Per chunk (and per row of `side`, when it is 2-D: one boolean mask per row): the highest similarity
        to a chunk of another document on `side`, NO_NEIGHBOUR when there is none."""
        sides = np.atleast_2d(side)
        hit = np.take(sides, self.order, axis=1)  # (rows, n, top), C order: `sides[:, order]` is not, and scans slowly
        hit &= self.valid
        first = hit.argmax(axis=2)
        best = np.take_along_axis(self.sorted[None], first[:, :, None], axis=2)[:, :, 0]
        missing = ~np.take_along_axis(hit, first[:, :, None], axis=2)[:, :, 0]
        for r, i in zip(*np.nonzero(missing)):  # every listed neighbour on the other side: scan the row
            best[r, i] = np.where(sides[r], self.sim[i], -np.inf).max()
        best = np.maximum(best, NO_NEIGHBOUR)
        return best if side.ndim == 2 else best[0]

    def novel(self, is_cur: np.ndarray) -> np.ndarray:
        nearest_ref = self.nearest_in(~is_cur)
        level = np.quantile(nearest_ref[~is_cur], NOVELTY_QUANTILE)
        return nearest_ref[is_cur] < level

    def novel_shares(self, labels: np.ndarray, batch: int = 256) -> np.ndarray:
        """`novel(row).mean()` for every label row, a batch of rows at a time; the reference's quantile of each
        row read from its sorted values as numpy's linear quantile reads it."""
        out = np.empty(labels.shape[0])
        for start in range(0, labels.shape[0], batch):
            is_cur = labels[start:start + batch]
            nearest = self.nearest_in(~is_cur)
            n_ref = (~is_cur).sum(axis=1)
            ranked = np.sort(np.where(is_cur, np.inf, nearest), axis=1)
            virtual = (n_ref - 1) * NOVELTY_QUANTILE
            low = np.floor(virtual).astype(np.int64)
            frac = virtual - low
            a = np.take_along_axis(ranked, low[:, None], axis=1)[:, 0]
            b = np.take_along_axis(ranked, np.minimum(low + 1, n_ref - 1)[:, None], axis=1)[:, 0]
            with np.errstate(invalid="ignore"):  # a == b == NO_NEIGHBOUR gives 0 * 0, never inf - inf
                level = np.where(frac < 0.5, a + (b - a) * frac, b - (b - a) * (1 - frac))
            out[start:start + batch] = ((nearest < level[:, None]) & is_cur).sum(axis=1) / is_cur.sum(axis=1)
        return out


def _new_label_share(values: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """For every label row: the share of current chunks whose label (a category or a source) no reference
    chunk has."""
    codes = np.unique(values, return_inverse=True)[1].ravel()
    one_hot = np.zeros((len(codes), int(codes.max()) + 1), np.float32)
    one_hot[np.arange(len(codes)), codes] = 1
    seen = ((~labels).astype(np.float32) @ one_hot) > 0  # (rows, labels): held by some reference chunk
    new = ~np.take(seen, codes, axis=1)
    return (new & labels).sum(axis=1) / labels.sum(axis=1)


def _counts(values: Sequence[str], limit: int = 4) -> str:
    """"Sports 40, Politics 2" for the most common values (an empty value is "none")."""
    common = pd.Series([v or "none" for v in values]).value_counts().head(limit)
    return ", ".join(f"{name} {count}" for name, count in common.items())


def _typical_titles(vectors: np.ndarray, titles: Sequence[str]) -> str:
    """The titles of the chunks closest to their group's mean: the most typical of them, deduplicated."""
    centre = vectors.mean(axis=0)
    order = np.argsort(-(vectors @ centre), kind="stable")
    picked = list(dict.fromkeys(titles[i] for i in order if titles[i]))[:MAX_EXAMPLES]
    return "; ".join(f"'{t[:80]}'" for t in picked)


def _describe(sample: Sample, mask: np.ndarray, what: str) -> str:
    """What the masked chunks of `sample` are: how many, their categories and sources, typical titles."""
    n = int(mask.sum())
    if n == 0 or not len(sample.titles):
        return ""
    pick = lambda values: [values[i] for i in np.flatnonzero(mask)]  # noqa: E731
    parts = [f"{n} {what}"]
    if len(sample.categories):
        parts.append(f"categories {_counts(pick(sample.categories))}")
    if len(sample.sources):
        parts.append(f"sources {_counts(pick(sample.sources))}")
    parts.append(f"e.g. {_typical_titles(sample.vectors[mask], pick(sample.titles))}")
    return ", ".join(parts)


def _document_flags(sample: Sample) -> tuple[np.ndarray, np.ndarray]:
    """Per document of a (wholly held) sample: whether any of its chunks has a near copy; and per chunk, its
    document's flag."""
    groups = sample.groups()
    flags = np.zeros(int(groups.max()) + 1 if len(groups) else 0, bool)
    np.logical_or.at(flags, groups, np.asarray(sample.duplicate, bool))
    return flags, flags[groups]


def _duplicates(reference: Sample, current: Sample) -> Verdict | None:
    """The share of new DOCUMENTS with a near copy elsewhere in the corpus against the reference documents'
    share; one-sided Fisher exact test on the documents, which is their permutation null (documents, not
    chunks, are exchangeable: a document's chunks share its copies). Each side's flags look for copies in the
    corpus seen by its window's end, so the current side's pool holds the days between the two windows' ends
    too; bench/corpus_null.py measures what that costs on null streams."""
    if current.duplicate is None or reference.duplicate is None:
        return None
    cur, cur_chunks = _document_flags(current)
    ref, _ = _document_flags(reference)
    table = [[int(cur.sum()), int((~cur).sum())], [int(ref.sum()), int((~ref).sum())]]
    from scipy import stats

    p = float(stats.fisher_exact(table, alternative="greater")[1])
    flagged, documents = int(cur.sum() + ref.sum()), cur.size + ref.size
    null_q95 = float(stats.hypergeom.ppf(0.95, documents, flagged, cur.size) / cur.size)
    detail = _describe(current, cur_chunks, "chunks of documents with near copies") if cur.mean() > ref.mean() else ""
    return Verdict(DUPLICATES.name, float(cur.mean()), null_q95, flagged / documents, math.nan,
                   p, float(cur.mean() - ref.mean()), detail)


def window_drift(reference: Sample, current: Sample, config: DriftConfig,
                 thresholds: dict[str, float] | None = None) -> list[Verdict]:
    """Every statistic of FAMILY that the samples support, each against its null at these sample sizes,
    with Holm-adjusted p-values and verdicts. Both sides are first sampled by documents (`kept_rows`: at most
    `config.max_chunks_per_document` chunks of a document, whole documents up to `config.sample_cap` chunks).

    The document is the unit. The null of PSI, KS, the classifier, novelty and the new-label shares is the
    permutation null of the side labels over the pooled DOCUMENTS (`config.permutations` seeded draws; a
    document's chunks always move together); the classifier and novelty never take a neighbour from the chunk's
    own document; the principal components are fitted on both sides together, so neither is favoured.
    Duplicates use Fisher's exact test on documents.

    A window drifted at `config.alpha` is tested again with `config.page_permutations` draws (the same seeded
    draws, continued), so that its p-values can reach the one-day page level `config.page_alpha`: with m
    statistics the smallest Holm-adjusted permutation p is m / (draws + 1), 0.014 at 500 draws. Only drifted
    windows pay for it, and the verdicts of the longer draw are the ones kept."""
    thresholds = thresholds or effect_thresholds(config)
    per_document = config.max_chunks_per_document
    keep_ref = kept_rows(reference.document_counts(), config.sample_cap, config.seed, per_document)
    keep_cur = kept_rows(current.document_counts(), config.sample_cap, current_seed(config), per_document)
    reference, current = _subset(reference, keep_ref), _subset(current, keep_cur)
    ref = _matrix(reference.vectors, "reference")
    cur = _matrix(current.vectors, "current")
    if ref.shape[1] != cur.shape[1]:
        raise DriftError(f"reference has dimension {ref.shape[1]} but current has {cur.shape[1]}")
    verdicts = decide(_statistics(reference, current, ref, cur, config, config.permutations), config.alpha,
                      thresholds)
    if config.page_permutations > config.permutations and any(v.verdict == DRIFTED for v in verdicts):
        verdicts = decide(_statistics(reference, current, ref, cur, config, config.page_permutations),
                          config.alpha, thresholds)
    return verdicts


def _statistics(reference: Sample, current: Sample, ref: np.ndarray, cur: np.ndarray, config: DriftConfig,
                permutations: int) -> list[Verdict]:
    """The family's values, nulls and raw p-values at `permutations` seeded draws of the documents (not yet
    decided)."""
    rng = np.random.default_rng(config.seed)
    pooled = np.vstack([ref, cur])
    ref_groups = reference.groups()
    n_ref_documents = int(ref_groups.max()) + 1
    groups = np.r_[ref_groups, current.groups() + n_ref_documents]  # a version is a unit of its own side
    labels = _labels(groups, n_ref_documents, permutations, rng)
    ref_proj, cur_proj = project(ref, cur, config.n_components, pooled=True)
    proj = np.vstack([ref_proj, cur_proj])
    with threadpool_limits(limits=1, user_api="blas"):
        similarity = pooled @ pooled.T
    psis, ks = _psi_ks_rows(proj, labels, config.bins, config.epsilon)
    accuracy = _classifier_rows(similarity, labels, groups)
    neighbours = Neighbours(similarity, groups)
    novel = neighbours.novel_shares(labels)
    is_novel = neighbours.novel(labels[0])
    results = [
        _verdict(PSI_MEAN, psis[0], psis[1:]),
        _verdict(KS_MAX, ks[0], ks[1:]),
        _verdict(CLASSIFIER, accuracy[0], accuracy[1:]),
        _verdict(NOVELTY, novel[0], novel[1:], detail=_describe(current, is_novel, "novel chunks")),
    ]
    duplicates = _duplicates(reference, current)
    if duplicates is not None:
        results.append(duplicates)
    for stat, ref_values, cur_values in ((NEW_CATEGORIES, reference.categories, current.categories),
                                         (NEW_SOURCES, reference.sources, current.sources)):
        if len(ref_values) and len(cur_values):
            values = np.asarray([*ref_values, *cur_values], dtype=object)
            shares = _new_label_share(values.astype(str), labels)
            new = ~np.isin(np.asarray(cur_values, dtype=object).astype(str), np.asarray(ref_values, dtype=str))
            results.append(_verdict(stat, shares[0], shares[1:],
                                    detail=_describe(current, new, "chunks in what the reference lacks")))
    if len(reference.languages) and len(current.languages):
        results.append(_languages(reference, current, labels, groups, config.language_min_documents))
    return results


OTHER_LANGUAGE = "other"  # the languages held by fewer than language_min_documents documents, pooled


def language_table(languages: Sequence[str], min_documents: int) -> tuple[list[str], np.ndarray]:
    """The language columns of a window x language table and each document's column (one-hot, documents x
    columns): a language held by fewer than `min_documents` of the documents is pooled as OTHER_LANGUAGE."""
    counts = pd.Series(list(languages), dtype=object).value_counts()
    pooled = [code if counts[code] >= min_documents else OTHER_LANGUAGE for code in languages]
    columns = sorted(set(pooled))
    index = {code: i for i, code in enumerate(columns)}
    one_hot = np.zeros((len(pooled), len(columns)))
    one_hot[np.arange(len(pooled)), [index[code] for code in pooled]] = 1
    return columns, one_hot


def g_statistic(current: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """The G-test statistic (log-likelihood ratio, 2 sum O ln(O / E)) of the 2 x L tables whose rows are `current`
    and `reference`, given as (tables, L) counts: scipy.stats.chi2_contingency(lambda_="log-likelihood",
    correction=False)'s statistic, for every table at once (a cell of 0 adds 0)."""
    observed = np.stack([current, reference], axis=1)  # (tables, 2, L)
    expected = observed.sum(axis=2, keepdims=True) * observed.sum(axis=1, keepdims=True) / observed.sum(
        axis=(1, 2), keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(observed > 0, observed * np.log(observed / expected), 0.0)
    return 2 * terms.sum(axis=(1, 2))


def language_shares(languages: Sequence[str], is_cur: np.ndarray, min_documents: int) -> Verdict:
    """The documents' languages, current against reference: the value is the total variation distance between the
    two windows' shares of documents per language (languages of fewer than `min_documents` documents pooled), the
    p-value that of the G-test on the window x language table of DOCUMENTS under their permutation null, exact where
    the chi-square approximation is not (a few foreign items); the effect is the distance above its null mean, and 0
    when fewer than `min_documents` current documents are in excess of the reference's shares (the distance times
    the current documents): one misread item in a window of three is a third of it, never a shift.
    `languages`: per document, its language; `is_cur`: (1 + draws, documents), row 0 the observed split, the others
    permutations of the documents."""
    columns, one_hot = language_table(languages, min_documents)
    cur = np.asarray(is_cur, np.float64)
    cur_counts, ref_counts = cur @ one_hot, (1 - cur) @ one_hot
    distance = 0.5 * np.abs(cur_counts / cur_counts.sum(axis=1, keepdims=True)
                            - ref_counts / ref_counts.sum(axis=1, keepdims=True)).sum(axis=1)
    g = g_statistic(cur_counts, ref_counts)
    verdict = _verdict(LANGUAGES, distance[0], distance[1:])
    if distance[0] * cur_counts[0].sum() < min_documents - 1e-9:
        verdict = dataclasses.replace(verdict, effect=0.0)
    from pipeline.shifts import language_name  # shifts reads the config and the contract only: no cycle

    n_cur, n_ref = int(cur_counts[0].sum()), int(ref_counts[0].sum())
    ranked = sorted(zip(columns, cur_counts[0], ref_counts[0]), key=lambda x: (-x[1], -x[2], x[0]))
    phrase = ", ".join(f"{language_name(code)} {int(c)}/{n_cur} (reference {int(r)}/{n_ref})" for code, c, r in ranked)
    return dataclasses.replace(verdict, p_value=_permutation_p(g[0], g[1:]), detail=f"documents by language: {phrase}")


def _languages(reference: Sample, current: Sample, labels: np.ndarray, groups: np.ndarray, min_documents: int
               ) -> Verdict:
    """`language_shares` of the two samples, on the family's permutations of the documents."""
    first = np.r_[0, np.flatnonzero(np.diff(groups)) + 1]  # each document's first chunk (groups are consecutive)
    languages = [*reference.languages, *current.languages]
    return language_shares([languages[i] for i in first], labels[:, first], min_documents)


def effect_thresholds(config: DriftConfig) -> dict[str, float]:
    """The effect-size line of each statistic, from the config."""
    return {PSI_MEAN.name: config.psi_effect, KS_MAX.name: config.ks_effect,
            CLASSIFIER.name: config.classifier_effect, NOVELTY.name: config.novelty_effect,
            DUPLICATES.name: config.duplicate_effect, NEW_CATEGORIES.name: config.composition_effect,
            NEW_SOURCES.name: config.composition_effect, LANGUAGES.name: config.language_effect}


def decide(results: Sequence[Verdict], alpha: float, thresholds: dict[str, float]) -> list[Verdict]:
    """Holm over the statistics given; drifted = adjusted p < alpha and effect at or above its line."""
    from pipeline.series import holm  # series imports the config only: no cycle at import time

    adjusted = holm([r.p_value for r in results]) if results else []
    out = []
    for r, p in zip(results, adjusted):
        line = thresholds[r.statistic]
        drifted = p < alpha and r.effect >= line
        out.append(dataclasses.replace(r, threshold=line, adjusted_p=p, verdict=DRIFTED if drifted else STABLE,
                                       detail=r.detail if drifted else ""))
    return out


def not_enough(n_reference: int, n_current: int, config: DriftConfig) -> str | None:
    """Why no verdict can be given at these sample sizes, or None when there is enough data."""
    if n_current < config.min_current:
        return f"not enough new data: {n_current} new chunks in the window (at least {config.min_current} needed)"
    if n_reference < config.min_reference:
        return (f"not enough reference data: {n_reference} chunks in the reference window "
                f"(at least {config.min_reference} needed)")
    return None


def current_seed(config: DriftConfig) -> int:
    """The seed of the current side's sample (the reference's is `config.seed`)."""
    return config.seed + 1


def kept_rows(counts: Sequence[int] | np.ndarray, cap: int, seed: int, per_document: int | None = None
              ) -> np.ndarray:
    """The rows `window_drift` keeps of a side whose documents hold `counts` chunks each (its rows numbered
    document after document): of each document at most `per_document` chunks, evenly spaced over it (all of them
    when None), so that no long document outweighs the rest; of the documents all, or, when their kept chunks
    exceed `cap`, whole documents drawn in a seeded order while they fit (at least one). Ascending."""
    counts = np.asarray(counts, np.int64)
    if cap < 1:
        raise ValueError(f"cap must be >= 1, got {cap}")
    sizes = counts if per_document is None else np.minimum(counts, per_document)
    if sizes.sum() <= cap:
        chosen = np.arange(len(counts))
    else:
        order = np.random.default_rng(seed).permutation(len(counts))
        fits = int(np.searchsorted(np.cumsum(sizes[order]), cap, side="right"))
        chosen = np.sort(order[:max(1, fits)])
    if np.array_equal(sizes, counts) and len(chosen) == len(counts):
        return np.arange(int(counts.sum()))
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    parts = [starts[i] + (np.arange(counts[i]) if sizes[i] == counts[i] else
                          np.unique(np.round(np.linspace(0, counts[i] - 1, sizes[i])).astype(np.int64)))
             for i in chosen]
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def _subset(sample: Sample, keep: np.ndarray) -> Sample:
    keep = sample.held(keep)
    pick = lambda values: [values[i] for i in keep] if len(values) else []  # noqa: E731
    return Sample(np.asarray(sample.vectors)[keep], pick(sample.categories), pick(sample.sources),
                  pick(sample.titles), None if sample.duplicate is None else np.asarray(sample.duplicate)[keep],
                  documents=pick(sample.documents), languages=pick(sample.languages))
