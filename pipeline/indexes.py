"""The dense and BM25 indexes persisted in the data directory, each with a sidecar JSON of what built it; a run
whose chunks and settings match loads them instead of rebuilding, and anything else rebuilds."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.chunking import Chunk
from pipeline.config import Config
from pipeline.retrieval import Bm25Index, DenseIndex

log = logging.getLogger(__name__)

INDEX_DIR = "indexes"  # in the data directory
SIDECAR = "index.json"
FORMAT = 1


@dataclass(frozen=True)
class Built:
    """The indexes loaded for a run (None: build it), and the sidecar they must match."""

    dense: DenseIndex | None
    bm25: Bm25Index | None
    sidecar: dict


def sidecar(config: Config, model: str, chunks: Sequence[Chunk], dimension: int) -> dict:
    """What built the indexes: model, dimension, normalisation, chunk count, the settings that shape an index,
    and a hash of the chunk ids and texts in order (positions are the indexes' ids)."""
    h = hashlib.sha256()
    for c in chunks:
        h.update(c.id.encode())
        h.update(b"\0")
        h.update(hashlib.sha256(c.text.encode()).digest())
    shape = {"chunking": dataclasses.asdict(config.chunking), "bm25": dataclasses.asdict(config.bm25),
             "dense_index": config.retrieval.dense_index, "hnsw_m": config.retrieval.hnsw_m}
    return {"format": FORMAT, "model": model, "dimension": int(dimension), "normalised": True,
            "chunks": len(chunks), "config_hash": hashlib.sha256(json.dumps(shape, sort_keys=True).encode())
            .hexdigest()[:12], "chunk_ids": h.hexdigest()[:16]}


CORPUS_KEYS = {"chunks", "chunk_ids"}  # sidecar keys that change whenever the corpus does


def load(data_dir: Path, expected: dict, config: Config) -> Built:
    """The stored indexes when their sidecar equals `expected`; otherwise none (the run builds them), with the
    mismatch logged."""
    folder = Path(data_dir) / INDEX_DIR
    try:
        stored = json.loads((folder / SIDECAR).read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return Built(None, None, expected)
    if stored != expected:
        changed = sorted(k for k in expected if stored.get(k) != expected[k])
        # New or changed chunks are every day with news (not worth a line in a demo or cron log); other
        # settings or another model are worth one.
        level = logging.DEBUG if set(changed) <= CORPUS_KEYS else logging.INFO
        log.log(level, "stored indexes were built for other chunks or settings (%s differ): rebuilding",
                ", ".join(changed))
        return Built(None, None, expected)
    dense = bm25 = None
    try:
        if (folder / "dense.faiss").is_file():
            dense = DenseIndex.load(folder / "dense.faiss", config.retrieval.dense_index)
            if dense.n != expected["chunks"]:
                dense = None
        if (folder / "bm25").is_dir():
            bm25 = Bm25Index.load(folder / "bm25", expected["chunks"], config.bm25.stopwords)
    except Exception as exc:  # a damaged file: rebuild, never fail the run over a cache
        log.warning("%s: cannot load the stored indexes (%s): rebuilding", folder, exc)
        return Built(None, None, expected)
    return Built(dense, bm25, expected)


def save(data_dir: Path, built: Built, dense: DenseIndex | None, bm25: Bm25Index | None) -> None:
    """Store the run's indexes with their sidecar, replacing the folder atomically (a new folder renamed over);
    nothing to do when they were loaded from it."""
    if (dense is None or dense is built.dense) and (bm25 is None or bm25 is built.bm25):
        return
    folder = Path(data_dir) / INDEX_DIR
    tmp = folder.with_name(f".{INDEX_DIR}-new-{os.getpid()}")  # not *.tmp: store.recover removes those files
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if dense is not None and dense.n:
        dense.save(tmp / "dense.faiss")
    if bm25 is not None and bm25.n:
        bm25.save(tmp / "bm25")
    (tmp / SIDECAR).write_text(json.dumps(built.sidecar, sort_keys=True) + "\n", encoding="utf-8")
    old = folder.with_name(f".{INDEX_DIR}-old-{os.getpid()}")
    if folder.exists():
        os.replace(folder, old)
    os.replace(tmp, folder)
    shutil.rmtree(old, ignore_errors=True)
