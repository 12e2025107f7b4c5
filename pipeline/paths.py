"""Where the files that ship beside the package are (the dashboard's app.py and pages/, the bundled demo data):
the repository root in a checkout, the installed `driftwatch_files` folder of a `pip install .`."""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path

BUNDLE_PACKAGE = "driftwatch_files"  # pyproject.toml maps it to the repository root
APP_FILE = "app.py"
DEMO_SUBDIR = Path("data") / "demo"


def _is_bundle(root: Path) -> bool:
    return (root / APP_FILE).is_file() and (root / DEMO_SUBDIR).is_dir()


@cache
def bundle_root() -> Path:
    """The folder holding app.py, pages/ and data/demo: the checkout this package runs from, else the installed
    copy (else the checkout's place, so that what needs a file there names the missing path)."""
    checkout = Path(__file__).resolve().parents[1]
    if _is_bundle(checkout):
        return checkout
    spec = importlib.util.find_spec(BUNDLE_PACKAGE)
    for location in (spec.submodule_search_locations or []) if spec else []:
        if _is_bundle(Path(location)):
            return Path(location).resolve()
    return checkout


def demo_dir() -> Path:
    return bundle_root() / DEMO_SUBDIR


def app_file() -> Path:
    return bundle_root() / APP_FILE
