"""The Alerts page: the alert log filtered, counted and grouped into incidents; and the one vocabulary of counts
every page uses (`count_alerts`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from urllib.parse import quote

import pandas as pd

from pipeline.alerts import condition_of, plural
from pipeline.contract import (ALERT, DRIFT_RULE, EVENTS, MESSAGE, METRIC, PIPELINE, RULE, RUN_DATE, SEVERITY, VALUE,
                               WARNING)
from pipeline.notify import MUTE, Silence, acknowledged_target
from pipeline.views import (SEVERITY_OF_RANK, SEVERITY_RANK, OpenCondition, between, open_alerts, open_conditions,
                            run_events)


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
    series_name, _, segment = str(metric).partition(" ")  # a segment rule's metric: "hit@5 tag:paraphrase"
    name, _, k = series_name.partition("@")
    if pipeline and k.isdigit() and segment:
        return f"segments?segment={quote(segment)}&metric={name}&k={k}&pipeline={pipeline}"
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
    """The statement of a silence (`notify.Silence.statement`) covering an incident row: an acknowledgement of its
    condition and start, or a mute of its series lasting to its last run; else ""."""
    since = f"{pd.Timestamp(incident.start):%Y-%m-%d}"
    acknowledged = acknowledged_target(condition_of(incident.rule, incident.pipeline, incident.metric), since)
    for s in silences:
        if s.target == acknowledged:
            return s.statement
        if (s.kind == MUTE and s.key == (incident.rule, incident.pipeline, incident.metric)
                and (not s.until or s.until >= f"{pd.Timestamp(incident.last):%Y-%m-%d}")):
            return s.statement
    return ""


# --- the one vocabulary of counts: open conditions, incidents, alert rows ---------------------------------------

# What each unit is, said once; every page that counts alerts names its unit and may show this as help.
UNITS = ("An open condition is one rule firing on the latest run: on one pipeline for a drop or slow drift, whichever "
         "of its series show it, else on one series or the corpus. An incident is one condition from the run it "
         "started to its last run. An alert row is one row of alerts.csv: one series on one run.")


def acknowledgement(condition: OpenCondition, silences: Sequence[Silence]) -> Silence | None:
    """The acknowledgement of the incident `condition` is (its condition and first run), or None."""
    target = acknowledged_target(condition.condition, f"{condition.since:%Y-%m-%d}")
    return next((s for s in silences if s.target == target), None)


@dataclass(frozen=True)
class AlertCounts:
    """An alert log counted in the three units (UNITS): the conditions open on the latest run of its runs (with
    their acknowledgements), its incidents and its alert rows."""

    day: pd.Timestamp | None  # the latest run
    conditions: tuple[OpenCondition, ...]
    acknowledgements: tuple[Silence | None, ...]  # per condition
    incidents: int
    alert_rows: int

    @property
    def open_rows(self) -> int:
        """The alert rows of the open conditions (the latest run's)."""
        return sum(len(c.messages) for c in self.conditions)

    def unacknowledged(self, severity: str) -> list[OpenCondition]:
        return [c for c, a in zip(self.conditions, self.acknowledgements) if a is None and c.severity == severity]

    @property
    def acknowledged(self) -> list[tuple[OpenCondition, Silence]]:
        return [(c, a) for c, a in zip(self.conditions, self.acknowledgements) if a is not None]

    @property
    def open_phrase(self) -> str:
        """"4 open conditions on 2026-11-22 (2 alerts, 1 warning, 1 acknowledged)"."""
        if self.day is None:
            return "no run yet"
        if not self.conditions:
            return f"no open condition on {self.day:%Y-%m-%d}"
        parts = [plural(len(self.unacknowledged(ALERT)), "alert"), plural(len(self.unacknowledged(WARNING)), "warning"),
                 f"{len(self.acknowledged)} acknowledged"]
        shown = [p for p in parts if not p.startswith("0 ")]
        return f"{plural(len(self.conditions), 'open condition')} on {self.day:%Y-%m-%d} ({', '.join(shown)})"

    def sentence(self, scope: str) -> str:
        """The open conditions, then the incidents and alert rows of `scope` ("the selection", "the week")."""
        return (f"{self.open_phrase}; {plural(self.incidents, 'incident')} and {plural(self.alert_rows, 'alert row')} "
                f"in {scope}")


def count_alerts(alerts: pd.DataFrame, runs: pd.DataFrame, silences: Sequence[Silence] = ()) -> AlertCounts:
    """`alerts` (alerts.csv rows, whole or a selection) counted as open conditions on the latest run of `runs`,
    incidents and alert rows: the one count the banner, the Overview, the Alerts page, the weekly review and its
    HTML file give."""
    latest = runs[RUN_DATE].max() if len(runs) else None
    conditions = tuple(open_conditions(open_alerts(alerts, runs)))
    return AlertCounts(None if latest is None or pd.isna(latest) else pd.Timestamp(latest), conditions,
                       tuple(acknowledgement(c, silences) for c in conditions), len(incidents(alerts, runs)),
                       len(alerts))


def drift_condition(counts: AlertCounts) -> str:
    """The corpus-drift condition of the latest run in a sentence, distinct from a run's drift verdict: the
    verdict says whether one run's window drifted; the condition is the alert rule's streak, open until it
    stops firing."""
    if counts.day is None:
        return "No run yet."
    ongoing = [c for c in counts.conditions if c.rule == DRIFT_RULE]
    if not ongoing:
        return f"No corpus-drift condition is open on the latest run ({counts.day:%Y-%m-%d})."
    c = ongoing[0]
    return (f"A corpus-drift condition ({c.severity}) is ongoing since {c.since:%Y-%m-%d} on the latest run "
            f"({counts.day:%Y-%m-%d}), whatever the verdict of the run shown.")
