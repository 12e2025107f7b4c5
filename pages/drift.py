"""Drift: embedding-drift statistics of the corpus against its reference snapshot (PSI, KL, KS, Evidently), the
unjudged share of the results, the question-top1 cosine, a 2-D projection of reference and current embeddings, and
the corpus composition over time."""

from __future__ import annotations

import streamlit as st

from pages import _ui as ui
from pipeline import charts, drift as stats, views

ui.page_frame()
st.title("Drift")
config, drift, metrics, alerts, runs = ui.config(), ui.drift(), ui.metrics(), ui.alerts(), ui.runs()
rules = config.alerts
reference = views.reference_date(drift, ui.data_dir())
events = views.run_events(runs)
st.caption(f"Reference snapshot: {reference or 'none yet'} (pinned by the first run, moved by "
           "`python -m pipeline rebaseline`). Each statistic compares the corpus's chunk embeddings on the run date "
           "with the reference's, on the reference's principal components.")

psi = views.drift_series(drift, [stats.PSI_MEAN.name, stats.PSI_MAX.name, stats.PSI_EXPECTED.name])
st.plotly_chart(charts.lines_figure(
    psi, views.STATISTIC, "Population stability index (PSI) against the reference", "PSI (unitless, ≥ 0)",
    levels=[(rules.psi_warning, "warning"), (rules.psi_alert, "alert")], events=events,
    points=views.alert_points(alerts, stats.PSI_MEAN.name),
    labels={stats.PSI_MEAN.name: "PSI mean over components", stats.PSI_MAX.name: "PSI max over components",
            stats.PSI_EXPECTED.name: "PSI expected with no drift"}), key="drift_chart")
st.caption("psi_expected is the PSI two samples of one distribution give at these sample sizes: a mean PSI near "
           "it is noise, not drift.")

left, right = st.columns(2)
with left:
    st.plotly_chart(charts.lines_figure(
        views.drift_series(drift, [stats.KL_MEAN.name, stats.KL_MAX.name]), views.STATISTIC,
        "KL divergence (current ‖ reference)", "KL (nats)", levels=[(stats.KL_MEAN.threshold, "threshold")],
        events=events, labels={stats.KL_MEAN.name: "KL mean over components",
                               stats.KL_MAX.name: "KL max over components"}), key="drift_kl_chart")
    st.plotly_chart(charts.lines_figure(
        views.drift_series(drift, [stats.EVIDENTLY_SCORE.name, stats.EVIDENTLY_DRIFTED.name]), views.STATISTIC,
        "Evidently domain classifier", "ROC AUC (0.5 = no drift); drifted 0/1",
        levels=[(stats.EVIDENTLY_SCORE.threshold, "AUC threshold")], events=events,
        labels={stats.EVIDENTLY_SCORE.name: "classifier ROC AUC",
                stats.EVIDENTLY_DRIFTED.name: "drifted (bootstrap test)"}),
        key="drift_evidently_chart")
with right:
    st.plotly_chart(charts.lines_figure(
        views.drift_series(drift, [stats.KS_MAX.name, stats.KS_MIN_P.name]), views.STATISTIC,
        "Kolmogorov–Smirnov", "KS statistic D; Bonferroni p-value (0–1)",
        levels=[(stats.KS_MIN_P.threshold, "significance")], events=events,
        labels={stats.KS_MAX.name: "largest KS statistic D", stats.KS_MIN_P.name: "smallest p-value (Bonferroni)"}),
        key="drift_ks_chart")
    cosines = views.top1_statistics(drift)
    st.plotly_chart(charts.lines_figure(
        views.drift_series(drift, list(cosines)), views.STATISTIC, "Mean cosine of each question to its top-1 chunk",
        "cosine similarity (−1 to 1)", events=events, labels=cosines), key="drift_top1_chart")

ks = sorted(int(k) for k in metrics[views.K].unique())
k = st.selectbox("Cutoff k for unjudged", ks, index=ks.index(views.default_k(ks)), key="drift_k")
st.plotly_chart(charts.lines_figure(
    views.metric_series(metrics, "unjudged", k), views.PIPELINE, f"Unjudged share of the top {k}",
    f"unjudged@{k} (share of the top {k} the gold set does not judge, 0–1)", events=events,
    points=views.alert_points(alerts, views.series_name("unjudged", k))), key="drift_unjudged_chart")

st.subheader("Reference and current embeddings")
days = views.run_dates(runs)
current = st.selectbox("Current date", days, index=len(days) - 1, key="drift_current")
if reference is None:
    st.info("No reference snapshot yet.", icon=":material/info:")
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
st.plotly_chart(charts.composition_figure(views.composition(ui.documents(), days, by or "source"), by or "source"),
                key="drift_composition_chart")
