"""Drift: the verdict of the latest run's drift statistics (what entered in the current window against the
reference window, each statistic with its null), the statistics over time beside their nulls, the top-1 cosine,
the unjudged share, a projection of reference and current embeddings, and the corpus composition."""

from __future__ import annotations

import streamlit as st

from pages import _ui as ui
from pipeline import charts, drift as stats, views
from pipeline.views import drift as drift_views

ui.page_frame()
st.title("Drift")
config, drift, metrics, alerts, runs = ui.config(), ui.drift(), ui.metrics(), ui.alerts(), ui.runs()
events = views.run_events(runs)
days = views.run_dates(runs)
chosen = st.selectbox("Run", days, index=len(days) - 1, key="drift_run") if days else None
window = drift_views.drift_window(drift, chosen)
if window:
    st.caption(f"Chunks new from {window['current_start']} to {window['run_date']} ({window['n_current']}) against those "
               f"new from {window['reference_start']} to {window['reference_end']} ({window['n_reference']}), the "
               "reference window (rolling, or pinned by `python -m pipeline rebaseline`). Drifted: significant after "
               "Holm's correction over the statistics AND at or above its effect line; the null is what the statistic "
               "reads when nothing changed, at these sample sizes.")
verdicts = drift_views.drift_verdicts(drift, chosen)
ui.table(verdicts, "drift_verdicts", column_config={
    "value": st.column_config.NumberColumn(format="%.3f"), "null 95%": st.column_config.NumberColumn(format="%.3f"),
    "effect line": st.column_config.NumberColumn(format="%.2f"), "p (Holm)": st.column_config.NumberColumn(format="%.3g"),
    "what is new": st.column_config.TextColumn(width="large")})

left, right = st.columns(2)
for column, statistic, title, unit in (
        (left, stats.PSI_MEAN.name, "PSI, mean over the principal components", "PSI (unitless, ≥ 0)"),
        (right, stats.CLASSIFIER.name, "Domain classifier (kNN, balanced accuracy)", "accuracy (0.5 = no drift)"),
        (left, stats.NOVELTY.name, "Share of new chunks unlike any in the reference", "share of new chunks (0–1)"),
        (right, stats.NEW_CATEGORIES.name, "Share of new chunks in categories the reference lacks",
         "share of new chunks (0–1)")):
    with column:
        st.plotly_chart(charts.lines_figure(drift_views.drift_against_null(drift, statistic), views.STATISTIC, title, unit,
                                            events=events), key=f"drift_chart_{statistic}")

cosines = drift_views.top1_statistics(drift)
st.plotly_chart(charts.lines_figure(
    drift_views.drift_series(drift, list(cosines)), views.STATISTIC, "Mean cosine of each question to its top-1 chunk",
    "cosine similarity (−1 to 1)", events=events, labels=cosines), key="drift_top1_chart")

ks = sorted(int(k) for k in metrics[views.K].unique())
if ks:
    k = st.selectbox("Cutoff k for unjudged", ks, index=ks.index(views.default_k(ks)), key="drift_k")
    st.plotly_chart(charts.lines_figure(
        views.metric_series(metrics, "unjudged", k), views.PIPELINE, f"Unjudged share of the top {k}",
        f"unjudged@{k} (share of the top {k} the gold set does not judge, 0–1)", events=events,
        points=views.alert_points(alerts, views.series_name("unjudged", k))), key="drift_unjudged_chart")

st.subheader("Reference and current embeddings")
reference = drift_views.reference_date(drift, ui.data_dir())
current = st.selectbox("Current date", days, index=len(days) - 1, key="drift_current") if days else None
if reference is None or current is None:
    st.info("No reference yet.", icon=":material/info:")
else:
    projection = ui.projection(reference, current)
    st.plotly_chart(charts.projection_figure(projection.points, str(reference), str(current), projection.explained),
                    key="drift_projection_chart")
    if projection.n_missing:
        st.caption(f"{projection.n_missing} sampled chunks have no cached embedding under {config.embedder.model} "
                   "and are left out (the dashboard never loads the model).")

st.subheader("Corpus composition")
by = st.segmented_control("Group by", ["source", "category"], default="source", key="drift_composition_by",
                          required=True)
st.plotly_chart(charts.composition_figure(drift_views.composition(ui.documents(), days, by or "source"), by or "source"),
                key="drift_composition_chart")
