"""Shared fixtures: the real embedding model (loaded once per session) and small configs."""

from __future__ import annotations

import os
import shutil
import socket
import threading
from pathlib import Path

import pytest

from pipeline.config import Config, EmbedderConfig, RetrievalConfig, SourceConfig
from pipeline.embeddings import Embedder

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    """The real all-MiniLM-L6-v2, loaded once for every test that needs it."""
    emb = Embedder(EmbedderConfig())
    emb.model  # load now, so the first test using it is not charged for it
    return emb


@pytest.fixture()
def e2e_config(tmp_path: Path) -> Config:
    """A copy of the small end-to-end feed folder and gold set, with a fresh data directory."""
    shutil.copytree(DATA / "e2e", tmp_path / "e2e")
    return Config(
        data_dir=tmp_path / "store",
        gold=tmp_path / "e2e" / "gold.jsonl",
        sources=(SourceConfig(name="ledger", path=tmp_path / "e2e" / "feeds"),),
        retrieval=RetrievalConfig(pipelines=("bm25", "dense", "hybrid"), k=(1, 3, 5), candidate_depth=10),
    )


class DripServer:
    """A raw-socket HTTP server on localhost that answers every request with `response`, one byte every
    `interval` seconds: each byte arrives well within any read timeout, so only a deadline stops a client."""

    def __init__(self, response: bytes, interval: float = 0.3) -> None:
        self.response, self.interval = response, interval
        self.stop = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/drip"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._drip, args=(conn,), daemon=True).start()

    def _drip(self, conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            try:
                for i in range(len(self.response)):
                    if self.stop.wait(self.interval):
                        return
                    conn.sendall(self.response[i:i + 1])
            except OSError:
                pass  # the client gave up: what the tests expect


@pytest.fixture()
def drip_server():
    """Status line and headers dripped one byte every 0.3 s (about 12 s in all), then an empty body."""
    server = DripServer(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
    yield server
    server.stop.set()
    server.listener.close()


DEMO_ENV = "DRIFTWATCH_DEMO_DIR"  # a month-long demo history built beforehand (`python -m pipeline demo --data-dir D`)


@pytest.fixture(scope="session")
def demo_history(tmp_path_factory) -> Path:
    """The bundled demo's month-long history, built once per test session (a few minutes) or taken from
    $DRIFTWATCH_DEMO_DIR when it holds one. Read-only: a test that writes (acknowledges, mutes) copies it first."""
    from pipeline.demo import build_demo

    given = os.environ.get(DEMO_ENV)
    if given and (Path(given) / "runs.csv").exists():
        return Path(given)
    built = tmp_path_factory.mktemp("demo-history") / "store"
    build_demo(Config(data_dir=built, gold=Path(".")), built)
    return built
