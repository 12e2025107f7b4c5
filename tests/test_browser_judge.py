"""The Judge page grades by keyboard in a real browser: `streamlit run app.py` on the judging store (two real runs of
the news slice and a pool of every reason), Debian's Chromium driven by Playwright; key 2 records a grade of 2 in
judgments.jsonl on the pair shown, key s skips to the next pair and writes nothing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, expect

from pipeline.config import ENV_CONFIG
from pipeline.judging import ledger
from pipeline.views import judge as judge_views
from tests.browser_support import DESKTOP, EXPECT_TIMEOUT, chromium, open_page, serving, wait_until_idle


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


def test_the_judge_page_grades_and_skips_by_keyboard(browser, judge_store, tmp_path):
    first, second, third, _ = judge_store.queued
    with serving(judge_store.data_dir, tmp_path, env={ENV_CONFIG: str(judge_store.config)}) as server:
        tab = open_page(browser, server, "judge", DESKTOP)
        try:
            progress = tab.locator(".st-key-judge_progress")
            candidate = tab.locator(".st-key-judge_candidate")
            expect(progress).to_contain_text("0 of 4 judged, 4 to go")
            expect(candidate).to_contain_text(f"candidate {first[1]} ")
            tab.keyboard.press("2")  # no name yet: the grade buttons are disabled, the key does nothing
            name = tab.locator(f".st-key-{judge_views.NAME_INPUT} input")
            name.fill("ana")
            name.press("Enter")
            wait_until_idle(tab)
            expect(tab.locator(".st-key-judge_grade_2 button")).to_be_enabled(timeout=EXPECT_TIMEOUT)
            tab.locator("h1").first.click()  # out of the name box: keys typed there are the name's
            assert ledger.read_judgments(judge_store.data_dir) == []

            tab.keyboard.press("2")
            expect(progress).to_contain_text("1 of 4 judged, 3 to go", timeout=EXPECT_TIMEOUT)
            wait_until_idle(tab)  # the run the key started is under way: the progress above is its own
            expect(candidate).to_contain_text(f"candidate {second[1]} ")
            got = ledger.read_judgments(judge_store.data_dir)
            assert [(j.question_id, j.doc_id, j.grade, j.judge) for j in got] == [(*first, 2, "ana")]

            tab.keyboard.press("s")
            # during the rerun the page may hold the element it replaces too: wait for the new one, then the end
            expect(candidate.filter(has_text=f"candidate {third[1]} ")).to_have_count(1, timeout=EXPECT_TIMEOUT)
            wait_until_idle(tab)
            expect(candidate).to_contain_text(f"candidate {third[1]} ")
            expect(progress).to_contain_text("1 of 4 judged, 3 to go")
            assert len(ledger.read_judgments(judge_store.data_dir)) == 1  # a skip writes nothing

            name.click()  # keys typed into the name box are the name's: neither a grade nor a skip
            name.press("End")
            tab.keyboard.type("2s")
            expect(name).to_have_value("ana2s")
            tab.locator("h1").first.click()
            wait_until_idle(tab)
            expect(candidate).to_contain_text(f"candidate {third[1]} ")
            assert len(ledger.read_judgments(judge_store.data_dir)) == 1
        except Exception:
            tab.screenshot(path=str(tmp_path / "judge.png"), full_page=True)
            print(f"screenshot: {tmp_path / 'judge.png'}\n--- streamlit log ---\n{server.log_tail()}")
            raise
        finally:
            tab.context.close()
