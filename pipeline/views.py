"""Derived, read-only tables for the dashboard and the weekly review: pure functions over the store's frames,
plus read-only access to the corpus (titles and links, composition over time, embedding projections)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline import store
from pipeline import series
from pipeline.alerts import ALERT, WARNING
from pipeline.metrics import metric_info
from pipeline.config import (DEFAULT_CONFIG_FILE, ENV_CONFIG, ENV_DATA_DIR, AlertsConfig, Config, load_config)
from pipeline.corpus import CORPUS_FILE, Corpus, CorpusError, text_hash
from pipeline.demo import DEMO_CONFIG
from pipeline.gold import GoldQuestion, load_gold
from pipeline.store import (DOCS_TOTAL, EVENTS, FIRST_RANK, K, MESSAGE, METRIC, PIPELINE, QUESTION_ID,
                            REFERENCE_DATE, RETRIEVED, RULE, RUN_DATE, SEVERITY, STATISTIC, VALUE)

RUN_COUNTS = ("docs_new", "docs_updated", "docs_deleted")

HEADLINE_METRICS = ("hit", "recall", "mrr", "ndcg")  # the Overview's cards
METRIC_LABELS = {"hit": "hit rate", "recall": "recall", "precision": "precision", "mrr": "MRR", "ndcg": "nDCG",
                 "unjudged": "unjudged share"}
SEVERITY_RANK = {WARNING: 1, ALERT: 2}  # 0: no alert
SEVERITY_OF_RANK = {rank: severity for severity, rank in SEVERITY_RANK.items()}
UNCATEGORISED = "(none)"
WEEK_FORMAT = re.compile(r"^(\d{4})-W(\d{2})$")


# --- where the data is and how it was made ------------------------------------------------------------


def resolve_data_dir(config: str | Path | None = None, data_dir: str | Path | None = None) -> Path:
    """The data directory: `data_dir`, else $DRIFTWATCH_DATA_DIR, else the data_dir of `config`
    ($DRIFTWATCH_CONFIG, then ./monitor.toml). Raises ConfigError when none of them gives one."""
    chosen = data_dir or os.environ.get(ENV_DATA_DIR)
    if chosen:
        return Path(chosen).expanduser().resolve()
    return load_config(config).data_dir


def settings(data_dir: Path) -> Config:
    """The configuration of a data directory: its demo.toml when the demo built it, else the config file
    ($DRIFTWATCH_CONFIG, then ./monitor.toml) when one exists, else the built-in defaults."""
    data_dir = Path(data_dir)
    if (data_dir / DEMO_CONFIG).exists():
        return load_config(data_dir / DEMO_CONFIG, data_dir=data_dir)
    path = Path(os.environ.get(ENV_CONFIG) or DEFAULT_CONFIG_FILE)
    if path.exists():
        return load_config(path, data_dir=data_dir)
    return Config(data_dir=data_dir, gold=Path())


def has_history(data_dir: Path) -> bool:
    return not store.read_runs(data_dir).empty


def gold_questions(path: Path) -> dict[str, GoldQuestion]:
    """The gold set by question id; empty when there is no such file (e.g. a config that names none)."""
    path = Path(path)
    if not path.is_file():
        return {}
    return {q.id: q for q in load_gold(path)}


# --- small helpers --------------------------------------------------------------------------------------


def series_name(metric: str, k: int) -> str:
    """"recall", 5 -> "recall@5", the name alerts.csv gives a series."""
    return f"{metric}@{k}"


def metric_label(metric: str, k: int | None = None) -> str:
    name = METRIC_LABELS.get(metric, metric)
    return name if k is None else f"{name}@{k}"


def default_k(ks: Iterable[int]) -> int:
    """The largest k not above 5 (the cutoff the alert rules watch by default), else the smallest."""
    ks = sorted(set(int(k) for k in ks))
    if not ks:
        raise ValueError("no k to choose from")
    return max([k for k in ks if k <= 5] or [ks[0]])


def values_of(frame: pd.DataFrame, column: str) -> list:
    """The distinct values of a column, in order of first appearance (pipelines keep their configured order)."""
    return list(pd.unique(frame[column].dropna()))


def run_dates(runs: pd.DataFrame) -> list[date]:
    return sorted(runs[RUN_DATE].dt.date.unique())


def escape_markdown(text: str) -> str:
    """`text` as literal Markdown: every ASCII punctuation mark backslash-escaped (so `psi_mean` is not
    italics, `$` not maths, `:red[...]` not a colour), line breaks folded to spaces."""
    flat = re.sub(r"\s+", " ", str(text))
    return re.sub(r"([!-/:-@\[-`{-~])", r"\\\1", flat)


def safe_url(url: object) -> str | None:
    """`url` when it is an http(s) link, else None (a feed's link is untrusted: no javascript: or data: URLs)."""
    return url if isinstance(url, str) and re.match(r"^https?://", url, re.I) else None


def _day(value: date | str | pd.Timestamp) -> pd.Timestamp:
    return pd.Timestamp(value).normalize()


def between(frame: pd.DataFrame, start: date | None = None, end: date | None = None) -> pd.DataFrame:
    """The rows whose run_date lies within [start, end] (an absent bound does not cut)."""
    keep = pd.Series(True, index=frame.index)
    if start is not None:
        keep &= frame[RUN_DATE] >= _day(start)
    if end is not None:
        keep &= frame[RUN_DATE] <= _day(end)
    return frame[keep]


# --- runs and alerts ------------------------------------------------------------------------------------


def last_run(runs: pd.DataFrame) -> pd.Series | None:
    """The runs.csv row of the latest run date, or None without runs."""
    if runs.empty:
        return None
    return runs.sort_values(RUN_DATE, kind="stable").iloc[-1]


def open_alerts(alerts: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """The alert rows of the latest run (a runs.csv row means the run wrote its alerts), alerts before
    warnings, then by rule, pipeline and metric."""
    latest = last_run(runs)
    if latest is None:
        return alerts.iloc[0:0]
    rows = alerts[alerts[RUN_DATE] == latest[RUN_DATE]]
    order = rows[SEVERITY].map(SEVERITY_RANK).fillna(0)
    return (rows.assign(_order=-order).sort_values(["_order", RULE, PIPELINE, METRIC], kind="stable")
            .drop(columns="_order").reset_index(drop=True))


def alerts_display(alerts: pd.DataFrame) -> pd.DataFrame:
    """Alert rows for a table: run_date as a date, values rounded, and the columns that may be empty
    (pipeline, baseline, change_pct, threshold) as text with "–" for an empty value rather than "None"."""
    out = alerts.copy()
    if RUN_DATE in out:
        out[RUN_DATE] = pd.to_datetime(out[RUN_DATE]).dt.date
    if VALUE in out:
        out[VALUE] = pd.to_numeric(out[VALUE], errors="coerce").round(4)
    formats = {"baseline": "{:.4f}", "threshold": "{:g}", "change_pct": "{:+.1f}"}
    for column, form in formats.items():
        if column in out:
            numbers = pd.to_numeric(out[column], errors="coerce")
            out[column] = [("–" if pd.isna(x) else form.format(x)) for x in numbers]
    for column in (PIPELINE, METRIC):
        if column in out:
            out[column] = out[column].fillna("").astype(str).replace({"None": "", "nan": ""})
    return out


def filter_alerts(alerts: pd.DataFrame, *, severities: Sequence[str] = (), rules: Sequence[str] = (),
                  pipelines: Sequence[str] = (), start: date | None = None, end: date | None = None) -> pd.DataFrame:
    """The alert log narrowed by each filter that is given (an empty filter keeps everything), newest first."""
    keep = pd.Series(True, index=alerts.index)
    for column, chosen in ((SEVERITY, severities), (RULE, rules), (PIPELINE, pipelines)):
        if chosen:
            keep &= alerts[column].fillna("").isin(list(chosen))
    narrowed = between(alerts[keep], start, end)
    return narrowed.sort_values([RUN_DATE, SEVERITY], ascending=[False, True], kind="stable").reset_index(drop=True)


def alert_counts(alerts: pd.DataFrame) -> pd.DataFrame:
    """Alerts per run date and severity: run_date, severity, alerts."""
    if alerts.empty:
        return pd.DataFrame({RUN_DATE: pd.Series(dtype="datetime64[ns]"), SEVERITY: pd.Series(dtype=object),
                             "alerts": pd.Series(dtype="int64")})
    return alerts.groupby([RUN_DATE, SEVERITY]).size().rename("alerts").reset_index()


def alert_points(alerts: pd.DataFrame, metric: str, pipelines: Sequence[str] | None = None) -> pd.DataFrame:
    """One point per run date and pipeline where alerts fired on `metric` (alerts.csv's metric, e.g.
    "recall@5" or "psi_mean"): value, the most severe severity, and every message (one per line)."""
    rows = alerts[alerts[METRIC] == metric]
    if pipelines is not None:
        rows = rows[rows[PIPELINE].fillna("").isin(list(pipelines))]
    columns = [RUN_DATE, PIPELINE, VALUE, SEVERITY, MESSAGE]
    if rows.empty:
        return pd.DataFrame({c: rows[c] for c in columns}).reset_index(drop=True)
    rows = rows.assign(_rank=rows[SEVERITY].map(SEVERITY_RANK).fillna(0),
                       _line="[" + rows[SEVERITY] + " / " + rows[RULE] + "] " + rows[MESSAGE],
                       **{PIPELINE: rows[PIPELINE].fillna("")})
    grouped = rows.sort_values("_rank", ascending=False, kind="stable").groupby([RUN_DATE, PIPELINE], sort=True)
    out = grouped.agg(value=(VALUE, "first"), severity=(SEVERITY, "first"), message=("_line", "\n".join))
    return out.reset_index()[columns]


def run_events(runs: pd.DataFrame) -> pd.DataFrame:
    """Run dates with a note in runs.csv's `events`: run_date, events."""
    notes = runs[EVENTS].fillna("").astype(str).str.strip()
    return runs.loc[notes != "", [RUN_DATE, EVENTS]].reset_index(drop=True)


# --- metric series ---------------------------------------------------------------------------------------


def with_trailing(metrics: pd.DataFrame, window: int) -> pd.DataFrame:
    """Each metrics.csv row with its series' previous `window` runs summarised as the alert rules see them
    (the run itself excluded, runs without a value skipped): trailing_mean, trailing_std (ddof=1), trailing_n."""
    keys = [PIPELINE, K, METRIC]
    frame = metrics.dropna(subset=[VALUE]).sort_values(keys + [RUN_DATE], kind="stable").reset_index(drop=True)
    earlier = frame.groupby(keys, sort=False)[VALUE].shift(1)
    by_series = earlier.groupby([frame[c] for c in keys], sort=False)
    def rolling(how: str) -> pd.Series:
        return by_series.transform(lambda s: getattr(s.rolling(window, min_periods=1), how)())

    frame["trailing_mean"] = rolling("mean")
    frame["trailing_std"] = rolling("std")
    frame["trailing_n"] = rolling("count").fillna(0).astype(int)
    # Equal values have no spread (their float std can come out as a rounding error), as in alerts.Trailing.
    flat = rolling("max") == rolling("min")
    frame.loc[flat & (frame["trailing_n"] >= 2), "trailing_std"] = 0.0
    return frame


def headline(metrics: pd.DataFrame, alerts: pd.DataFrame, k: int, window: int,
             names: Sequence[str] = HEADLINE_METRICS, history: int = 30) -> pd.DataFrame:
    """The Overview's cards: per pipeline and metric at `k`, the latest run's value, the mean of the previous
    `window` runs, the change (value - mean), the most severe alert of the latest run on that series
    ("" when none) and the last `history` values (for a sparkline)."""
    columns = [PIPELINE, METRIC, K, VALUE, "trailing_mean", "change", SEVERITY, "history"]
    rows = metrics[(metrics[K] == k) & metrics[METRIC].isin(list(names))]
    if rows.empty:
        return pd.DataFrame(columns=columns)
    latest = rows[RUN_DATE].max()
    frame = with_trailing(rows, window)
    today = frame[frame[RUN_DATE] == latest].copy()
    today["change"] = today[VALUE] - today["trailing_mean"]
    fired = alerts[alerts[RUN_DATE] == latest].assign(_rank=lambda a: a[SEVERITY].map(SEVERITY_RANK).fillna(0))
    worst = fired.groupby([PIPELINE, METRIC])["_rank"].max()
    keys = list(zip(today[PIPELINE], today[METRIC].map(lambda m: series_name(m, k))))
    rank = [worst.get(key, 0) for key in keys]
    today[SEVERITY] = [SEVERITY_OF_RANK.get(r, "") for r in rank]
    tails = frame.groupby([PIPELINE, METRIC])[VALUE].agg(lambda s: s.tail(history).tolist())
    today["history"] = [tails.get((p, m), []) for p, m in zip(today[PIPELINE], today[METRIC])]
    pipeline_order = {p: i for i, p in enumerate(values_of(rows, PIPELINE))}
    today = today.assign(_p=today[PIPELINE].map(pipeline_order), _m=today[METRIC].map(list(names).index))
    return today.sort_values(["_p", "_m"])[columns].reset_index(drop=True)


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


def metric_series(metrics: pd.DataFrame, metric: str, k: int) -> pd.DataFrame:
    """One metric@k over time for every pipeline: run_date, pipeline, value."""
    rows = metrics[(metrics[METRIC] == metric) & (metrics[K] == k)]
    return rows[[RUN_DATE, PIPELINE, VALUE]].sort_values([PIPELINE, RUN_DATE], kind="stable").reset_index(drop=True)


# --- questions ---------------------------------------------------------------------------------------------


def question_column(metric: str) -> str:
    """metrics.csv's metric name -> its per_question.csv column ("mrr" -> "rr")."""
    return metric_info(metric).column


def _slice(per_question: pd.DataFrame, pipeline: str, k: int) -> pd.DataFrame:
    return per_question[(per_question[PIPELINE] == pipeline) & (per_question[K] == k)]


def _rank_key(rank: pd.Series) -> pd.Series:
    """first_relevant_rank with 0 (no relevant document within the candidate depth) as the worst rank."""
    values = pd.to_numeric(rank, errors="coerce").astype(float)
    return values.where(values > 0, math.inf)


def question_changes(per_question: pd.DataFrame, pipeline: str, k: int, metric: str,
                     then: date, now: date) -> pd.DataFrame:
    """Per question (index question_id): the metric then and now, change (now - then), harm (the change
    signed so that positive is worse), first relevant rank then and now (0: not retrieved) and whether
    the rank worsened. Questions present on either date; sorted worst first, then by question id."""
    column = question_column(metric)
    rows = _slice(per_question, pipeline, k)
    pair = rows[rows[RUN_DATE].isin([_day(then), _day(now)])]
    value = pair.pivot_table(index=QUESTION_ID, columns=RUN_DATE, values=column, aggfunc="first", dropna=False)
    rank = pair.pivot_table(index=QUESTION_ID, columns=RUN_DATE, values=FIRST_RANK, aggfunc="first", dropna=False)
    ids = sorted(set(pair[QUESTION_ID]))
    get = lambda table, day: table.reindex(index=ids).get(_day(day), pd.Series(np.nan, index=ids))  # noqa: E731
    out = pd.DataFrame(index=pd.Index(ids, name=QUESTION_ID))
    out["then"] = get(value, then).astype(float)
    out["now"] = get(value, now).astype(float)
    out["change"] = out["now"] - out["then"]
    out["harm"] = -out["change"] if metric_info(metric).higher_is_better else out["change"]
    out["rank_then"] = get(rank, then).astype("Int64")
    out["rank_now"] = get(rank, now).astype("Int64")
    out["rank_worse"] = (_rank_key(out["rank_now"]) > _rank_key(out["rank_then"])) & out["rank_then"].notna() \
        & out["rank_now"].notna()
    out = out.assign(_harm=out["harm"].fillna(-math.inf))
    out = out.sort_values(["_harm", "rank_worse"], ascending=[False, False], kind="stable")
    return out.drop(columns="_harm")


def question_heatmap(per_question: pd.DataFrame, pipeline: str, k: int, metric: str, then: date, now: date,
                     start: date | None = None, end: date | None = None) -> pd.DataFrame:
    """Questions x run dates of one metric, rows ordered by the largest regression between `then` and
    `now` first (see `question_changes`); columns cut to [start, end]."""
    column = question_column(metric)
    rows = between(_slice(per_question, pipeline, k), start, end)
    matrix = rows.pivot_table(index=QUESTION_ID, columns=RUN_DATE, values=column, aggfunc="first", dropna=False)
    order = question_changes(per_question, pipeline, k, metric, then, now).index
    order = [q for q in order if q in matrix.index] + sorted(set(matrix.index) - set(order))
    return matrix.reindex(order)


def regressed_questions(per_question: pd.DataFrame, pipeline: str, k: int, metric: str, then: date, now: date,
                        texts: Mapping[str, str] | None = None) -> pd.DataFrame:
    """The questions whose metric got worse, or whose first relevant document fell lower, from `then` to
    `now`: question_id, question, then, now, change, rank_then, rank_now (0: not retrieved), worst first."""
    changes = question_changes(per_question, pipeline, k, metric, then, now)
    worse = changes[(changes["harm"] > 0) | changes["rank_worse"]].reset_index()
    worse.insert(1, "question", worse[QUESTION_ID].map(dict(texts or {})).fillna(""))
    return worse[[QUESTION_ID, "question", "then", "now", "change", "rank_then", "rank_now"]]


def question_rows(per_question: pd.DataFrame, question_id: str) -> pd.DataFrame:
    """Every per_question.csv row of one question (all pipelines, k and dates): what a drill-down reads."""
    return per_question[per_question[QUESTION_ID] == question_id].reset_index(drop=True)


def rank_history(per_question: pd.DataFrame, question_id: str) -> pd.DataFrame:
    """A question's first relevant rank per run date and pipeline (NaN when no relevant document was within
    the candidate depth). The rank does not depend on k: the smallest k's rows are read."""
    rows = per_question[per_question[QUESTION_ID] == question_id]
    if rows.empty:
        return pd.DataFrame({RUN_DATE: pd.Series(dtype="datetime64[ns]"), PIPELINE: pd.Series(dtype=object),
                             "rank": pd.Series(dtype=float)})
    rows = rows[rows[K] == rows[K].min()]
    rank = pd.to_numeric(rows[FIRST_RANK], errors="coerce").astype(float)
    out = pd.DataFrame({RUN_DATE: rows[RUN_DATE], PIPELINE: rows[PIPELINE], "rank": rank.where(rank > 0)})
    return out.sort_values([PIPELINE, RUN_DATE], kind="stable").reset_index(drop=True)


def retrieved(per_question: pd.DataFrame, question_id: str, pipeline: str, k: int, day: date) -> list[str]:
    """The top-k doc ids a pipeline retrieved for a question on a date, best first ([] without a row)."""
    rows = _slice(per_question, pipeline, k)
    row = rows[(rows[QUESTION_ID] == question_id) & (rows[RUN_DATE] == _day(day))]
    return store.split_ids(row[RETRIEVED].iloc[-1]) if len(row) else []


def above_gold(ids: Sequence[str], gold: Iterable[str]) -> list[str]:
    """The ids ranked above the first gold document (every id when no gold document is among them)."""
    gold = set(gold)
    out = []
    for doc_id in ids:
        if doc_id in gold:
            break
        out.append(doc_id)
    return out


def displacing(per_question: pd.DataFrame, question_id: str, pipeline: str, k: int, then: date, now: date,
               gold: Iterable[str]) -> pd.DataFrame:
    """The documents that rank above the question's first gold document `now` (within the top k): rank,
    doc_id, and new_above (True when it was not above the gold document `then`: it displaced it)."""
    gold = list(gold)
    above_now = above_gold(retrieved(per_question, question_id, pipeline, k, now), gold)
    above_then = set(above_gold(retrieved(per_question, question_id, pipeline, k, then), gold))
    return pd.DataFrame({"rank": range(1, len(above_now) + 1), "doc_id": above_now,
                         "new_above": [d not in above_then for d in above_now]})


def documents_info(data_dir: Path, doc_ids: Sequence[str]) -> dict[str, dict]:
    """Title, url, source, first_seen and deleted_at per doc id, read from the corpus opened read-only
    ({} when there is no corpus yet)."""
    ids = list(dict.fromkeys(doc_ids))
    if not ids:
        return {}
    try:
        with Corpus.in_dir(data_dir, readonly=True) as corpus:
            return corpus.documents_info(ids)
    except CorpusError:
        return {}


def document_table(doc_ids: Sequence[str], info: Mapping[str, Mapping], gold: Iterable[str] = ()) -> pd.DataFrame:
    """Ranked documents for display: rank, doc_id, title, link (http(s) only), feed, first_seen, deleted_at,
    gold (True for the question's relevant documents). Titles stay text: the table is never rendered as HTML."""
    gold = set(gold)
    rows = []
    for rank, doc_id in enumerate(doc_ids, start=1):
        meta = info.get(doc_id, {})
        rows.append({"rank": rank, "doc_id": doc_id, "title": meta.get("title") or "(not in the corpus)",
                     "link": safe_url(meta.get("url")), "feed": meta.get("source") or "",
                     "first_seen": meta.get("first_seen") or "", "deleted_at": meta.get("deleted_at") or "",
                     "gold": doc_id in gold})
    columns = ["rank", "doc_id", "title", "link", "feed", "first_seen", "deleted_at", "gold"]
    return pd.DataFrame(rows, columns=columns)


# --- drift --------------------------------------------------------------------------------------------------


def drift_series(drift: pd.DataFrame, statistics: Sequence[str]) -> pd.DataFrame:
    """drift.csv rows of the given statistics: run_date, statistic, value (long; statistics in the order given)."""
    order = {s: i for i, s in enumerate(statistics)}
    rows = drift[drift[STATISTIC].isin(list(statistics))]
    rows = rows.assign(_order=rows[STATISTIC].map(order)).sort_values(["_order", RUN_DATE], kind="stable")
    return rows[[RUN_DATE, STATISTIC, VALUE]].reset_index(drop=True)


VERDICT_COLUMNS = ("statistic", "value", "null 95%", "effect line", "p (Holm)", "verdict", "what is new")


def drift_verdicts(drift: pd.DataFrame, day: date | None = None) -> pd.DataFrame:
    """The Drift page's verdict table for one run (the latest when `day` is None): per statistic of the
    family, its value, its null's 95% quantile at that run's sample sizes, the effect-size line, the
    Holm-adjusted p-value, the verdict and, when drifted, what is new. Context statistics are left out."""
    from pipeline.drift import CONTEXT

    if drift.empty:
        return pd.DataFrame(columns=list(VERDICT_COLUMNS))
    when = pd.Timestamp(day) if day is not None else drift[RUN_DATE].max()
    rows = drift[(drift[RUN_DATE] == when) & (drift["verdict"].fillna("") != CONTEXT)]
    rows = rows[~rows[STATISTIC].astype(str).str.startswith("query_")]
    return pd.DataFrame({
        "statistic": rows[STATISTIC], "value": rows[VALUE], "null 95%": rows["null_value"],
        "effect line": rows["threshold"], "p (Holm)": rows["p_value"],
        "verdict": rows["verdict"].str.replace("_", " "), "what is new": rows["detail"].fillna(""),
    }).reset_index(drop=True)


def drift_window(drift: pd.DataFrame, day: date | None = None) -> dict[str, object]:
    """What one run's drift rows compared: current window start, reference window, sample sizes."""
    if drift.empty:
        return {}
    when = pd.Timestamp(day) if day is not None else drift[RUN_DATE].max()
    rows = drift[drift[RUN_DATE] == when]
    if rows.empty:
        return {}
    first = rows.iloc[0]
    return {"run_date": when.date(), "current_start": first["current_start"], "reference_start": first["reference_start"],
            "reference_end": first[REFERENCE_DATE], "n_current": first["n_current"], "n_reference": first["n_reference"]}


def drift_against_null(drift: pd.DataFrame, statistic: str) -> pd.DataFrame:
    """One statistic and its null's 95% quantile over time (long: run_date, statistic, value)."""
    rows = drift[drift[STATISTIC] == statistic].sort_values(RUN_DATE, kind="stable")
    value = rows[[RUN_DATE, VALUE]].assign(**{STATISTIC: statistic})
    null = rows[[RUN_DATE, "null_value"]].rename(columns={"null_value": VALUE}).assign(
        **{STATISTIC: f"{statistic}, no-drift 95%"})
    return pd.concat([value, null], ignore_index=True)[[RUN_DATE, STATISTIC, VALUE]]


def top1_statistics(drift: pd.DataFrame) -> dict[str, str]:
    """The question-top1 cosine statistics present (top1_cosine_<pipeline>), each with its pipeline."""
    from pipeline.drift import TOP1_COSINE  # drift imports scipy: only the pages that show drift pay for it

    prefix = f"{TOP1_COSINE.name}_"
    return {s: s.removeprefix(prefix) for s in sorted(drift[STATISTIC].unique()) if str(s).startswith(prefix)}


def reference_date(drift: pd.DataFrame, data_dir: Path | None = None) -> date | None:
    """The reference snapshot of the latest drift rows (reference.json's date when drift.csv has none)."""
    rows = drift[drift[REFERENCE_DATE].fillna("").astype(str) != ""]
    if len(rows):
        return date.fromisoformat(rows.sort_values(RUN_DATE, kind="stable")[REFERENCE_DATE].iloc[-1])
    return store.read_reference(data_dir) if data_dir is not None else None


def corpus_documents(data_dir: Path) -> pd.DataFrame:
    """Every document the corpus ever held: doc_id, first_seen, deleted_at (NaT while present), source and
    category (its first; "(none)" without one), from its latest version. Empty without a corpus."""
    columns = ["doc_id", "first_seen", "deleted_at", "source", "category"]
    rows: list = []
    if (Path(data_dir) / CORPUS_FILE).exists():
        with Corpus.in_dir(data_dir, readonly=True) as corpus:
            rows = corpus.lifetimes()
    frame = pd.DataFrame(rows, columns=columns)
    frame["first_seen"] = pd.to_datetime(frame["first_seen"], format="%Y-%m-%d")
    frame["deleted_at"] = pd.to_datetime(frame["deleted_at"], format="%Y-%m-%d")
    frame["category"] = frame["category"].replace("", UNCATEGORISED)
    return frame


def composition(documents: pd.DataFrame, dates: Iterable[date | pd.Timestamp], by: str) -> pd.DataFrame:
    """Documents present on each date per value of `by` ("source" or "category"): run_date, <by>, documents.
    A document is present from its first_seen date until the day before its deleted_at."""
    days = pd.DatetimeIndex(sorted({_day(d) for d in dates}))
    if documents.empty or days.empty:
        return pd.DataFrame({RUN_DATE: pd.Series(dtype="datetime64[ns]"), by: pd.Series(dtype=object),
                             "documents": pd.Series(dtype="int64")})
    added = documents.groupby(["first_seen", by]).size().unstack(fill_value=0)
    gone = documents.dropna(subset=["deleted_at"]).groupby(["deleted_at", by]).size().unstack(fill_value=0)
    change = added.sub(gone, fill_value=0) if len(gone) else added
    level = change.sort_index().cumsum()
    level = level.reindex(level.index.union(days)).ffill().fillna(0).loc[days]
    level.index.name, level.columns.name = RUN_DATE, by
    out = level.stack().rename("documents").astype("int64").reset_index()
    return out.sort_values([by, RUN_DATE], kind="stable").reset_index(drop=True)


@dataclass(frozen=True)
class Projection:
    """Reference and current chunk embeddings on the reference's first two principal components."""

    points: pd.DataFrame  # side ("reference" / "current"), x, y, chunk_id, doc_id
    reference_date: date
    current_date: date
    explained: tuple[float, float]  # share of the reference's variance along each axis
    n_missing: int  # sampled chunks without a cached embedding, left out


def embedding_projection(data_dir: Path, config: Config, reference: date, current: date,
                         cap: int = 1500, seed: int = 0) -> Projection:
    """Chunks of both snapshots (as the job chunks them), at most `cap` per side (seeded), with the vectors
    the job cached under the configured embedder. Read-only: a chunk without a cached vector is left out and
    counted rather than embedded (embed_cached would load the model and write the cache)."""
    from pipeline.drift import project
    from pipeline.embeddings import Embedder
    from pipeline.job import chunk_documents

    key = Embedder(config.embedder).key
    sides: dict[str, tuple[np.ndarray, list]] = {}
    missing = 0
    with Corpus.in_dir(data_dir, readonly=True) as corpus:
        for side, day in (("reference", reference), ("current", current)):
            chunks = chunk_documents(config, corpus.snapshot(day))
            rng = np.random.default_rng(seed)
            keep = (np.sort(rng.choice(len(chunks), size=cap, replace=False)) if len(chunks) > cap
                    else range(len(chunks)))
            chosen = [chunks[i] for i in keep]
            hashes = [text_hash(c.text) for c in chosen]
            found = corpus.cached_embeddings(key, hashes)
            present = [(c, found[h]) for c, h in zip(chosen, hashes) if h in found]
            missing += len(chosen) - len(present)
            vectors = np.stack([v for _, v in present]) if present else np.zeros((0, 0), dtype=np.float32)
            sides[side] = (vectors, [c for c, _ in present])
    (ref, ref_chunks), (cur, cur_chunks) = sides["reference"], sides["current"]
    empty = pd.DataFrame({"side": pd.Series(dtype=object), "x": pd.Series(dtype=float), "y": pd.Series(dtype=float),
                          "chunk_id": pd.Series(dtype=object), "doc_id": pd.Series(dtype=object)})
    if len(ref) < 3 or len(cur) < 1 or ref.shape[1] != cur.shape[1]:
        return Projection(empty, reference, current, (math.nan, math.nan), missing)
    ref_xy, cur_xy = project(ref, cur, 2)
    total = float(np.var(ref.astype(np.float64), axis=0).sum())
    explained = tuple(float(v) / total if total else math.nan for v in np.var(ref_xy, axis=0))
    explained = (explained + (math.nan, math.nan))[:2]
    parts = []
    for side, xy, chunks in (("reference", ref_xy, ref_chunks), ("current", cur_xy, cur_chunks)):
        y = xy[:, 1] if xy.shape[1] > 1 else np.zeros(len(xy))
        parts.append(pd.DataFrame({"side": side, "x": xy[:, 0], "y": y, "chunk_id": [c.id for c in chunks],
                                   "doc_id": [c.doc_id for c in chunks]}))
    return Projection(pd.concat(parts, ignore_index=True), reference, current, explained, missing)


# --- weeks ---------------------------------------------------------------------------------------------------


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


# --- simulation sandboxes --------------------------------------------------------------------------------------


def sandbox_dir(data_dir: Path) -> Path:
    """Where the dashboard keeps the simulation sandbox of a data directory: a folder of the system's temporary
    directory named after it (outside the data directory, as `simulate.prepare_sandbox` requires)."""
    resolved = Path(data_dir).resolve()
    digest = hashlib.sha1(str(resolved).encode()).hexdigest()[:10]
    return Path(tempfile.gettempdir()) / "driftwatch-sandboxes" / f"{resolved.name or 'data'}-{digest}"


@dataclass(frozen=True)
class SandboxInfo:
    path: Path
    description: str  # the scenario's own description, e.g. "simulation: injected 40 offtopic documents"
    start: date
    created: str


def sandbox_info(sandbox: Path, source: Path) -> SandboxInfo | None:
    """What the sandbox holds, when it holds a simulation of `source` (None otherwise)."""
    from pipeline.simulate import SANDBOX_FILE, Scenario

    path = Path(sandbox) / SANDBOX_FILE
    if not path.is_file() or not (Path(sandbox) / store.RUNS).exists():
        return None
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
        if Path(meta["source"]).resolve() != Path(source).resolve():
            return None
        raw = meta["scenario"]
        scenario = Scenario(**{**raw, "start": date.fromisoformat(raw["start"]),
                               "before": date.fromisoformat(raw["before"]) if raw.get("before") else None})
    except (ValueError, KeyError, TypeError, OSError):
        return None
    return SandboxInfo(Path(sandbox), scenario.describe(), scenario.start, str(meta.get("created", "")))


def side_by_side(original: pd.DataFrame, simulated: pd.DataFrame | None, group: str) -> pd.DataFrame:
    """Two long series frames (run_date, <group>, value) joined per date and group, as `simulate.compare` joins
    the metric series of a source and its sandbox: run_date, <group>, value_original, value_simulated, change.
    Without a simulation the simulated values are NaN."""
    keys = [RUN_DATE, group]
    left = original[keys + [VALUE]]
    if simulated is None:
        both = left.rename(columns={VALUE: "value_original"}).assign(value_simulated=math.nan)
    else:
        both = left.merge(simulated[keys + [VALUE]], on=keys, suffixes=("_original", "_simulated"))
    both["change"] = both["value_simulated"] - both["value_original"]
    return both.sort_values(keys, kind="stable").reset_index(drop=True)
