"""Weekly review: one ISO week's metric means against the previous week, the alerts fired that week, the most
regressed questions and the corpus changes; downloadable as the same HTML file `python -m pipeline report` writes,
and the week's rows as CSV."""

from __future__ import annotations

import streamlit as st

from pages import _ui as ui
from pipeline import charts, contract, report, views
from pipeline.views import alerts as alerts_views, weekly as weekly_views

ui.page_frame()
st.title("Weekly review")
runs, metrics = ui.runs(), ui.metrics()
week = st.selectbox("ISO week", weekly_views.weeks(runs)[::-1], key="weekly_week")
review = ui.weekly_review(week)
k = review.k
first, last = review.run_dates[0], review.run_dates[-1]
st.caption(f"{len(review.run_dates)} runs from {first} to {last}, compared with {review.previous}: weekly means of "
           f"the daily runs at k = {k}.")

with st.container(key="weekly_summary", border=True):
    st.markdown(views.escape_markdown(report.summary_paragraph(review, review.gold_texts)))

names = [m for m in views.HEADLINE if m in set(review.summary[contract.METRIC])]
metric = st.segmented_control("Chart metric", names, default=names[views.first_metric(names)],
                              format_func=views.metric_label, key="weekly_metric", required=True) or names[0]
rows = review.summary[review.summary[contract.METRIC] == metric]
st.plotly_chart(charts.weekly_figure(rows, views.metric_label(metric, k), week, review.previous), key="weekly_chart")

for pipeline in views.values_of(review.summary, contract.PIPELINE):
    cells = review.summary[review.summary[contract.PIPELINE] == pipeline]
    for column, row in zip(st.columns(len(cells)), cells.itertuples(index=False)):
        delta = None if row.change != row.change else f"{row.change:+.3f} ({row.change_pct:+.1f}%)"
        column.metric(f"{pipeline} · {views.metric_label(row.metric, k)}", f"{row.mean:.3f}", delta,
                      delta_color="normal" if views.metric_info(row.metric).higher_is_better else "inverse", border=True,
                      help=f"weekly mean {row.mean:.4f}; {review.previous}: {row.previous:.4f}")

st.subheader("Alerts fired this week")
with st.container(key="weekly_counts"):
    st.caption(views.escape_markdown(review.counts.sentence("the week")), help=alerts_views.UNITS)
    for condition, acknowledged in review.counts.acknowledged:
        st.markdown(f"- {ui.condition_markdown(condition)} · {views.escape_markdown(acknowledged.statement)}")
if review.alerts.empty:
    st.success("No alert fired this week.", icon=":material/check_circle:")
else:
    ui.alerts_table(review.alerts, "weekly_alerts")

st.subheader(f"Most regressed questions ({views.metric_label(views.DEFAULT_METRIC, k)}, weekly mean)")
if review.regressions.empty:
    st.success("No question's weekly mean fell.", icon=":material/check_circle:")
else:
    ui.table(review.regressions, "weekly_regressions",
             column_config={"previous": st.column_config.NumberColumn(review.previous, format="%.3f"),
                            "mean": st.column_config.NumberColumn(week, format="%.3f"),
                            "change": st.column_config.NumberColumn("change", format="%+.3f")})

st.subheader("Persistence")
ui.persistence_table(review.persistence, "weekly_persistence")

st.subheader("Corpus changes")
corpus = review.corpus
cards = st.columns(4)
cards[0].metric("Documents at the end of the week", f"{corpus.docs_end:,}" if corpus.docs_end is not None else "–",
                None if corpus.docs_start is None else f"{corpus.docs_end - corpus.docs_start:+,} over the week")
cards[1].metric("New", f"{corpus.docs_new:,}")
cards[2].metric("Updated / deleted", f"{corpus.docs_updated:,} / {corpus.docs_deleted:,}")
cards[3].metric("Failed feed fetches", f"{corpus.feeds_failed}",
                f"{corpus.degraded_runs} degraded runs" if corpus.degraded_runs else None,
                delta_color="off", delta_arrow="off")
for day, note in zip(review.events[contract.RUN_DATE], review.events[contract.EVENTS]):
    st.caption(views.escape_markdown(f"{day:%Y-%m-%d}: {note}"))

left, right = st.columns(2)
left.download_button("Download the review (HTML)", report.render_html(review), f"driftwatch-review-{week}.html",
                     "text/html", key="weekly_download_html", icon=":material/download:")
right.download_button("Download the week's metrics rows (CSV)", report.week_csv(metrics, week),
                      f"driftwatch-metrics-{week}.csv", "text/csv", key="weekly_download_csv",
                      icon=":material/download:")
