"""Real vector stores for the tests and the bench: a Chroma server, PostgreSQL with pgvector (pgserver), Qdrant local
mode, each started here, and the team's indexing job that writes the stream into them (driftwatch only reads)."""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import numpy as np

from pipeline.chunking import chunk_documents
from pipeline.config import Config
from pipeline.corpus import Corpus
from pipeline.embeddings import Embedder, embed_cached

START_DEADLINE = 60.0  # seconds for a server to answer after its start
DIM = 384  # all-MiniLM-L6-v2
# Chroma's index is HNSW (approximate); searched with an ef far above any k the tests ask for, over collections of a
# few thousand records, it returns the exact top k (the equality test checks it).
CHROMA_HNSW = {"space": "cosine", "ef_search": 1000, "ef_construction": 400, "max_neighbors": 32}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def chroma_server(folder: Path) -> Iterator[str]:
    """`chroma run` (the chromadb package's CLI, beside this Python) on a free port; yields its URL."""
    cli = Path(sys.executable).parent / "chroma"
    port = free_port()
    log = open(folder.parent / f"{folder.name}.log", "wb")
    process = subprocess.Popen([str(cli if cli.exists() else shutil.which("chroma")), "run", "--path", str(folder),
                                "--port", str(port), "--host", "127.0.0.1"], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        until = time.monotonic() + START_DEADLINE
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/v2/heartbeat", timeout=2):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > until:
                    raise RuntimeError(f"chroma run did not answer within {START_DEADLINE:g} s "
                                       f"(see {log.name})") from None
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


@contextlib.contextmanager
def postgres() -> Iterator[str]:
    """PostgreSQL from the pgserver wheel (its own vector.so), with the vector extension created; yields a dsn.
    Its folder is a fresh one under the temp dir that others may traverse: run as root, pgserver runs PostgreSQL as
    its own user, who cannot enter pytest's private temp folders."""
    import pgserver

    folder = Path(tempfile.mkdtemp(prefix="driftwatch-pg-"))
    folder.chmod(0o755)
    server = pgserver.get_server(folder / "data", cleanup_mode="stop")
    try:
        server.psql("CREATE EXTENSION IF NOT EXISTS vector;")
        yield server.get_uri()
    finally:
        server.cleanup()
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def servers(root: Path, dsn_env: str) -> Iterator[tuple[str, str]]:
    """A Chroma server and PostgreSQL with pgvector (its dsn in the environment variable `dsn_env`): (url, dsn)."""
    with chroma_server(root / "chroma") as url, postgres() as dsn:
        old = os.environ.get(dsn_env)
        os.environ[dsn_env] = dsn
        try:
            yield url, dsn
        finally:
            if old is None:
                del os.environ[dsn_env]
            else:
                os.environ[dsn_env] = old


@dataclass
class Records:
    """What the indexing job writes for one day: chunk ids, document ids, texts, vectors, one model stamp."""

    ids: list[str]
    doc_ids: list[str]
    texts: list[str]
    vectors: np.ndarray
    model: str


class ChromaWriter:
    def __init__(self, url: str | None, collection: str, path: Path | None = None) -> None:
        import chromadb

        if path is not None:
            self.client = chromadb.PersistentClient(path=str(path))
        else:
            host, port = url.removeprefix("http://").split(":")
            self.client = chromadb.HttpClient(host=host, port=int(port))
        self.collection = self.client.get_or_create_collection(collection, configuration={"hnsw": CHROMA_HNSW},
                                                               embedding_function=None)
        self.waits = 0  # searches that found a record just written missing

    def write(self, r: Records, gone: list[str]) -> None:
        for s in range(0, len(r.ids), 1000):
            e = s + 1000
            self.collection.upsert(ids=r.ids[s:e], embeddings=r.vectors[s:e], documents=r.texts[s:e],
                                   metadatas=[{"doc_id": d, "model": r.model} for d in r.doc_ids[s:e]])
        if gone:
            self.collection.delete(ids=gone)
        if r.ids:
            self.wait_searchable(r)

    def wait_searchable(self, r: Records) -> None:
        """Check that every record written answers a search for its own vector, waiting a little for the index to
        catch up. Chroma 1.5.9 can leave live records unreachable by query() after upserts of existing records
        (chroma-core/chroma#7758; the bench saw it when this job re-upserted every record daily): so the job writes
        only new and changed records, and stops here rather than serve an index missing some."""
        until = time.monotonic() + START_DEADLINE
        while True:
            found = self.collection.query(query_embeddings=r.vectors, n_results=3, include=[])
            missing = [i for i, hits in zip(r.ids, found["ids"]) if i not in hits]
            if not missing:
                return
            self.waits += 1
            if time.monotonic() > until:
                raise RuntimeError(f"Chroma: {len(missing)} records written are not searchable after "
                                   f"{START_DEADLINE:g} s ({missing[:3]})")
            time.sleep(0.2)

    def restate(self, record_id: str, text: str) -> None:
        """The record's text edited in place, its vector kept (as read back): a stale vector."""
        kept = self.collection.get(ids=[record_id], include=["embeddings", "metadatas"])
        self.collection.upsert(ids=[record_id], embeddings=kept["embeddings"], documents=[text],
                               metadatas=kept["metadatas"])

    def close(self) -> None:
        pass


class PgWriter:
    """A table with an HNSW index (the search must bypass it to be exact)."""

    def __init__(self, dsn: str, table: str) -> None:
        import psycopg
        from pgvector.psycopg import register_vector
        from psycopg import sql

        self.conn = psycopg.connect(dsn, autocommit=True)
        register_vector(self.conn)
        self.table = sql.Identifier(table)
        self.conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (id text PRIMARY KEY, doc_id text, body text, "
                                  "embedding vector({}), model text)").format(self.table, sql.Literal(DIM)))
        self.conn.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} USING hnsw (embedding vector_cosine_ops)")
                          .format(sql.Identifier(f"{table}_hnsw"), self.table))

    def write(self, r: Records, gone: list[str]) -> None:
        from psycopg import sql

        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.executemany(sql.SQL("INSERT INTO {} VALUES (%s, %s, %s, %s, %s) ON CONFLICT (id) DO UPDATE SET "
                                    "doc_id = EXCLUDED.doc_id, body = EXCLUDED.body, embedding = EXCLUDED.embedding, "
                                    "model = EXCLUDED.model").format(self.table),
                            [(i, d, t, v, r.model) for i, d, t, v in zip(r.ids, r.doc_ids, r.texts, r.vectors)])
            cur.execute(sql.SQL("DELETE FROM {} WHERE id = ANY(%s)").format(self.table), (gone,))

    def restate(self, record_id: str, text: str) -> None:
        from psycopg import sql

        self.conn.execute(sql.SQL("UPDATE {} SET body = %s WHERE id = %s").format(self.table), (text, record_id))

    def close(self) -> None:
        self.conn.close()


def qdrant_id(chunk_id: str) -> str:
    """Qdrant ids are integers or UUIDs: the indexing job keys a chunk by a UUID of its id."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, chunk_id))


class QdrantWriter:
    """Local mode holds its folder's lock while open: the job opens, writes and closes, as a cron job would."""

    def __init__(self, path: Path, collection: str) -> None:
        self.path, self.collection = path, collection

    def write(self, r: Records, gone: list[str]) -> None:
        from qdrant_client import QdrantClient, models

        client = QdrantClient(path=str(self.path))
        try:
            if not client.collection_exists(self.collection):
                client.create_collection(self.collection, vectors_config=models.VectorParams(
                    size=DIM, distance=models.Distance.COSINE))
            points = [models.PointStruct(id=qdrant_id(i), vector=v.tolist(),
                                         payload={"chunk_id": i, "doc_id": d, "text": t, "model": r.model})
                      for i, d, t, v in zip(r.ids, r.doc_ids, r.texts, r.vectors)]
            for s in range(0, len(points), 1000):
                client.upsert(self.collection, points[s:s + 1000])
            if gone:
                client.delete(self.collection, points_selector=models.PointIdsList(points=[qdrant_id(i) for i in gone]))
        finally:
            client.close()

    def restate(self, record_id: str, text: str) -> None:
        from qdrant_client import QdrantClient

        client = QdrantClient(path=str(self.path))
        try:
            client.set_payload(self.collection, {"text": text}, points=[qdrant_id(record_id)])
        finally:
            client.close()

    def close(self) -> None:
        pass


def load_stream(writers: Sequence, corpus: Corpus, day: date, config: Config, embedder: Embedder,
                written: dict[str, str]) -> int:
    """The team's indexing job for `day`: the documents of `corpus` (already ingested up to `day`) chunked and
    embedded as the builtin dense pipeline does (chunk_documents, the Embedder through the corpus's cache); the new
    and changed chunks upserted into every store and the chunks gone deleted, as an incremental job does.
    `written` (chunk id -> text, kept by the caller across days) is what the stores hold. Returns the chunks written."""
    chunks = chunk_documents(config, corpus.snapshot(day))
    fresh = [c for c in chunks if written.get(c.id) != c.text]
    gone = sorted(set(written) - {c.id for c in chunks})
    vectors = embed_cached(corpus, embedder, [c.text for c in fresh]).vectors if fresh else np.zeros((0, DIM))
    records = Records([c.id for c in fresh], [c.doc_id for c in fresh], [c.text for c in fresh],
                      np.asarray(vectors, dtype=np.float32), embedder.key)
    for writer in writers:
        writer.write(records, gone)
    for c in fresh:
        written[c.id] = c.text
    for chunk in gone:
        del written[chunk]
    return len(fresh)

QUALITY = ["hit", "recall", "precision", "rr", "ndcg", "unjudged", "first_relevant_rank", "retrieved"]


def replay(config: Config, writers: Sequence, days: Sequence[date], embedder: Embedder) -> None:
    """Each day: the team's indexing job loads the stores, then a run of the job scores every target. The job reads
    the same feeds into the run's own corpus first, so the stores hold the very vectors the run's dense index holds
    (from the embedding cache), and the run's ingest finds nothing new."""
    from pipeline.job import ingest, run_day

    written: dict[str, str] = {}
    for day in days:
        with Corpus.in_dir(config.data_dir) as corpus:
            ingest(config, corpus, day)
            load_stream(writers, corpus, day, config, embedder, written)
        run_day(config, day, embedder=embedder, notify=False)


def by_target(frame, name: str, keys: list[str]):
    from pipeline import contract

    return frame[frame[contract.PIPELINE] == name].drop(columns=[contract.PIPELINE]).set_index(keys).sort_index()


def differences(data_dir: Path, name: str, reference: str = "dense") -> tuple[int, int, float]:
    """Values of target `name` against `reference` over the stored series: (compared, differing, largest top-1 score
    difference). Compared: every per-question outcome (QUALITY columns) and every metric value, exactly."""
    from pipeline import contract, store

    keys = [contract.RUN_DATE, "k", "question_id"]
    questions = store.read_per_question(data_dir)
    ref, ours = by_target(questions, reference, keys), by_target(questions, name, keys)
    metrics = store.read_metrics(data_dir)
    mkeys = [contract.RUN_DATE, "k", "metric"]
    ref_m, ours_m = by_target(metrics, reference, mkeys), by_target(metrics, name, mkeys)
    if not (ours.index.equals(ref.index) and ours_m.index.equals(ref_m.index)):
        return ref[QUALITY].size + len(ref_m), ref[QUALITY].size + len(ref_m), math.inf
    differing = int((ours[QUALITY].astype(str) != ref[QUALITY].astype(str)).to_numpy().sum()
                    + (ours_m["value"].to_numpy() != ref_m["value"].to_numpy()).sum())
    top1 = float(np.max(np.abs(ours["top1_score"].to_numpy() - ref["top1_score"].to_numpy()), initial=0.0))
    return ref[QUALITY].size + len(ref_m), differing, top1
