"""Alerts: the alert log as incidents (one ongoing condition is one row with its start, duration, daily values and a
link to its chart), acknowledging or muting one with a note (kept in the data directory's mutes.json, honoured by
the notifier), and the raw rows, filtered by severity, rule, pipeline and date."""

from __future__ import annotations

import streamlit as st

from pages import _ui as ui
from pipeline import charts, contract, notify, views
from pipeline.alerts import is_new
from pipeline.views import alerts as alerts_views

CORPUS_WIDE = "(corpus)"  # how alerts that concern no single pipeline are offered in the filter

ui.page_frame()
st.title("Alerts")
alerts, runs, directory = ui.alerts(), ui.runs(), ui.data_dir()
c1, c2, c3 = st.columns(3)
severities = c1.multiselect("Severity", views.values_of(alerts, contract.SEVERITY), key="alerts_severity",
                            placeholder="all")
rules = c2.multiselect("Rule", sorted(views.values_of(alerts, contract.RULE)), key="alerts_rule", placeholder="all")
pipelines = c3.multiselect("Pipeline", [p or CORPUS_WIDE for p in views.values_of(alerts, contract.PIPELINE)],
                           key="alerts_pipeline", placeholder="all")
start, end = ui.date_range("Date range", views.run_dates(runs), key="alerts_dates")
log = alerts_views.filter_alerts(alerts, severities=severities, rules=rules, start=start, end=end,
                                 pipelines=["" if p == CORPUS_WIDE else p for p in pipelines])
silences = ui.silences()
counts = alerts_views.count_alerts(log, runs, silences)
with st.container(key="alerts_counts"):
    st.caption(views.escape_markdown(counts.sentence("the selection")), help=alerts_views.UNITS)
    for condition, acknowledged in zip(counts.conditions, counts.acknowledgements):
        st.markdown(f"- {ui.condition_markdown(condition)}"
                    + (f" · {views.escape_markdown(acknowledged.statement)}" if acknowledged else ""))

found = alerts_views.incidents(log, runs)
st.subheader(f"Incidents ({len(found)})")
st.caption("One row per incident: one condition from the run it started (the rules' `since`) to its last; a "
           "pipeline's drop or slow drift is one condition over all its series. Open its chart from the chart column.")
if found.empty:
    st.success("No alert in the selection.", icon=":material/check_circle:")
else:
    ui.table(alerts_views.incidents_display(found, silences), "alerts_incidents", width="stretch", column_config={
        "start": st.column_config.DateColumn("start", format="YYYY-MM-DD", width=100),
        "days": st.column_config.NumberColumn("days", format="%d", width=50),
        "runs": st.column_config.NumberColumn("runs", format="%d", width=50),
        "daily values": st.column_config.LineChartColumn("daily values", width=120),
        "value": st.column_config.NumberColumn("last value", format="%.3f", width=80),
        "chart": st.column_config.LinkColumn("chart", display_text="open ↗", width=60),
        "silenced": st.column_config.TextColumn("acknowledged / muted", width=220),
        "message": st.column_config.TextColumn("last message", width=220)})

    with st.expander("Acknowledge or mute an incident", key="alerts_silence"):
        labels = {i: f"{r.rule} on {r.pipeline or 'the corpus'} {r.metrics}, since {r.start:%Y-%m-%d}"
                  + (" (ongoing)" if r.ongoing else "") for i, r in found.iterrows()}
        chosen = st.selectbox("Incident", list(labels), format_func=labels.get, key="alerts_silence_incident")
        kind = st.radio("What", [notify.ACKNOWLEDGE, notify.MUTE], horizontal=True, key="alerts_silence_kind",
                        format_func={notify.ACKNOWLEDGE: "acknowledge this condition until it ends (every page shows "
                                     "it acknowledged; a new condition still pages)",
                                     notify.MUTE: "mute the series until a date"}.get)
        until = st.date_input("Muted until (inclusive)", value=None, key="alerts_silence_until",
                              disabled=kind != notify.MUTE, help="empty: until lifted")
        by = st.text_input("Your name", key="alerts_silence_by")
        note = st.text_input("Note (why, what you are doing)", key="alerts_silence_note")
        if st.button("Save", key="alerts_silence_save", icon=":material/notifications_off:"):
            row = found.loc[chosen]
            try:
                notify.add_silence(directory, notify.Silence(
                    kind, row["rule"], row["pipeline"], row["metric"], note,
                    since=f"{row['start']:%Y-%m-%d}" if kind == notify.ACKNOWLEDGE else "",
                    until=str(until) if kind == notify.MUTE and until else "", by=by.strip()))
            except notify.SilenceError as exc:
                ui.error(exc)
            else:
                st.rerun()
        for number, s in enumerate(silences):
            left, right = st.columns([5, 1])
            left.caption(views.escape_markdown(f"{s.rule} on {s.pipeline or 'the corpus'} {s.metric}"
                                               f"{' since ' + s.since if s.since else ''}: {s.statement}"))
            if right.button("Lift", key=f"alerts_lift_{number}"):
                notify.lift_silence(directory, s.kind, s.key)
                st.rerun()

st.plotly_chart(charts.alerts_timeline_figure(alerts_views.alert_counts(log)), key="alerts_chart")
new = int(is_new(log).sum()) if len(log) else 0
with st.expander(f"The {len(log)} alert rows ({new} new, {len(log) - new} continuing an alert of the previous run): one "
                 "series on one run each",
                 key="alerts_rows"):
    ui.alerts_table(log, "alerts_table")
