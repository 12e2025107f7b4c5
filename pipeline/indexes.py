"""The dense and BM25 indexes persisted in the data directory, each with a sidecar JSON of what built it, and the
per-chunk BM25 token counts: a run whose settings match reuses every stored chunk's vector and counts (loading the
indexes as they are when its chunks match exactly), computes only the new chunks', and rebuilds on anything else."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline import jsonl
from pipeline.chunking import Chunk
from pipeline.config import Config
from pipeline.corpus import text_hash
from pipeline.embeddings import Embedded
from pipeline.retrieval import Bm25Index, DenseIndex, TermCounts, indexes_needed, stopword_set

log = logging.getLogger(__name__)

INDEX_DIR = "indexes"  # in the data directory
SIDECAR = "index.json"
DENSE = "dense.faiss"
BM25 = "bm25"  # the bm25s folder
CHUNKS = "chunks.json"  # {"ids": [...], "hashes": [...]}: the indexed chunks in index order (text hashes as the cache's)
COUNTS = "bm25_counts.npz"  # the TermCounts matrix (data, indices, indptr) and lengths, rows in index order
VOCAB = "bm25_vocab.json"  # the TermCounts vocabulary, a JSON list (column order)
FORMAT = 2

LOADED, UPDATED, BUILT = "loaded", "updated", "built"  # Prepared.how

def sidecar(config: Config, model: str, chunks: Sequence[Chunk], dimension: int,
            hashes: Sequence[str] | None = None) -> dict:
    """What built the indexes: model, dimension, normalisation, chunk count, the settings that shape an index,
    and a hash of the chunk ids and texts in order (positions are the indexes' ids). `hashes`: the chunks'
    `text_hash`es when known."""
    h = hashlib.sha256()
    for c, th in zip(chunks, hashes or [text_hash(c.text) for c in chunks]):
        h.update(c.id.encode())
        h.update(b"\0")
        h.update(bytes.fromhex(th))
    shape = {"chunking": dataclasses.asdict(config.chunking), "bm25": dataclasses.asdict(config.bm25),
             "dense_index": config.retrieval.dense_index, "hnsw_m": config.retrieval.hnsw_m}
    return {"format": FORMAT, "model": model, "dimension": int(dimension), "normalised": True,
            "chunks": len(chunks), "config_hash": hashlib.sha256(json.dumps(shape, sort_keys=True).encode())
            .hexdigest()[:12], "chunk_ids": h.hexdigest()[:16]}


CORPUS_KEYS = {"chunks", "chunk_ids"}  # sidecar keys that change whenever the corpus does


@dataclass(frozen=True)
class Prepared:
    """A run's indexes over its chunks (None: no configured pipeline needs it), every chunk's vector in the run's
    order, the sidecar, and how they were obtained: LOADED as stored, UPDATED (the stored chunks' vectors and
    counts reused, the others' added) or BUILT from scratch."""

    dense: DenseIndex | None
    bm25: Bm25Index | None
    embedded: Embedded
    sidecar: dict
    how: str
    chunk_ids: tuple[str, ...]
    hashes: tuple[str, ...]
    reused: int = 0  # chunks whose vector (and counts) came from the stored indexes


@dataclass
class _Stored:
    """What the stored folder holds for an update: its chunks' text hashes (index order), their vectors and their
    token counts (None when not stored)."""

    hashes: list[str]
    vectors: np.ndarray | None
    counts: TermCounts | None


VectorsOf = Callable[[Sequence[Chunk]], Embedded]


def prepare(data_dir: Path, chunks: Sequence[Chunk], config: Config, model: str, vectors_of: VectorsOf, *,
            reuse: bool = True) -> Prepared:
    """The run's indexes over `chunks` (in this order), `config.retrieval.pipelines` deciding which, and the
    vectors of all chunks; `vectors_of(chunks)` gives the cached vectors of the chunks it is given.

    - the stored sidecar equals the run's: the stored indexes are loaded as they are (their vectors read back);
    - only the chunks differ (same format, model, settings): every chunk whose text the stored indexes hold gets
      its vector from the stored FAISS index and its BM25 counts from the stored counts, only the others' come
      from `vectors_of` and the tokenizer; both indexes are then built over all chunks in the run's order (the
      flat index is the vectors copied, BM25 `Bm25Index.from_counts`), so they equal a build from scratch,
      ties included. An HNSW index reuses the vectors but builds its graph again, as a rebuild does;
    - anything else (another model or setting, an older format, `reuse` False, a damaged file: warned):
      everything built from `vectors_of` and the texts.
    """
    hashes = [text_hash(c.text) for c in chunks]
    needs_dense, needs_bm25 = indexes_needed(config.retrieval.pipelines)
    folder = Path(data_dir) / INDEX_DIR
    stored = _read_sidecar(folder) if reuse and chunks else None
    expected = sidecar(config, model, chunks, stored.get("dimension", 0) if stored else 0, hashes)
    if stored is not None:
        changed = sorted(k for k in expected if stored.get(k) != expected[k])
        try:
            if not changed:
                loaded = _load_as_stored(folder, chunks, hashes, config, expected, needs_dense, needs_bm25)
                if loaded is not None:
                    return loaded
            if set(changed) <= CORPUS_KEYS:
                found = _read_stored(folder, stored, needs_bm25)
                if found is not None:
                    return _update(found, chunks, hashes, config, expected, vectors_of, needs_dense, needs_bm25)
            else:
                log.info("stored indexes were built for other settings (%s differ): rebuilding",
                         ", ".join(k for k in changed if k not in CORPUS_KEYS))
        except _Damaged as exc:  # never fail the run over a cache
            log.warning("%s: cannot use the stored indexes (%s): rebuilding", folder, exc.__cause__ or exc)
    return _from_scratch(chunks, hashes, config, expected, vectors_of(chunks), needs_dense, needs_bm25)


def keep(data_dir: Path, prepared: Prepared) -> None:
    """Store what `prepare` gave (indexes, counts, chunks, sidecar; see `_write`) unless it was loaded as stored."""
    if prepared.how != LOADED:
        _write(Path(data_dir) / INDEX_DIR, prepared.sidecar, prepared.dense, prepared.bm25,
               {"ids": list(prepared.chunk_ids), "hashes": list(prepared.hashes)})


class _Damaged(Exception):
    """A stored file that cannot be read or does not fit its sidecar (the cause chained)."""


def _read_sidecar(folder: Path) -> dict | None:
    try:
        stored = jsonl.loads_bounded((folder / SIDECAR).read_text(encoding="utf-8"), folder / SIDECAR)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("%s: cannot read %s (%s): rebuilding", folder, SIDECAR, exc)
        return None
    return stored if isinstance(stored, dict) else None


def _load_as_stored(folder: Path, chunks: Sequence[Chunk], hashes: list[str], config: Config, expected: dict,
                    needs_dense: bool, needs_bm25: bool) -> Prepared | None:
    """The stored indexes as they are, when every one the pipelines need and the vectors are there."""
    if not (folder / DENSE).is_file() or (needs_bm25 and not (folder / BM25).is_dir()):
        return None
    try:
        dense = DenseIndex.load(folder / DENSE, config.retrieval.dense_index)
        bm25 = Bm25Index.load(folder / BM25, len(chunks), config.bm25.stopwords) if needs_bm25 else None
    except Exception as exc:
        raise _Damaged() from exc
    if dense.n != len(chunks) or dense.index.d != expected["dimension"]:
        raise _Damaged(f"{DENSE} holds {dense.n} vectors of {dense.index.d} dimensions, the sidecar says "
                       f"{len(chunks)} of {expected['dimension']}")
    return Prepared(dense if needs_dense else None, bm25, Embedded(dense.vectors(), 0), expected, LOADED,
                    tuple(c.id for c in chunks), tuple(hashes), len(chunks))


def _read_stored(folder: Path, stored: dict, needs_bm25: bool) -> _Stored | None:
    """The stored chunks with their vectors and counts (each None when not stored), checked against each other
    and the sidecar; None when the chunks were not recorded."""
    try:
        listed = jsonl.loads_bounded((folder / CHUNKS).read_text(encoding="utf-8"), folder / CHUNKS)
    except FileNotFoundError:
        log.info("%s: no %s (the stored chunks): rebuilding", folder, CHUNKS)
        return None
    except (OSError, ValueError) as exc:
        raise _Damaged() from exc
    hashes = listed.get("hashes") if isinstance(listed, dict) else None
    if not isinstance(hashes, list) or len(hashes) != stored.get("chunks"):
        raise _Damaged(f"{CHUNKS} does not list the sidecar's {stored.get('chunks')} chunks")
    vectors = counts = None
    try:
        if (folder / DENSE).is_file():
            vectors = DenseIndex.load(folder / DENSE, "flat").vectors()
        if needs_bm25 and (folder / COUNTS).is_file():
            counts = _load_counts(folder)
    except Exception as exc:
        raise _Damaged() from exc
    if vectors is not None and vectors.shape != (len(hashes), stored.get("dimension")):
        raise _Damaged(f"{DENSE} holds {vectors.shape} vectors, the sidecar says "
                       f"{(len(hashes), stored.get('dimension'))}")
    if counts is not None and counts.matrix.shape[0] != len(hashes):
        raise _Damaged(f"{COUNTS} holds {counts.matrix.shape[0]} chunks, the sidecar says {len(hashes)}")
    return _Stored(hashes, vectors, counts)


def _update(found: _Stored, chunks: Sequence[Chunk], hashes: list[str], config: Config, expected: dict,
            vectors_of: VectorsOf, needs_dense: bool, needs_bm25: bool) -> Prepared:
    """Indexes over `chunks` from the stored chunks' vectors and counts (by text) and the new chunks' own."""
    position = {h: i for i, h in enumerate(found.hashes)}
    source = np.fromiter((position.get(h, -1) for h in hashes), dtype=np.int64, count=len(hashes))
    new = np.flatnonzero(source < 0)
    fresh = [chunks[i] for i in new]
    if found.vectors is None:
        embedded = vectors_of(chunks)
    else:
        vectors = found.vectors[np.maximum(source, 0)]
        found.vectors = None  # the stored copy is no longer needed
        n_encoded = 0
        if len(fresh):
            added = vectors_of(fresh)
            if added.vectors.shape[1:] != vectors.shape[1:]:
                log.info("the new chunks' vectors have %s dimensions, the stored ones %s: rebuilding",
                         added.vectors.shape[-1], vectors.shape[-1])
                every = vectors_of(chunks)
                return _from_scratch(chunks, hashes, config, expected,
                                     Embedded(every.vectors, every.n_encoded + added.n_encoded), needs_dense,
                                     needs_bm25)
            vectors[new], n_encoded = added.vectors, added.n_encoded
        embedded = Embedded(vectors, n_encoded)
    counts = None
    if needs_bm25:
        stopwords = stopword_set(config.bm25.stopwords)
        if found.counts is None:
            counts = TermCounts.of_texts([c.text for c in chunks], stopwords)
        else:
            added_counts = TermCounts.of_texts([c.text for c in fresh], stopwords, found.counts.vocab)
            order = source.copy()
            order[new] = len(found.hashes) + np.arange(len(new))
            counts = found.counts.rows(order, added_counts)
    log.debug("stored indexes updated: %d chunks kept, %d new, %d no longer indexed", len(chunks) - len(new),
              len(new), len(found.hashes) - len(set(source[source >= 0].tolist())))
    return _built(UPDATED, chunks, hashes, config, expected, embedded, counts, needs_dense, len(chunks) - len(new))


def _from_scratch(chunks: Sequence[Chunk], hashes: list[str], config: Config, expected: dict, embedded: Embedded,
                  needs_dense: bool, needs_bm25: bool) -> Prepared:
    counts = TermCounts.of_texts([c.text for c in chunks], stopword_set(config.bm25.stopwords)) if needs_bm25 else None
    return _built(BUILT, chunks, hashes, config, expected, embedded, counts, needs_dense, 0)


def _built(how: str, chunks: Sequence[Chunk], hashes: list[str], config: Config, expected: dict, embedded: Embedded,
           counts: TermCounts | None, needs_dense: bool, reused: int) -> Prepared:
    """The indexes over `chunks` from their vectors and counts, with `expected`'s sidecar (the vectors' dimension)."""
    b = config.bm25
    return Prepared(DenseIndex(embedded.vectors, config.retrieval) if needs_dense else None,
                    Bm25Index.from_counts(counts, b.k1, b.b, b.method, b.stopwords) if counts is not None else None,
                    embedded, {**expected, "dimension": int(embedded.vectors.shape[-1])}, how,
                    tuple(c.id for c in chunks), tuple(hashes), reused)


def _load_counts(folder: Path) -> TermCounts:
    """The stored counts, checked for consistency (a damaged file raises ValueError)."""
    from scipy import sparse

    vocab = jsonl.loads_bounded((folder / VOCAB).read_text(encoding="utf-8"), folder / VOCAB)
    with np.load(folder / COUNTS, allow_pickle=False) as stored:
        data, indices, indptr, lengths = (stored[k] for k in ("data", "indices", "indptr", "lengths"))
    n = len(lengths)
    if (not isinstance(vocab, list) or indptr.shape != (n + 1,) or indptr[0] != 0 or indptr[-1] != len(data)
            or len(indices) != len(data) or np.any(np.diff(indptr) < 0) or np.any(data <= 0)
            or (len(indices) and (indices.min() < 0 or indices.max() >= len(vocab)))):
        raise ValueError(f"{COUNTS} is not a matrix of counts over {VOCAB}")
    total = np.r_[0, np.cumsum(data, dtype=np.int64)]
    if not np.array_equal(total[indptr[1:]] - total[indptr[:-1]], lengths):
        raise ValueError(f"{COUNTS}: the chunk lengths are not the sums of their counts")
    matrix = sparse.csr_matrix((data.astype(np.int32), indices.astype(np.int32), indptr.astype(np.int64)),
                               shape=(n, len(vocab)))
    return TermCounts(matrix, vocab, lengths.astype(np.int64))


def _write(folder: Path, sidecar_: dict, dense: DenseIndex | None, bm25: Bm25Index | None,
           chunks: dict | None = None) -> None:
    """The indexes, the BM25 counts (when the index was built from them), the chunks in index order and the
    sidecar, replacing the folder atomically (a new folder renamed over)."""
    tmp = folder.with_name(f".{INDEX_DIR}-new-{os.getpid()}")  # not *.tmp: store.recover removes those files
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if dense is not None and dense.n:
        dense.save(tmp / DENSE)
    if bm25 is not None and bm25.n:
        bm25.save(tmp / BM25)
        if bm25.counts is not None:
            m = bm25.counts.matrix
            np.savez(tmp / COUNTS, data=m.data, indices=m.indices, indptr=m.indptr, lengths=bm25.counts.lengths)
            (tmp / VOCAB).write_text(json.dumps(bm25.counts.vocab, ensure_ascii=False), encoding="utf-8")
    if chunks is not None:
        (tmp / CHUNKS).write_text(json.dumps(chunks), encoding="utf-8")
    (tmp / SIDECAR).write_text(json.dumps(sidecar_, sort_keys=True) + "\n", encoding="utf-8")
    old = folder.with_name(f".{INDEX_DIR}-old-{os.getpid()}")
    if folder.exists():
        os.replace(folder, old)
    os.replace(tmp, folder)
    shutil.rmtree(old, ignore_errors=True)
