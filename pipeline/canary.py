"""The canary: a candidate target against the one it would replace, per run, by paired per-question differences
(canary.csv), and the sentence the Overview and the weekly review give it. A candidate never pages."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from pipeline import contract
from pipeline.metrics import DEFAULT_METRIC, DEFAULT_WATCHED, REGISTRY, series_name

CONFIDENCE = 0.95  # the paired t interval's level
EXACT_MAX = 20  # nonzero differences up to which the sign-flip null is enumerated (2**20 sums); beyond, Monte Carlo
DRAWS = 20_000  # Monte Carlo sign flips, seeded: a re-run of a date gives the same p
SEED = 0
METRICS = DEFAULT_WATCHED  # the headline's quality metrics (hit, recall, MRR, nDCG), at default_k


@dataclass(frozen=True)
class Paired:
    """Candidate minus against over the questions both scored: the mean, its paired t interval, the sign-flip p."""

    n: int
    mean_diff: float
    ci_low: float
    ci_high: float
    p_value: float


def t_interval(diffs: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The paired t interval of the mean difference (NaN below 2 differences; the mean itself when they are all
    equal: no spread, no uncertainty the t interval could show)."""
    n = len(diffs)
    if n < 2:
        return math.nan, math.nan
    from scipy import stats  # here: the pages and the report import this module for its sentence only

    mean, se = float(diffs.mean()), float(diffs.std(ddof=1)) / math.sqrt(n)
    half = float(stats.t.ppf((1 + confidence) / 2, n - 1)) * se
    return mean - half, mean + half


def sign_flip_p(diffs: np.ndarray, draws: int = DRAWS, seed: int = SEED) -> float:
    """Two-sided p of the mean difference under the paired null (each question's difference is as likely with
    either sign): the share of sign flips whose |sum| reaches the observed one. Zero differences flip to
    themselves and are left out; up to EXACT_MAX nonzero ones every flip is enumerated (the identity included),
    beyond, `draws` seeded random flips with the (1 + hits) / (1 + draws) estimate."""
    d = diffs[diffs != 0]
    if len(d) == 0:
        return 1.0
    observed = abs(float(d.sum()))
    tolerance = 1e-9 * max(1.0, observed)  # sums equal up to rounding count as reaching it
    if len(d) <= EXACT_MAX:
        sums = np.zeros(1)
        for value in d:
            sums = np.concatenate((sums + value, sums - value))
        return float(np.mean(np.abs(sums) >= observed - tolerance))
    signs = np.random.default_rng(seed).choice((-1.0, 1.0), size=(draws, len(d)))
    hits = int(np.sum(np.abs(signs @ d) >= observed - tolerance))
    return (1 + hits) / (1 + draws)


def paired(candidate: Sequence[float], against: Sequence[float]) -> Paired:
    """The canary statistic over per-question values in the same question order (NaN: the question was not
    scored by one side, and is left out of the pair)."""
    c, a = np.asarray(candidate, dtype=float), np.asarray(against, dtype=float)
    both = ~(np.isnan(c) | np.isnan(a))
    diffs = c[both] - a[both]
    if len(diffs) == 0:
        return Paired(0, math.nan, math.nan, math.nan, math.nan)
    low, high = t_interval(diffs)
    return Paired(len(diffs), float(diffs.mean()), low, high, sign_flip_p(diffs))


def canary_rows(run_date: str, per_question: pd.DataFrame | Sequence[dict], pairs: Mapping[str, str], k: int
                ) -> list[dict]:
    """canary.csv's rows of one run: per candidate (`pairs`: candidate -> against) and headline metric at k, the
    paired statistic over the questions both scored. A side without rows that day (a failed target) gives none."""
    frame = pd.DataFrame(per_question)
    rows: list[dict] = []
    if frame.empty:
        return rows
    frame = frame[frame[contract.K] == k]
    for candidate, against in pairs.items():
        sides = [frame[frame[contract.PIPELINE] == name].set_index(contract.QUESTION_ID) for name in (candidate,
                                                                                                   against)]
        if sides[0].empty or sides[1].empty:
            continue
        questions = sides[1].index.intersection(sides[0].index)
        for metric in METRICS:
            column = REGISTRY[metric].column
            p = paired(sides[0].loc[questions, column].to_numpy(float), sides[1].loc[questions, column].to_numpy(float))
            rows.append({contract.RUN_DATE: run_date, contract.CANDIDATE: candidate, contract.AGAINST: against,
                         contract.METRIC: metric, contract.K: k, contract.N_QUESTIONS: p.n,
                         contract.MEAN_DIFF: p.mean_diff, contract.CI_LOW: p.ci_low, contract.CI_HIGH: p.ci_high,
                         contract.P_VALUE: p.p_value})
    return rows


def sentence(row: Mapping) -> str:
    """One canary.csv row in words: "candidate X: recall@5 −0.040 ± 0.030 against hybrid (p 0.02, 40 questions)"."""
    info = REGISTRY[row[contract.METRIC]]
    name, n = series_name(info.label, int(row[contract.K])), int(row[contract.N_QUESTIONS])
    head = f"candidate {row[contract.CANDIDATE]}: {name}"
    questions = f"{n} question" + ("" if n == 1 else "s")
    if n < 2 or pd.isna(row[contract.CI_LOW]):
        return f"{head} not compared against {row[contract.AGAINST]} ({questions} scored by both)"
    half = (row[contract.CI_HIGH] - row[contract.CI_LOW]) / 2
    mean = f"{row[contract.MEAN_DIFF]:+.3f}".replace("-", "\u2212")
    p = row[contract.P_VALUE]
    return (f"{head} {mean} \u00b1 {half:.3f} against {row[contract.AGAINST]} "
            f"({'p < 0.001' if p < 0.001 else f'p {p:.2g}'}, {questions})")


def latest_sentences(canary: pd.DataFrame, metric: str = DEFAULT_METRIC) -> list[str]:
    """The sentence of each candidate on its latest run, for `metric` (the Overview's and the weekly review's)."""
    if canary.empty:
        return []
    rows = canary[canary[contract.METRIC] == metric].sort_values(contract.RUN_DATE)
    return [sentence(row) for _, row in rows.groupby(contract.CANDIDATE, sort=False).tail(1).iterrows()]
