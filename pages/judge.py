"""Judge: the queue of pooled documents, one pair at a time: the question and its gold document's text beside the
candidate's, their shared word runs highlighted, grade buttons (keys 0, 1, 2), skip (key s) and progress. Grades go
to judgments.jsonl through pipeline/judging/review.py, the same as `driftwatch judge`."""

from __future__ import annotations

import streamlit as st

from pages import _ui as ui
from pipeline import charts, contract, views
from pipeline.errors import DriftwatchError
from pipeline.judging import questions, review
from pipeline.views import judge as judge_views

REMEMBERED = "judge_name_remembered"  # session state: the name, kept while other pages are open
SKIPPED = "judge_skipped"  # session state: the pairs this session skipped, in the order skipped
PROBLEM = "judge_problem"  # session state: a grade that could not be recorded, said on the next run


def grade(pair: tuple[str, str], value: int) -> None:
    try:
        review.record(ui.data_dir(), *pair, value, st.session_state.get(judge_views.NAME_INPUT, ""))
    except DriftwatchError as exc:
        st.session_state[PROBLEM] = str(exc)


def review_question(question_id: str, accept: bool) -> None:
    try:
        questions.review(ui.data_dir(), question_id, st.session_state.get(judge_views.NAME_INPUT, ""),
                         accept=accept)
    except DriftwatchError as exc:
        st.session_state[PROBLEM] = str(exc)


def skip(pair: tuple[str, str]) -> None:
    st.session_state[SKIPPED] = review.skip(st.session_state.get(SKIPPED, []), pair)


ui.page_frame()
st.title("Judge")
directory = ui.data_dir()
state = review.load(directory, ui.gold())
if judge_views.NAME_INPUT not in st.session_state and REMEMBERED in st.session_state:
    st.session_state[judge_views.NAME_INPUT] = st.session_state[REMEMBERED]
name = st.text_input("Your name", key=judge_views.NAME_INPUT, max_chars=200,
                     help="recorded with each grade in judgments.jsonl").strip()
st.session_state[REMEMBERED] = name
done = state.progress
with st.container(key="judge_progress"):
    st.progress(done.fraction, text=done.describe())
    agreed = judge_views.prelabel_line(state.judgments)
    if agreed:
        st.caption(agreed)
if PROBLEM in st.session_state:
    ui.error(st.session_state.pop(PROBLEM))

pairs = review.order(state.queue, st.session_state.get(SKIPPED, []))
if not pairs:
    st.info("Nothing to judge: every pooled document has a human judgment on its current text. The daily job pools "
            "the unjudged documents of each run's top k (pool.csv); `driftwatch judge --import FILE` adds judgments "
            "made elsewhere.", icon=":material/task_alt:")
else:
    shown = review.item(state, *pairs[0])
    pair = (shown.question_id, shown.doc_id)
    with st.container(key="judge_item"):
        st.subheader(views.escape_markdown(f"{shown.question_id}: {shown.question}"))
        st.caption(views.escape_markdown(f"{judge_views.reasons_line(shown.reasons)} · rank {shown.rank} of "
                                         f"{shown.pipeline or '-'} on {shown.run_date}"))
        if shown.detail:
            st.warning(views.escape_markdown(f"Differing sentences: {shown.detail}"), icon=":material/difference:")
        left, right = st.columns(2)
        with left.container(key="judge_gold", border=True):
            st.caption(views.escape_markdown(shown.gold_label))
            st.markdown(judge_views.highlighted(shown.overlap.gold))
        with right.container(key="judge_candidate", border=True):
            st.caption(views.escape_markdown(f"candidate {shown.doc_id} ({shown.overlap.shared_words} of "
                                             f"{shown.overlap.candidate_words} words in shared runs, highlighted)"))
            st.markdown(judge_views.highlighted(shown.overlap.candidate))
        if shown.suggestion is not None:
            st.caption(views.escape_markdown(
                f"LLM suggestion (not a judgment): {shown.suggestion.grade} by {shown.suggestion.judge}"
                + ("" if shown.suggestion_current else ", on an earlier text")))
        if shown.earlier is not None:
            st.caption(views.escape_markdown(f"Judged {shown.earlier.grade} by {shown.earlier.judge} on an earlier "
                                             "text of this document"))
    if not name:
        st.info("Enter your name above to grade.", icon=":material/badge:")
    buttons = st.columns(len(judge_views.GRADE_BUTTONS) + 1)
    for column, (value, key) in zip(buttons, judge_views.GRADE_BUTTONS.items()):
        column.button(f"{value} · {review.GRADE_NAMES[value]}", key=key, on_click=grade, args=(pair, value),
                      disabled=not name, width="stretch", shortcut=judge_views.SHORTCUTS[key])
    buttons[-1].button("Skip", key=judge_views.SKIP_BUTTON, on_click=skip, args=(pair,), width="stretch",
                       shortcut=judge_views.SHORTCUTS[judge_views.SKIP_BUTTON])
    st.caption("Keys: 0, 1 and 2 grade, s skips. A skip is this session's only: the pair comes back last.")

try:
    drafts = judge_views.drafts_to_review(directory)
except DriftwatchError as exc:
    drafts = []
    ui.error(str(exc))
if drafts:
    with st.container(key="judge_questions"):
        st.subheader("Drafted questions for new documents")
        st.caption(f"{len(drafts)} drafted by `driftwatch suggest-questions`, to review: an accepted question joins "
                   "the maintained qrels (added_per_question.csv) from the next run.")
        for draft in drafts[:judge_views.DRAFTS_SHOWN]:
            text, accept_column, reject_column = st.columns([6, 1, 1])
            text.markdown(views.escape_markdown(f"{draft.question}"))
            text.caption(views.escape_markdown(judge_views.draft_caption(draft)))
            accept_column.button("Accept", key=f"judge_accept_{draft.id}", on_click=review_question,
                                 args=(draft.id, True), disabled=not name)
            reject_column.button("Reject", key=f"judge_reject_{draft.id}", on_click=review_question,
                                 args=(draft.id, False), disabled=not name)

st.plotly_chart(charts.pool_figure(judge_views.pool_counts(state.pool), contract.POOL_REASONS), key="judge_chart")
