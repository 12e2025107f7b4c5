"""The Overview screenshot of the README and the docs (docs/images/overview.png): `streamlit run app.py` on a demo
history, opened in headless Chromium as tests/test_browser.py does.

    python -m pipeline demo --data-dir /tmp/driftwatch/data/demo-store   # the sidebar shows this path
    python docs/screenshot.py --data-dir /tmp/driftwatch/data/demo-store
"""

from __future__ import annotations

import argparse
import io
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from PIL import Image
from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "images" / "overview.png"
CHROMIUM = "/usr/bin/chromium"  # Debian's; Playwright cannot download its own browsers here
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run"]
VIEWPORT = {"width": 1280, "height": 1040}
APP_IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"][data-test-connection-state="CONNECTED"]'
DRAWN_CHART = '[data-testid="stPlotlyChart"] .js-plotly-plot'
COLOURS = 256  # a palette PNG: the page is flat colours, and the file stays small


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
            return response.read().decode().strip() == "ok"
    except (urllib.error.URLError, OSError):
        return False


def screenshot(data_dir: Path, out: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "DRIFTWATCH_DATA_DIR": str(data_dir.resolve())}
    env.pop("DRIFTWATCH_CONFIG", None)
    server = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
                               "--server.port", str(port)], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not healthy(url):
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("streamlit did not start")
            time.sleep(0.1)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            tab = browser.new_page(viewport=VIEWPORT)
            tab.goto(url, timeout=120_000)
            tab.wait_for_selector(APP_IDLE, state="attached", timeout=120_000)
            tab.wait_for_function("() => document.querySelector('[data-testid=\"stSkeleton\"]') === null")
            tab.wait_for_selector(DRAWN_CHART, timeout=30_000)
            tab.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")
            png = tab.screenshot()
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=10)
    image = Image.open(io.BytesIO(png)).convert("RGB").quantize(COLOURS, method=Image.Quantize.MEDIANCUT)
    out.parent.mkdir(parents=True, exist_ok=True)
    image.save(out, optimize=True)
    print(f"wrote {out} ({out.stat().st_size:,} bytes)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, required=True, help="a demo history (python -m pipeline demo)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    screenshot(args.data_dir, args.out)


if __name__ == "__main__":
    main()
