"""Where the files that ship beside the package are (the dashboard's app.py and pages/, the bundled demo data):
the repository root in a checkout, the installed `driftwatch_files` folder of a `pip install .`."""

from __future__ import annotations

import importlib.util
import tomllib
from functools import cache
from pathlib import Path

BUNDLE_PACKAGE = "driftwatch_files"  # pyproject.toml maps it to the repository root
APP_FILE = "app.py"
STREAMLIT_CONFIG = Path(".streamlit") / "config.toml"  # streamlit reads it from the working directory only
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


def streamlit_config() -> Path:
    return bundle_root() / STREAMLIT_CONFIG


def dashboard_options() -> dict[str, object]:
    """The dashboard's streamlit settings, as "section.option" -> value, from the shipped .streamlit/config.toml:
    `streamlit run app.py` in a checkout reads the file itself, `driftwatch dashboard` passes them on the command
    line (run from any directory, streamlit would not find the file), so the file is their one owner."""
    with streamlit_config().open("rb") as handle:
        sections = tomllib.load(handle)
    return {f"{section}.{name}": value for section, options in sections.items() for name, value in options.items()}


def dashboard_flags() -> list[str]:
    """`dashboard_options` as streamlit's command-line flags."""
    def text(value: object) -> str:
        return str(value).lower() if isinstance(value, bool) else str(value)
    return [part for name, value in dashboard_options().items() for part in (f"--{name}", text(value))]
