"""Read-only connectors to the team's vector store (Chroma, PostgreSQL with pgvector, Qdrant): search by a vector and
scan every record, each client imported only when its store is opened."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit

import numpy as np

from pipeline.config import TargetConfig
from pipeline.redact import redact
from pipeline.targets import TargetError

CHROMA, PGVECTOR, QDRANT = "chroma", "pgvector", "qdrant"
DEFAULT_VECTOR_COLUMN = "embedding"  # pgvector: the column holding the vectors when `vector` is not set
# Similarities whose order is "higher is better", as the builtin dense pipeline's inner product of unit vectors.
CHROMA_SPACES = ("cosine", "ip")
QDRANT_DISTANCES = ("Cosine", "Dot")
PG_OPERATORS = {"cosine": "<=>", "ip": "<#>"}  # pgvector's cosine distance and negative inner product

T = TypeVar("T")


@dataclass(frozen=True)
class StoredVector:
    """One record of a vector store as it is stored: id, the text it holds, its vector, its model stamp."""
    id: str                     # the record's id (a chunk id or a document id)
    doc_id: str                 # the document it belongs to (= id when the store holds whole documents)
    text: str | None            # the stored text, None when the store has none
    vector: np.ndarray          # float32, as stored (not re-normalised)
    model: str | None           # the payload's model stamp when the store has one (the configured model_field)


class VectorStore(Protocol):
    name: str

    def search(self, vector: np.ndarray, k: int) -> list[tuple[str, float, str | None]]: ...

    def scan(self, batch: int = 1000) -> Iterator[StoredVector]: ...

    def close(self) -> None: ...


def _call(name: str, what: str, call: Callable[[], T]) -> T:
    """`call()`, any failure of the store's client (connection, timeout, a missing collection, a server error)
    as a TargetError naming the target: the team's store is outside driftwatch, like a target's own code."""
    try:
        return call()
    except TargetError:
        raise
    except Exception as exc:  # each client raises its own (httpx, psycopg, grpc, ValueError...)
        raise TargetError(redact(f"target {name!r}: {what}: {type(exc).__name__}: {exc}"[:600])) from exc


def _field(record: dict | None, key: str | None) -> Any:
    return None if record is None or key is None else record.get(key)


def _folder(name: str, path: Path) -> Path:
    """An embedded store's folder, which must exist: its client would create an empty store in its place."""
    if not path.is_dir():
        raise TargetError(f"target {name!r}: no store folder at {path}")
    return path


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _stored(record_id: Any, vector: Any, text: Any, payload: dict | None, config: TargetConfig) -> StoredVector:
    rid = str(record_id)
    doc_id = _field(payload, config.doc_id)
    return StoredVector(rid, str(doc_id) if doc_id is not None else rid, _text(text),
                        np.asarray(vector, dtype=np.float32), _text(_field(payload, config.model_field)))


class ChromaStore:
    """A Chroma collection, over its HTTP server (`url`) or an embedded folder (`path`). The record's document is
    its text; `doc_id` and `model_field` are metadata keys. The collection's space must be cosine or ip (hnswlib's
    distances 1 - cosine and 1 - dot: score = 1 - distance); l2's distances are not similarities."""

    def __init__(self, config: TargetConfig, base: Path) -> None:
        self.name, self.config = config.name, config
        where = redact(config.url) if config.url else str(config.path)
        self.client = _call(self.name, f"cannot reach Chroma at {where}", lambda: self._client(base))
        self.collection = _call(self.name, f"Chroma collection {config.collection!r} at {where}",
                                lambda: self.client.get_collection(config.collection, embedding_function=None))
        space = (self.collection.configuration or {}).get("hnsw", {}) or {}
        self.space = space.get("space") or (self.collection.metadata or {}).get("hnsw:space") or "l2"
        if self.space not in CHROMA_SPACES:
            raise TargetError(f"target {self.name!r}: Chroma collection {config.collection!r} uses space "
                              f"{self.space!r}; a similarity needs {' or '.join(CHROMA_SPACES)}")

    def _client(self, base: Path) -> Any:
        import chromadb

        c = self.config
        if c.path is not None:
            return chromadb.PersistentClient(path=str(_folder(self.name, base / c.path)))
        url = urlsplit(c.url)
        client = chromadb.HttpClient(host=url.hostname or "localhost", port=url.port or (443 if url.scheme == "https"
                                     else 8000), ssl=url.scheme == "https")
        # The client's httpx session waits forever by default: every call of a run has a deadline.
        session = getattr(getattr(client, "_server", None), "_session", None)
        if session is not None:
            import httpx

            session.timeout = httpx.Timeout(c.timeout)
        return client

    def search(self, vector: np.ndarray, k: int) -> list[tuple[str, float, str | None]]:
        answer = _call(self.name, "Chroma query", lambda: self.collection.query(
            query_embeddings=[np.asarray(vector, dtype=np.float32)], n_results=k,
            include=["documents", "metadatas", "distances"]))
        ids, distances = answer["ids"][0], answer["distances"][0]
        texts = (answer.get("documents") or [[None] * len(ids)])[0]
        metas = (answer.get("metadatas") or [[None] * len(ids)])[0]
        return [(str(_field(m, self.config.doc_id) or i), 1.0 - d, _text(t))
                for i, d, t, m in zip(ids, distances, texts, metas)]

    def scan(self, batch: int = 1000) -> Iterator[StoredVector]:
        offset = 0
        while True:
            page = _call(self.name, "Chroma get", lambda: self.collection.get(
                limit=batch, offset=offset, include=["embeddings", "documents", "metadatas"]))
            ids = page["ids"]
            for n, record_id in enumerate(ids):
                yield _stored(record_id, page["embeddings"][n], (page.get("documents") or [None] * len(ids))[n],
                              (page.get("metadatas") or [None] * len(ids))[n], self.config)
            if len(ids) < batch:
                return
            offset += batch

    def close(self) -> None:
        self.collection = None  # the clients hold no connection to release


class PgVectorStore:
    """A PostgreSQL table with a pgvector column, read in one read-only session. Search is exact (index scans are
    off in its transaction, so an HNSW or IVFFlat index cannot make it approximate), by `<=>` (cosine: score =
    1 - distance) or `<#>` (negative inner product: score = -distance); every statement has a timeout."""

    def __init__(self, config: TargetConfig, base: Path) -> None:
        self.name, self.config = config.name, config
        dsn = os.environ.get(config.dsn_env or "")
        if not dsn:
            raise TargetError(f"target {self.name!r}: the environment variable {config.dsn_env} (its dsn) is not set")
        self.conn = _call(self.name, f"cannot connect to PostgreSQL (dsn from ${config.dsn_env})",
                          lambda: self._connect(dsn))
        from psycopg import sql

        c = self.config
        self.columns = sql.SQL(", ").join(
            sql.Identifier(n) if n else sql.NULL
            for n in (c.id, c.doc_id, c.text, c.vector or DEFAULT_VECTOR_COLUMN, c.model_field))
        self.table = sql.Identifier(*c.table.split(".", 1))
        self.vector = sql.Identifier(c.vector or DEFAULT_VECTOR_COLUMN)
        self.operator = PG_OPERATORS[c.distance]
        # The table and every configured column now, so a wrong name fails the target before its first question.
        _call(self.name, f"pgvector table {c.table}", lambda: self._rows(
            sql.SQL("SELECT {} FROM {} LIMIT 0").format(self.columns, self.table), ()))

    def _connect(self, dsn: str) -> Any:
        import psycopg
        from pgvector.psycopg import register_vector

        ms = int(self.config.timeout * 1000)
        conn = psycopg.connect(dsn, connect_timeout=max(1, round(self.config.timeout)),
                               options=f"-c statement_timeout={ms} -c default_transaction_read_only=on")
        register_vector(conn)
        return conn

    def _rows(self, query: Any, params: tuple) -> list[tuple]:
        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.execute("SET LOCAL enable_indexscan = off")
            cur.execute(query, params)
            return cur.fetchall()

    def search(self, vector: np.ndarray, k: int) -> list[tuple[str, float, str | None]]:
        from psycopg import sql

        query = sql.SQL("SELECT {columns}, {vector} {op} %s FROM {table} ORDER BY {vector} {op} %s LIMIT %s").format(
            columns=self.columns, vector=self.vector, op=sql.SQL(self.operator), table=self.table)
        v = np.asarray(vector, dtype=np.float32)
        rows = _call(self.name, f"pgvector search of {self.config.table}", lambda: self._rows(query, (v, v, k)))
        cosine = self.config.distance == "cosine"
        return [(str(doc if doc is not None else rid), (1.0 - d) if cosine else -d, _text(text))
                for rid, doc, text, _, _, d in rows]

    def scan(self, batch: int = 1000) -> Iterator[StoredVector]:
        from psycopg import sql

        c = self.config
        query = sql.SQL("SELECT {columns} FROM {table} WHERE {id}::text > %s ORDER BY {id}::text LIMIT %s").format(
            columns=self.columns, table=self.table, id=sql.Identifier(c.id))
        after = ""  # keyset pagination: stable under concurrent writes, no OFFSET rescans
        while True:
            rows = _call(self.name, f"pgvector scan of {c.table}", lambda: self._rows(query, (after, batch)))
            for rid, doc, text, vector, model in rows:
                yield StoredVector(str(rid), str(doc if doc is not None else rid), _text(text),
                                   np.asarray(vector.to_numpy() if hasattr(vector, "to_numpy") else vector,
                                              dtype=np.float32), _text(model))
            if len(rows) < batch:
                return
            after = str(rows[-1][0])

    def close(self) -> None:
        self.conn.close()


class QdrantStore:
    """A Qdrant collection, on a server (`url`) or in local mode (`path`): the same client and calls. Payload keys
    `text`, `doc_id` and `model_field`; `vector` names the vector when the collection has several. Its distance
    must be Cosine or Dot (scores are similarities, higher is better). A record's id is its payload's `id` key when it
has one (point ids are integers or UUIDs, so a chunk's own id usually lives in the payload), else the point id."""

    def __init__(self, config: TargetConfig, base: Path) -> None:
        self.name, self.config = config.name, config
        where = redact(config.url) if config.url else str(config.path)
        self.client = _call(self.name, f"cannot open Qdrant at {where}", lambda: self._client(base))
        info = _call(self.name, f"Qdrant collection {config.collection!r} at {where}",
                     lambda: self.client.get_collection(config.collection))
        vectors = info.config.params.vectors
        params = vectors.get(config.vector) if isinstance(vectors, dict) else vectors
        if params is None:
            raise TargetError(f"target {self.name!r}: Qdrant collection {config.collection!r} has no vector "
                              f"{config.vector!r} (it has {', '.join(vectors)})")
        distance = getattr(params.distance, "value", str(params.distance))
        if distance not in QDRANT_DISTANCES:
            raise TargetError(f"target {self.name!r}: Qdrant collection {config.collection!r} uses distance "
                              f"{distance}; a similarity needs {' or '.join(QDRANT_DISTANCES)}")

    def _client(self, base: Path) -> Any:
        from qdrant_client import QdrantClient

        if self.config.path is not None:
            return QdrantClient(path=str(_folder(self.name, base / self.config.path)))
        return QdrantClient(url=self.config.url, timeout=max(1, round(self.config.timeout)))

    def _payload_keys(self) -> list[str]:
        return [k for k in (self.config.id, self.config.text, self.config.doc_id, self.config.model_field) if k]

    def search(self, vector: np.ndarray, k: int) -> list[tuple[str, float, str | None]]:
        from qdrant_client import models

        c = self.config
        # exact=True on a server: a full scan, not the HNSW graph, so the ranking is the builtin flat index's (local
        # mode always scans, and warns when asked).
        exact = models.SearchParams(exact=True) if self.config.url else None
        answer = _call(self.name, "Qdrant query_points", lambda: self.client.query_points(
            c.collection, query=np.asarray(vector, dtype=np.float32).tolist(), using=c.vector, limit=k,
            with_payload=self._payload_keys() or False, search_params=exact))
        return [(str(_field(p.payload, c.doc_id) or p.id), float(p.score), _text(_field(p.payload, c.text)))
                for p in answer.points]

    def scan(self, batch: int = 1000) -> Iterator[StoredVector]:
        c = self.config
        offset = None
        while True:
            points, offset = _call(self.name, "Qdrant scroll", lambda: self.client.scroll(
                c.collection, limit=batch, offset=offset, with_payload=self._payload_keys() or False,
                with_vectors=[c.vector] if c.vector else True))
            for p in points:
                vector = p.vector.get(c.vector) if isinstance(p.vector, dict) else p.vector
                # Point ids are integers or UUIDs: a record's own id (a chunk id) is its payload's `id` key, if any.
                yield _stored(_field(p.payload, c.id) or p.id, vector, _field(p.payload, c.text), p.payload, c)
            if offset is None:
                return

    def close(self) -> None:
        self.client.close()


STORES: dict[str, Callable[[TargetConfig, Path], VectorStore]] = {
    CHROMA: ChromaStore, PGVECTOR: PgVectorStore, QDRANT: QdrantStore}


def open_store(config: TargetConfig, base: Path) -> VectorStore:
    """The store a chroma, pgvector or qdrant target reads, opened read-only (`base`: the folder relative paths
    are under). Raises targets.TargetError with the target's name and why (unreachable, no such collection, a
    distance that is not a similarity, the dsn's variable unset)."""
    return STORES[config.kind](config, base)
