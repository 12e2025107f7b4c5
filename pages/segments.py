"""Segments: a segment x run date heatmap of one metric@k and pipeline (gold tags, and the sources and categories
of the gold documents), the segment alerts of the latest run in their own words, and a drill-down to a segment's
questions and their per-question outcomes."""

from __future__ import annotations

import streamlit as st

from pages import _ui as ui
from pipeline import charts, contract, segments, views
from pipeline.views import segments as segment_views

ui.page_frame()
st.title("Segments")
config, metrics = ui.config(), ui.metrics()
series, members = ui.read(contract.SEGMENTS), ui.read(contract.SEGMENT_QUESTIONS)
if series.empty:
    st.info("No segment series yet: the next run writes them (segments.csv), one per gold tag and per source and "
            "category of the gold documents.", icon=":material/info:")

pipelines = views.values_of(metrics, contract.PIPELINE)
ks = sorted(int(k) for k in metrics[contract.K].unique())
names = [m for m in views.RETRIEVAL_METRICS if m in set(metrics[contract.METRIC])]
asked = st.query_params  # a segment alert's chart link names its segment, metric, k and pipeline
asked_k = int(asked["k"]) if str(asked.get("k", "")).isdigit() and int(asked["k"]) in ks else views.default_k(ks)
c1, c2, c3 = st.columns(3)
pipeline = c1.selectbox("Pipeline", pipelines, key="segments_pipeline",
                        index=pipelines.index(asked["pipeline"]) if asked.get("pipeline") in pipelines else 0)
k = c2.selectbox("Cutoff k", ks, index=ks.index(asked_k), key="segments_k")
first = names.index(asked["metric"]) if asked.get("metric") in names else views.first_metric(names)
metric = c3.selectbox("Metric", names, index=first,
                      format_func=views.metric_label, key="segments_metric")
label = views.metric_label(metric, k)

for line in segment_views.segment_alert_lines(ui.alerts()):
    st.warning(views.escape_markdown(line), icon=":material/warning:")
st.caption(f"Each segment's mean over its questions (its n in brackets, on the latest run). The segment rules test "
           f"segments of at least {config.alerts.segment_min_n} questions (`alerts.segment_min_n`), Holm-corrected "
           "over segments and series together.")
matrix = segment_views.segment_heatmap(series, pipeline, metric, k)
st.plotly_chart(charts.segment_heatmap_figure(matrix, label, pipeline), key="segments_chart")

st.subheader("Drill-down")
choices = segment_views.segment_names(members)
segment = st.selectbox("Segment", choices, key="segments_segment", format_func=segments.label,
                       index=choices.index(asked["segment"]) if asked.get("segment") in choices else 0)
if segment:
    questions = ui.per_question_view(segment_views.segment_questions, members, segment, pipeline, k, metric)
    st.plotly_chart(charts.heatmap_figure(questions, label, pipeline), key="segments_questions_chart")
