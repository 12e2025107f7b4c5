"""Questions: a question x date heatmap sorted by regression, the questions that regressed between two dates,
and a drill-down into one question (its gold documents, its rank over time, what it retrieved then and now, and
the documents that displaced its gold document)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from pages import _ui as ui
from pipeline import charts, contract, views
from pipeline.views import questions as questions_views

ui.page_frame()
st.title("Questions")
config, metrics, runs, alerts, gold = ui.config(), ui.metrics(), ui.runs(), ui.alerts(), ui.gold()

pipelines = views.values_of(metrics, contract.PIPELINE)
ks = sorted(int(k) for k in metrics[contract.K].unique())
names = [m for m in views.RETRIEVAL_METRICS if m in set(metrics[contract.METRIC])]
days = views.run_dates(runs)
c1, c2, c3, c4, c5 = st.columns(5)
asked = st.query_params  # the Overview's incident link names a pipeline and a "Then"
pipeline = c1.selectbox("Pipeline", pipelines, key="questions_pipeline",
                        index=pipelines.index(asked["pipeline"]) if asked.get("pipeline") in pipelines else 0)
k = c2.selectbox("Cutoff k", ks, index=ks.index(views.default_k(ks)), key="questions_k")
metric = c3.selectbox("Metric", names, index=views.first_metric(names),
                      format_func=views.metric_label, key="questions_metric")
then_default = questions_views.default_then(days, alerts, runs, config.alerts.window)
then_default = next((d for d in days if str(d) == asked.get("then")), then_default)
then = c4.selectbox("Then", days, index=days.index(then_default), key="questions_then",
                    help="Defaults to the last run before the latest incident started.")
now = c5.selectbox("Now", days, index=len(days) - 1, key="questions_now")
label = views.metric_label(metric, k)

matrix = ui.per_question_view(questions_views.question_heatmap, pipeline, k, metric, then, now)
st.plotly_chart(charts.heatmap_figure(matrix, label, pipeline), key="questions_chart")

st.subheader(f"Questions that regressed from {then} to {now}")
texts = {qid: q.question for qid, q in gold.items()}
regressed = ui.per_question_view(questions_views.regressed_questions, pipeline, k, metric, then, now, texts)
if regressed.empty:
    st.success(f"No question's {label} fell and no first relevant document moved down.",
               icon=":material/check_circle:")
else:
    ui.table(regressed, "questions_regressed", column_config={
        "question_id": st.column_config.TextColumn("question", width=70, pinned=True), "question": st.column_config.TextColumn("text", width="large"),
        "then": st.column_config.NumberColumn(f"{label} then", format="%.3f"),
        "now": st.column_config.NumberColumn(f"{label} now", format="%.3f"),
        "change": st.column_config.NumberColumn("change", format="%+.3f"),
        "rank_then": st.column_config.NumberColumn("rank then", help="first relevant rank; 0: not retrieved",
                                                   format="%d"),
        "rank_now": st.column_config.NumberColumn("rank now", help="first relevant rank; 0: not retrieved",
                                                  format="%d")})

st.subheader("Drill-down")
regressed_ids = list(regressed[contract.QUESTION_ID])
order = regressed_ids + [q for q in matrix.index if q not in set(regressed_ids)]
question = st.selectbox("Question", order, key="questions_question",
                        format_func=lambda q: f"{q}: {texts[q]}" if q in texts else q)
if question is None:
    st.stop()
gold_ids = list(gold[question].relevant_ids) if question in gold else []
rows = ui.per_question_view(questions_views.question_rows, question)
before = questions_views.retrieved(rows, question, pipeline, k, then)
after = questions_views.retrieved(rows, question, pipeline, k, now)
displaced = questions_views.displacing(rows, question, pipeline, k, then, now, gold_ids)
info = ui.documents_info(gold_ids + before + after)

text = texts.get(question, "(not in the gold set)")
st.markdown(f"**{views.escape_markdown(question)}**: {views.escape_markdown(text)}")
st.caption("Gold documents (relevant to the question)")
ui.document_table(questions_views.document_table(gold_ids, info, gold_ids).drop(columns="rank"), key="questions_gold")

st.caption(f"Documents that overtook a gold document from {then} to {now} in the top {k} of {pipeline}: ranked above "
           "it now, or in the top k after it left, and below it (or absent) then. The feed they came from and the date "
           "they were first ingested say where they came from.")
table = questions_views.document_table(list(displaced["doc_id"]), info, gold_ids).drop(columns="gold")
table = table.drop(columns="link").assign(  # the link is in the top-k tables below: this one fits the page
    rank_then=["–" if r is pd.NA else str(r) for r in displaced["rank_then"]], displaced=displaced["displaced"].to_numpy())
if table.empty:
    st.success(f"No document overtook a gold document of {question} in the top {k}.", icon=":material/check_circle:")
else:
    ui.document_table(table, key="questions_displacing", extra={
        "rank_then": st.column_config.TextColumn("rank then", help="–: not in the top k then", width=70),
        "displaced": st.column_config.TextColumn("gold overtaken", width=110)})

st.plotly_chart(charts.rank_figure(questions_views.rank_history(rows, question), question), key="questions_rank_chart")
for day, ids, key in ((then, before, "questions_then_docs"), (now, after, "questions_now_docs")):
    st.caption(f"Top {k} of {pipeline} on {day}")
    ui.document_table(questions_views.document_table(ids, info, gold_ids), key=key)
