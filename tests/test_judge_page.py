"""The Judge page through AppTest on the judging store (two real runs of the news slice and a pool of every reason):
grading through the buttons appends to the ledger on the text shown and moves the progress; skip moves on without
writing; the judge's name is remembered in the session; the texts are shown as literal Markdown, overlap marked."""

from __future__ import annotations

from pipeline import contract
from pipeline.judging import ledger
from pipeline.views import judge as judge_views
from tests.test_app import fresh_caches, open_app, rerun, visit  # noqa: F401 (fixtures)

PAGE = "pages/judge.py"


def progress_text(at) -> str:
    return at.get_by_key("judge_progress").get("progress")[0].proto.text


def shown_pair(at) -> str:
    return at.get_by_key("judge_candidate").caption[0].value


def test_grading_by_the_buttons_appends_to_the_ledger_and_moves_the_progress(judge_store, open_app):  # noqa: F811
    at = visit(open_app(judge_store.data_dir, config=judge_store.config), PAGE)
    first, second, third, _ = judge_store.queued
    assert progress_text(at) == "0 of 4 judged, 4 to go"
    assert at.button(key="judge_grade_2").disabled  # no name yet
    assert f"candidate {first[1]} " in shown_pair(at).replace("\\", "")
    at.text_input(key=judge_views.NAME_INPUT).input("ana")
    rerun(at)
    assert not at.button(key="judge_grade_2").disabled
    assert [b.proto.shortcut for b in (at.button(key=k) for k in judge_views.SHORTCUTS)] == ["0", "1", "2", "s"]
    at.button(key="judge_grade_2").click()
    rerun(at)
    got = ledger.read_judgments(judge_store.data_dir)
    assert [(j.question_id, j.doc_id, j.grade, j.judge) for j in got] == [(*first, 2, "ana")]
    assert progress_text(at) == "1 of 4 judged, 3 to go"
    assert f"candidate {second[1]} " in shown_pair(at).replace("\\", "")

    at.button(key="judge_skip").click()  # the changed gold document: skipped, nothing written
    rerun(at)
    assert len(ledger.read_judgments(judge_store.data_dir)) == 1
    assert f"candidate {third[1]} " in shown_pair(at).replace("\\", "")
    at.button(key="judge_grade_0").click()
    rerun(at)
    assert [(j.question_id, j.doc_id, j.grade) for j in ledger.read_judgments(judge_store.data_dir)][1:] == [
        (*third, 0)]
    assert progress_text(at) == "2 of 4 judged, 2 to go"

    visit(at, "pages/overview.py")  # the name outlives a visit to another page
    at = visit(at, PAGE)
    assert at.text_input(key=judge_views.NAME_INPUT).value == "ana"
    assert not at.button(key="judge_grade_1").disabled


def test_the_texts_are_literal_markdown_with_the_shared_runs_highlighted(judge_store, open_app):  # noqa: F811
    at = visit(open_app(judge_store.data_dir, config=judge_store.config), PAGE)
    gold, candidate = (at.get_by_key(k).markdown[0] for k in ("judge_gold", "judge_candidate"))
    assert f":{judge_views.HIGHLIGHT}[" in gold.value and f":{judge_views.HIGHLIGHT}[" in candidate.value
    assert not gold.proto.allow_html and not candidate.proto.allow_html
    shadow = at.get_by_key("judge_item")
    assert any(judge_store.shadow_detail.split()[0] in w.value for w in shadow.warning)  # the differing sentences
    assert at.get_by_key("judge_chart")


def test_an_empty_queue_says_so_and_still_draws_the_pool(judge_store, open_app):  # noqa: F811
    for pair in judge_store.queued:
        ledger.append_judgments(judge_store.data_dir, [ledger.judgment_from(
            {"question_id": pair[0], "doc_id": pair[1], "grade": 1, "judge": "bo"}, "test",
            required=ledger.IMPORT_KEYS, content_hash=_queued_hash(judge_store, pair))])
    at = visit(open_app(judge_store.data_dir, config=judge_store.config), PAGE)
    assert progress_text(at) == "4 of 4 judged, 0 to go"
    assert any(i.value.startswith("Nothing to judge") for i in at.info)
    assert at.get_by_key("judge_chart")


def _queued_hash(store, pair) -> str:
    from pipeline.judging import review

    rows = review.read_pool(store.data_dir)
    rows = rows[(rows[contract.QUESTION_ID] == pair[0]) & (rows[contract.DOC_ID] == pair[1])]
    return rows[contract.CONTENT_HASH].iloc[-1]
