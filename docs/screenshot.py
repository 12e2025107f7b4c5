"""The Overview screenshot of the README and the docs (docs/images/overview.png): `streamlit run app.py` on a demo
history, opened in headless Chromium as tests/test_browser.py does.

    python -m pipeline demo --data-dir /tmp/driftwatch/data/demo-store   # the sidebar shows this path
    python docs/screenshot.py --data-dir /tmp/driftwatch/data/demo-store
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
from pathlib import Path

from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.browser_support import ROOT, chromium, serving, wait_until_idle  # the browser tests' own server

OUT = ROOT / "docs" / "images" / "overview.png"
VIEWPORT = {"width": 1280, "height": 1040}
DRAWN_CHART = '[data-testid="stPlotlyChart"] .js-plotly-plot'
COLOURS = 256  # a palette PNG: the page is flat colours, and the file stays small


def screenshot(data_dir: Path, out: Path) -> None:
    with tempfile.TemporaryDirectory() as logs, serving(data_dir.resolve(), Path(logs)) as server, \
            chromium() as browser:
        tab = browser.new_page(viewport=VIEWPORT)
        tab.set_default_timeout(120_000)
        tab.goto(server.url)
        wait_until_idle(tab)
        tab.wait_for_selector(DRAWN_CHART, timeout=30_000)
        tab.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")
        png = tab.screenshot()
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
