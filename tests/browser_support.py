"""What every browser test shares: Debian's Chromium, `streamlit run app.py` served on a free localhost port for a
data directory, and the wait for a page's script run to finish. Test modules import from here; the month-long demo
history they read is tests/conftest.py's session fixture `demo_history`."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from pipeline.config import Config
from pipeline.demo import build_demo

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")  # Debian's; Playwright cannot download its own browsers here
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
LOCAL_HOST = "127.0.0.1"  # where the test serves the app: the only host a page may request
START_TIMEOUT = 60  # seconds for the server to answer its health check
PAGE_TIMEOUT = 120_000  # ms for a page's script run (the Drift page's first run projects embeddings: seconds)
EXPECT_TIMEOUT = 30_000  # ms for an element to appear once the run is over (plotly.js draws after it)
DESKTOP = {"width": 1440, "height": 1000}
PHONE = {"width": 390, "height": 844}

# Streamlit's DOM (1.67): the app root carries the script and connection state; an element whose code is loaded
# lazily (charts, most widgets) is a stSkeleton placeholder until it mounts; keyed elements carry st-key-<key>.
APP_IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"][data-test-connection-state="CONNECTED"]'
PLACEHOLDER = '[data-testid="stSkeleton"]'
EXCEPTION = '[data-testid="stException"]'


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOCAL_HOST, 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class Server:
    url: str
    log: Path
    data_dir: Path | None = None

    def log_tail(self, lines: int = 40) -> str:
        text = self.log.read_text(encoding="utf-8", errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
            return response.read().decode().strip() == "ok"
    except (urllib.error.URLError, OSError):
        return False


@contextmanager
def serving(data_dir: Path, log_dir: Path, env: dict[str, str] | None = None) -> Iterator[Server]:
    """`streamlit run app.py` on `data_dir`, on a free port, until the block ends (`env`: extra variables).
    No --browser.gatherUsageStats: the repository's .streamlit/config.toml must keep the pages offline."""
    port = free_port()
    log = Path(log_dir) / "streamlit.log"
    variables = {**os.environ, "DRIFTWATCH_DATA_DIR": str(data_dir)}
    variables.pop("DRIFTWATCH_CONFIG", None)  # unless `env` names one: the test's own
    variables.update(env or {})
    command = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
               "--server.port", str(port)]
    with log.open("wb") as out:
        process = subprocess.Popen(command, cwd=ROOT, env=variables, stdout=out, stderr=subprocess.STDOUT)
    running = Server(f"http://{LOCAL_HOST}:{port}", log, Path(data_dir))
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not healthy(running.url):
            if process.poll() is not None:
                pytest.fail(f"streamlit exited with {process.returncode}:\n{running.log_tail()}", pytrace=False)
            if time.monotonic() > deadline:
                pytest.fail(f"streamlit did not answer /_stcore/health within {START_TIMEOUT} s:\n"
                            f"{running.log_tail()}", pytrace=False)
            time.sleep(0.1)  # the polling interval, not a wait for readiness
        yield running
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def chromium() -> Iterator[Browser]:
    """One headless Debian Chromium."""
    if not CHROMIUM.is_file():
        pytest.fail(f"Chromium not found at {CHROMIUM}: the browser test drives Debian's Chromium "
                    "(apt-get install -y chromium chromium-driver; .ci/run installs it)", pytrace=False)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def open_page(browser: Browser, server: Server, path: str, viewport: dict) -> Page:
    """`path` of the served app in a new context of `viewport` size, once its script run is over and without an
    exception box; close it with `tab.context.close()`."""
    context = browser.new_context(viewport=viewport)
    context.set_default_timeout(PAGE_TIMEOUT)
    tab = context.new_page()
    tab.goto(f"{server.url}/{path}")
    wait_until_idle(tab)
    expect(tab.locator(EXCEPTION)).to_have_count(0)
    return tab


def demo_store(tmp_path_factory, name: str, days: int, drift_day: date) -> Path:
    """`days` daily runs of the bundled demo from its first day, its drift packs flowing in from `drift_day`."""
    data_dir = tmp_path_factory.mktemp(name) / "store"
    build_demo(Config(data_dir=Path(), gold=Path()), data_dir, days=days, drift_day=drift_day)
    return data_dir


def wait_until_idle(tab: Page) -> None:
    """Until the app is connected, its script run has finished and every element has replaced its placeholder."""
    tab.wait_for_selector(APP_IDLE, state="attached")
    tab.wait_for_function(f"() => document.querySelector('{PLACEHOLDER}') === null")
