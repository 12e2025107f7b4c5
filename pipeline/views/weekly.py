"""The weekly review's tables: ISO weeks, weekly means against the previous week, regressed questions and
corpus changes (the Weekly review page and `pipeline.report`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, timedelta

import numpy as np
import pandas as pd

from pipeline.metrics import metric_info
from pipeline.contract import DOCS_TOTAL, K, METRIC, PIPELINE, QUESTION_ID, RUN_DATE, VALUE
from pipeline.views import _day, between, question_column


RUN_COUNTS = ("docs_new", "docs_updated", "docs_deleted")


WEEK_FORMAT = re.compile(r"^(\d{4})-W(\d{2})$")


def iso_week(day: date | pd.Timestamp) -> str:
    """The ISO week of a date, "2026-W48"."""
    year, week, _ = _day(day).isocalendar()
    return f"{year}-W{week:02d}"


def week_bounds(week: str) -> tuple[date, date]:
    """Monday and Sunday of an ISO week "YYYY-Www"; ValueError for anything else."""
    match = WEEK_FORMAT.match(str(week))
    if not match:
        raise ValueError(f"not an ISO week (YYYY-Www, e.g. 2026-W48): {week!r}")
    try:
        monday = date.fromisocalendar(int(match[1]), int(match[2]), 1)
    except ValueError:
        raise ValueError(f"{week!r}: week {int(match[2])} does not exist in {match[1]}") from None
    return monday, monday + timedelta(days=6)


def previous_week(week: str) -> str:
    return iso_week(week_bounds(week)[0] - timedelta(days=7))


def weeks(runs: pd.DataFrame) -> list[str]:
    """The ISO weeks holding at least one run, oldest first."""
    return sorted({iso_week(d) for d in runs[RUN_DATE]})


def in_week(frame: pd.DataFrame, week: str) -> pd.DataFrame:
    return between(frame, *week_bounds(week))


def weekly_means(metrics: pd.DataFrame, week: str) -> pd.DataFrame:
    """Each metric@k and pipeline: its mean over the week's runs against the previous week's: pipeline, k,
    metric, mean, previous, change (mean - previous), change_pct (relative, %), better (True, False, or
    None without a previous week or a change)."""
    this, before = in_week(metrics, week), in_week(metrics, previous_week(week))
    keys = [PIPELINE, K, METRIC]
    mean = this.groupby(keys, sort=False)[VALUE].mean().rename("mean")
    previous = before.groupby(keys, sort=False)[VALUE].mean().rename("previous")
    out = pd.concat([mean, previous.reindex(mean.index)], axis=1).reset_index()
    out["change"] = out["mean"] - out["previous"]
    out["change_pct"] = (out["change"] / out["previous"].abs().replace(0, np.nan)) * 100
    rising_is_good = out[METRIC].map(lambda m: metric_info(m).higher_is_better)
    better = np.where(out["change"] > 0, rising_is_good, ~rising_is_good)
    out["better"] = pd.Series(better, index=out.index, dtype=object).where((out["change"].fillna(0) != 0), None)
    return out.sort_values([METRIC, K, PIPELINE], kind="stable").reset_index(drop=True)


def week_regressions(per_question: pd.DataFrame, week: str, k: int, metric: str = "recall",
                     top: int = 10) -> pd.DataFrame:
    """The questions whose weekly mean of `metric`@k fell most against the previous week, any pipeline:
    pipeline, question_id, previous, mean, change; at most `top` rows, only real regressions."""
    column = question_column(metric)
    rows = per_question[per_question[K] == k]
    this, before = in_week(rows, week), in_week(rows, previous_week(week))
    keys = [PIPELINE, QUESTION_ID]
    mean = this.groupby(keys)[column].mean().rename("mean")
    previous = before.groupby(keys)[column].mean().rename("previous")
    out = pd.concat([previous, mean], axis=1, join="inner").reset_index()
    out["change"] = out["mean"] - out["previous"]
    harm = -out["change"] if metric_info(metric).higher_is_better else out["change"]
    out = out[harm > 0].assign(_harm=harm[harm > 0])
    out = out.sort_values(["_harm", PIPELINE, QUESTION_ID], ascending=[False, True, True], kind="stable")
    return out.drop(columns="_harm").head(top).reset_index(drop=True)


@dataclass(frozen=True)
class CorpusWeek:
    runs: int
    docs_new: int
    docs_updated: int
    docs_deleted: int
    docs_start: int | None  # docs_total at the last run before the week (None: the history starts in it)
    docs_end: int | None  # docs_total at the week's last run
    degraded_runs: int  # runs with failed feeds
    feeds_failed: int


def week_corpus(runs: pd.DataFrame, week: str) -> CorpusWeek:
    """What the week's runs did to the corpus."""
    rows = in_week(runs, week).sort_values(RUN_DATE, kind="stable")
    before = runs[runs[RUN_DATE] < _day(week_bounds(week)[0])].sort_values(RUN_DATE, kind="stable")

    def total(frame: pd.DataFrame) -> int | None:
        last = frame[DOCS_TOTAL].iloc[-1] if len(frame) else None
        return None if last is None or pd.isna(last) else int(last)

    failed = rows["feeds_failed"].fillna(0)
    return CorpusWeek(runs=len(rows), **{c: int(rows[c].fillna(0).sum()) for c in RUN_COUNTS},
                      docs_start=total(before), docs_end=total(rows), degraded_runs=int((failed > 0).sum()),
                      feeds_failed=int(failed.sum()))



