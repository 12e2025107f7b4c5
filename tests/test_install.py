"""`pip install .` into a fresh venv, then `driftwatch` run from another directory: help, init, check on a local
feed, the bundled demo data and the dashboard found in the installed copy (not in this checkout).

The new venv sees this interpreter's site-packages through a .pth file, so the dependencies (torch...) are not
installed again; driftwatch itself is installed with --no-deps --no-build-isolation, as a user's pip would."""

from __future__ import annotations

import json
import os
import shutil
import signal
import site
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from playwright.sync_api import expect

from pipeline.cli import EXIT_BAD_INPUT, main
from tests.test_browser_pages import listening_addresses
from tests.test_browser import EXCEPTION, PAGE_TIMEOUT, browser, wait_until_idle  # noqa: F401 (browser: a fixture)

ROOT = Path(__file__).resolve().parents[1]
RSS = Path(__file__).parent / "data" / "feeds" / "rss20.xml"
# What a build reads: the project files, not the checkout's history, venv or data directories.
IGNORED = shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.pyc", "build", "*.egg-info", "demo-store",
                                 "store", "sandbox", ".pytest_cache", "out", "reports", "tests", "bench")

pytest.importorskip("setuptools", minversion="70.1", reason="the build backend of requirements-dev.txt is missing")


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A venv with driftwatch installed from a copy of this checkout; returns its bin folder."""
    base = tmp_path_factory.mktemp("install")
    source, env_dir = base / "source", base / "venv"
    shutil.copytree(ROOT, source, ignore=IGNORED)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    bindir = env_dir / "bin"
    purelib = subprocess.run([str(bindir / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             check=True, capture_output=True, text=True).stdout.strip()
    Path(purelib, "_parent_site.pth").write_text("\n".join(site.getsitepackages()) + "\n", encoding="utf-8")
    subprocess.run([str(bindir / "python"), "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", str(source)], check=True, cwd=base, env=_env())
    shutil.rmtree(source)  # the installed copy must not lean on the tree it was built from
    return bindir


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DRIFTWATCH_CONFIG", "DRIFTWATCH_DATA_DIR")}
    return {**env, "HF_HUB_OFFLINE": "1"}


def run(bindir: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(bindir / args[0]), *args[1:]], cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=300)


def test_the_command_and_the_module_are_installed(venv, tmp_path):
    done = run(venv, "driftwatch", "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for command in ("run", "backfill", "eval", "demo", "init", "check", "dashboard (app)"):
        assert command in done.stdout
    assert done.stdout.startswith("usage: driftwatch")
    module = run(venv, "python", "-m", "pipeline", "check", "--help", cwd=tmp_path)
    assert module.returncode == 0 and module.stdout.startswith("usage: python -m pipeline check")


def test_the_bundled_files_come_from_the_installed_copy(venv, tmp_path):
    script = ("import json, sys; from pipeline import demo, paths, __file__ as f; "
              "print(json.dumps([f, str(paths.app_file()), str(demo.GOLD_FILE), "
              "len(list(demo.FEEDS_DIR.glob('*/*.xml'))), paths.app_file().is_file(), "
              "(paths.bundle_root() / 'pages' / '_ui.py').is_file(), sys.prefix]))")
    done = run(venv, "python", "-c", script, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    package, app, gold, n_feeds, app_exists, ui_exists, prefix = json.loads(done.stdout)
    for path in (package, app, gold):
        assert Path(path).is_relative_to(prefix), path  # in the venv, not in this checkout
    assert n_feeds == len(list((ROOT / "data" / "demo" / "feeds").glob("*/*.xml"))) > 0
    assert app_exists and ui_exists and Path(gold).is_file()


def test_the_demos_answers_and_labels_ship_with_the_installed_copy(venv, tmp_path):
    script = ("import json, sys; from pipeline import demo; "
              "print(json.dumps([str(demo.ANSWERS_FILE), demo.ANSWERS_FILE.is_file(), demo.LABELS_FILE.is_file(), "
              "sys.prefix]))")
    done = run(venv, "python", "-c", script, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    answers, has_answers, has_labels, prefix = json.loads(done.stdout)
    assert Path(answers).is_relative_to(prefix) and has_answers and has_labels


def test_init_then_check_from_another_directory(venv, tmp_path):
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = run(venv, "driftwatch", "init", str(project), cwd=elsewhere)
    assert done.returncode == 0, done.stderr
    assert "17 6 * * * " in done.stdout and str(project / "monitor.toml") in done.stdout
    shutil.copy(RSS, project / "courier.xml")
    config = project / "monitor.toml"
    text = config.read_text(encoding="utf-8")
    head, rest = text.split("\n[fetch]", 1)  # relative paths: relative to the config, not to the working directory
    config.write_text(head + '\n[[sources]]\nname = "courier"\npath = "courier.xml"\n\n[fetch]' + rest, encoding="utf-8")
    (project / "gold.jsonl").write_text('{"id": "q1", "question": "Why was the vote delayed?", "relevant": '
                                        '["pol-041", "pol-042"]}\n', encoding="utf-8")
    done = run(venv, "driftwatch", "check", "--config", str(config), cwd=elsewhere)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 questions, 2 of 2 relevant document ids found" in done.stdout and "check passed" in done.stdout
    assert str(project / "courier.xml") in done.stdout
    assert not (project / "data").exists() and list(elsewhere.iterdir()) == []
    again = run(venv, "driftwatch", "init", str(project), cwd=elsewhere)
    assert again.returncode == 2 and f"{config} already exists" in again.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
            return response.read() == b"ok"
    except OSError:
        return False


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_driftwatch_dashboard_serves_the_overview_from_the_installed_copy(venv, tmp_path, browser):
    """`driftwatch demo` then `driftwatch dashboard` from a directory that is not the repository: the Overview's
    script runs (its title drawn in Chromium) from the installed app.py, and SIGTERM stops streamlit with it."""
    store, elsewhere = tmp_path / "store", tmp_path / "elsewhere"
    elsewhere.mkdir()
    built = run(venv, "driftwatch", "demo", "--days", "1", "--data-dir", str(store), cwd=elsewhere)
    assert built.returncode == 0, built.stderr
    assert built.stdout.splitlines()[-1] == f"open it with: driftwatch dashboard --data-dir {store}"
    port, log = _free_port(), tmp_path / "dashboard.log"
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:  # its own session: whatever it leaves behind is found (and killed) by group
        proc = subprocess.Popen([str(venv / "driftwatch"), "dashboard", "--data-dir", str(store), "--port", str(port)],
                                cwd=elsewhere, env=_env(), stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not _healthy(url):
            assert proc.poll() is None and time.monotonic() < deadline, \
                f"the dashboard did not come up (exit {proc.poll()}):\n{log.read_text()}"
            time.sleep(0.2)  # the polling interval, not a wait for readiness
        with urllib.request.urlopen(url, timeout=10) as response:
            assert b"<title>Streamlit</title>" in response.read()
        context = browser.new_context()
        try:
            tab = context.new_page()
            tab.set_default_timeout(PAGE_TIMEOUT)
            tab.goto(url)
            wait_until_idle(tab)
            expect(tab.locator(EXCEPTION)).to_have_count(0)
            expect(tab.locator("h1").filter(has_text="Overview")).to_have_count(1)
            expect(tab.locator(".st-key-overview_chart")).to_be_attached()
            # the shipped .streamlit/config.toml's settings, passed on the command line from any directory
            expect(tab.locator('[data-testid="stAppDeployButton"]')).to_have_count(0)
        finally:
            context.close()
        assert listening_addresses(port) == {"127.0.0.1"}
        proc.terminate()  # the driftwatch process only, as a service manager would
        assert proc.wait(timeout=30) == 0
        assert not _group_alive(proc.pid), "streamlit outlived driftwatch dashboard"
    finally:
        if _group_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    out = log.read_text()
    assert f"serving the dashboard of {store} on {url}" in out
    assert list(elsewhere.iterdir()) == [], "the dashboard wrote into its working directory"


def test_dashboard_refuses_a_busy_port_in_one_line(capsys):
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        assert main(["dashboard", "--data-dir", str(ROOT), "--port", str(port)]) == EXIT_BAD_INPUT
    assert f"error: cannot serve on 127.0.0.1:{port}: " in capsys.readouterr().err


def test_every_package_of_pipeline_is_installed():
    """pyproject lists pipeline's packages by name: a new subpackage left out installs a broken driftwatch."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "pipeline").rglob("__init__.py")}
    assert found <= listed, f"pyproject.toml's packages lack {sorted(found - listed)}"


def test_the_dashboard_settings_have_one_owner_shipped_in_the_wheel():
    """`streamlit run app.py` reads .streamlit/config.toml; `driftwatch dashboard` passes the same file's settings
    (the installed copy carries it: pyproject's package data), so both serve 127.0.0.1 without a Deploy button."""
    import tomllib

    from pipeline.paths import STREAMLIT_CONFIG, dashboard_flags, dashboard_options

    options = dashboard_options()
    assert options["server.address"] == "127.0.0.1" and options["client.toolbarMode"] == "minimal"
    assert options["browser.gatherUsageStats"] is False and options["client.showSidebarNavigation"] is False
    flags = dashboard_flags()
    assert dict(zip(flags[::2], flags[1::2])) == {f"--{k}": str(v).lower() if isinstance(v, bool) else str(v)
                                                  for k, v in options.items()}
    shipped = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert STREAMLIT_CONFIG.as_posix() in shipped["driftwatch_files"]
