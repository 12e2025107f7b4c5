"""Alerts: the alert log, filtered by severity, rule, pipeline and date."""

from __future__ import annotations

import streamlit as st

from pages import _ui as ui
from pipeline import charts, views
from pipeline.views import alerts as alerts_views
from pipeline.alerts import is_new

CORPUS_WIDE = "(corpus)"  # how alerts that concern no single pipeline are offered in the filter

ui.page_frame()
st.title("Alerts")
alerts, runs = ui.alerts(), ui.runs()
c1, c2, c3 = st.columns(3)
severities = c1.multiselect("Severity", views.values_of(alerts, views.SEVERITY), key="alerts_severity",
                            placeholder="all")
rules = c2.multiselect("Rule", sorted(views.values_of(alerts, views.RULE)), key="alerts_rule", placeholder="all")
pipelines = c3.multiselect("Pipeline", [p or CORPUS_WIDE for p in views.values_of(alerts, views.PIPELINE)],
                           key="alerts_pipeline", placeholder="all")
start, end = ui.date_range("Date range", views.run_dates(runs), key="alerts_dates")
log = alerts_views.filter_alerts(alerts, severities=severities, rules=rules, start=start, end=end,
                          pipelines=["" if p == CORPUS_WIDE else p for p in pipelines])

st.plotly_chart(charts.alerts_timeline_figure(alerts_views.alert_counts(log)), key="alerts_chart")
new = int(is_new(log).sum()) if len(log) else 0
st.caption(f"{len(log)} alert rows ({new} new, {len(log) - new} continuing an alert of the previous run).")
ui.alerts_table(log, "alerts_table")
