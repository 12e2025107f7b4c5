"""Question segments: every gold tag, and the source and category of a question's gold documents. Each segment's
metric series (segments.csv, with its n), its members (segment_questions.csv), and the drop and slow-drift rules
over its questions, Holm-corrected over segments and series together, named with the rest for contrast."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd
from scipy import special

from pipeline import alerts, contract, series, store
from pipeline.alerts import Alert
from pipeline.config import AlertsConfig
from pipeline.contract import (ALERT, K, PIPELINE, QUESTION_ID, RUN_DATE, SEGMENT, SEGMENT_CATEGORY, SEGMENT_DROP,
                               SEGMENT_SLOW_DRIFT, SEGMENT_SOURCE, SEGMENT_TAG, WARNING)
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


def _rest(rows: pd.DataFrame, ids: set[str], key: series.SeriesKey, test: series.Contrast) -> Rest:
    outside = rows[~rows[QUESTION_ID].astype(str).isin(ids)]
    matrix = series.question_matrix(outside, key, outside)
    n = len(set(outside.loc[store.as_days(outside[RUN_DATE]) == test.tested[-1], QUESTION_ID]))
    if matrix.empty:
        return Rest(n, None)
    tested = len(test.tested)
    return Rest(n, series.contrast(matrix, test.tested, test.weights[:tested], test.baseline_days,
                                   test.higher_is_better))


def segment_matrices(per_question: pd.DataFrame, members: Mapping[str, Sequence[str]], config: AlertsConfig,
                     ks: Sequence[int], today: pd.Timestamp) -> dict[SegmentKey, series.Matrix]:
    """The matrix of every watched series over every segment with at least `segment_min_n` questions answered
    today, and fewer than all of them (a segment of every question is the overall series, watched already)."""
    on_today = per_question[store.as_days(per_question[RUN_DATE]) == today]
    pipelines = list(dict.fromkeys(on_today[PIPELINE]))
    groups = {g: rows for g, rows in per_question.groupby([PIPELINE, K], sort=False)}
    ids_of = {g: rows[QUESTION_ID].astype(str) for g, rows in groups.items()}
    mine: dict[tuple, pd.DataFrame] = {}  # a segment's rows of a pipeline and k, selected once for its series
    out: dict[SegmentKey, series.Matrix] = {}
    for key in series.keys(config, ks, pipelines):
        group = (key.pipeline, key.k)
        if group not in groups:
            continue
        answered = set(on_today.loc[(on_today[PIPELINE] == key.pipeline) & (on_today[K] == key.k)
                                    & on_today[key.metric.column].notna(), QUESTION_ID].astype(str))
        for segment, ids in members.items():
            n = len(answered & set(ids))
            if n < config.segment_min_n or n == len(answered):
                continue
            if (group, segment) not in mine:
                mine[group, segment] = groups[group][ids_of[group].isin(set(ids))]
            rows = mine[group, segment]
            out[SegmentKey(key.pipeline, key.metric, key.k, segment)] = series.question_matrix(rows, key, rows)
    return out


MC_RESOLUTION = 5  # the Monte Carlo draws resolve p down to a fifth of Holm's first step, alpha / tests


def family_config(config: AlertsConfig, n_tests: int) -> AlertsConfig:
    """The settings the segment family is tested with: its own alpha (`segment_alpha`), and enough Monte Carlo draws
    for Holm's first step over `n_tests` to be reachable (5000 draws resolve p to 1/5001: over 48 tests, 0.0096)."""
    draws = max(config.permutations, math.ceil(MC_RESOLUTION * n_tests / config.segment_alpha))
    return dataclasses.replace(config, alpha=config.segment_alpha, permutations=draws)


def segment_alerts(day: str, today: pd.Timestamp, per_question: pd.DataFrame,
                   members: Mapping[str, Sequence[str]], config: AlertsConfig, ks: Sequence[int]) -> list[Alert]:
    """The drop and slow-drift rules over each segment's questions (`segment_matrices`), with the overall rules'
    tests, thresholds and severities; Holm over every segment and series of a rule (their own family). A segment
    alerts only when the rest of the questions stayed flat over the same runs: a change hidden in the mean, not a
    change of every kind of question (the overall rules' concern, which would otherwise page once per segment)."""
    matrices = segment_matrices(per_question, members, config, ks, today)
    rest_alpha = config.alpha  # the overall rules' alpha: the rest moved if it would fire there (without Holm)
    config = family_config(config, len(matrices))
    tested = alerts.tests_of(matrices, today, config)
    n_tests = {rule: sum(t.rule == rule for t in tested) for rule in RULE_OF}
    groups = {g: rows for g, rows in per_question.groupby([PIPELINE, K], sort=False)}
    out = []
    for t in tested:
        key: SegmentKey = t.key
        threshold = series.drop_threshold(config, key.name)
        if not series.fires(t.test, threshold, t.p_value, config.alpha):
            continue
        confirmed = t.rule == contract.SLOW_DRIFT or t.confirm is not None
        shown = t.confirm if t.rule == contract.DROP and confirmed else t.test
        ids = set(members[key.segment])
        rest = _rest(groups[(key.pipeline, key.k)], ids, key, shown)
        if rest.describe(threshold, rest_alpha) != FLAT:
            continue  # not confined to the segment: the whole set moved, which the overall rules watch
        out.append(Alert(day, RULE_OF[t.rule], key.pipeline, f"{key.name} {key.segment}", t.test.value,
                         shown.baseline, t.test.change * 100, threshold * 100, ALERT if confirmed else WARNING,
                         message(key, t.rule, shown, rest, threshold, t.p_value, n_tests[t.rule], config),
                         p_value=t.p_value))
    return out


def message(key: SegmentKey, rule: str, test: series.Contrast, rest: Rest, threshold: float, p: float,
            n_tests: int, config: AlertsConfig) -> str:
    """"paraphrase questions (12): hit@5 0.70 → 0.30 since 2025-07-01; the other 28 flat", then the pipeline,
    the rule and its test."""
    since = f"{test.baseline_days[0]:%Y-%m-%d}"
    how = ("against the runs before" if rule == contract.DROP else
           f"slow drift against the reference {since} to {test.baseline_days[-1]:%Y-%m-%d}")
    return (f"{label(key.segment)} questions ({test.n_questions}): {key.name} {test.baseline:.2f} → {test.value:.2f} "
            f"since {since}; the other {rest.n} {rest.describe(threshold, config.alpha)}{DETAILS.format(key.pipeline)}"
            f"{how}; threshold {threshold:.0%}; paired test over {test.n_questions} questions: {test.z:.1f} null sds, "
            f"p={p:.2g} after Holm over {n_tests} segment series)")


DETAILS = " ({}, "  # where a message's headline ends and its pipeline, rule and test begin


def headline(message: str, pipeline: str) -> str:
    """A segment alert's message without its details: "paraphrase questions (12): ...; the other 28 flat"."""
    return message.partition(DETAILS.format(pipeline))[0]

