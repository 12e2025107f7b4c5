"""Agreement of a judge (or a heuristic) with human labels: raw agreement, Cohen's kappa, rates, confusion."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Agreement:
    """Binary agreement; `positive` is the flagged failure (unfaithful, irrelevant, refusal, not supported), so
    tpr is the share of the humans' failures the judge flags and fpr the share of their passes it flags."""

    n: int
    agreement: float
    kappa: float
    tpr: float
    fpr: float
    tp: int
    fp: int
    fn: int
    tn: int


def cohen_kappa(human: Sequence[Hashable], judged: Sequence[Hashable]) -> float:
    """(p_o - p_e) / (1 - p_e) over any label set: p_o the share of items both give the same label, p_e the
    agreement expected by chance from each rater's own label shares. NaN when p_e is 1 (both raters give one
    and the same label to everything: agreement is then not informative) or with no items."""
    if len(human) != len(judged):
        raise ValueError(f"{len(human)} human labels against {len(judged)} judged ones")
    n = len(human)
    if n == 0:
        return math.nan
    observed = sum(a == b for a, b in zip(human, judged)) / n
    left, right = Counter(human), Counter(judged)
    expected = sum(left[label] * right[label] for label in left) / (n * n)
    if math.isclose(expected, 1.0):
        return math.nan
    return (observed - expected) / (1 - expected)


def _rate(part: int, whole: int) -> float:
    return part / whole if whole else math.nan


def agreement(human: Sequence[bool], judged: Sequence[bool]) -> Agreement:
    """Agreement of binary labels (True = the failure is flagged)."""
    pairs = list(zip(human, judged))
    tp = sum(h and j for h, j in pairs)
    fp = sum(j and not h for h, j in pairs)
    fn = sum(h and not j for h, j in pairs)
    tn = sum(not h and not j for h, j in pairs)
    n = len(pairs)
    return Agreement(n, _rate(tp + tn, n), cohen_kappa(list(human), list(judged)), _rate(tp, tp + fn),
                     _rate(fp, fp + tn), tp, fp, fn, tn)
