"""Question segments: every gold tag, and the source and category of a question's gold documents. Each segment's
metric series (segments.csv, with its n), its members (segment_questions.csv), and the drop and slow-drift rules
over its questions, Holm-corrected over segments and series together, named with the rest for contrast."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import special

from pipeline import contract, series, store
from pipeline.alerts import NEAR_ALPHA, SEED, Alert
from pipeline.config import AlertsConfig
from pipeline.contract import (ALERT, K, PIPELINE, QUESTION_ID, RUN_DATE, SEGMENT, SEGMENT_CATEGORY, SEGMENT_DROP,
                               SEGMENT_SLOW_DRIFT, SEGMENT_SOURCE, SEGMENT_TAG)
from pipeline.gold import GoldQuestion
from pipeline.metrics import MEAN_NAMES, METRICS

RULE_OF = {contract.DROP: SEGMENT_DROP, contract.SLOW_DRIFT: SEGMENT_SLOW_DRIFT}


def name(kind: str, value: str) -> str:
    """A segment's name in the store: its kind and value, "tag:paraphrase"."""
    return f"{kind}:{value}"


def label(segment: str) -> str:
    """How a message names a segment: a tag as itself ("paraphrase"), else its kind and value ("source peps")."""
    kind, _, value = segment.partition(":")
    return value if kind == SEGMENT_TAG else f"{kind} {value}"


def membership(gold: Sequence[GoldQuestion], documents: Mapping[str, tuple[str, str]]) -> dict[str, tuple[str, ...]]:
    """Segment -> its questions (gold order). A question belongs to each of its tags and to the source and the
    category (`documents`: doc id -> (source, first category), "" when it has none) of each of its relevant
    documents; a document the corpus lacks gives no source or category."""
    found: dict[str, list[str]] = {}
    for q in gold:
        labels = [name(SEGMENT_TAG, t) for t in q.tags]
        for doc in q.relevant_ids:
            source, category = documents.get(doc, ("", ""))
            labels += [name(kind, v) for kind, v in ((SEGMENT_SOURCE, source), (SEGMENT_CATEGORY, category)) if v]
        for segment in dict.fromkeys(labels):
            found.setdefault(segment, []).append(q.id)
    return {s: tuple(ids) for s, ids in sorted(found.items())}


def member_rows(run_date: str, members: Mapping[str, Sequence[str]]) -> list[dict]:
    """segment_questions.csv rows of a run."""
    return [{RUN_DATE: run_date, SEGMENT: s, QUESTION_ID: q} for s, ids in members.items() for q in ids]


def members_on(frame: pd.DataFrame, day: pd.Timestamp) -> dict[str, tuple[str, ...]]:
    """The membership of segment_questions.csv's last run on or before `day` (empty when none)."""
    rows = frame[store.as_days(frame[RUN_DATE]) <= day] if len(frame) else frame
    if rows.empty:
        return {}
    rows = rows[rows[RUN_DATE] == rows[RUN_DATE].max()]
    return {s: tuple(g[QUESTION_ID].astype(str)) for s, g in rows.groupby(SEGMENT, sort=True)}


def series_rows(question_rows: pd.DataFrame | Sequence[dict], members: Mapping[str, Sequence[str]]) -> list[dict]:
    """segments.csv rows: per run, pipeline, k, segment and metric, the mean over the segment's questions with a
    value (as metrics.csv's means leave a question without relevant documents out) and their number."""
    frame = pd.DataFrame(question_rows)
    if frame.empty:
        return []
    frame[QUESTION_ID] = frame[QUESTION_ID].astype(str)
    out = []
    for segment, ids in members.items():
        part = frame[frame[QUESTION_ID].isin(set(ids))]
        for (day, pipeline, k), group in part.groupby([RUN_DATE, PIPELINE, K], sort=True):
            for column in METRICS:
                values = group[column].astype(float)
                n = int(values.notna().sum())
                out.append({RUN_DATE: str(day)[:10], PIPELINE: pipeline, K: int(k), SEGMENT: segment,
                            contract.METRIC: MEAN_NAMES[column],
                            contract.VALUE: float(values.mean()) if n else math.nan,
                            "n_questions": n})
    return out


# --- the rules -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SegmentKey(series.SeriesKey):
    """A watched series over one segment's questions."""

    segment: str = ""


FLAT = "flat"  # the rest of the questions did not move


@dataclass(frozen=True)
class Rest:
    """The questions outside a segment over the same runs: their contrast (None: none has every run)."""

    n: int
    test: series.Contrast | None

    def describe(self, threshold: float, alpha: float) -> str:
        """"flat" unless practically large and significant (two-sided) on its own; else its figures."""
        t = self.test
        if t is None:
            return "without values"
        p = float(2 * special.ndtr(-abs(t.z))) if math.isfinite(t.z) else (0.0 if t.difference else 1.0)
        if abs(t.change) <= threshold or p >= alpha:
            return FLAT
        return f"{t.baseline:.2f} → {t.value:.2f}"


@dataclass(frozen=True)
class Changes:
    """One series' per-question changes over one rule's runs: d_q = (weighted mean of the tested runs) - (mean of
    the baseline runs), for the questions with a value on every one of them."""

    questions: np.ndarray  # question ids, in the order of `values` and `d`
    values: np.ndarray  # questions x (tested + baseline) runs
    d: np.ndarray
    window: series.Contrast  # the rule's contrast over every question: its runs and weights

    def contrast(self, rows: np.ndarray) -> series.Contrast | None:
        """The rule's contrast over some of the questions (a boolean mask)."""
        w = self.window
        days = (*w.tested, *w.baseline_days)
        matrix = series.Matrix(self.values[rows], days)
        return series.contrast(matrix, w.tested, w.weights[:len(w.tested)], w.baseline_days, w.higher_is_better)


def changes(matrix: series.Matrix, questions: np.ndarray, window: series.Contrast | None) -> Changes | None:
    """The per-question changes over `window`'s runs (a contrast over every question of `matrix`)."""
    if window is None:
        return None
    values = matrix.values[:, matrix.position([*window.tested, *window.baseline_days])]
    kept = ~np.isnan(values).any(axis=1)
    return Changes(questions[kept], values[kept], values[kept] @ window.weights, window)


DRAWN_AT_ONCE = 1_000_000  # values relabelled per chunk of draws (8 MB), bounding memory on large gold sets


def interaction_p(d: np.ndarray, inside: Sequence[np.ndarray], higher_is_better: bool, draws: int, seed: int,
                  stop_above: float | None = None) -> list[float]:
    """The segment x rest interaction test of each segment (a mask over `d`): the one-sided permutation p of
    mean(d | in the segment) - mean(d | outside) at least as harmful as observed, the segment labels relabelled at
    random among the questions `draws` times (seeded, shared by the segments): (1 + draws as extreme) / (1 + draws).
    Valid whatever the runs' autocorrelation: it conditions on each question's change. With the total of d fixed,
    the difference is monotone in the segment's sum, so a draw's sums for every size are one cumulative sum."""
    rng = np.random.default_rng(seed)
    sign = -1.0 if higher_is_better else 1.0  # harm > 0
    harm = sign * d
    sizes = np.array([int(m.sum()) for m in inside])
    observed = np.array([harm[m].sum() for m in inside]) - 1e-9
    extreme = np.zeros(len(inside), dtype=int)
    drawn, chunk = 0, max(series.PERMUTATION_CHUNK, DRAWN_AT_ONCE // max(harm.size, 1))
    for start in range(0, draws, chunk):
        rows = min(chunk, draws - start)
        sums = np.cumsum(rng.permuted(np.broadcast_to(harm, (rows, harm.size)), axis=1), axis=1)[:, sizes - 1]
        extreme += np.count_nonzero(sums >= observed, axis=0)
        drawn += rows
        if stop_above is not None and ((extreme + 1) / (draws + 1) > stop_above).all():
            break  # every p of the full draw can only be larger
    return ((extreme + 1) / (drawn + 1)).tolist()


def normal_p(d: np.ndarray, inside: np.ndarray, higher_is_better: bool) -> float:
    """The interaction's p by the normal tail of the segment's sum of d under relabelling (sampling without
    replacement): a screen, drawn exactly (`interaction_p`) where the decision could turn on it."""
    n, m = d.size, int(inside.sum())
    sd = math.sqrt(m * (n - m) / (n * (n - 1)) * float(((d - d.mean()) ** 2).sum())) if n > 1 else 0.0
    harm = (-1.0 if higher_is_better else 1.0) * (float(d[inside].sum()) - m * float(d.mean()))
    if sd == 0:
        return 1.0 if harm <= 1e-12 else 0.0
    return float(special.ndtr(-harm / sd))


@dataclass(frozen=True)
class SegmentTest:
    """One segment of one series under one rule: its contrast, the rest's, and the interaction's p (Holm-adjusted
    once the family is known; 1.0 when not practically large, which never fires and only raises Holm's bar)."""

    key: SegmentKey
    rule: str  # contract.DROP or contract.SLOW_DRIFT: the overall rule whose runs it uses
    test: series.Contrast
    rest: Rest
    large: bool  # the segment's own change, and its change beyond the rest's, pass the practical threshold
    p_value: float = 1.0

    def fires(self, config: AlertsConfig) -> bool:
        return self.large and self.p_value < config.segment_alpha


def _large(test: series.Contrast, rest: series.Contrast | None, threshold: float) -> bool:
    """Practically large: the segment's change passes the threshold, and so does its change beyond the rest's (in
    units of the segment's baseline): a decline of every kind of question is the overall rules' concern."""
    return (test.relative_harm > threshold and rest is not None
            and test.harm - rest.harm > threshold * abs(test.baseline))


def _windows(matrix: series.Matrix, today: pd.Timestamp, config: AlertsConfig, higher_is_better: bool,
             start: pd.Timestamp | None) -> dict[str, series.Contrast | None]:
    """The runs of each rule: the drop's last `confirm_days` runs against the `window` before them; the slow drift's
    moving mean against the reference period."""
    return {contract.DROP: series.drop_contrast(matrix, today, config, higher_is_better,
                                                block=max(1, config.confirm_days)),
            contract.SLOW_DRIFT: series.slow_contrast(matrix, today, config, higher_is_better, start)}


def segment_tests(per_question: pd.DataFrame, members: Mapping[str, Sequence[str]], config: AlertsConfig,
                  ks: Sequence[int], today: pd.Timestamp) -> list[SegmentTest]:
    """Every segment x watched series x rule tested today: segments with at least `segment_min_n` of the questions
    answered on the rule's runs, and fewer than all of them (a segment of every question is the overall series),
    with the interaction's p (Holm over the rule's family at `segment_alpha`) where the change is practically
    large (`_large`)."""
    on_today = per_question[store.as_days(per_question[RUN_DATE]) == today]
    pipelines = list(dict.fromkeys(on_today[PIPELINE]))
    groups = {g: rows for g, rows in per_question.groupby([PIPELINE, K], sort=False)}
    start = series.reference_start(config)
    found: list[SegmentTest] = []
    pending: list[tuple[Changes, list[tuple[int, np.ndarray]]]] = []  # per series and rule: its large tests' masks
    for key in series.keys(config, ks, pipelines):
        rows = groups.get((key.pipeline, key.k))
        if rows is None:
            continue
        matrix = series.question_matrix(rows, key, rows)
        if matrix.empty or today not in matrix.days:
            continue
        questions = np.unique(rows[QUESTION_ID].to_numpy().astype(str))
        threshold = series.drop_threshold(config, key.name)
        for rule, window in _windows(matrix, today, config, key.metric.higher_is_better, start).items():
            change = changes(matrix, questions, window)
            if change is None:
                continue
            large = []
            for segment, ids in members.items():
                inside = np.isin(change.questions, list(ids))
                n = int(inside.sum())
                if n < config.segment_min_n or n == inside.size:
                    continue
                test = change.contrast(inside)
                rest = Rest(inside.size - n, change.contrast(~inside))
                big = _large(test, rest.test, threshold)
                if big:
                    large.append((len(found), inside))
                found.append(SegmentTest(SegmentKey(key.pipeline, key.metric, key.k, segment), rule, test, rest, big))
            if large:
                pending.append((change, large))
    return _adjusted(found, pending, config)


MC_RESOLUTION = 5  # the Monte Carlo draws resolve p down to a fifth of Holm's first step, alpha / tests


def draws_for(config: AlertsConfig, n_tests: int) -> int:
    """Enough Monte Carlo draws for Holm's first step over `n_tests` at `segment_alpha` to be reachable (5000 draws
    resolve p to 1/5001: over 48 tests, 0.0096)."""
    return max(config.permutations, math.ceil(MC_RESOLUTION * n_tests / config.segment_alpha))


def _adjusted(found: list[SegmentTest], pending: list[tuple[Changes, list[tuple[int, np.ndarray]]]],
              config: AlertsConfig) -> list[SegmentTest]:
    """The interaction p of the large tests (drawn per series and rule, shared draws), Holm per rule over every test
    of the rule (the others at 1.0: they cannot fire, and a p of 1 only makes Holm stricter for the rest)."""
    p = [1.0] * len(found)
    for rule in RULE_OF:
        family = [i for i, t in enumerate(found) if t.rule == rule]
        draws = draws_for(config, len(family))
        for change, large in pending:
            mine = [(i, inside) for i, inside in large if found[i].rule == rule]
            for i, inside in mine:
                p[i] = normal_p(change.d, inside, change.window.higher_is_better)
            mine = [(i, inside) for i, inside in mine if p[i] < NEAR_ALPHA * config.segment_alpha]
            if not mine:
                continue
            drawn = interaction_p(change.d, [inside for _, inside in mine], change.window.higher_is_better, draws,
                                  SEED, stop_above=config.segment_alpha)
            for (i, _), q in zip(mine, drawn):
                p[i] = q
        for i, q in zip(family, series.holm([p[i] for i in family])):
            p[i] = q
    return [dataclasses.replace(t, p_value=q) for t, q in zip(found, p)]


def segment_alerts(day: str, today: pd.Timestamp, per_question: pd.DataFrame,
                   members: Mapping[str, Sequence[str]], config: AlertsConfig, ks: Sequence[int]) -> list[Alert]:
    """The segment rules (`segment_tests`): a segment whose questions changed, on the drop's or the slow drift's
    runs, by more than the practical threshold and by more than the rest by as much, significantly by the segment x
    rest interaction test (Holm over the rule's segments x pipelines x series at `segment_alpha`). A change of every
    kind of question is the overall rules' concern, which would otherwise page once per segment."""
    return alerts_of(day, segment_tests(per_question, members, config, ks, today), config)


def alerts_of(day: str, tested: Sequence[SegmentTest], config: AlertsConfig) -> list[Alert]:
    """The alerts of a run's segment tests: those that fire, in their own words."""
    n_tests = {rule: sum(t.rule == rule for t in tested) for rule in RULE_OF}
    out = []
    for t in tested:
        if not t.fires(config):
            continue
        key, threshold = t.key, series.drop_threshold(config, t.key.name)
        out.append(Alert(day, RULE_OF[t.rule], key.pipeline, f"{key.name} {key.segment}", t.test.value,
                         t.test.baseline, t.test.change * 100, threshold * 100, ALERT,
                         message(key, t.rule, t.test, t.rest, threshold, t.p_value, n_tests[t.rule], config),
                         p_value=t.p_value))
    return out


def message(key: SegmentKey, rule: str, test: series.Contrast, rest: Rest, threshold: float, p: float,
            n_tests: int, config: AlertsConfig) -> str:
    """"paraphrase questions (12): hit@5 0.70 → 0.30 since 2025-07-01; the other 28 flat", then the pipeline,
    the rule and its test."""
    since = f"{test.baseline_days[0]:%Y-%m-%d}"
    how = (f"the last {len(test.tested)} runs against the {len(test.baseline_days)} before" if rule == contract.DROP
           else f"slow drift against the reference {since} to {test.baseline_days[-1]:%Y-%m-%d}")
    return (f"{label(key.segment)} questions ({test.n_questions}): {key.name} {test.baseline:.2f} → {test.value:.2f} "
            f"since {since}; the other {rest.n} {rest.describe(threshold, config.alpha)}{DETAILS.format(key.pipeline)}"
            f"{how}; threshold {threshold:.0%}; segment x rest permutation test of the questions' changes: "
            f"p={p:.2g} after Holm over {n_tests} segment series)")


DETAILS = " ({}, "  # where a message's headline ends and its pipeline, rule and test begin


def headline(message: str, pipeline: str) -> str:
    """A segment alert's message without its details: "paraphrase questions (12): ...; the other 28 flat"."""
    return message.partition(DETAILS.format(pipeline))[0]
