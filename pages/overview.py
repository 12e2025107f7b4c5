"""Overview: each pipeline's latest metrics against their trailing mean, the open alerts, the last run and the
corpus size over time."""

from __future__ import annotations

import streamlit as st

from pages import _ui as ui
from pipeline import charts, views

ui.page_frame()
st.title("Overview")
config, metrics, alerts, runs = ui.config(), ui.metrics(), ui.alerts(), ui.runs()
window = config.alerts.window

ks = sorted(int(k) for k in metrics[views.K].unique())
k = st.selectbox("Cutoff k", ks, index=ks.index(views.default_k(ks)), key="overview_k",
                 help="The rank cutoff of the metrics shown (the alert rules watch the largest k not above 5).")
cards = views.headline(metrics, alerts, k, window)
st.caption(f"Latest run's value of each metric, mean over the gold questions; the delta is the change against the "
           f"mean of the previous {window} runs, red or orange when an alert or a warning fired on the series.")
for pipeline in views.values_of(cards, views.PIPELINE):
    row_cards = cards[cards[views.PIPELINE] == pipeline]
    columns = st.columns(len(row_cards))
    for column, row in zip(columns, row_cards.itertuples(index=False)):
        ui.metric_card(column, f"{pipeline} · {views.metric_label(row.metric, k)}", row, window)

st.subheader("Open alerts")
open_rows = views.open_alerts(alerts, runs)
if open_rows.empty:
    st.success("No alert on the latest run.", icon=":material/check_circle:")
else:
    ui.alerts_table(open_rows.drop(columns=[views.RUN_DATE]), "overview_open_alerts")

st.subheader("Last run")
last = views.last_run(runs)
columns = st.columns(5)
columns[0].metric("Run date", f"{last[views.RUN_DATE]:%Y-%m-%d}", help=f"finished {last['finished_at']}")
columns[1].metric("Status", str(last["status"]))
columns[2].metric("Feeds ok / failed", f"{last['feeds_ok']} / {last['feeds_failed']}")
columns[3].metric("Documents", f"{last[views.DOCS_TOTAL]:,}",
                  f"+{last['docs_new']} / ~{last['docs_updated']} / −{last['docs_deleted']}", delta_color="off", delta_arrow="off",
                  help=f"{last['docs_new']} new, {last['docs_updated']} updated and {last['docs_deleted']} deleted "
                       "documents in the last run.")
columns[4].metric("Duration", f"{last['seconds']:.1f} s")
if str(last[views.EVENTS]).strip():
    st.caption(views.escape_markdown(f"Note: {last[views.EVENTS]}"))

st.plotly_chart(charts.corpus_size_figure(runs), key="overview_chart")
