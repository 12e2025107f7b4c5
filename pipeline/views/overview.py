"""The Overview page: per pipeline a verdict (ok / warning / alert) with its reason in a sentence (its open
conditions, else how it stands against the reference period and last week), the last incident with its cause, and
the cards with their sparklines.
The reference period and the baseline window are the rules' own (`pipeline.series`), never recomputed here."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from pipeline import series
from pipeline.contract import ALERT, WARNING
from pipeline.config import AlertsConfig
from pipeline.metrics import DEFAULT_WATCHED, metric_info
from pipeline.contract import K, METRIC, PIPELINE, RULE, RUN_DATE, SEVERITY, VALUE
from pipeline.contract import AGAINST, CANDIDATE, CI_HIGH, CI_LOW, MEAN_DIFF, N_QUESTIONS, P_VALUE
from pipeline.views import SEVERITY_OF_RANK, SEVERITY_RANK, metric_label, open_conditions, series_name, values_of

OK = "ok"
STATUSES = (OK, WARNING, ALERT)
WEEK = pd.Timedelta(days=7)


@dataclass(frozen=True)
class SeriesStatus:
    """One metric@k of one pipeline on the latest run, against the rules' reference period and a week ago."""

    pipeline: str
    metric: str
    k: int
    value: float
    reference: float  # mean of the slow-drift rule's reference period (NaN until it is complete)
    reference_days: tuple[pd.Timestamp, pd.Timestamp] | None
    week_ago: float  # the value of the last run at least 7 days before the latest (NaN without one)
    week_ago_day: pd.Timestamp | None
    first: float  # the value of the first run
    first_day: pd.Timestamp
    severity: str  # the most severe alert of the latest run on this series ("" when none)
    history: tuple[float, ...]  # every value, oldest first (a sparkline)

    @property
    def higher_is_better(self) -> bool:
        return metric_info(self.metric).higher_is_better

    def harm(self, baseline: float) -> float:
        """The relative change from `baseline` to today, positive when it goes the harmful way."""
        if math.isnan(baseline):
            return math.nan
        change = series.relative_change(self.value, baseline)
        return -change if self.higher_is_better else change

    @property
    def against_reference(self) -> float:
        return self.harm(self.reference)

    @property
    def against_week(self) -> float:
        return self.harm(self.week_ago)


@dataclass(frozen=True)
class Verdict:
    pipeline: str
    status: str  # ok / warning / alert
    reason: str  # one sentence: the open conditions when a rule fired, else the series furthest from its reference
    series: tuple[SeriesStatus, ...]
    worst: SeriesStatus | None  # the series furthest from its reference on the harmful side


def _daily(metrics: pd.DataFrame, pipeline: str, metric: str, k: int) -> pd.Series:
    rows = metrics[(metrics[PIPELINE] == pipeline) & (metrics[METRIC] == metric) & (metrics[K] == k)]
    return rows.dropna(subset=[VALUE]).sort_values(RUN_DATE, kind="stable").set_index(RUN_DATE)[VALUE]


def series_status(metrics: pd.DataFrame, alerts: pd.DataFrame, pipeline: str, metric: str, k: int,
                  config: AlertsConfig) -> SeriesStatus | None:
    """The latest run of one series against the rules' reference period (`series.reference_days` over the
    same run dates) and a week ago; None without a value."""
    daily = _daily(metrics, pipeline, metric, k)
    if daily.empty:
        return None
    matrix = series.Matrix(daily.to_numpy(dtype=float)[None, :], tuple(pd.Timestamp(d) for d in daily.index))
    reference = series.reference_days(matrix, config, series.reference_start(config))
    today = daily.index[-1]
    earlier = daily[daily.index <= today - WEEK]
    fired = alerts[(alerts[RUN_DATE] == today) & (alerts[PIPELINE].fillna("") == pipeline)
                   & (alerts[METRIC] == series_name(metric, k))]
    rank = int(fired[SEVERITY].map(SEVERITY_RANK).fillna(0).max()) if len(fired) else 0
    return SeriesStatus(
        pipeline=pipeline, metric=metric, k=k, value=float(daily.iloc[-1]),
        reference=float(daily.loc[reference].mean()) if reference else math.nan,
        reference_days=(reference[0], reference[-1]) if reference else None,
        week_ago=float(earlier.iloc[-1]) if len(earlier) else math.nan,
        week_ago_day=earlier.index[-1] if len(earlier) else None,
        first=float(daily.iloc[0]), first_day=daily.index[0],
        severity=SEVERITY_OF_RANK.get(rank, ""), history=tuple(float(v) for v in daily))


def _pct(x: float) -> str:
    return f"{abs(x):.0%}" if abs(x) >= 0.01 else f"{abs(x):.1%}"


def _versus(harm: float, baseline: float, what: str) -> str:
    if math.isnan(harm):
        return ""
    if abs(harm) < 0.005:
        return f"level with {what} ({baseline:.3f})"
    side = "worse than" if harm > 0 else "better than"
    return f"{_pct(harm)} {side} {what} ({baseline:.3f})"


def describe(status: SeriesStatus) -> str:
    """One series in a sentence, e.g. "MRR@5 0.770: 12% worse than the reference period (0.87, ...)"."""
    parts = []
    if status.reference_days is not None:
        first, last = status.reference_days
        parts.append(_versus(status.against_reference, status.reference,
                             f"the reference period {first:%b %d}–{last:%b %d}"))
    if status.week_ago_day is not None:
        parts.append(_versus(status.against_week, status.week_ago, f"a week ago, {status.week_ago_day:%b %d}"))
    if len(status.history) > 1:
        parts.append(f"{status.first:.3f} on the first run ({status.first_day:%b %d})")
    detail = "; ".join(p for p in parts if p) or "no earlier run to compare with"
    return f"{metric_label(status.metric, status.k)} {status.value:.3f}: {detail}"


def verdict(metrics: pd.DataFrame, alerts: pd.DataFrame, pipeline: str, k: int, config: AlertsConfig,
            names: Sequence[str] = DEFAULT_WATCHED) -> Verdict:
    """One pipeline's status on the latest run: "alert" when an alert fired on one of its series, "warning"
    when a warning did or a series is worse than its reference period or a week ago by more than the drop
    rule's practical threshold (large but not, or not yet, significant), else "ok". The reason names the open
    conditions on its series and since when (`views.OpenCondition.short`; their lines say how much), else
    describes the series furthest from its reference."""
    statuses = tuple(s for s in (series_status(metrics, alerts, pipeline, m, k, config) for m in names) if s)
    if not statuses:
        return Verdict(pipeline, OK, "no values yet", (), None)
    today = metrics.loc[metrics[PIPELINE] == pipeline, RUN_DATE].max()
    fired = alerts[(alerts[RUN_DATE] == today) & (alerts[PIPELINE].fillna("") == pipeline)]
    rank = int(fired[SEVERITY].map(SEVERITY_RANK).fillna(0).max()) if len(fired) else 0

    def distance(s: SeriesStatus) -> float:
        harms = [h for h in (s.against_reference, s.against_week) if not math.isnan(h)]
        return max(harms) if harms else -math.inf

    worst = max(statuses, key=distance)
    large = [s for s in statuses if distance(s) > series.drop_threshold(config, series_name(s.metric, s.k))]
    status = SEVERITY_OF_RANK.get(rank) or (WARNING if large else OK)
    sentence = describe(worst) + "."
    if len(fired):  # the open conditions say how (the banner, one line each): here only which, since when
        ordered = fired.assign(_rank=-fired[SEVERITY].map(SEVERITY_RANK).fillna(0))
        ordered = ordered.sort_values(["_rank", RULE, METRIC], kind="stable")
        sentence = "; ".join(c.short for c in open_conditions(ordered)) + "."
    elif large:
        sentence = ("Worse than the drop rule's practical threshold, but no rule fired (not significant "
                    "against the per-question noise, or not yet). " + sentence)
    return Verdict(pipeline, status, sentence, statuses, worst)


def verdicts(metrics: pd.DataFrame, alerts: pd.DataFrame, k: int, config: AlertsConfig) -> list[Verdict]:
    """Every pipeline's verdict, in the configured order."""
    return [verdict(metrics, alerts, p, k, config) for p in values_of(metrics, PIPELINE)]


def sparkline(metrics: pd.DataFrame, status: SeriesStatus) -> pd.DataFrame:
    """A series with its reference mean for a small chart: run_date, value, reference."""
    daily = _daily(metrics, status.pipeline, status.metric, status.k)
    return pd.DataFrame({RUN_DATE: daily.index, VALUE: daily.to_numpy(),
                         "reference": np.full(len(daily), status.reference)})


def tone(status: SeriesStatus, config: AlertsConfig) -> str:
    """How a series' sparkline is coloured: its alert's severity when one fired, else "warning" when it is
    worse than its reference period by more than half the practical threshold, else "ok"."""
    if status.severity:
        return status.severity
    harm = status.against_reference
    threshold = series.drop_threshold(config, series_name(status.metric, status.k))
    return WARNING if not math.isnan(harm) and harm > threshold / 2 else OK


def incident_sentence(story) -> str:
    """An episode (`views.alerts.Episode`) in a sentence: when, how long, what fired first, what followed and the
    run note of its first day (the cause, when the run recorded one)."""
    first = story.first
    span = (f"ongoing since {story.start:%Y-%m-%d} ({(story.last - story.start).days + 1} days)" if story.ongoing
            else f"from {story.start:%Y-%m-%d} to {story.last:%Y-%m-%d}")
    owner = f"{first['pipeline']} {first['metric']}" if first["pipeline"] else "the corpus"
    text = f"{span.capitalize()}: {first['rule']} on {owner} ({short(first['message'])})"
    rest = story.incidents.iloc[1:]
    if len(rest):
        hurt = sorted(set(p for p in rest["pipeline"] if p))
        text += (f"; then {len(rest)} more conditions ({', '.join(sorted(set(rest['rule'])))}) on "
                 f"{', '.join(hurt) or 'the corpus'}")
    if story.note:
        text += f". Run note: {story.note}"
    return text + "."


def most_hurt(story) -> str | None:
    """The pipeline with the most incidents in an episode (None when they concern only the corpus)."""
    owners = story.incidents["pipeline"][story.incidents["pipeline"] != ""]
    return str(owners.value_counts().index[0]) if len(owners) else None


SHORT_MESSAGE = 160


def short(message: str) -> str:
    """An alert message's first clause (up to its details in parentheses), at most SHORT_MESSAGE characters."""
    head = str(message).split(" (", 1)[0].split(". ", 1)[0]
    return head if len(head) <= SHORT_MESSAGE else head[: SHORT_MESSAGE - 1] + "…"


CANARY_HEADERS = {CANDIDATE: "candidate", AGAINST: "against", METRIC: "metric", N_QUESTIONS: "questions",
                  MEAN_DIFF: "difference", CI_LOW: "95% low", CI_HIGH: "95% high", P_VALUE: "p"}


def canary_table(canary: pd.DataFrame) -> pd.DataFrame:
    """The candidates' latest run (canary.csv): per candidate and metric@k the paired difference, its interval and
    p, labelled for the page."""
    if canary.empty:
        return pd.DataFrame(columns=list(CANARY_HEADERS.values()))
    latest = canary[canary[RUN_DATE] == canary.groupby(CANDIDATE)[RUN_DATE].transform("max")]
    shown = latest.assign(**{METRIC: [metric_label(m, int(k)) for m, k in zip(latest[METRIC], latest[K])]})
    return shown[list(CANARY_HEADERS)].rename(columns=CANARY_HEADERS).reset_index(drop=True)
