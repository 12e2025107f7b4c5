"""Derived, read-only tables for the dashboard and the weekly review, one module per page (`overview`, `trends`,
`questions`, `answers`, `drift`, `simulate`, `weekly`, `alerts`); this package module holds what several pages share:
the data directory and its settings, labels, date filters, the open alerts and run notes. Pure functions over
the store's frames; the corpus is only ever opened read-only. Bands and baselines come from `pipeline.series`."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import pandas as pd

from pipeline.alerts import RunbookEntry, condition_of, runbook
from pipeline.answers import LOGGED
from pipeline.config import DEFAULT_CONFIG_FILE, ENV_CONFIG, ENV_DATA_DIR, Config, load_config
from pipeline.contract import (CORPUS_METRIC, EVENTS, K, MESSAGE, METRIC, PIPELINE, RULE, RUN_DATE, SEVERITIES,
                               SEVERITY, VALUE)
from pipeline.demo import DEMO_CONFIG
from pipeline.gold import GoldQuestion, load_gold
from pipeline.persistence import PERSISTENCE_METRICS, Persistence
# the registry's lists, default_k and series_name, re-exported for the pages
from pipeline.metrics import (DEFAULT_METRIC, HEADLINE, REGISTRY, RETRIEVAL_METRICS, default_k,  # noqa: F401
                              metric_info, series_name)
from pipeline import store
from pipeline.contract import SEGMENT_RULES
from pipeline.segments import headline, label

SEVERITY_RANK = {severity: rank for rank, severity in enumerate(SEVERITIES, start=1)}  # 0: no alert
SEVERITY_OF_RANK = {rank: severity for severity, rank in SEVERITY_RANK.items()}


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


def metric_label(metric: str, k: int | None = None) -> str:
    """A metric's label from the registry ("nDCG", or "nDCG@5" at k); a name the registry lacks as it is."""
    name = REGISTRY[metric].label if metric in REGISTRY else metric
    return name if k is None else f"{name}@{k}"


def persistence_frame(result: Persistence) -> pd.DataFrame:
    """The persistence table as the pages show it, one row per pipeline in order of effectiveness: the two ranks,
    then nDCG and recall at k on the latest run, on the reference period and their relative drop in percent."""
    table = result.table()
    names = {PIPELINE: "pipeline", "effectiveness_rank": "rank by effectiveness",
             "persistence_rank": "rank by persistence"}
    for metric in PERSISTENCE_METRICS:
        label = metric_label(metric, result.k)
        names |= {metric: f"{label} now", f"{metric}_reference": f"{label} reference",
                  f"{metric}_drop": f"relative {metric_label(metric)} drop (%)"}
        table[f"{metric}_drop"] = table[f"{metric}_drop"] * 100
    return table[list(names)].rename(columns=names)


def first_metric(names: Sequence[str]) -> int:
    """The index a metric picker over `names` starts at: the registry's DEFAULT_METRIC (recall), else the first."""
    return names.index(DEFAULT_METRIC) if DEFAULT_METRIC in names else 0


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


@dataclass(frozen=True)
class OpenCondition:
    """One open condition of the latest run (`alerts.condition_of`: a pipeline's drop or slow drift whichever of
    its series show it, any other rule per metric), from its alerts.csv rows."""

    rule: str
    pipeline: str  # "" for a rule about the corpus or the run
    severity: str  # the most severe of its rows
    since: pd.Timestamp  # the first run of its streak (alerts.csv `since`; the run date when it has none)
    worst: str  # the alerts.csv metric that changed most (largest |change_pct|; the first row's when none has one)
    change_pct: float  # that row's change in percent (NaN for a rule without one)
    per_series: bool  # a pipeline's drop or slow drift, one condition over several series
    messages: tuple[tuple[str, str], ...]  # (metric, message) of each of its rows, in their order

    @property
    def condition(self) -> tuple[str, ...]:
        """`alerts.condition_of` of its rows: (rule, pipeline) over several series, else with the metric (the segment,
        for a segment rule)."""
        return condition_of(self.rule, self.pipeline, self.worst)

    @property
    def where(self) -> str:
        if self.pipeline == LOGGED:  # a name of the answer layer's, not a retriever's
            return f"{LOGGED} (your system's logged answers)"
        return self.pipeline or "the corpus"

    @property
    def runbook(self) -> RunbookEntry:
        """What to do next: its rule's runbook entry (docs/runbook.md)."""
        return runbook(self.rule)

    @property
    def worst_label(self) -> str:
        """The worst series as the pages name it ("nDCG@5"), else the metric as alerts.csv gives it."""
        name, _, k = self.worst.partition("@")
        return metric_label(name, int(k)) if k.isdigit() else self.worst

    @property
    def line(self) -> str:
        """The condition in one line: rule, pipeline, since when, and the series that moved most with its
        change, e.g. "slow_drift on bm25 since 2026-11-13: nDCG@5 -15.0%, the worst of 3 series"."""
        text = f"{self.rule} on {self.where} since {self.since:%Y-%m-%d}"
        if self.rule in SEGMENT_RULES:  # the message's own words: the segment, its n, the change and the rest
            return f"{text}: " + "; ".join(dict.fromkeys(headline(m, self.pipeline) for _, m in self.messages))
        shown = [self.worst_label if self.worst not in (self.rule, CORPUS_METRIC, "") else "",
                 "" if math.isnan(self.change_pct) else f"{self.change_pct:+.1f}%"]
        if any(shown):
            text += ": " + " ".join(part for part in shown if part)
        if len(self.messages) > 1:
            text += f", the worst of {len(self.messages)} series"
        return text

    @property
    def short(self) -> str:
        """The condition within its pipeline's verdict: "slow_drift since 2026-11-13", "floor on recall@5 since
        2026-11-22"."""
        on = "" if self.per_series or self.worst in (self.rule, CORPUS_METRIC, "") else f" on {self.worst_label}"
        return f"{self.rule}{on} since {self.since:%Y-%m-%d}"


def open_conditions(rows: pd.DataFrame) -> list[OpenCondition]:
    """Alert rows of one run (`open_alerts`) as one `OpenCondition` each condition, in the rows' order."""
    if rows.empty:
        return []
    since = rows["since"] if "since" in rows else pd.Series("", index=rows.index)
    since = pd.to_datetime(since.fillna("").astype(str).replace("", None), errors="coerce")
    frame = rows.assign(_pipeline=rows[PIPELINE].fillna(""), _metric=rows[METRIC].fillna(""),
                        _since=since.fillna(rows[RUN_DATE]), _rank=rows[SEVERITY].map(SEVERITY_RANK).fillna(0),
                        _size=pd.to_numeric(rows["change_pct"], errors="coerce").abs())
    frame["_condition"] = [condition_of(r, p, m) for r, p, m in zip(frame[RULE], frame["_pipeline"], frame["_metric"])]
    out = []
    for condition, group in frame.groupby("_condition", sort=False):
        sizes = group["_size"]
        worst = group.loc[sizes.idxmax()] if sizes.notna().any() else group.iloc[0]
        out.append(OpenCondition(
            rule=condition[0], pipeline=condition[1], severity=SEVERITY_OF_RANK.get(int(group["_rank"].max()), ""),
            since=group["_since"].min(), worst=worst["_metric"],
            change_pct=float(pd.to_numeric(worst["change_pct"], errors="coerce")), per_series=len(condition) == 2,
            messages=tuple(zip(group["_metric"], group[MESSAGE].fillna("").astype(str)))))
    return out


MAX_NAMED_SEGMENTS = 3  # segments a banner line names before "…"


@dataclass(frozen=True)
class SegmentSummary:
    """Several open segment conditions as one banner line: "3 segments declined: paraphrase, stdlib, syntax (...)";
    each one's own words are on the Segments page and in the alert list."""

    conditions: tuple[OpenCondition, ...]

    @property
    def segments(self) -> list[str]:
        """The segments, as messages name them, in the conditions' order (one per segment over its pipelines)."""
        return list(dict.fromkeys(label(c.worst.partition(" ")[2]) for c in self.conditions))

    @property
    def line(self) -> str:
        names = self.segments
        shown = ", ".join(names[:MAX_NAMED_SEGMENTS]) + (", …" if len(names) > MAX_NAMED_SEGMENTS else "")
        pipelines = ", ".join(dict.fromkeys(c.pipeline for c in self.conditions))
        since = min(c.since for c in self.conditions)
        return (f"{len(names)} segments declined: {shown} (on {pipelines} since {since:%Y-%m-%d}; each on the Segments "
                f"page)")

    @property
    def runbook(self) -> RunbookEntry:
        return self.conditions[0].runbook


def banner_items(conditions: Sequence[OpenCondition]) -> list[OpenCondition | SegmentSummary]:
    """The banner's lines: each condition, except that the segment conditions of more than one segment become one
    `SegmentSummary` where the first of them stood."""
    mine = tuple(c for c in conditions if c.rule in SEGMENT_RULES)
    if len({c.worst.partition(" ")[2] for c in mine}) < 2:
        return list(conditions)
    out: list[OpenCondition | SegmentSummary] = []
    for c in conditions:
        if c not in mine:
            out.append(c)
        elif c is mine[0]:
            out.append(SegmentSummary(mine))
    return out


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



def alert_points(alerts: pd.DataFrame, metric: str | None, pipelines: Sequence[str] | None = None) -> pd.DataFrame:
    """One point per run date and pipeline where alerts fired on `metric` (alerts.csv's metric, e.g.
    "recall@5" or "psi_mean"; None: on any): value, the most severe severity, and every message (one per line)."""
    rows = alerts if metric is None else alerts[alerts[METRIC] == metric]
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


def question_column(metric: str) -> str:
    """metrics.csv's metric name -> its per_question.csv column ("mrr" -> "rr")."""
    return metric_info(metric).column


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




def metric_series(metrics: pd.DataFrame, metric: str, k: int) -> pd.DataFrame:
    """One metric@k over time for every pipeline: run_date, pipeline, value."""
    rows = metrics[(metrics[METRIC] == metric) & (metrics[K] == k)]
    return rows[[RUN_DATE, PIPELINE, VALUE]].sort_values([PIPELINE, RUN_DATE], kind="stable").reset_index(drop=True)


# --- questions ---------------------------------------------------------------------------------------------



# --- drift --------------------------------------------------------------------------------------------------



# --- weeks ---------------------------------------------------------------------------------------------------



# --- simulation sandboxes --------------------------------------------------------------------------------------


