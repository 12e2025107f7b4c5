"""The Alerts page: the alert log filtered, counted and grouped into incidents."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date

import pandas as pd

from pipeline.alerts import condition_of
from pipeline.contract import EVENTS, MESSAGE, METRIC, PIPELINE, RULE, RUN_DATE, SEVERITY, VALUE
from pipeline.views import SEVERITY_OF_RANK, SEVERITY_RANK, between, run_events


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



# --- incidents: one ongoing condition, not one row per run ---------------------------------------------------


INCIDENT_COLUMNS = ("rule", "pipeline", "metric", "metrics", "severity", "start", "last", "runs", "days", "ongoing", "values",
                    "value", "baseline", "p_value", "message")


def incidents(alerts: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """The alert log as incidents: the rows of one condition ((rule, pipeline, metric) and its `since`, the
    first run of its streak as the rules mark it) become one row with its start, its last run, the runs it
    fired on, its length in days, whether it is ongoing (it fired on the latest run), its daily values (run
    date -> value), the most severe severity and the latest run's value, baseline, p and message. Newest
    start first."""
    columns = list(INCIDENT_COLUMNS)
    if alerts.empty:
        return pd.DataFrame(columns=columns)
    latest = runs[RUN_DATE].max() if len(runs) else alerts[RUN_DATE].max()
    since = pd.to_datetime(alerts["since"].fillna("").astype(str).replace("", None), errors="coerce")
    frame = alerts.assign(start=since.fillna(alerts[RUN_DATE]), _pipeline=alerts[PIPELINE].fillna(""),
                          _rank=alerts[SEVERITY].map(SEVERITY_RANK).fillna(0))
    # One incident per condition (alerts.condition_of: a pipeline's drop or slow drift in any of its series).
    frame["_condition"] = [condition_of(r, p, m) for r, p, m in zip(frame[RULE], frame["_pipeline"], frame[METRIC])]
    rows = []
    for (condition, start), group in frame.sort_values(RUN_DATE, kind="stable").groupby(
            ["_condition", "start"], sort=False):
        rule, pipeline = condition[:2]
        metrics = ", ".join(dict.fromkeys(group[METRIC]))  # metric: the series that started it
        metric = group[METRIC].iloc[0]
        severity = SEVERITY_OF_RANK.get(int(group["_rank"].max()), "")
        # One value a day: the starting series' where it fired, else the first series that did.
        group = group.assign(_own=group[METRIC] != metric).sort_values([RUN_DATE, "_own"], kind="stable")
        group = group.drop_duplicates(RUN_DATE, keep="first")
        last = group.iloc[-1]
        rows.append({
            "rule": rule, "pipeline": pipeline, "metric": metric, "metrics": metrics,
            "severity": severity, "start": start,
            "last": last[RUN_DATE], "runs": len(group), "days": (last[RUN_DATE] - start).days + 1,
            "ongoing": bool(last[RUN_DATE] == latest),
            "values": {f"{d:%Y-%m-%d}": float(v) for d, v in zip(group[RUN_DATE], group[VALUE])},
            "value": float(last[VALUE]), "baseline": last.get("baseline"), "p_value": last.get("p_value"),
            "message": str(last[MESSAGE])})
    out = pd.DataFrame(rows, columns=columns)
    return out.sort_values(["start", "severity", "rule", "pipeline", "metric"], ascending=[False, True, True, True, True],
                           kind="stable").reset_index(drop=True)


@dataclass(frozen=True)
class Episode:
    """Incidents whose spans overlap or touch, chained: what a reviewer calls "the incident" (a drift event
    followed by the metrics it moved)."""

    start: pd.Timestamp
    last: pd.Timestamp
    ongoing: bool
    incidents: pd.DataFrame  # rows of `incidents`, oldest start first
    note: str  # the run note (runs.csv `events`) of the first run of the episode, or of the run before it

    @property
    def first(self) -> pd.Series:
        return self.incidents.iloc[0]


def episodes(incidents_frame: pd.DataFrame, runs: pd.DataFrame) -> list[Episode]:
    """The incidents chained into episodes (oldest first): an incident starting on or before the day after the
    running episode's last run joins it."""
    if incidents_frame.empty:
        return []
    ordered = incidents_frame.sort_values(["start", "last"], kind="stable").reset_index(drop=True)
    groups: list[list[int]] = []
    last = None
    for i, row in ordered.iterrows():
        if last is not None and row["start"] <= last + pd.Timedelta(days=1):
            groups[-1].append(i)
            last = max(last, row["last"])
        else:
            groups.append([i])
            last = row["last"]
    notes = run_events(runs)
    out = []
    for group in groups:
        part = ordered.loc[group].reset_index(drop=True)
        start = part["start"].min()
        near = notes[(notes[RUN_DATE] <= start) & (notes[RUN_DATE] >= start - pd.Timedelta(days=1))]
        out.append(Episode(start, part["last"].max(), bool(part["ongoing"].any()), part,
                           str(near[EVENTS].iloc[-1]) if len(near) else ""))
    return out


def chart_link(pipeline: str, metric: str, start: pd.Timestamp) -> str:
    """The page that charts an incident's series: Trends for a retrieval series (metric@k, its pipeline), Drift
    on the incident's first run for a corpus-wide one (a relative URL of the app)."""
    name, _, k = str(metric).partition("@")
    if pipeline and k.isdigit():
        return f"trends?metric={name}&k={k}&pipeline={pipeline}"
    return f"drift?run={start:%Y-%m-%d}"


def incidents_display(frame: pd.DataFrame, silences: Sequence = ()) -> pd.DataFrame:
    """Incidents for a table: dates as dates, the daily values as a list (a sparkline column), the series named
    with its pipeline, the link to its chart and the note of a silence (`notify.Silence`) covering it."""
    out = frame.copy()
    out["series"] = [f"{p} {m}" if p else f"{m} (corpus)" for p, m in zip(out["pipeline"], out["metrics"])]
    out["chart"] = [chart_link(p, m, d) for p, m, d in zip(out["pipeline"], out["metric"], out["start"])]
    out["silenced"] = [silence_note(r, silences) for r in out.itertuples(index=False)]
    out["start"] = pd.to_datetime(out["start"]).dt.date
    out["last"] = pd.to_datetime(out["last"]).dt.date
    out["daily values"] = [list(v.values()) for v in out["values"]]
    out["state"] = ["ongoing" if o else "ended" for o in out["ongoing"]]
    return out[["severity", "rule", "series", "start", "days", "runs", "state", "daily values", "value", "chart",
                "silenced", "message"]]


def silence_note(incident, silences: Sequence) -> str:
    """"acknowledged: <note>" / "muted to <date>: <note>" for an incident row a silence covers, else ""."""
    since = f"{pd.Timestamp(incident.start):%Y-%m-%d}"
    for s in silences:
        same = (condition_of(*s.key) == condition_of(incident.rule, incident.pipeline, incident.metric)
                if s.kind == "acknowledge" else s.key == (incident.rule, incident.pipeline, incident.metric))
        if not same:
            continue
        if s.kind == "acknowledge" and s.since == since:
            return f"acknowledged: {s.note}"
        if s.kind == "mute" and (not s.until or s.until >= f"{pd.Timestamp(incident.last):%Y-%m-%d}"):
            return f"muted{' to ' + s.until if s.until else ''}: {s.note}"
    return ""
