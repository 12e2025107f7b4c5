"""Retrieval pipelines over chunks: dense (FAISS), BM25 (bm25s), RRF fusion and cross-encoder rerank.

Every pipeline ranks chunks, collapses them to documents (a document scores as its best chunk)
and returns at most `candidate_depth` documents, so all pipelines are compared at the same depth.
"""

from __future__ import annotations

import logging
import math
import re
import sys
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from pipeline.chunking import Chunk
from pipeline.config import Config, RerankConfig, RetrievalConfig

if TYPE_CHECKING:
    from scipy import sparse

log = logging.getLogger(__name__)

_WORD = re.compile(r"\w+", re.UNICODE)
RERANKER = "reranker"  # how messages name the cross-encoder
_ABSENT = object()


@dataclass(frozen=True)
class Ranking:
    """One question's ranked documents, best first, with each document's score and best chunk (an external
    target has no chunks; it may return each document's text instead)."""

    doc_ids: tuple[str, ...]
    scores: tuple[float, ...]
    chunk_ids: tuple[str, ...]
    texts: tuple[str | None, ...] = ()

    @property
    def top1_score(self) -> float:
        return self.scores[0] if self.scores else float("nan")


EMPTY = Ranking((), (), ())


def tokenize(text: str, stopwords: frozenset[str] = frozenset()) -> list[str]:
    """Lower-cased Unicode word tokens (Latin, Cyrillic, Greek, CJK runs...), NFKC-normalised.

    Unlike an ASCII pattern this keeps "Москва" or "Zürich" whole, and it keeps one-character
    tokens so that identifiers such as "REG-2026/114/B" stay matchable as reg, 2026, 114, b.
    """
    words = _WORD.findall(unicodedata.normalize("NFKC", text).casefold())
    return [w for w in words if w not in stopwords] if stopwords else words


def import_bm25s():
    """bm25s, imported when a BM25 index is built or loaded (0.8 s, numba included), on its numpy top-k and with
    the DEBUG level its import gives its logger put back to WARNING.

    bm25s imports JAX at its own import whenever JAX is installed (and then runs an XLA top-k that logs a TPU
    warning), to use it for the top-k of `retrieve`. Our scores come from `get_scores`, and JAX doubled a day's
    run on machines that have it: JAX is hidden while bm25s loads, so bm25s finds it unavailable and any top-k it
    computes is numpy's. A JAX that the process imported itself is put back untouched."""
    if "bm25s" not in sys.modules:
        before = sys.modules.get("jax", _ABSENT)
        sys.modules["jax"] = None  # `import jax` raises ImportError, which bm25s takes as "not installed"
        try:
            import bm25s  # noqa: F401
        finally:
            if before is _ABSENT:
                del sys.modules["jax"]
            else:
                sys.modules["jax"] = before
    logging.getLogger("bm25s").setLevel(logging.WARNING)
    return sys.modules["bm25s"]


def stopword_set(name: str) -> frozenset[str]:
    if name == "none":
        return frozenset()
    import_bm25s()
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN)


@dataclass(frozen=True)
class ChunkTable:
    """The chunks a run indexes, with each chunk's document as an integer for fast collapsing."""

    chunks: tuple[Chunk, ...]
    doc_ids: tuple[str, ...]  # distinct documents, in first-chunk order
    doc_of_chunk: np.ndarray  # (n_chunks,) index into doc_ids

    @classmethod
    def build(cls, chunks: Sequence[Chunk]) -> ChunkTable:
        index: dict[str, int] = {}
        of_chunk = np.fromiter((index.setdefault(c.doc_id, len(index)) for c in chunks), dtype=np.int64,
                               count=len(chunks))
        return cls(tuple(chunks), tuple(index), of_chunk)

    def collapse(self, order: np.ndarray, scores: np.ndarray, depth: int) -> Ranking:
        """Documents in order of their best chunk, given chunk positions sorted best first."""
        docs = self.doc_of_chunk[order]
        _, first = np.unique(docs, return_index=True)
        keep = np.sort(first)[:depth]
        return Ranking(tuple(self.doc_ids[d] for d in docs[keep]), tuple(float(s) for s in scores[keep]),
                       tuple(self.chunks[c].id for c in order[keep]))


def _best_first(table: ChunkTable, scores: np.ndarray, positions: np.ndarray, depth: int) -> Ranking:
    """`table.collapse` of every chunk sorted by `_sorted_desc`, sorting only the best-scored chunks: those scoring
    at least the m-th best score (ties included, so they are a prefix of the full order), m growing until they
    hold `depth` documents."""
    n = len(scores)
    m = max(4 * depth, 64)
    while m < n:
        cut = np.partition(scores, n - m)[n - m]
        best = scores >= cut
        ranking = table.collapse(*_sorted_desc(scores[best], positions[best]), depth)
        if len(ranking.doc_ids) >= depth:
            return ranking
        m *= 4
    return table.collapse(*_sorted_desc(scores, positions), depth)


def _sorted_desc(scores: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sort by score descending; ties keep chunk order (document id order), so results are stable."""
    order = np.lexsort((positions, -scores))
    return positions[order], scores[order]


BLAS_QUERIES = 20  # FAISS scores a batch of at least this many queries with one matrix product


class DenseIndex:
    """FAISS inner product over L2-normalised vectors (cosine): exact by default, HNSW on request."""

    def __init__(self, vectors: np.ndarray, config: RetrievalConfig) -> None:
        import faiss

        self.n, dim = vectors.shape if vectors.size else (0, 0)
        self.kind = config.dense_index
        if self.kind == "hnsw":
            self.index = faiss.IndexHNSWFlat(max(dim, 1), config.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            self.index.hnsw.efSearch = config.hnsw_ef_search
        else:
            self.index = faiss.IndexFlatIP(max(dim, 1))
        if self.n:
            self.index.add(np.ascontiguousarray(vectors, dtype=np.float32))

    def search(self, queries: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        import faiss

        # The exact search of a batch of queries as one BLAS product (FAISS's historical default, from 20
        # queries): the FAISS wheel's threshold is 128,000, below which it scores query by query, 3 to 4 times
        # slower for 50 questions over 100,000 chunks (0.44 s against 0.12 s; the same ids, scores within 1e-7).
        faiss.cvar.distance_compute_blas_threshold = BLAS_QUERIES
        scores, ids = self.index.search(np.ascontiguousarray(queries, dtype=np.float32), min(n, self.n))
        return scores, ids

    def vectors(self) -> np.ndarray:
        """The vectors the index holds, in order (as added: the same float32 values)."""
        if not self.n:
            return np.zeros((0, 0), dtype=np.float32)
        return self.index.reconstruct_n(0, self.n)

    def save(self, path: Path) -> None:
        import faiss

        faiss.write_index(self.index, str(path))

    @classmethod
    def load(cls, path: Path, kind: str) -> DenseIndex:
        import faiss

        index = cls.__new__(cls)
        index.index, index.kind = faiss.read_index(str(path)), kind
        index.n = index.index.ntotal
        return index


@dataclass(frozen=True)
class TermCounts:
    """Each chunk's BM25 token counts: a CSR matrix (chunks x vocabulary, int32), the vocabulary, and each chunk's
    token length (its row's sum). A chunk's row depends on its text and the stopwords only, so a stored row is
    reused for the same text."""

    matrix: sparse.csr_matrix
    vocab: list[str]
    lengths: np.ndarray  # (n_chunks,) int64

    @classmethod
    def of_texts(cls, texts: Sequence[str], stopwords: frozenset[str], vocab: Sequence[str] = ()) -> TermCounts:
        """The counts of `texts` tokenised; token ids continue `vocab` (tokens not in it are appended)."""
        from scipy import sparse

        index = {t: i for i, t in enumerate(vocab)}
        ids: list[int] = []
        indptr = np.zeros(len(texts) + 1, dtype=np.int64)
        for row, text in enumerate(texts):
            ids.extend([index.setdefault(t, len(index)) for t in tokenize(text, stopwords)])
            indptr[row + 1] = len(ids)
        matrix = sparse.csr_matrix((np.ones(len(ids), dtype=np.int32), np.asarray(ids, dtype=np.int32), indptr),
                                   shape=(len(texts), len(index)))
        matrix.sum_duplicates()
        return cls(matrix, list(index), np.diff(indptr))

    def rows(self, order: np.ndarray, fresh: TermCounts | None = None) -> TermCounts:
        """The rows at `order` (positions past these counts' rows are `fresh`'s, whose vocabulary continues this
        one), with the vocabulary cut to the tokens they hold: the counts a build over those chunks would have."""
        from scipy import sparse

        matrix, vocab, lengths = self.matrix, self.vocab, self.lengths
        if fresh is not None:
            vocab = fresh.vocab
            matrix = sparse.vstack([sparse.csr_matrix((matrix.data, matrix.indices, matrix.indptr),
                                                      shape=(matrix.shape[0], len(vocab))), fresh.matrix],
                                   format="csr", dtype=np.int32)
            lengths = np.concatenate([lengths, fresh.lengths])
        matrix = matrix[np.asarray(order, dtype=np.int64)]
        marked = np.zeros(len(vocab), dtype=bool)
        marked[matrix.indices] = True
        held = np.flatnonzero(marked)
        if len(held) < len(vocab):
            new_id = np.zeros(len(vocab), dtype=np.int32)
            new_id[held] = np.arange(len(held), dtype=np.int32)
            matrix = sparse.csr_matrix((matrix.data, new_id[matrix.indices], matrix.indptr),
                                       shape=(matrix.shape[0], len(held)))
            vocab = [vocab[i] for i in held]
        return TermCounts(matrix, list(vocab), lengths[order])


class Bm25Index:
    """bm25s over the chunks, with the Unicode tokenizer above."""

    counts: TermCounts | None = None  # set when built from counts (what `pipeline.indexes` stores)

    def __init__(self, texts: Sequence[str], k1: float, b: float, method: str, stopwords: str) -> None:
        bm25s = import_bm25s()

        self.stopwords = stopword_set(stopwords)
        self.n = len(texts)
        self.model = bm25s.BM25(k1=k1, b=b, method=method)
        if self.n:
            self.model.index([tokenize(t, self.stopwords) for t in texts], show_progress=False)

    @classmethod
    def from_counts(cls, counts: TermCounts, k1: float, b: float, method: str, stopwords: str) -> Bm25Index:
        """The index bm25s's `index()` builds over the same chunks, computed from their token counts without a
        Python loop over chunks: every stored score is the same float32, and so is every query's score.

        bm25s scores a document's tokens with its scorer functions called on (float32 counts, the document's
        length as an int, the mean length as a float64 scalar); calling them once per distinct length, on every
        count of the documents of that length, keeps those argument types and so numpy's promotion of them
        (float64 under numpy 2, float32 under numpy 1). Idf is bm25s's function per distinct document frequency.
        Token ids follow the counts' vocabulary (bm25s's follow a set's order): a query's scores do not depend
        on them, being summed in the query's token order.
        """
        bm25s = import_bm25s()
        from bm25s.scoring import _select_idf_scorer, _select_tfc_scorer
        from scipy import sparse

        n = counts.matrix.shape[0]
        if not n:
            return cls((), k1, b, method, stopwords)
        df = np.bincount(counts.matrix.indices, minlength=len(counts.vocab))
        if not df.all():  # tokens no chunk holds: bm25s would not know them
            counts = counts.rows(np.arange(n))
            df = df[df > 0]
        index = cls.__new__(cls)
        index.stopwords, index.n, index.counts = stopword_set(stopwords), n, counts
        model = index.model = bm25s.BM25(k1=k1, b=b, method=method)
        dtype = np.dtype(model.dtype)
        n_vocab = len(counts.vocab)
        avg_len = np.asarray(counts.lengths, dtype=np.int64).mean()
        tfc_of, idf_of = _select_tfc_scorer(model.method), _select_idf_scorer(model.idf_method)
        dfs, df_index = np.unique(df, return_inverse=True)
        idf_by_df = [idf_of(int(d), N=n) for d in dfs]
        idf = np.asarray(idf_by_df, dtype=dtype)[df_index]
        nonoccurrence = None
        if model.method in model.methods_requiring_nonoccurrence:
            tfc0 = tfc_of(tf_array=0, l_d=avg_len, l_avg=avg_len, k1=model.k1, b=model.b, delta=model.delta)
            nonoccurrence = np.asarray([x * tfc0 for x in idf_by_df], dtype=dtype)[df_index]
        by_length = np.argsort(counts.lengths, kind="stable")
        grouped = counts.matrix[by_length]
        lengths = counts.lengths[by_length]
        starts = np.flatnonzero(np.r_[True, lengths[1:] != lengths[:-1]])
        bounds = grouped.indptr[np.r_[starts, len(lengths)]]
        tf, tokens = grouped.data.astype(dtype), grouped.indices
        data = np.empty(len(tf), dtype=dtype)
        for length, lo, hi in zip(lengths[starts], bounds[:-1], bounds[1:]):
            part = idf[tokens[lo:hi]] * tfc_of(tf_array=tf[lo:hi], l_d=int(length), l_avg=avg_len, k1=model.k1,
                                               b=model.b, delta=model.delta)
            if nonoccurrence is not None:
                part -= nonoccurrence[tokens[lo:hi]]
            data[lo:hi] = part
        restored = np.empty_like(by_length)
        restored[by_length] = np.arange(len(by_length))
        scores = sparse.csr_matrix((data, tokens, grouped.indptr), shape=(n, n_vocab))[restored].tocsc()
        model.scores = {"data": scores.data.astype(dtype, copy=False),
                        "indices": scores.indices.astype(np.dtype(model.int_dtype), copy=False),
                        "indptr": scores.indptr.astype(np.int64, copy=False), "num_docs": n}
        model.vocab_dict = dict(zip(counts.vocab, range(n_vocab)))
        model.vocab_dict.setdefault("", n_vocab)  # bm25s's empty token, past the scored vocabulary
        model.unique_token_ids_set = set(model.vocab_dict.values())
        model.nonoccurrence_array = nonoccurrence
        return index

    def save(self, folder: Path) -> None:
        self.model.save(str(folder), show_progress=False)

    @classmethod
    def load(cls, folder: Path, n: int, stopwords: str) -> Bm25Index:
        bm25s = import_bm25s()

        index = cls.__new__(cls)
        index.stopwords, index.n = stopword_set(stopwords), n
        index.model = bm25s.BM25.load(str(folder), show_progress=False)
        return index

    def scores(self, query: str) -> np.ndarray:
        """Every chunk's score for `query` (zeros when no query token is indexed)."""
        return self._scores(self._token_ids(query))

    def matching(self, query: str) -> tuple[np.ndarray, np.ndarray]:
        """The chunks sharing at least one token with `query` (positions, ascending) and their scores.

        Only these: bm25l and bm25+ give every chunk a score above 0, whether it shares a token or not.
        """
        ids = self._token_ids(query)
        if not ids:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        indptr, indices = self.model.scores["indptr"], self.model.scores["indices"]
        hit = np.zeros(self.n, bool)  # a mask, not np.unique: no sort of the posting lists
        for t in ids:
            hit[indices[indptr[t]:indptr[t + 1]]] = True
        positions = np.flatnonzero(hit).astype(np.int64)
        return positions, self._scores(ids)[positions]

    def _token_ids(self, query: str) -> list[int]:
        return self.model.get_tokens_ids(tokenize(query, self.stopwords)) if self.n else []

    def _scores(self, ids: list[int]) -> np.ndarray:
        if not ids:
            return np.zeros(self.n, dtype=np.float64)
        return np.asarray(self.model.get_scores(ids), dtype=np.float64)


def _head(ranking: Ranking, n: int) -> Ranking:
    return Ranking(ranking.doc_ids[:n], ranking.scores[:n], ranking.chunk_ids[:n])


def rrf(rankings: Sequence[Ranking], k_rrf: int, depth: int) -> Ranking:
    """Reciprocal rank fusion: score(d) = sum over lists of 1 / (k_rrf + rank(d)), ranks from 1.

    A document missing from a list adds 0 for that list. Equal scores are ordered by the ranks: the better
    best rank first, then the better next rank (a document missing from a list counts as ranked below all
    there), then the better rank in the earlier list (the hybrid pipeline fuses dense before BM25, so dense
    decides a mirror tie such as ranks (1, 2) against (2, 1)). Two documents cannot share a rank in one
    list, so the ranks always decide; the id is only the key's last resort. A document's chunk is its
    chunk in the first list that has it.
    """
    score: dict[str, float] = {}
    ranks: dict[str, list[float]] = {}
    chunk: dict[str, str] = {}
    for i, ranking in enumerate(rankings):
        for rank, (doc, ch) in enumerate(zip(ranking.doc_ids, ranking.chunk_ids), start=1):
            score[doc] = score.get(doc, 0.0) + 1.0 / (k_rrf + rank)
            ranks.setdefault(doc, [math.inf] * len(rankings))[i] = rank
            chunk.setdefault(doc, ch)
    order = sorted(score, key=lambda d: (-score[d], sorted(ranks[d]), ranks[d], d))[:depth]
    return Ranking(tuple(order), tuple(score[d] for d in order), tuple(chunk[d] for d in order))


class Reranker:
    """A sentence-transformers CrossEncoder re-scoring (question, best chunk) pairs."""

    def __init__(self, config: RerankConfig, device: str = "cpu") -> None:
        from sentence_transformers import CrossEncoder

        from pipeline.embeddings import EmbedderError, locate_model

        source = locate_model(config.model, RERANKER)
        try:
            self.model = CrossEncoder(source.location, device=device, local_files_only=source.local)
        except Exception as exc:
            raise EmbedderError(f"cannot load reranker {config.model!r} (looked at {source.location!r}): "
                                f"{exc}") from exc
        self.config = config

    def rerank(self, question: str, ranking: Ranking, chunk_text: Callable[[str], str]) -> Ranking:
        """The top `depth` documents re-ordered by the cross-encoder; the rest follow unchanged."""
        head = min(self.config.depth, len(ranking.doc_ids))
        if head == 0:
            return ranking
        pairs = [(question, chunk_text(c)) for c in ranking.chunk_ids[:head]]
        scores = np.asarray(self.model.predict(pairs, batch_size=self.config.batch_size,
                                               show_progress_bar=False), dtype=np.float64).reshape(len(pairs), -1)[:, -1]
        order = sorted(range(head), key=lambda i: (-scores[i], i))
        tail = range(head, len(ranking.doc_ids))
        return Ranking(
            tuple(ranking.doc_ids[i] for i in order) + ranking.doc_ids[head:],
            tuple(float(scores[i]) for i in order) + tuple(ranking.scores[i] for i in tail),
            tuple(ranking.chunk_ids[i] for i in order) + ranking.chunk_ids[head:],
        )


def indexes_needed(pipelines: Sequence[str]) -> tuple[bool, bool]:
    """Whether `pipelines` need the dense index, and the BM25 one."""
    return (any(p in ("dense", "hybrid", "hybrid_rerank") for p in pipelines),
            any(p in ("bm25", "hybrid", "hybrid_rerank") for p in pipelines))


class Retriever:
    """All indexes of one run over one chunk table; `search` runs a named pipeline for a batch of questions."""

    def __init__(self, chunks: Sequence[Chunk], vectors: np.ndarray, config: Config,
                 reranker: Reranker | None = None, dense: DenseIndex | None = None,
                 bm25: Bm25Index | None = None) -> None:
        """`dense` and `bm25` are indexes built earlier over these very chunks (see `pipeline.indexes`)."""
        self.table = ChunkTable.build(chunks)
        self.config = config
        self.depth = config.retrieval.candidate_depth
        self._text = {c.id: c.text for c in chunks}
        needs_dense, needs_bm25 = indexes_needed(config.retrieval.pipelines)
        self.dense = (dense or DenseIndex(vectors, config.retrieval)) if needs_dense else None
        b = config.bm25
        self.bm25 = ((bm25 or Bm25Index([c.text for c in chunks], b.k1, b.b, b.method, b.stopwords))
                     if needs_bm25 else None)
        self.reranker = reranker

    def _dense(self, query_vectors: np.ndarray) -> list[Ranking]:
        n_chunks = len(self.table.chunks)
        if not n_chunks:
            return [EMPTY] * len(query_vectors)
        # Several chunks of one document may crowd the top: widen the search until `depth`
        # distinct documents are found or every chunk has been seen.
        n = min(n_chunks, self.depth * 4)
        out: list[Ranking | None] = [None] * len(query_vectors)
        todo = list(range(len(query_vectors)))
        while todo:
            scores, ids = self.dense.search(query_vectors[todo], n)
            still = []
            for row, q in enumerate(todo):
                valid = ids[row] >= 0
                order, sc = _sorted_desc(scores[row][valid].astype(np.float64), ids[row][valid])
                ranking = self.table.collapse(order, sc, self.depth)
                if len(ranking.doc_ids) < self.depth and n < n_chunks:
                    still.append(q)
                else:
                    out[q] = ranking
            todo, n = still, min(n_chunks, n * 4)
        return out  # type: ignore[return-value]

    def _bm25(self, questions: Sequence[str]) -> list[Ranking]:
        out = []
        for question in questions:
            matched, scores = self.bm25.matching(question)  # a chunk sharing no term with the question is not retrieved
            out.append(_best_first(self.table, scores, matched, self.depth))
        return out

    def search(self, pipeline: str, questions: Sequence[str], query_vectors: np.ndarray | None,
               cache: dict[str, list[Ranking]] | None = None) -> list[Ranking]:
        """Rankings of `pipeline` for each question; `cache` shares branch results between pipelines."""
        cache = {} if cache is None else cache
        if pipeline not in cache:
            if pipeline == "dense":
                cache[pipeline] = self._dense(query_vectors)
            elif pipeline == "bm25":
                cache[pipeline] = self._bm25(questions)
            elif pipeline == "hybrid":
                dense = self.search("dense", questions, query_vectors, cache)
                sparse = self.search("bm25", questions, query_vectors, cache)
                cut = self.config.retrieval.fusion_depth or self.depth
                cache[pipeline] = [rrf([_head(d, cut), _head(s, cut)], self.config.retrieval.rrf_k, self.depth)
                                   for d, s in zip(dense, sparse)]
            elif pipeline == "hybrid_rerank":
                if self.reranker is None:
                    raise ValueError("pipeline hybrid_rerank needs a reranker")
                fused = self.search("hybrid", questions, query_vectors, cache)
                cache[pipeline] = [self.reranker.rerank(q, r, self._text.__getitem__) for q, r in zip(questions, fused)]
            else:
                raise ValueError(f"unknown pipeline {pipeline!r}")
        return cache[pipeline]
