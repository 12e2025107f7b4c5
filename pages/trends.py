"""Trends: chosen metrics over time for several pipelines, with the trailing mean, the drop threshold, the sigma
band, alert markers and run events."""

from __future__ import annotations

import streamlit as st

from pages import _ui as ui
from pipeline import charts, views

ui.page_frame()
st.title("Trends")
config, metrics, alerts, runs = ui.config(), ui.metrics(), ui.alerts(), ui.runs()
rules = config.alerts

names = views.values_of(metrics, views.METRIC)
pipelines = views.values_of(metrics, views.PIPELINE)
ks = sorted(int(k) for k in metrics[views.K].unique())
left, middle, right = st.columns([2, 2, 1])
chosen = left.multiselect("Metrics", names, default=[n for n in ("recall", "mrr") if n in names] or names[:1],
                          format_func=views.metric_label, key="trends_metrics")
shown = middle.multiselect("Pipelines", pipelines, default=pipelines, key="trends_pipelines")
k = right.selectbox("Cutoff k", ks, index=ks.index(views.default_k(ks)), key="trends_k")
start, end = ui.date_range("Date range", views.run_dates(runs), key="trends_dates")

events = views.between(views.run_events(runs), start, end)
st.caption(f"Dotted: mean of the previous {rules.window} runs; shaded: ±{rules.sigma:g} standard deviations around "
           f"it (once {rules.window} runs are in); dashed: the drop threshold; markers: alerts that fired on the "
           "series; vertical lines: run notes.")
if not chosen or not shown:
    st.info("Pick at least one metric and one pipeline.", icon=":material/info:")
for metric in chosen:
    name = views.series_name(metric, k)
    trend = views.trend(metrics, metric, k, shown, rules, ks, start, end)
    points = views.between(views.alert_points(alerts, name, shown), start, end)
    figure = charts.trend_figure(trend, views.metric_label(metric, k), points, events, window=rules.window,
                                 sigma=rules.sigma,
                                 threshold_note=views.threshold_note(metric, k, rules))
    st.plotly_chart(figure, key=f"trends_chart_{metric}")
