"""Stored indexes updated with a day's chunks: BM25 built from stored token counts equals bm25s's own build, and
`indexes.prepare` after adds, removals and changed texts equals a build from scratch."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import numpy as np
import pytest

from pipeline import indexes
from pipeline.chunking import Chunk, chunk_document
from pipeline.config import BM25_METHODS, Bm25Config, ChunkingConfig, Config, EmbedderConfig, RetrievalConfig
from pipeline.corpus import Corpus, text_hash
from pipeline.embeddings import Embedder, embed_cached
from pipeline.retrieval import Bm25Index, DenseIndex, Retriever, TermCounts, stopword_set, tokenize

DEMO = Path(__file__).resolve().parents[1] / "data" / "demo"
PIPELINES = ("dense", "bm25", "hybrid")


@pytest.fixture(scope="module")
def demo_chunks() -> list[Chunk]:
    """The bundled demo's articles, chunked with the default settings (674 chunks)."""
    size, overlap = ChunkingConfig().size, ChunkingConfig().overlap
    chunks = []
    for path in sorted((DEMO / "articles").glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            a = json.loads(line)
            chunks += chunk_document(a["id"], a["title"], a["text"], size, overlap)
    return chunks


@pytest.fixture(scope="module")
def questions() -> list[str]:
    return [json.loads(line)["question"] for line in (DEMO / "gold.jsonl").read_text(encoding="utf-8").splitlines()]


# --- from_counts against bm25s's index() ------------------------------------------------------------------------


@pytest.mark.parametrize("stopwords", ["en", "none"])
@pytest.mark.parametrize("method", BM25_METHODS)
def test_bm25_from_counts_scores_equal_bm25s_own_build(demo_chunks, questions, method, stopwords):
    """Differential: on the demo's texts, every vocabulary token's scores and every demo question's scores from
    `from_counts` equal bm25s's `index()` bit for bit (np.array_equal on the float32 scores), so rankings,
    ties included, are the same; so are the matched chunks and the non-occurrence terms of bm25l and bm25+."""
    texts = [c.text for c in demo_chunks]
    reference = Bm25Index(texts, 1.5, 0.75, method, stopwords)
    counts = TermCounts.of_texts(texts, stopword_set(stopwords))
    built = Bm25Index.from_counts(counts, 1.5, 0.75, method, stopwords)
    ref, ours = reference.model, built.model
    assert ours.vocab_dict.keys() == ref.vocab_dict.keys() and len(ref.vocab_dict) > 3000
    assert ours.scores["num_docs"] == ref.scores["num_docs"] == len(texts)
    for key in ("data", "indices", "indptr"):
        assert ours.scores[key].dtype == ref.scores[key].dtype, key
    for token in ref.vocab_dict.keys() - {""}:
        assert np.array_equal(ours.get_scores([ours.vocab_dict[token]]), ref.get_scores([ref.vocab_dict[token]]))
        if ref.nonoccurrence_array is not None:
            assert ours.nonoccurrence_array[ours.vocab_dict[token]] == ref.nonoccurrence_array[ref.vocab_dict[token]]
    assert (ours.nonoccurrence_array is None) == (method not in ("bm25l", "bm25+"))
    for question in questions:
        ranked = built.scores(question)
        assert ranked.dtype == np.float64 and np.array_equal(ranked, reference.scores(question)), question
        for a, b in zip(built.matching(question), reference.matching(question)):
            assert np.array_equal(a, b)


def test_term_counts_rows_cut_the_vocabulary_and_continue_it():
    """Rows taken in a new order, with a fresh text's counts appended: the vocabulary keeps only tokens still
    held, and the counts are the texts' own."""
    stored = TermCounts.of_texts(["apple pear apple", "fig", "pear kiwi"], frozenset())
    assert stored.vocab == ["apple", "pear", "fig", "kiwi"] and stored.lengths.tolist() == [3, 1, 2]
    fresh = TermCounts.of_texts(["kiwi lime lime"], frozenset(), stored.vocab)
    assert fresh.vocab == ["apple", "pear", "fig", "kiwi", "lime"]
    taken = stored.rows(np.array([3, 0]), fresh)  # the fresh text, then the first; "fig" is held no more
    assert taken.vocab == ["apple", "pear", "kiwi", "lime"] and taken.lengths.tolist() == [3, 3]
    assert taken.matrix.toarray().tolist() == [[0, 0, 1, 2], [2, 1, 0, 0]]


# --- prepare: updated as stored vs built from scratch ---------------------------------------------------------------


def _unit(text: str, dim: int = 32) -> np.ndarray:
    """A seeded random unit vector per text: this file tests the indexes, not the model."""
    rng = np.random.default_rng(int(text_hash(text)[:8], 16))
    v = rng.standard_normal(dim).astype(np.float32)
    return v / np.linalg.norm(v)


@pytest.fixture
def setting(tmp_path):
    """A data directory whose embedding cache holds a vector for every text the tests index."""
    config = Config(data_dir=tmp_path / "data", gold=DEMO / "gold.jsonl", retrieval=RetrievalConfig(pipelines=PIPELINES))
    embedder = Embedder(EmbedderConfig())  # the cache answers: the model is never loaded
    corpus = Corpus.in_dir(config.data_dir)
    yield config, embedder, corpus
    corpus.close()


def _vectors_of(corpus: Corpus, embedder: Embedder, calls: list[int]):
    def vectors_of(chunks):
        missing = [c.text for c in chunks if not corpus.cached_embeddings(embedder.key, [text_hash(c.text)])]
        corpus.cache_embeddings(embedder.key, {text_hash(t): _unit(t) for t in missing})
        calls.append(len(chunks))
        return embed_cached(corpus, embedder, [c.text for c in chunks])
    return vectors_of


def _next_day(chunks: list[Chunk], demo_chunks: list[Chunk]) -> list[Chunk]:
    """Yesterday's chunks with 40 removed, one text changed, and 100 new ones, some in the middle."""
    kept = [c for i, c in enumerate(chunks) if i % 12 != 5]
    kept[7] = dataclasses.replace(kept[7], text=kept[7].text + " Corrected: the minister resigned on Friday.")
    new = demo_chunks[500:600]
    return kept[:200] + new[:30] + kept[200:] + new[30:]


def _assert_same(prepared: indexes.Prepared, scratch: indexes.Prepared, chunks, config, questions):
    """The same vectors, dense search, BM25 scores and every pipeline's rankings as a build from scratch, and as
    bm25s's own index over the texts."""
    assert prepared.embedded.vectors.dtype == np.float32
    assert np.array_equal(prepared.embedded.vectors, scratch.embedded.vectors)
    assert prepared.sidecar == scratch.sidecar
    queries = np.stack([_unit(q) for q in questions])
    for a, b in zip(prepared.dense.search(queries, 50), scratch.dense.search(queries, 50)):
        assert np.array_equal(a, b)
    reference = Bm25Index([c.text for c in chunks], config.bm25.k1, config.bm25.b, config.bm25.method,
                          config.bm25.stopwords)
    for q in questions:
        assert np.array_equal(prepared.bm25.scores(q), reference.scores(q))
        assert np.array_equal(prepared.bm25.scores(q), scratch.bm25.scores(q))
    ours = Retriever(chunks, prepared.embedded.vectors, config, dense=prepared.dense, bm25=prepared.bm25)
    fresh = Retriever(chunks, scratch.embedded.vectors, config)
    for p in PIPELINES:
        assert ours.search(p, questions, queries) == fresh.search(p, questions, queries), p


@pytest.mark.parametrize("method", ["lucene", "bm25+"])
def test_prepare_updates_the_stored_indexes_as_a_rebuild_would(setting, demo_chunks, questions, method):
    config, embedder, corpus = setting
    config = config.replace(bm25=Bm25Config(method=method))
    calls: list[int] = []
    vectors_of = _vectors_of(corpus, embedder, calls)
    day0 = demo_chunks[:500]
    first = indexes.prepare(config.data_dir, day0, config, embedder.key, vectors_of)
    assert first.how == indexes.BUILT and calls == [500]
    indexes.keep(config.data_dir, first)
    again = indexes.prepare(config.data_dir, day0, config, embedder.key, vectors_of)  # the same chunks
    assert again.how == indexes.LOADED and calls == [500] and again.embedded.n_encoded == 0
    _assert_same(again, first, day0, config, questions)

    day1 = _next_day(day0, demo_chunks)
    calls.clear()
    updated = indexes.prepare(config.data_dir, day1, config, embedder.key, vectors_of)
    assert updated.how == indexes.UPDATED
    assert calls == [101] and updated.reused == len(day1) - 101  # the new chunks and the changed text only
    scratch = indexes.prepare(config.data_dir, day1, config, embedder.key, vectors_of, reuse=False)
    assert scratch.how == indexes.BUILT
    _assert_same(updated, scratch, day1, config, questions)

    indexes.keep(config.data_dir, updated)  # and the day after: fewer chunks, from the updated files
    day2 = day1[50:]
    calls.clear()
    shrunk = indexes.prepare(config.data_dir, day2, config, embedder.key, vectors_of)
    assert shrunk.how == indexes.UPDATED and calls == [] and shrunk.reused == len(day2)
    _assert_same(shrunk, indexes.prepare(config.data_dir, day2, config, embedder.key, vectors_of, reuse=False),
                 day2, config, questions)


def test_hnsw_reuses_the_vectors_and_builds_its_graph_again(setting, demo_chunks):
    config, embedder, corpus = setting
    config = config.replace(retrieval=dataclasses.replace(config.retrieval, dense_index="hnsw"))
    calls: list[int] = []
    vectors_of = _vectors_of(corpus, embedder, calls)
    indexes.keep(config.data_dir, indexes.prepare(config.data_dir, demo_chunks[:500], config, embedder.key,
                                                  vectors_of))
    day1 = _next_day(demo_chunks[:500], demo_chunks)
    updated = indexes.prepare(config.data_dir, day1, config, embedder.key, vectors_of)
    assert updated.how == indexes.UPDATED and calls[-1] == 101 and updated.dense.kind == "hnsw"
    assert np.array_equal(updated.embedded.vectors, embed_cached(corpus, embedder, [c.text for c in day1]).vectors)
    assert updated.dense.n == len(day1)


def _stored_day(setting, demo_chunks):
    config, embedder, corpus = setting
    vectors_of = _vectors_of(corpus, embedder, [])
    indexes.keep(config.data_dir, indexes.prepare(config.data_dir, demo_chunks[:500], config, embedder.key,
                                                  vectors_of))
    return config, embedder, vectors_of, _next_day(demo_chunks[:500], demo_chunks)


@pytest.mark.parametrize("damage", ["truncated", "lengths", "vocab"])
def test_a_damaged_counts_file_rebuilds_and_warns(setting, demo_chunks, questions, caplog, damage):
    config, embedder, vectors_of, day1 = _stored_day(setting, demo_chunks)
    folder = config.data_dir / indexes.INDEX_DIR
    if damage == "truncated":
        path = folder / indexes.COUNTS
        path.write_bytes(path.read_bytes()[:5000])
    elif damage == "lengths":  # a readable file whose numbers do not add up
        with np.load(folder / indexes.COUNTS) as f:
            arrays = dict(f)
        arrays["lengths"] = arrays["lengths"] + 1
        np.savez(folder / indexes.COUNTS, **arrays)
    else:
        (folder / indexes.VOCAB).write_text('["only", "two"]', encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="pipeline.indexes"):
        rebuilt = indexes.prepare(config.data_dir, day1, config, embedder.key, vectors_of)
    assert rebuilt.how == indexes.BUILT
    assert [r.levelname for r in caplog.records] == ["WARNING"] and "rebuilding" in caplog.records[0].message
    _assert_same(rebuilt, indexes.prepare(config.data_dir, day1, config, embedder.key, vectors_of, reuse=False),
                 day1, config, questions)


def test_other_settings_an_older_format_or_a_past_date_rebuild(setting, demo_chunks, caplog):
    """Another model, other BM25 settings or an older format: rebuilt and told at INFO; `reuse=False` (a past
    date) rebuilds without reading the stored files; new chunks alone are no news (nothing at INFO)."""
    config, embedder, vectors_of, day1 = _stored_day(setting, demo_chunks)
    folder = config.data_dir / indexes.INDEX_DIR
    with caplog.at_level(logging.INFO, logger="pipeline.indexes"):
        assert indexes.prepare(config.data_dir, day1, config, embedder.key, vectors_of).how == indexes.UPDATED
        assert not caplog.records
        assert indexes.prepare(config.data_dir, day1, config, embedder.key + "@onnx", vectors_of).how == indexes.BUILT
        assert indexes.prepare(config.data_dir, day1, config.replace(bm25=Bm25Config(k1=1.2)), embedder.key,
                               vectors_of).how == indexes.BUILT
        stored = json.loads((folder / indexes.SIDECAR).read_text())
        (folder / indexes.SIDECAR).write_text(json.dumps({**stored, "format": 1}))
        assert indexes.prepare(config.data_dir, day1, config, embedder.key, vectors_of).how == indexes.BUILT
    told = [r.message.split("(")[1].split(" differ")[0] for r in caplog.records]
    assert told == ["model", "config_hash", "format"] and {r.levelname for r in caplog.records} == {"INFO"}
    (folder / indexes.SIDECAR).write_text(json.dumps(stored))
    (folder / indexes.COUNTS).write_bytes(b"not read by a past date's run")
    caplog.clear()
    past = indexes.prepare(config.data_dir, day1, config, embedder.key, vectors_of, reuse=False)
    assert past.how == indexes.BUILT and not caplog.records


def test_kept_files_are_the_counts_of_the_indexed_chunks(setting, demo_chunks):
    """What `keep` writes: the chunks in index order with their text hashes, and counts a fresh count equals."""
    config, embedder, vectors_of, day1 = _stored_day(setting, demo_chunks)
    prepared = indexes.prepare(config.data_dir, day1, config, embedder.key, vectors_of)
    indexes.keep(config.data_dir, prepared)
    folder = config.data_dir / indexes.INDEX_DIR
    listed = json.loads((folder / indexes.CHUNKS).read_text())
    assert listed == {"ids": [c.id for c in day1], "hashes": [text_hash(c.text) for c in day1]}
    stored = indexes._load_counts(folder)
    fresh = TermCounts.of_texts([c.text for c in day1], stopword_set(config.bm25.stopwords))
    column = {t: i for i, t in enumerate(stored.vocab)}
    assert sorted(stored.vocab) == sorted(fresh.vocab)
    order = [column[t] for t in fresh.vocab]
    assert (stored.matrix[:, order] != fresh.matrix).nnz == 0 and np.array_equal(stored.lengths, fresh.lengths)
    assert stored.lengths.tolist() == [len(tokenize(c.text, stopword_set("en"))) for c in day1]
    assert isinstance(DenseIndex.load(folder / indexes.DENSE, "flat"), DenseIndex)
