"""Questions: a question x date heatmap sorted by regression, the questions that regressed between two dates,
and a drill-down into one question (its gold documents, its rank over time, what it retrieved then and now, and
the documents that displaced its gold document)."""

from __future__ import annotations

import streamlit as st

from pages import _ui as ui
from pipeline import charts, views
from pipeline.views import questions as questions_views

ui.page_frame()
st.title("Questions")
config, metrics, runs, gold = ui.config(), ui.metrics(), ui.runs(), ui.gold()

pipelines = views.values_of(metrics, views.PIPELINE)
ks = sorted(int(k) for k in metrics[views.K].unique())
names = [m for m in views.METRIC_LABELS if m in set(metrics[views.METRIC])]
days = views.run_dates(runs)
c1, c2, c3, c4, c5 = st.columns(5)
pipeline = c1.selectbox("Pipeline", pipelines, key="questions_pipeline")
k = c2.selectbox("Cutoff k", ks, index=ks.index(views.default_k(ks)), key="questions_k")
metric = c3.selectbox("Metric", names, index=names.index("recall") if "recall" in names else 0,
                      format_func=views.metric_label, key="questions_metric")
then = c4.selectbox("Then", days, index=max(0, len(days) - 1 - config.alerts.window), key="questions_then")
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
        "question_id": "question", "question": st.column_config.TextColumn("text", width="large"),
        "then": st.column_config.NumberColumn(f"{label} then", format="%.3f"),
        "now": st.column_config.NumberColumn(f"{label} now", format="%.3f"),
        "change": st.column_config.NumberColumn("change", format="%+.3f"),
        "rank_then": st.column_config.NumberColumn("first relevant rank then", help="0: not retrieved"),
        "rank_now": st.column_config.NumberColumn("first relevant rank now", help="0: not retrieved")})

st.subheader("Drill-down")
order = list(regressed[views.QUESTION_ID]) + [q for q in matrix.index if q not in set(regressed[views.QUESTION_ID])]
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
st.plotly_chart(charts.rank_figure(questions_views.rank_history(rows, question), question), key="questions_rank_chart")

left, right = st.columns(2)
for column, day, ids, key in ((left, then, before, "questions_then_docs"), (right, now, after, "questions_now_docs")):
    with column:
        st.caption(f"Top {k} of {pipeline} on {day}")
        ui.document_table(questions_views.document_table(ids, info, gold_ids), key=key)

st.caption(f"Documents ranked above the first gold document on {now} (new: not above it on {then}, so they "
           "displaced it), with the feed they came from and the date they were first ingested")
table = questions_views.document_table(list(displaced["doc_id"]), info, gold_ids).drop(columns="gold")
table["new"] = displaced["new_above"].to_numpy()
ui.document_table(table, key="questions_displacing",
                  extra={"new": st.column_config.CheckboxColumn("new above gold")})
