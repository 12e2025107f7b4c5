"""The Segments page: a segment x run date table of one metric@k and pipeline (segments.csv), and a segment's
questions (segment_questions.csv's latest run) with their per-question outcomes."""

from __future__ import annotations

import pandas as pd

from pipeline import segments
from pipeline.contract import K, METRIC, PIPELINE, QUESTION_ID, RUN_DATE, SEGMENT, SEGMENT_RULES, VALUE
from pipeline.views.questions import question_heatmap


def segment_heatmap(frame: pd.DataFrame, pipeline: str, metric: str, k: int) -> pd.DataFrame:
    """Segments (rows, named with their latest n: "paraphrase (12)") x run dates of one metric's segment means."""
    rows = frame[(frame[PIPELINE] == pipeline) & (frame[METRIC] == metric) & (frame[K] == k)]
    if rows.empty:
        return pd.DataFrame()
    matrix = rows.pivot_table(index=SEGMENT, columns=RUN_DATE, values=VALUE, aggfunc="first", dropna=False)
    latest = rows.sort_values(RUN_DATE).groupby(SEGMENT)["n_questions"].last()
    return matrix.rename(index=lambda s: f"{segments.label(s)} ({int(latest[s])})")


def segment_names(frame: pd.DataFrame) -> list[str]:
    """The segments of the latest run's membership, as stored ("tag:paraphrase")."""
    return sorted(segments.members_on(frame, frame[RUN_DATE].max()) if len(frame) else ())


def segment_questions(per_question: pd.DataFrame, members: pd.DataFrame, segment: str, pipeline: str, k: int,
                      metric: str) -> pd.DataFrame:
    """The segment's questions (its latest membership) x run dates of one metric, largest regression from the first
    run to the last first (`questions.question_heatmap`)."""
    ids = set(segments.members_on(members, members[RUN_DATE].max()).get(segment, ()))
    rows = per_question[per_question[QUESTION_ID].astype(str).isin(ids)]
    if rows.empty:
        return pd.DataFrame()
    days = sorted(rows[RUN_DATE].unique())
    return question_heatmap(rows, pipeline, k, metric, pd.Timestamp(days[0]).date(), pd.Timestamp(days[-1]).date())


def segment_alert_lines(alerts: pd.DataFrame) -> list[str]:
    """The latest run's segment alerts in their own words (the message's headline), with rule and pipeline."""
    if alerts.empty:
        return []
    rows = alerts[(alerts[RUN_DATE] == alerts[RUN_DATE].max()) & alerts["rule"].isin(SEGMENT_RULES)]
    return [f"{r.rule} on {r.pipeline}: {segments.headline(r.message, r.pipeline)}" for r in rows.itertuples()]
