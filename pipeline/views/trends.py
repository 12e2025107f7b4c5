"""The Trends page: metric series with what the rules compare them with (bands from `pipeline.series`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import date

import pandas as pd

from pipeline import series
from pipeline.config import AlertsConfig
from pipeline.metrics import metric_info
from pipeline.contract import K, METRIC, PIPELINE, RUN_DATE, VALUE
from pipeline.judging import qrels
from pipeline.views import (between, series_name, values_of)


def trend(metrics: pd.DataFrame, per_question: pd.DataFrame, metric: str, k: int, pipelines: Sequence[str],
          config: AlertsConfig, ks: Sequence[int], start: date | None = None, end: date | None = None) -> pd.DataFrame:
    """A metric@k series per pipeline with what the rules compare it against, from `series.bands` (the same
    functions the rules call): for a watched series the drop rule's baseline and firing edge and the
    slow-drift rule's reference, moving mean and edge; for every series its configured floor. Computed over
    the whole history, then cut to [start, end]."""
    name = series_name(metric, k)
    info = metric_info(metric)
    rows = metrics[(metrics[METRIC] == metric) & (metrics[K] == k) & metrics[PIPELINE].isin(list(pipelines))]
    frame = rows[[RUN_DATE, PIPELINE, VALUE]].copy()
    watched = name in config.watched(tuple(ks))
    if watched and len(frame):
        n_tests = len(series.keys(config, ks, values_of(metrics, PIPELINE)))
        drawn = pd.concat([series.bands(per_question, series.SeriesKey(p, info, k), config, n_tests)
                           for p in values_of(rows, PIPELINE)], ignore_index=True)
        frame = frame.merge(drawn, on=[RUN_DATE, PIPELINE], how="left")
    else:
        for column in BAND_COLUMNS:
            frame[column] = math.nan
    frame["floor"] = config.floors.get(name, math.nan)
    frame["watched"] = watched
    return between(frame, start, end).sort_values([PIPELINE, RUN_DATE], kind="stable").reset_index(drop=True)


BAND_COLUMNS = ("baseline", "edge", "reference", "ewma", "reference_edge")


def threshold_note(metric: str, k: int, config: AlertsConfig) -> str:
    """How the drop rule's edge sits against its baseline, e.g. "10% below the baseline and past the noise"."""
    side = "below" if metric_info(metric).higher_is_better else "above"
    return f"{series.drop_threshold(config, series_name(metric, k)):.0%} {side} the baseline and past its noise"





def maintained(maintained_metrics: pd.DataFrame, versions: pd.DataFrame, metric: str, k: int,
               pipelines: Sequence[str], start: date | None = None, end: date | None = None
               ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The maintained series of metric@k (re-scored with the maintained qrels: pipeline/judging/qrels.py's
    `maintained_trend`) and each qrels version as a marker (`version_marks`), cut to [start, end]; both empty when
    nothing is judged yet (no maintained_metrics.csv)."""
    return (between(qrels.maintained_trend(maintained_metrics, metric, k, pipelines), start, end),
            between(qrels.version_marks(versions), start, end))
