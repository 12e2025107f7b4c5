"""Secrets never at rest: marker secrets planted in a config's URLs, a feed's query string and a judge's 401 reply,
then `run`, `check`, `report` and `export`, and every file and every line they wrote searched for them."""

from __future__ import annotations

import base64
import json
import logging
import shutil
import socket
import sqlite3
from datetime import date
from pathlib import Path

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from pipeline import cli, job

DATA = Path(__file__).parent / "data"
APP = Path(__file__).resolve().parents[1] / "app.py"
DAY = date(2026, 11, 4)
FEED_TOKEN = "MARKER-feed-token-5f2a"
JUDGE_PASSWORD = "MARKER-judge-pass-81c0"
MLFLOW_PASSWORD = "MARKER-mlflow-pass-c3d9"
API_KEY = "MARKER-api-key-0b7e"  # held by the environment variables the config names, echoed by a 401
HOOK_PATH = "/hooks/T0000/MARKER-hook-path-7a1e"
MARKERS = (FEED_TOKEN, JUDGE_PASSWORD, MLFLOW_PASSWORD, API_KEY, "MARKER-hook-path-7a1e")
RSS = (b"<rss version='2.0'><channel><title>t</title><item><guid isPermaLink='false'>tok-1</guid>"
       b"<title>The tram budget</title><description>The tram line is budgeted again.</description></item>"
       b"</channel></rss>")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def upstream():
    """Feeds, the judge, a team's search service and the webhook on localhost. The judge and the service answer
    401 echoing the credential they were sent, as some providers do; the webhook fails, so its URL is logged."""
    server = HTTPServer(threaded=True)
    server.start()
    server.expect_request("/feed.xml").respond_with_data(RSS, content_type="application/rss+xml",
                                                         headers={"ETag": '"v1"'})  # kept in the HTTP cache
    server.expect_request("/gone.xml").respond_with_data("gone", status=404)

    def refuse(key: str) -> Response:
        return Response(json.dumps({"error": {"message": f"Incorrect API key provided: {key}"}}), status=401,
                        content_type="application/json")

    def judge(request: Request) -> Response:
        # A base_url with userinfo makes the client send Basic credentials (user:password), not the Bearer key.
        scheme, _, credential = request.headers.get("Authorization", "").partition(" ")
        return refuse(base64.b64decode(credential).decode() if scheme == "Basic" else credential)
    server.expect_request("/v1/chat/completions", method="POST").respond_with_handler(judge)
    server.expect_request("/search", method="POST").respond_with_handler(
        lambda request: refuse(request.headers.get("X-Api-Key", "")))
    server.expect_request(HOOK_PATH, method="POST").respond_with_data("no", status=500)
    yield server
    server.clear()
    if server.is_running():
        server.stop()


def test_no_planted_secret_reaches_any_file_or_output(upstream, embedder, tmp_path, monkeypatch, capsys, caplog):
    monkeypatch.setattr(job, "Embedder", lambda config: embedder)  # the session's model, not a second load
    monkeypatch.setenv("DW_TEST_JUDGE_KEY", API_KEY)
    monkeypatch.setenv("DW_TEST_TEAM_KEY", API_KEY)
    shutil.copytree(DATA / "e2e", tmp_path / "e2e")
    logged = tmp_path / "answers.jsonl"
    logged.write_text(json.dumps({"question_id": "q2", "answer": "It costs 610 million crowns [e2e-tram].",
                                  "contexts": [{"id": "e2e-tram", "text": "The tram costs 610 million."}]}) + "\n")
    host = f"127.0.0.1:{upstream.port}"
    text = f'''
data_dir = "{tmp_path / 'store'}"
gold = "{tmp_path / 'e2e' / 'gold.jsonl'}"

[[sources]]
name = "ledger"
path = "{tmp_path / 'e2e' / 'feeds'}"

[[sources]]
name = "live"
url = "http://{host}/feed.xml?lang=en&access_token={FEED_TOKEN}"

[[sources]]
name = "gone"
url = "http://{host}/gone.xml?token={FEED_TOKEN}"

[[targets]]
name = "bm25"
kind = "builtin"

[[targets]]
name = "team"
kind = "http"
url = "http://{host}/search"
headers = {{X-Api-Key = "DW_TEST_TEAM_KEY"}}
retries = 0

[retrieval]
pipelines = ["bm25"]
k = [1, 3]
candidate_depth = 10

[generation]
mode = "logged"
logged = "{logged}"
base_url = "http://judge:{JUDGE_PASSWORD}@{host}/v1"
model = "fake-judge"
api_key_env = "DW_TEST_JUDGE_KEY"
timeout = 5.0
retries = 0

[alerts]
webhook_url = "http://{host}{HOOK_PATH}"
webhook_retries = 0

[export.mlflow]
tracking_uri = "http://mlflow:{MLFLOW_PASSWORD}@127.0.0.1:{_closed_port()}"
timeout = 2
'''
    config, bearer = tmp_path / "monitor.toml", tmp_path / "bearer.toml"
    config.write_text(text)
    # Today the judge is reached without userinfo: the client sends the Bearer key, and the reply echoes it.
    bearer.write_text(text.replace(f"judge:{JUDGE_PASSWORD}@", ""))
    out = tmp_path / "week.html"
    caplog.set_level(logging.DEBUG)
    codes = [cli.main(["run", "--config", str(config), "--date", str(DAY)]),
             # today: a past date replays the corpus, today's run fetches the feeds (and keeps their ETags)
             cli.main(["run", "--config", str(bearer), "--date", str(date.today())]),
             cli.main(["check", "--config", str(config)]),
             cli.main(["report", "--config", str(config), "--out", str(out)]),
             cli.main(["export", "--config", str(config)])]
    printed = capsys.readouterr()

    # The secrets were really planted and really met: the feed and the judge were asked with them, the judge's
    # reply echoed the key, the export and one feed failed (so their URLs were written in messages).
    asked = [request for request, _ in upstream.log]
    assert any(r.path == "/feed.xml" and r.args.get("access_token") == FEED_TOKEN for r in asked)
    assert any(r.path == "/v1/chat/completions" and JUDGE_PASSWORD in base64.b64decode(
        r.headers.get("Authorization", "").partition(" ")[2]).decode() for r in asked)
    assert any(r.path == "/v1/chat/completions" and r.headers.get("Authorization") == f"Bearer {API_KEY}"
               for r in asked)
    assert any(r.path == "/search" and r.headers.get("X-Api-Key") == API_KEY for r in asked)
    assert codes[0] in (0, 1) and codes[1] in (0, 1) and codes[3] == 0 and codes[4] == 1, (codes, printed.err[-2000:])
    runs = (tmp_path / "store" / "runs.csv").read_text()
    with sqlite3.connect(tmp_path / "store" / "corpus.sqlite") as db:
        assert db.execute("SELECT count(*) FROM http_cache WHERE etag = '\"v1\"'").fetchone() == (1,)
    assert "export mlflow failed: http://mlflow:***@127.0.0.1" in runs
    assert "http://" + host in printed.out + printed.err + caplog.text  # the URLs are still named, masked
    assert "Incorrect API key provided: ***" in caplog.text

    written = [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix != ".toml"]
    assert out in written and len(written) > 10
    found = {(p.name, m) for p in written for m in MARKERS if m.encode() in p.read_bytes()}
    found |= {(name, m) for name, text in (("stdout", printed.out), ("stderr", printed.err), ("log", caplog.text))
              for m in MARKERS if m in text}
    assert found == set()

    assert _dashboard_text(tmp_path / "store", monkeypatch).count("export mlflow failed") >= 1  # the events shown
    found = {m for m in MARKERS if m in _dashboard_text(tmp_path / "store", monkeypatch)}
    assert found == set()


def _dashboard_text(data_dir: Path, monkeypatch) -> str:
    """Everything the pages that show runs' events and alerts' messages draw (every element's protobuf, tables'
    cells included), from Streamlit's AppTest."""
    import streamlit as st
    from streamlit.runtime.pages_manager import PagesManager
    from streamlit.testing.v1 import AppTest

    original = PagesManager.__init__

    def steady(self, *args, **kwargs) -> None:  # a server's state after its first request (see test_app.py)
        original(self, *args, **kwargs)
        PagesManager.uses_pages_directory = False

    monkeypatch.setattr(PagesManager, "__init__", steady)
    monkeypatch.setenv("DRIFTWATCH_DATA_DIR", str(data_dir))
    monkeypatch.delenv("DRIFTWATCH_CONFIG", raising=False)
    st.cache_data.clear()
    at = AppTest.from_file(str(APP), default_timeout=120).run()
    shown = []

    def walk(node) -> None:
        if getattr(node, "proto", None) is not None:
            shown.append(str(node.proto))
        for child in getattr(node, "children", {}).values():
            walk(child)
    for page in ("pages/overview.py", "pages/trends.py", "pages/alerts.py", "pages/weekly.py"):
        at.switch_page(page).run()
        assert not at.exception, [e.value for e in at.exception]
        walk(at._tree)
    st.cache_data.clear()
    return "\n".join(shown)


@pytest.mark.parametrize("text, shown", [
    ("https://alice:s3cret@mlflow.example:5000/x", "https://alice:***@mlflow.example:5000/x"),
    ("http://127.0.0.1:8080/feed@2x.xml", "http://127.0.0.1:8080/feed@2x.xml"),  # a port, an @ in the path: kept
    ("http://h/f.xml?lang=en&Access_Token=abc&page=2", "http://h/f.xml?lang=en&Access_Token=***&page=2"),
    ("GET /f?sig=a1;apiKey=b2 failed", "GET /f?sig=***;apiKey=*** failed"),
    ("http://h/f?monkey=1", "http://h/f?monkey=***"),  # a substring match on the name: masked rather than missed
    ("Authorization: Bearer abc.def-123", "Authorization: Bearer ***"),
    ("sqlite:///tmp/mlflow.db and mlruns", "sqlite:///tmp/mlflow.db and mlruns"),
])
def test_redact_masks_the_password_secret_parameters_and_credentials_only(text, shown):
    from pipeline.redact import redact
    assert redact(text) == shown


def test_configured_values_are_masked_anywhere_and_short_ones_never(monkeypatch):
    from pipeline import redact
    from pipeline.config import AlertsConfig, Config, GenerationConfig, SourceConfig
    monkeypatch.setenv("DW_KEY", "sk-live-123456")
    config = Config(data_dir=Path("d"), gold=Path("g"),
                    sources=(SourceConfig(name="s", url="http://u:feedpass@h/f?token=feedtok"),),
                    generation=GenerationConfig(api_key_env="DW_KEY"),
                    alerts=AlertsConfig(webhook_url="https://hooks.example/services/T1/B2/xyz"))
    assert sorted(redact.config_secrets(config)) == ["/services/T1/B2/xyz", "feedpass", "feedtok", "sk-live-123456"]
    monkeypatch.setattr(redact, "_values", frozenset())
    redact.remember([*redact.config_secrets(config), "ab"])
    assert redact.redact("401: key sk-live-123456 (feedpass) at /services/T1/B2/xyz, ab") == \
        "401: key *** (***) at ***, ab"
