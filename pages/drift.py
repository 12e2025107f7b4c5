"""Drift: the verdict of a run's drift statistics first (what entered in the current window against the reference
window, each statistic with its null), then what came in (composition by source and category, the novel documents,
the projection of the current window against the reference), then the statistics over time beside their nulls."""

from __future__ import annotations

import streamlit as st

from pages import _ui as ui
from pipeline import charts, contract, evidently_report, views
from pipeline.errors import DriftwatchError
from pipeline.views import alerts as alerts_views, drift as drift_views

TONES = {drift_views.DRIFTED_CONFIRMED: st.error, drift_views.DRIFTED_NOT_CONFIRMED: st.warning,
         drift_views.STABLE_TONE: st.success, drift_views.NOT_ENOUGH_TONE: st.info}

ui.page_frame()
st.title("Drift")
config, drift, metrics, alerts, runs = ui.config(), ui.drift(), ui.metrics(), ui.alerts(), ui.runs()
events = views.run_events(runs)
days = views.run_dates(runs)
asked = next((d for d in days if str(d) == st.query_params.get("run")), days[-1])  # the Overview's incident link
chosen = st.selectbox("Run", days, index=days.index(asked), key="drift_run")
spans = drift_views.windows(drift, chosen)
verdicts = drift_views.drift_verdicts(drift, chosen)
confirmed = drift_views.confirmation(drift, chosen, config.drift)
tone, sentence = drift_views.conclusion(verdicts, confirmed, config.drift,
                                        drift_views.named_shift(drift, chosen, confirmed))
with st.container(key="drift_conclusion"):
    TONES[tone](views.escape_markdown(f"This run's verdict ({chosen}): {sentence}"), icon=":material/troubleshoot:")
with st.container(key="drift_condition"):  # the alert rule's streak, distinct from one run's verdict
    st.caption(views.escape_markdown(alerts_views.drift_condition(ui.alert_counts())))
if spans:
    reference, current = spans
    window = drift_views.drift_window(drift, chosen)
    st.caption(f"Chunks new in {current.label()} ({window['n_current']}) against those new in {reference.label()} "
               f"({window['n_reference']}), the reference window (rolling, or pinned by `python -m pipeline "
               "rebaseline`). Drifted: significant after Holm's correction over the statistics AND a value at or "
               "above its threshold (the null's mean plus the statistic's effect line: its column says how it is "
               "made); the null is what the statistic reads when nothing changed, at these sample sizes.")
ui.table(verdicts, "drift_verdicts", column_config={
    "value": st.column_config.NumberColumn(format="%.3f"), "threshold": st.column_config.NumberColumn(format="%.3f"),
    "p (Holm)": st.column_config.NumberColumn(format="%.3g"), "null 95%": st.column_config.NumberColumn(format="%.3f"),
    "what is new": st.column_config.TextColumn(width="large")})

if spans:
    documents = ui.documents()
    st.subheader("What came in")
    columns = st.columns(2)
    for column, by in zip(columns, ("source", "category")):
        with column:
            ui.table(drift_views.window_composition(documents, reference, current, by), f"drift_composition_{by}",
                     column_config={
                         by: st.column_config.TextColumn(by), "reference": st.column_config.NumberColumn(
                             "ref.", format="%d", help=f"new documents in the reference window {reference.label()}"),
                         "current": st.column_config.NumberColumn(
                             "current", format="%d", help=f"new documents in the current window {current.label()}"),
                         "reference_share": st.column_config.NumberColumn("ref. %", format="percent"),
                         "current_share": st.column_config.NumberColumn("current %", format="percent"),
                         "change": st.column_config.NumberColumn("change", format="percent")}, width="stretch")
    novel = drift_views.novel_documents(documents, reference, current)
    info = ui.documents_info(list(novel["doc_id"]))
    novel.insert(1, "title", [info.get(d, {}).get("title", "") for d in novel["doc_id"]])
    st.caption(f"The {len(novel)} documents first seen in the current window ({current.label()}), those from a source "
               "or a category the reference window lacks first.")
    ui.table(novel, "drift_novel", height=min(420, 36 * (len(novel) + 1) + 2), column_config={
        "doc_id": st.column_config.TextColumn("doc id", width=90), "title": st.column_config.TextColumn(width=360),
        "first_seen": st.column_config.DateColumn("first seen", format="YYYY-MM-DD", width=100),
        "new_source": st.column_config.CheckboxColumn("new source", width=90),
        "new_category": st.column_config.CheckboxColumn("new category", width=100)})

    projection = ui.projection(reference, current)
    st.plotly_chart(charts.projection_figure(projection.points, reference.label(), current.label(),
                                             projection.explained), key="drift_projection_chart")
    if projection.n_missing:
        st.caption(f"{projection.n_missing} sampled chunks have no cached embedding under {config.embedder.model} "
                   "and are left out (the dashboard never loads the model).")

st.subheader("Over time")
left, right = st.columns(2)
for column, statistic, title, unit in (
        (left, contract.PSI_MEAN, "PSI, mean over the principal components", "PSI (unitless, ≥ 0)"),
        (right, contract.CLASSIFIER_ACCURACY, "Domain classifier (kNN, balanced accuracy)", "accuracy (0.5 = no drift)"),
        (left, contract.NOVEL_SHARE, "Share of new chunks unlike any in the reference", "share of new chunks (0–1)"),
        (right, contract.NEW_CATEGORY_SHARE, "Share of new chunks in categories the reference lacks",
         "share of new chunks (0–1)"),
        (left, contract.LANGUAGE_SHARE, "Documents' languages against the reference's", "total variation (0–1)")):
    with column:
        st.plotly_chart(charts.lines_figure(drift_views.drift_against_null(drift, statistic), contract.STATISTIC, title,
                                            unit, events=events), key=f"drift_chart_{statistic}")

cosines = drift_views.top1_statistics(drift)
st.plotly_chart(charts.lines_figure(
    drift_views.drift_series(drift, list(cosines)), contract.STATISTIC,
    "Mean cosine of each question to its top-1 chunk", "cosine similarity (−1 to 1)", events=events, labels=cosines), key="drift_top1_chart")

ks = sorted(int(k) for k in metrics[contract.K].unique())
k = st.selectbox("Cutoff k for unjudged", ks, index=ks.index(views.default_k(ks)), key="drift_k")
st.plotly_chart(charts.lines_figure(
    views.metric_series(metrics, "unjudged", k), contract.PIPELINE,
    f"Unjudged share of the top {k}: retrieved chunks the gold set does not judge",
    f"unjudged@{k} (0–1)", events=events,  # a short axis title: a long one ran into the chart's title
    points=views.alert_points(alerts, views.series_name("unjudged", k))), key="drift_unjudged_chart")

st.subheader("Corpus composition over time")
by = st.segmented_control("Group by", ["source", "category"], default="source", key="drift_composition_by",
                          required=True)
st.plotly_chart(charts.composition_figure(drift_views.composition(ui.documents(), days, by or "source"),
                                          by or "source"), key="drift_composition_chart")

st.subheader("Evidently report")
st.caption(evidently_report.offer(chosen))
if evidently_report.can_build() and st.button("Build the Evidently report", key="drift_evidently_build"):
    with st.spinner("Building the Evidently report..."):
        try:
            st.session_state["drift_evidently"] = evidently_report.render(config, chosen)
        except DriftwatchError as exc:
            ui.error(exc)
built = st.session_state.get("drift_evidently")
if built is not None and built.run_date == chosen:
    st.download_button("Download the Evidently report", built.html, evidently_report.file_name(chosen),
                       mime="text/html", key="drift_evidently_download")
