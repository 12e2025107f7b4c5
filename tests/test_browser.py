"""The dashboard in a real browser: `streamlit run app.py` on a short real history, every page app.py routes opened
in headless Chromium, checked for its title, its chart and the absence of errors, and screenshotted."""

from __future__ import annotations

import ast
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pandas as pd
import pytest
from playwright.sync_api import Browser, Page, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
from streamlit.source_util import page_icon_and_name

from pipeline.alerts import condition_of
from pipeline.demo import FIRST_RUN_DAY, demo_date
from tests.browser_support import (EXCEPTION, EXPECT_TIMEOUT, LOCAL_HOST, PAGE_TIMEOUT, ROOT, Server, chromium,
                                   demo_store, serving, wait_until_idle)

APP = ROOT / "app.py"
SCREENSHOTS_ENV = "DRIFTWATCH_SCREENSHOTS"  # set (to anything) to keep the screenshots in bench/out/screenshots
SCREENSHOTS_OUT = ROOT / "bench" / "out" / "screenshots"
VIEWPORT = {"width": 1400, "height": 900}

CHART = '[data-testid="stPlotlyChart"]'
DRAWN_CHART = f"{CHART} .js-plotly-plot"
ERROR_BOX = '[data-testid="stAlert"]:has([data-testid="stAlertContentError"])'
# Red boxes that state the history, not faults: app.py's open-alert banner, and the Drift page's conclusion when the
# window's drift is confirmed (a shift still flowing in on the last day is compared with what came before it).
BANNER = ".st-key-alert_banner, .st-key-drift_conclusion"
ERROR_WORDS = re.compile(r"Traceback|Error")

# Pages whose chart may only come after an action (a simulation run): their main controls must be there instead.
CONTROLS = {"pages/simulate.py": ("sim_scenario", "sim_start", "sim_seed", "sim_run")}


@dataclass(frozen=True)
class RoutedPage:
    """One st.Page of app.py: its file, its title (the page's h1) and its URL path ("" for the default page)."""

    file: str
    title: str
    url_path: str
    has_chart: bool

    @property
    def name(self) -> str:
        return Path(self.file).stem


def routed_pages() -> list[RoutedPage]:
    """The st.Page(...) calls of app.py, read from its source so a new page is covered without editing this file.
    The URL path and title follow st.Page's inference (file name, unless url_path= / title= say otherwise)."""
    pages = []
    for node in ast.walk(ast.parse(APP.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "Page"):
            continue
        file = ast.literal_eval(node.args[0])
        options = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg in ("title", "url_path", "default")}
        inferred = page_icon_and_name(Path(file))[1]
        url_path = "" if options.get("default") else options.get("url_path", inferred).strip("/")
        source = (ROOT / file).read_text(encoding="utf-8")
        pages.append(RoutedPage(file, options.get("title") or inferred.replace("_", " "), url_path,
                                "st.plotly_chart(" in source))
    return pages


PAGES = routed_pages()


def test_every_page_file_is_opened_in_the_browser():
    files = {p.relative_to(ROOT).as_posix() for p in (ROOT / "pages").glob("*.py") if not p.name.startswith("_")}
    assert files == {p.file for p in PAGES}, "app.py's st.Page calls and pages/ disagree"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One headless Chromium for every page (a fresh context per page)."""
    with chromium() as launched:
        yield launched


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> Path:
    """Four daily runs of the bundled demo (2026-10-24 to 10-27), the drift packs flowing in from the third."""
    return demo_store(tmp_path_factory, "browser", days=4, drift_day=demo_date(FIRST_RUN_DAY + 2))


@pytest.fixture(scope="module")
def server(history, tmp_path_factory) -> Iterator[Server]:
    """`streamlit run app.py` on the history, on a free port, until the module's tests are done."""
    with serving(history, tmp_path_factory.mktemp("server")) as running:
        yield running


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("screenshots")


def error_boxes(tab: Page) -> list[tuple[str, bool]]:
    """Every red box on the page: its text and whether it states the history (the alert banner, the drift conclusion)."""
    return tab.eval_on_selector_all(ERROR_BOX, f"els => els.map(e => [e.innerText, !!e.closest('{BANNER}')])")


def full_page_screenshot(tab: Page, path: Path) -> None:
    """The whole page: Streamlit scrolls inside its main block, not the document, so the viewport is first
    stretched to the main block's height (two animation frames let the layout settle)."""
    height = tab.eval_on_selector('[data-testid="stMain"]', "e => e.getBoundingClientRect().top + e.scrollHeight")
    tab.set_viewport_size({"width": VIEWPORT["width"], "height": max(VIEWPORT["height"], int(height) + 1)})
    tab.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")
    tab.screenshot(path=str(path), full_page=True)
    if os.environ.get(SCREENSHOTS_ENV):
        SCREENSHOTS_OUT.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, SCREENSHOTS_OUT / path.name)


def check_page(tab: Page, page: RoutedPage) -> None:
    """No exception or error box, the page's title, its main chart (or, for a page whose chart needs an action
    first, its main controls) and every chart drawn."""
    expect(tab.locator(EXCEPTION), "an exception shown on the page").to_have_count(0)
    boxes = error_boxes(tab)
    assert [text for text, in_banner in boxes if not in_banner] == [], "an error box outside the alert banner"
    assert [text for text, _ in boxes if ERROR_WORDS.search(text)] == [], "an error box naming an error"

    links = tab.locator(".st-key-page_links a")  # the app's own page list, every page in it
    expect(links, "the sidebar's page links").to_have_count(len(PAGES), timeout=EXPECT_TIMEOUT)
    # each link's text ends with its title (an icon's ligature name comes first)
    assert [t.strip().splitlines()[-1] for t in links.all_inner_texts()] == [p.title for p in PAGES]
    title = tab.locator("h1").filter(has_text=re.compile(rf"^\s*{re.escape(page.title)}\s*$"))
    expect(title, f"the title {page.title!r}").to_have_count(1, timeout=EXPECT_TIMEOUT)
    controls = CONTROLS.get(page.file, ())
    for key in controls:
        expect(tab.locator(f".st-key-{key}"), f"the control {key!r}").to_be_visible(timeout=EXPECT_TIMEOUT)
    charts = tab.locator(CHART)
    if page.has_chart and not controls:
        expect(charts.first, "the page's main chart").to_be_attached(timeout=EXPECT_TIMEOUT)
    expected = charts.count()
    drawn = tab.locator(DRAWN_CHART)
    expect(drawn, f"all {expected} chart elements drawn by plotly").to_have_count(expected, timeout=EXPECT_TIMEOUT)


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_page_renders_in_the_browser(browser, server, screenshots, page: RoutedPage):
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(PAGE_TIMEOUT)
    tab = context.new_page()
    script_errors: list[str] = []
    tab.on("pageerror", lambda exc: script_errors.append(str(exc)))
    requested: list[str] = []
    tab.on("request", lambda request: requested.append(request.url))
    url = f"{server.url}/{page.url_path}"
    try:
        problem = None
        try:
            tab.goto(url)
            wait_until_idle(tab)
            check_page(tab, page)
            assert script_errors == [], "JavaScript errors in the page"
            assert [u for u in requested if urlparse(u).scheme in ("http", "https", "ws", "wss")
                    and urlparse(u).hostname != LOCAL_HOST] == [], \
                "the page fetched from the internet (a :material/ favicon, Streamlit's usage statistics)"
        except (AssertionError, PlaywrightTimeoutError) as exc:
            problem = exc
        shot = screenshots / f"{PAGES.index(page) + 1:02d}-{page.name}.png"
        full_page_screenshot(tab, shot)  # a broken page too: the picture is the quickest diagnosis
        if problem is not None:
            raise AssertionError(f"{page.file} at {url} (screenshot {shot}): {problem}\n"
                                 f"--- streamlit log ---\n{server.log_tail()}") from None
    finally:
        context.close()


# --- the demo's story, read by content: the month-long demo history built here (a few minutes), or the one in
# DRIFTWATCH_DEMO_DIR (e.g. from `python -m pipeline demo --data-dir /tmp/dash-demo`), reused when set ---

@pytest.fixture(scope="module")
def demo_server(demo_history, tmp_path_factory) -> Iterator[Server]:
    with serving(demo_history, tmp_path_factory.mktemp("demo-server")) as running:
        yield running


def open_demo_page(browser, server: Server, path: str, screenshots: Path, name: str) -> tuple[Page, object]:
    context = browser.new_context(viewport={"width": 1440, "height": 1000})
    context.set_default_timeout(PAGE_TIMEOUT)
    tab = context.new_page()
    tab.goto(f"{server.url}/{path}")
    wait_until_idle(tab)
    expect(tab.locator(EXCEPTION)).to_have_count(0)
    full_page_screenshot(tab, screenshots / f"demo-{name}.png")
    return tab, context


def test_demo_overview_names_the_decline_and_the_incident(browser, demo_server, screenshots):
    tab, context = open_demo_page(browser, demo_server, "", screenshots, "overview")
    try:
        dense = tab.locator(".st-key-overview_verdict_dense")
        expect(dense).to_contain_text(re.compile(r"alert\s+dense · slow_drift since 2026-11-\d\d"))  # not green
        # one line per open condition (a pipeline's slow drift over all its series is one), each once
        alerts = pd.read_csv(demo_server.data_dir / "alerts.csv", keep_default_na=False)
        latest = alerts[alerts["run_date"] == alerts["run_date"].max()]
        conditions = {condition_of(*row) for row in zip(latest["rule"], latest["pipeline"], latest["metric"])}
        lines = tab.locator(".st-key-alert_banner_alert li, .st-key-alert_banner_warning li")
        expect(lines).to_have_count(len(conditions))
        assert len(conditions) < len(latest)  # the demo's slow drifts fire on several series of each pipeline
        texts = lines.all_inner_texts()
        for pipeline in ("bm25", "dense", "hybrid"):
            mine = [t for t in texts if t.startswith(f"slow_drift on {pipeline} since ")]
            assert len(mine) == 1 and re.search(r"since 2026-11-\d\d: \S+@5 -\d+\.\d%", mine[0]), texts
        expect(tab.locator(".st-key-alert_banner_details")).to_contain_text(
            f"Details: the {len(latest)} alert rows of the {len(conditions)} open conditions")
        incident = tab.locator(".st-key-overview_incident")
        expect(incident).to_contain_text("since 2026-11-13")
        expect(incident).to_contain_text("near-duplicate")  # the cause: the run note of the event's first day
    finally:
        context.close()


def test_demo_questions_show_the_near_duplicate_that_pushed_out_the_gold_document(browser, demo_server,
                                                                                  screenshots):
    tab, context = open_demo_page(browser, demo_server, "questions?pipeline=dense", screenshots, "questions")
    try:
        expect(tab.locator(".st-key-questions_then input")).to_have_value("2026-11-12")  # before the incident
        tab.locator(".st-key-questions_question").click()
        tab.get_by_role("option", name=re.compile(r"^q19:")).click()
        wait_until_idle(tab)
        table = tab.locator(".st-key-questions_displacing")
        expect(table).to_contain_text("dup-207")
        expect(table).to_contain_text("eco-011")
        full_page_screenshot(tab, screenshots / "demo-questions-q19.png")
    finally:
        context.close()


def test_demo_drift_says_what_came_in(browser, demo_server, screenshots):
    tab, context = open_demo_page(browser, demo_server, "drift?run=2026-11-13", screenshots, "drift")
    try:
        expect(tab.locator(".st-key-drift_conclusion")).to_contain_text("Drifted")
        expect(tab.locator(".st-key-drift_novel")).to_be_visible()
        expect(tab.locator(".st-key-drift_composition_source")).to_be_visible()
    finally:
        context.close()
