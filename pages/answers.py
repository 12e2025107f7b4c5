"""Answers: the retrieval and generation layers side by side over time, which layer failed per question, one
answer with its claims and the context it was judged against, and how far the judge and the heuristics agree
with the human labels."""

from __future__ import annotations

import streamlit as st

from pages import _ui as ui
from pipeline import answers, charts, contract, views
from pipeline.views import answers as answers_views

VERDICT_BOXES = {"supported": (st.success, ":material/check_circle:"),
                 "contradicted": (st.error, ":material/cancel:"),
                 "undetermined": (st.warning, ":material/help:")}
SHARE = "share of answers or questions"
SCALE = [-0.02, 1.02]

ui.page_frame()
st.title("Answers")
config, metrics, gold = ui.config(), ui.metrics(), ui.gold()
generation, per_answer = ui.read(contract.GENERATION), ui.read(contract.PER_ANSWER)
agreement = ui.read(contract.AGREEMENT)
g = config.generation
days = answers_views.answer_dates(per_answer)
answered = answers_views.answer_pipelines(per_answer)
retrievers = views.values_of(metrics, contract.PIPELINE)
ks = sorted(int(k) for k in metrics[contract.K].unique()) or [g.k]

c1, c2, c3 = st.columns(3)
shown = c1.selectbox("Answers of", answered or ["–"], key="answers_pipeline",
                     help=f"the pipeline whose top k was the context; `{answers.LOGGED}`: your system's logged answers "
                          "(generation.mode = \"logged\"), not a retriever of this monitor's")
default = next((p for p in (g.pipeline, shown, "hybrid") if p in retrievers), retrievers[0] if retrievers else None)
retriever = c2.selectbox("Retrieval metric of", retrievers or ["–"], key="answers_retriever",
                         index=retrievers.index(default) if default in retrievers else 0)
k = c3.selectbox("Cutoff k", ks, index=ks.index(g.k) if g.k in ks else ks.index(views.default_k(ks)),
                 key="answers_k")
shown = shown if answered else None
retriever = retriever if retrievers else None

left, right = st.columns(2)  # on one 0-1 scale, so that the two layers compare at a glance
retrieval = charts.lines_figure(answers_views.retrieval_layer(metrics, per_answer, retriever, k, shown),
                                answers_views.SERIES, "Retrieval layer: did the right document reach the prompt?",
                                SHARE)
generated = charts.lines_figure(answers_views.generation_layer(generation, shown), answers_views.SERIES,
                                "Generation layer: is the answer faithful and relevant?", "score or share")
left.plotly_chart(retrieval.update_yaxes(range=SCALE), key="answers_retrieval_chart")
right.plotly_chart(generated.update_yaxes(range=SCALE), key="answers_generation_chart")
if not days:
    st.info(views.escape_markdown(
        f"No answers in {ui.data_dir()} yet. Turn the answer layer on in the config's [generation] section: "
        'mode = "logged" with logged = "answers.jsonl" (your RAG system\'s answers: question_id, answer, contexts '
        'with id and text, optional run_date), or mode = "generate" with base_url and model (an OpenAI-compatible '
        "endpoint) to answer every gold question from the day's top k; labels = \"labels.csv\" adds the human "
        "labels the judge and the heuristics are checked against. The next run of the daily job fills this page; "
        "the bundled demo (python -m pipeline demo) has answers and labels."), icon=":material/info:")
    st.stop()

st.caption("Faithfulness and answer relevance by the LLM judge appear only when a judge ran; the heuristics need "
           "no endpoint. Shares of answers count only the answers where they are defined: the run's table below "
           "gives n and how many were undetermined.")
day = st.selectbox("Run date", days, index=len(days) - 1, key="answers_date")
with st.expander(f"The run's generation.csv rows ({shown}, {day})", key="answers_summary_box"):
    ui.table(answers_views.run_summary(generation, day, shown), "answers_summary", column_config={
        "value": st.column_config.NumberColumn("value", format="%.3f"),
        "undetermined": st.column_config.NumberColumn("undetermined", help="records without a value")})

st.subheader("Which layer failed, per question")
texts = {qid: q.question for qid, q in gold.items()}
attributed = answers_views.attribution(per_answer, day, shown, texts)
for column, (name, count) in zip(st.columns(4), answers_views.layer_counts(attributed).items()):
    column.metric(name, count, border=True)
hint_ok, hint_why = answers.heuristic_trust(agreement)
if not hint_ok:  # a signal the tool itself distrusts: shown here as a hint, never a banner condition
    with st.container(key="answers_hint"):
        st.info(views.escape_markdown(f"K-precision and the heuristics' verdicts are hints here: {hint_why}. "
                                      "They are not alert conditions until their kappa reaches the gate."),
                icon=":material/lightbulb:")
st.caption("Retrieval miss: no gold document in the context. Generation miss: a gold document was there and the "
           "answer is unfaithful, wrong or refusing (by the judge when it ran, else by the heuristics). The "
           "unsupported column lists the numbers, dates and ids of the answer that the context does not contain.")
ui.table(attributed, "answers_attribution", column_config={
    "question_id": st.column_config.TextColumn("question", width=70, pinned=True),
    "question": st.column_config.TextColumn("text", width="large"),
    "gold_in_context": st.column_config.NumberColumn("gold in context", format="%d"),
    "faithfulness": st.column_config.NumberColumn("faithfulness", format="%.3f"),
    "faithfulness_state": st.column_config.TextColumn("judge's state"),
    "k_precision": st.column_config.NumberColumn("K-precision" if hint_ok else "K-precision (hint)", format="%.3f")})

st.subheader("One answer and its context")
order = list(attributed[contract.QUESTION_ID])
question = st.selectbox("Question", order, key="answers_question",
                        format_func=lambda q: f"{q}: {texts[q]}" if q in texts else q)
records = {r["question_id"]: r for r in ui.answer_records(day) if r.get("pipeline") == shown}
if question not in records:
    st.info(views.escape_markdown(f"{contract.ANSWERS_DIR}/{day}.jsonl has no record of {question}: re-run the daily "
                                  f"job for {day}."), icon=":material/info:")
    st.stop()
view = answers_views.answer_view(records[question], gold[question].relevant_ids if question in gold else (),
                                 ui.labels(), day)
st.markdown(f"**{views.escape_markdown(question)}**: {views.escape_markdown(view.question)}")
st.caption("Answer (shown as text)")
st.code(view.answer, language=None, wrap_lines=True)
if view.claims_by:
    st.caption("Claims by the judge, worst verdict first" if view.claims_by == "judge" else
               "Claims as a human labelled them (the judge did not run on this answer)")
    for claim in view.claims:
        box, icon = VERDICT_BOXES.get(claim.verdict, VERDICT_BOXES["undetermined"])
        box(views.escape_markdown(f"{claim.verdict}: {claim.claim}" + (f" ({claim.reason})" if claim.reason else "")),
            icon=icon)
else:
    st.caption("No claims: the LLM judge did not run (the heuristics need no endpoint) and no human labelled this "
               "answer's claims.")
if view.unsupported:
    st.warning(views.escape_markdown("Numbers, dates or ids absent from the context: " + ", ".join(view.unsupported)),
               icon=":material/warning:")
if view.citations_invalid:
    st.warning(views.escape_markdown("Cited ids that are not in the context: " + ", ".join(view.citations_invalid)),
               icon=":material/link_off:")
if view.relevance_reason:
    st.caption(views.escape_markdown(f"Judge on relevance: {view.relevance_reason}"))
if view.reverse_questions:
    st.caption(views.escape_markdown("Questions the judge wrote for this answer: "
                                     + " / ".join(view.reverse_questions)))
for metric, label in view.human.items():
    st.caption(views.escape_markdown(f"Human label, {metric}: {label}"))
ui.table(answers_views.scores_table(view), "answers_scores")
st.caption("The context it was given (gold: a relevant document of the question; cited: named by the answer)")
for row in view.contexts.itertuples(index=False):
    marks = "".join((" · gold" if row.gold else "", " · cited" if row.cited else ""))
    with st.expander(views.escape_markdown(f"{row.rank}. {row.doc_id}{marks}"), expanded=bool(row.gold),
                     key=f"answers_context_{row.rank}"):
        st.code(row.text, language=None, wrap_lines=True)

st.subheader("Judge and heuristics against the human labels")
table = answers_views.agreement_table(agreement, day)
if table.empty:
    st.info("No human labels to agree with: set generation.labels to a CSV of question_id, run_date, metric, claim, "
            "label, note. Until then no judged metric can fire an alert or fail the gate.", icon=":material/info:")
    st.stop()
ui.table(table, "answers_agreement", column_config={
    "run_date": st.column_config.DateColumn("labels of", format="YYYY-MM-DD"),
    **{c: st.column_config.NumberColumn(c, format="%.3f") for c in ("agreement", "kappa", "tpr", "fpr")},
    "trusted": st.column_config.CheckboxColumn("trusted", help=f"kappa >= generation.min_kappa ({g.min_kappa:g})")})
for note in answers_views.trust_notes(table, g.min_kappa):
    st.warning(views.escape_markdown(note), icon=":material/gpp_maybe:")
names = [f"{r.metric} · {r.judge} · {r.level}" for r in table.itertuples(index=False)]
picked = st.selectbox("Confusion matrix of", range(len(names)), format_func=names.__getitem__, key="answers_confusion")
ui.table(answers_views.confusion(table.iloc[picked]), "answers_confusion_matrix")
