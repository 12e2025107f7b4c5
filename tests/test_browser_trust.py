"""Issue 27 in Chromium, at desktop size and at 390 x 844, on a copy of the month-long demo history: the header says
how old the history is (and warns on a stale directory), every page counts the latest run's open conditions in
the same words, an acknowledgement made on the Alerts page is seen on the Overview and the weekly review, the
incident's explanation stands above the cards, and on a phone the banner folds to one line above its expander."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from pipeline import contract, notify, store
from pipeline.demo import DEMO_CONFIG
from pipeline.views.alerts import count_alerts
from pipeline.views.drift import VERDICT_COLUMNS
from tests.browser_support import DESKTOP, EXPECT_TIMEOUT, PHONE, Server, chromium, open_page, serving, wait_until_idle

VIEWPORTS = {"desktop": DESKTOP, "phone": PHONE}
ACKNOWLEDGER = "Ana Tester"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


@pytest.fixture(scope="module")
def history(demo_history, tmp_path_factory) -> Path:
    """A copy of the demo history: the acknowledgement test writes its mutes.json."""
    copy = tmp_path_factory.mktemp("trust") / "store"
    shutil.copytree(demo_history, copy)
    return copy


@pytest.fixture(scope="module")
def server(history, tmp_path_factory) -> Iterator[Server]:
    with serving(history, tmp_path_factory.mktemp("trust-server")) as running:
        yield running


@pytest.fixture(scope="module")
def stale_server(demo_history, tmp_path_factory) -> Iterator[Server]:
    """The demo's runs as a live monitor's (its demo.toml removed, so the checkout's monitor.toml configures it):
    the last run weeks before today's date, the history of a daily job that stopped."""
    copy = tmp_path_factory.mktemp("stale") / "store"
    shutil.copytree(demo_history, copy)
    (copy / DEMO_CONFIG).unlink()
    with serving(copy, tmp_path_factory.mktemp("stale-server")) as running:
        yield running


def latest_day(data_dir: Path) -> str:
    return f"{store.read_runs(data_dir)[contract.RUN_DATE].max():%Y-%m-%d}"


@pytest.mark.parametrize("size", VIEWPORTS)
def test_a_stale_directory_says_when_its_last_run_was_on_every_page(browser, stale_server, server, size):
    last = latest_day(stale_server.data_dir)
    for path in ("", "alerts", "drift"):
        tab = open_page(browser, stale_server, path, VIEWPORTS[size])
        try:
            header = tab.locator(".st-key-freshness")
            expect(header).to_contain_text(f"No run since {last} (expected daily,", timeout=EXPECT_TIMEOUT)
            expect(header.locator('[data-testid="stAlertContentWarning"]')).to_be_visible()
        finally:
            tab.context.close()
    tab = open_page(browser, server, "", VIEWPORTS[size])  # the demo itself is a recorded history
    try:
        expect(tab.locator(".st-key-freshness")).to_contain_text(f"Recorded history (the demo): last run {last}")
        expect(tab.locator('.st-key-freshness [data-testid="stAlertContentWarning"]')).to_have_count(0)
    finally:
        tab.context.close()


@pytest.mark.parametrize("size", VIEWPORTS)
def test_every_page_counts_the_open_conditions_in_the_same_words(browser, server, size):
    data_dir = server.data_dir
    counts = count_alerts(store.read(data_dir, contract.ALERTS), store.read_runs(data_dir),
                          notify.read_silences(data_dir))
    assert counts.conditions  # the demo ends with open conditions
    for path, key in (("", "overview_counts"), ("alerts", "alerts_counts"), ("weekly", "weekly_counts")):
        tab = open_page(browser, server, path, VIEWPORTS[size])
        try:
            expect(tab.locator(".st-key-alert_banner_line")).to_contain_text(counts.open_phrase)
            expect(tab.locator(f".st-key-{key}")).to_contain_text(counts.open_phrase)
            expect(tab.locator(".st-key-alert_banner_details")).to_contain_text(
                f"Details: the {counts.open_rows} alert rows of the {len(counts.conditions)} open conditions")
        finally:
            tab.context.close()


@pytest.mark.parametrize("size", VIEWPORTS)
def test_the_incidents_explanation_stands_above_the_cards_on_the_first_screen(browser, server, size):
    tab = open_page(browser, server, "", VIEWPORTS[size])
    try:
        incident = tab.locator(".st-key-overview_incident")
        expect(incident).to_contain_text("since 2026-11-13")
        expect(incident.locator("a", has_text="runbook")).not_to_have_count(0)  # each open condition's next step
        top = incident.bounding_box()["y"]
        cards = tab.locator('[class*="st-key-overview_verdict_"]').first.bounding_box()["y"]
        print(f"{size}: the incident's explanation at {top:.0f} px, the first verdict card at {cards:.0f} px")
        assert top < cards and top < VIEWPORTS[size]["height"]
    finally:
        tab.context.close()


def test_on_a_phone_the_banner_folds_to_one_line_with_an_expander(browser, server, tmp_path):
    tab = open_page(browser, server, "", PHONE)
    try:
        line = tab.locator(".st-key-alert_banner_line")
        expect(line).to_be_visible()
        expect(tab.locator(".st-key-alert_banner_alert")).to_be_hidden()
        expect(tab.locator(".st-key-alert_banner_warning")).to_be_hidden()
        details = tab.locator(".st-key-alert_banner_details")
        expect(details).to_be_visible()
        banner = tab.locator(".st-key-alert_banner").bounding_box()["height"]
        print(f"phone: the folded banner is {banner:.0f} px of the first screen's {PHONE['height']} px")
        assert banner < 0.2 * PHONE["height"]
        tab.screenshot(path=str(tmp_path / "phone-banner.png"))
        details.locator("summary").click()  # the conditions, their next steps and rows behind the expander
        expect(details.locator("a", has_text="runbook").first).to_be_visible()
    finally:
        tab.context.close()
    tab = open_page(browser, server, "", DESKTOP)
    try:  # at desktop size the conditions are listed, the one-line fold is not shown
        expect(tab.locator(".st-key-alert_banner_line")).to_be_hidden()
        expect(tab.locator(".st-key-alert_banner_alert li").first).to_be_visible()
    finally:
        tab.context.close()


def test_an_acknowledgement_made_on_the_alerts_page_is_seen_on_the_overview_and_the_weekly_review(browser, server):
    tab = open_page(browser, server, "alerts", DESKTOP)
    try:
        tab.locator(".st-key-alerts_silence summary").click()
        tab.locator(".st-key-alerts_silence_incident").click()
        option = tab.locator('[role="option"]', has_text="(ongoing)").first
        chosen = option.inner_text()
        option.click()
        wait_until_idle(tab)
        for key, text in (("alerts_silence_by", ACKNOWLEDGER), ("alerts_silence_note", "looking into it")):
            field = tab.locator(f".st-key-{key} input")
            field.fill(text)
            field.press("Enter")
            wait_until_idle(tab)
        tab.locator(".st-key-alerts_silence_save button").click()
        wait_until_idle(tab)
        expect(tab.locator(".st-key-alerts_counts")).to_contain_text(f"acknowledged by {ACKNOWLEDGER} at",
                                                                     timeout=EXPECT_TIMEOUT)
    finally:
        tab.context.close()
    saved, = json.loads((server.data_dir / notify.MUTES_FILE).read_text(encoding="utf-8"))
    assert saved["by"] == ACKNOWLEDGER and chosen.startswith(f"{saved['rule']} on ")
    rule_on = chosen.split(",")[0].rsplit(" ", 1)[0]  # "slow_drift on dense"
    for size, viewport in VIEWPORTS.items():
        tab = open_page(browser, server, "", viewport)
        try:
            expect(tab.locator(".st-key-alert_banner_line")).to_contain_text("1 acknowledged")
            if size == "desktop":  # the neutral box, under the red and orange ones
                box = tab.locator(".st-key-alert_banner_acknowledged")
                expect(box).to_contain_text(rule_on)
                expect(box).to_contain_text(f"acknowledged by {ACKNOWLEDGER} at")
                expect(box).to_contain_text("until the condition ends")
                paging = tab.locator(".st-key-alert_banner_alert li, .st-key-alert_banner_warning li")
                assert not any(text.startswith(rule_on) for text in paging.all_inner_texts())
        finally:
            tab.context.close()
    tab = open_page(browser, server, "weekly", DESKTOP)
    try:
        expect(tab.locator(".st-key-weekly_counts")).to_contain_text(f"acknowledged by {ACKNOWLEDGER} at")
        expect(tab.locator(".st-key-weekly_summary")).to_contain_text(f"acknowledged by {ACKNOWLEDGER} at")
    finally:
        tab.context.close()


def test_on_a_phone_the_drift_tables_verdict_is_on_screen_without_scrolling_sideways(browser, server):
    tab = open_page(browser, server, "drift", PHONE)
    try:
        grid = tab.locator('.st-key-drift_verdicts [data-testid="stDataFrame"]')
        expect(grid).to_be_visible()
        box = grid.bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"]
        assert tab.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"]
        # the grid draws on a canvas; its accessible copy holds the columns drawn at the grid's scroll position
        drawn = tab.locator('.st-key-drift_verdicts [role="columnheader"]')
        expect(drawn.first).to_have_text(VERDICT_COLUMNS[0], timeout=EXPECT_TIMEOUT)  # once the grid has drawn
        assert VERDICT_COLUMNS[0] == "verdict", drawn.all_inner_texts()
    finally:
        tab.context.close()
