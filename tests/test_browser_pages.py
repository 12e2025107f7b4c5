"""Issue 27's page points in Chromium, at desktop size and on a phone (390 x 844): Simulate's answer dated against an
original with its own later incident and with an earlier one, Trends at 1440 px without a title, legend or run note
running into another, no Deploy button, and the server bound to 127.0.0.1 by .streamlit/config.toml."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from pipeline.demo import FIRST_RUN_DAY, demo_date
from pipeline.paths import dashboard_options
from pipeline.simulate import Scenario, catch_verdict, caught, discard_sandbox, simulate, source_config
from pipeline.views.simulate import caught_lines, sandbox_dir
from tests.browser_support import (DESKTOP, EXPECT_TIMEOUT, LOCAL_HOST, PHONE, Server, chromium, demo_store, open_page,
                                   serving)

DRIFT_DAY = demo_date(FIRST_RUN_DAY + 7)  # 2026-10-31: the original's own corpus drift
LATER = demo_date(FIRST_RUN_DAY + 4)  # injected before the original's incident: the sandbox must catch it first
EARLIER = demo_date(FIRST_RUN_DAY + 9)  # injected after it (the last run): the original's incident came first
SIZES = {"desktop": DESKTOP, "phone": PHONE}
CHART = '[data-testid="stPlotlyChart"]'


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> Path:
    """Ten daily runs of the demo (2026-10-24 to 11-02), its drift packs flowing in from 10-31."""
    return demo_store(tmp_path_factory, "pages", days=10, drift_day=DRIFT_DAY)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


def simulated(history: Path, folder: Path, start: date) -> Path:
    """A copy of the history with 64 off-topic documents injected on `start`, simulated into the sandbox the
    dashboard shows for it (the page's button calls the same function)."""
    data_dir = folder / "store"
    shutil.copytree(history, data_dir)
    simulate(source_config(data_dir, None), Scenario("offtopic", start, n=64), data_dir, sandbox_dir(data_dir))
    return data_dir


@pytest.fixture(scope="module", params=[LATER, EARLIER], ids=["later-original-incident", "earlier-original-incident"])
def simulation(request, history, tmp_path_factory) -> Iterator[tuple[Server, Path, date]]:
    start = request.param
    data_dir = simulated(history, tmp_path_factory.mktemp(f"sim-{start}"), start)
    try:
        with serving(data_dir, tmp_path_factory.mktemp("server")) as running:
            yield running, data_dir, start
    finally:
        discard_sandbox(sandbox_dir(data_dir))


@pytest.fixture(scope="module")
def server(history, tmp_path_factory) -> Iterator[Server]:
    with serving(history, tmp_path_factory.mktemp("server")) as running:
        yield running


@pytest.mark.parametrize("size", SIZES, ids=list(SIZES))
def test_simulate_dates_each_condition_against_the_original(browser, simulation, size):
    server, data_dir, start = simulation
    tab = open_page(browser, server, "simulate", SIZES[size])
    try:
        verdict = tab.locator('.st-key-sim_verdict [data-testid="stMarkdownContainer"]')  # the text, not the icon
        expect(verdict).to_be_visible(timeout=EXPECT_TIMEOUT)
        compared = caught(data_dir, sandbox_dir(data_dir), start)
        assert verdict.inner_text().strip() == catch_verdict(compared, start)
        assert [line.strip() for line in tab.locator(".st-key-sim_caught li").all_inner_texts()] == \
            caught_lines(compared)
        drift, = [line for line in caught_lines(compared) if ": drift on the corpus, " in line]
        if start == LATER:  # the original's own corpus drift on 10-31 must not hide the sandbox's on the 28th
            assert drift.startswith(f"caught on {start} (the original: not until {DRIFT_DAY})")
            assert verdict.inner_text().startswith("Yes:")
        else:  # the original's incident, open since 10-31, is not a catch of the change on 11-02
            assert drift.startswith(f"not earlier: the original fired it too, on {DRIFT_DAY}, before the change on "
                                    f"{start}")
            assert verdict.inner_text().startswith("No:")
        assert str(sandbox_dir(data_dir)) not in tab.locator("body").inner_text()  # no path of the server's machine
        box = verdict.bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= SIZES[size]["width"]  # readable without scrolling sideways
    finally:
        tab.context.close()


def boxes(tab: Page, chart: str) -> dict[str, list[dict]]:
    """The drawn boxes of a plotly chart's title, legend and annotations (panel titles, run notes, floor labels)."""
    return tab.eval_on_selector(chart, r"""root => {
        const box = e => { const r = e.getBoundingClientRect(); return {x: r.x, y: r.y, w: r.width, h: r.height,
                                                                          text: e.textContent}; };
        const all = s => [...root.querySelectorAll(s)].filter(e => e.getBoundingClientRect().width > 0).map(box);
        const axisTitles = [...root.querySelectorAll('text')].filter(e => /^x\d*title$/.test(e.getAttribute('class')))
            .filter(e => e.getBoundingClientRect().width > 0).map(box);
        return {title: all('.g-gtitle .gtitle'), legend: all('.legend .bg'), annotations: all('.annotation'),
                axisTitles};
    }""")


def overlap(a: dict, b: dict) -> bool:
    return a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"] and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"]


def test_trends_at_1440_draws_no_title_legend_or_note_over_another(browser, server):
    tab = open_page(browser, server, "trends", DESKTOP)
    try:
        chart = CHART  # the first: recall, the page's default metric
        expect(tab.locator(f"{chart} .js-plotly-plot").first).to_be_attached(timeout=EXPECT_TIMEOUT)
        drawn = boxes(tab, chart)
        title, = drawn["title"]
        legend, = drawn["legend"]
        notes = drawn["annotations"]
        assert any("drift event" in n["text"] for n in notes), "the run note of the drift day"
        labelled = [("title", title), ("legend", legend)] + [(n["text"], n) for n in notes + drawn["axisTitles"]]
        clashes = [(a, b) for i, (a, one) in enumerate(labelled) for b, other in labelled[i + 1:] if overlap(one, other)]
        assert clashes == []
        assert legend["y"] > max(n["y"] + n["h"] for n in notes)  # the legend at the foot, under the panels
    finally:
        tab.context.close()


def test_no_deploy_button_and_the_server_listens_on_localhost_only(browser, server):
    tab = open_page(browser, server, "", DESKTOP)
    try:
        expect(tab.locator("h1").first).to_be_visible(timeout=EXPECT_TIMEOUT)
        expect(tab.locator('[data-testid="stAppDeployButton"]')).to_have_count(0)
    finally:
        tab.context.close()
    assert dashboard_options()["server.address"] == LOCAL_HOST
    port = int(server.url.rsplit(":", 1)[1])
    assert listening_addresses(port) == {LOCAL_HOST}


def listening_addresses(port: int) -> set[str]:
    """The local addresses a socket of this machine listens on at `port` (/proc/net/tcp and tcp6, state 0A)."""
    found = set()
    for table in (Path("/proc/net/tcp"), Path("/proc/net/tcp6")):
        for line in table.read_text().splitlines()[1:] if table.exists() else []:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.rsplit(":", 1)
            if state == "0A" and int(hex_port, 16) == port:
                found.add(decode(address))
    return found


def decode(address: str) -> str:
    """/proc/net/tcp's hex address (little-endian words) as text: IPv4 dotted, IPv6 "::" or the word "v6"."""
    if len(address) == 8:
        return ".".join(str(int(address[i:i + 2], 16)) for i in (6, 4, 2, 0))
    return "::" if set(address) == {"0"} else f"v6:{address}"
