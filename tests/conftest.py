"""Shared fixtures: the real embedding model (loaded once per session) and small configs."""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from pipeline.config import Config, EmbedderConfig, JudgingConfig, RetrievalConfig, SourceConfig
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


# --- the judging queue: two real daily runs of the news slice, and pool.csv rows of every reason ------------------

JUDGE_SLICE = DATA / "news-slice"
JUDGE_DAYS = ("2025-09-10", "2025-09-11")
JUDGE_CONFIG = "monitor.toml"  # beside the data directory: its data_dir, the slice's gold set and daily files


@dataclass(frozen=True)
class JudgeStore:
    """A data directory with a corpus, a history and a pool to judge. `queued` lists the pairs the queue holds, in
    its order; `gold_changed` is the gold document given a changed text on the second day (its pool row's pair)."""

    data_dir: Path
    config: Path
    queued: tuple[tuple[str, str], ...]
    gold_changed: tuple[str, str]
    shadow_detail: str


def _pool_rows(data_dir: Path) -> tuple[list[dict], JudgeStore]:
    from pipeline import contract
    from pipeline.corpus import Corpus
    from pipeline.gold import load_gold

    gold = {q.id: q.relevant_ids[0] for q in load_gold(JUDGE_SLICE / "gold.jsonl")}
    day = JUDGE_DAYS[1]
    detail = "A second suspect was charged on Thursday."
    with Corpus.in_dir(data_dir) as corpus:
        docs = {s.document.id: s for s in corpus.snapshot(day)}
        changed = docs[gold["n45"]].document  # the gold document of n45 gets a changed fact on the second day
        copied = docs[gold["n42"]].document  # and n42's a shadow: a near copy of it with a fact added
        shadow = f"{copied.id}-copy"
        corpus.ingest([dataclasses.replace(changed, text=changed.text + " Officials later revised the account."),
                       dataclasses.replace(copied, id=shadow, url=f"{copied.url}#copy",
                                           text=f"{copied.text} {detail}")],
                      day)
        others = sorted(d for d in docs if d not in gold.values() and docs[d].first_seen == day)
        hashes = corpus.content_hashes([shadow, *others, *gold.values()], day)
    outranking, new = others[:2]

    def row(question: str, doc: str, reason: str, rank: int, gold_doc: str = "", digest: str | None = None) -> dict:
        return {"run_date": day, "question_id": question, "doc_id": doc, "reason": reason, "pipeline": "dense",
                "rank": rank, "gold_doc_id": gold_doc, "detail": detail if reason == contract.SHADOW else "",
                "content_hash": hashes[doc] if digest is None else digest}

    rows = [row("n42", shadow, contract.SHADOW, 1, gold["n42"]),
            row("n42", shadow, contract.OUTRANKS_GOLD, 1, gold["n42"]),
            row("n43", outranking, contract.OUTRANKS_GOLD, 2, gold["n43"]),
            row("n44", new, contract.NEW_IN_TOP_K, 3),
            row("n45", gold["n45"], contract.GOLD_CHANGED, 1, gold["n45"]),
            row("n46", gold["n46"], contract.GOLD_DELETED, 0, gold["n46"], digest="")]
    # the queue's order: shadows, the changed gold document, what outranks gold, what is new; the deleted one never
    queued = (("n42", shadow), ("n45", gold["n45"]), ("n43", outranking), ("n44", new))
    return rows, JudgeStore(data_dir, Path(), queued, ("n45", gold["n45"]), detail)


@pytest.fixture(scope="session")
def judge_history(tmp_path_factory) -> JudgeStore:
    """Two daily runs of the real job on the news slice, then pool.csv rows of every reason (the pool's own
    builder is not needed to judge it): built once, copied by `judge_store`."""
    from datetime import date

    from pipeline import contract, job, store

    root = tmp_path_factory.mktemp("judge")
    daily = root / "daily"
    daily.mkdir()
    for day in JUDGE_DAYS:
        shutil.copy(JUDGE_SLICE / "daily" / f"{day}.xml", daily / f"{day}.xml")
    shutil.copy(JUDGE_SLICE / "gold.jsonl", root / "gold.jsonl")
    data_dir = root / "store"
    # The job's own pool is off: the queue's rows are the hand-made ones below (tests/test_judging_pool.py tests it).
    config = Config(data_dir=data_dir, gold=root / "gold.jsonl", sources=(SourceConfig("news", path=daily),),
                    judging=JudgingConfig(pool=False))
    for day in JUDGE_DAYS:
        job.run_day(config, date.fromisoformat(day))
    rows, built = _pool_rows(data_dir)
    store.replace_date(data_dir, contract.POOL, JUDGE_DAYS[1], rows)
    return dataclasses.replace(built, config=_judge_config(root, data_dir))


def _judge_config(root: Path, data_dir: Path) -> Path:
    path = root / JUDGE_CONFIG
    path.write_text(f'data_dir = "{data_dir}"\ngold = "{root / "gold.jsonl"}"\n\n[[sources]]\nname = "news"\n'
                    f'path = "{root / "daily"}"\n', encoding="utf-8")
    return path


@pytest.fixture()
def judge_store(judge_history, tmp_path) -> JudgeStore:
    """A fresh copy of `judge_history` (its data directory, gold set, daily files and config) for a test that
    writes judgments."""
    root = tmp_path / "judge"
    shutil.copytree(judge_history.data_dir.parent, root)
    return dataclasses.replace(judge_history, data_dir=root / "store", config=_judge_config(root, root / "store"))
