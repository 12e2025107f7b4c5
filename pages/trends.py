"""Trends: chosen metrics over time for several pipelines, with what the rules test them against (drop baseline
and edge, slow-drift edge, floor), alert markers and run events."""

from __future__ import annotations

import streamlit as st

from pages import _ui as ui
from pipeline import charts, contract, views
from pipeline.persistence import persistence
from pipeline.views import trends as trends_views

ui.page_frame()
st.title("Trends")
config, metrics, alerts, runs = ui.config(), ui.metrics(), ui.alerts(), ui.runs()
per_question = ui.per_question()
rules = config.alerts

names = views.values_of(metrics, contract.METRIC)
pipelines = views.values_of(metrics, contract.PIPELINE)
ks = sorted(int(k) for k in metrics[contract.K].unique())
left, middle, right = st.columns([2, 2, 1])
asked = st.query_params  # an incident's chart link names its metric, k and pipeline
asked_k = int(asked["k"]) if str(asked.get("k", "")).isdigit() and int(asked["k"]) in ks else None
chosen = left.multiselect("Metrics", names, default=[asked["metric"]] if asked.get("metric") in names else
                          [n for n in ("recall", "mrr") if n in names] or names[:1],
                          format_func=views.metric_label, key="trends_metrics")
shown = middle.multiselect("Pipelines", pipelines, key="trends_pipelines",
                           default=[asked["pipeline"]] if asked.get("pipeline") in pipelines else pipelines)
k = right.selectbox("Cutoff k", ks, index=ks.index(asked_k or views.default_k(ks)), key="trends_k")
start, end = ui.date_range("Date range", views.run_dates(runs), key="trends_dates")

events = views.between(views.run_events(runs), start, end)
st.caption(f"Watched series only: dotted, the mean of the {rules.window} runs before each run (the drop rule's "
           "baseline); shaded out to the dashed edge, the values a run must pass for the drop rule to fire (the "
           "practical threshold and the per-question noise, at Holm's first step over the watched series); "
           "dash-dot: the edge the slow-drift rule's moving mean must pass against the reference period. "
           "Shaded: runs on which an alert (red) or a warning (orange) fired on the series; dotted vertical lines: "
           "run notes. Series no rule watches show only their values (and a floor when one is configured).")
if not chosen or not shown:
    st.info("Pick at least one metric and one pipeline.", icon=":material/info:")
maintained_metrics, versions = ui.read(contract.MAINTAINED_METRICS), ui.read(contract.QRELS_VERSIONS)
if len(maintained_metrics):
    st.caption("Dashed: the same series re-scored over the whole history with the maintained qrels (the gold set "
               "plus the human judgments, see Judge), beside the frozen gold set's; purple dash-dot lines: each "
               "qrels version, at the first run date it scored. unjudged@k is shown below for both.")
drawn = list(chosen)
if len(maintained_metrics) and chosen and shown and "unjudged" not in drawn:
    drawn.append("unjudged")  # the coverage of both qrels, under the chosen metrics
for metric in drawn:
    name = views.series_name(metric, k)
    trend = trends_views.trend(metrics, per_question, metric, k, shown, rules, ks, start, end)
    points = views.between(views.alert_points(alerts, name, shown), start, end)
    kept, marks = trends_views.maintained(maintained_metrics, versions, metric, k, shown, start, end)
    figure = charts.trend_figure(trend, views.metric_label(metric, k), points, events,
                                 threshold_note=trends_views.threshold_note(metric, k, rules),
                                 maintained=kept, versions=marks)
    st.plotly_chart(figure, key=f"trends_chart_{metric}")

st.subheader("Persistence")
lasting = ui.per_question_view(persistence, rules, k)
ui.persistence_table(lasting, "trends_persistence")
