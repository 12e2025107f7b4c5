"""Daily cost proportional to what is new: dated feed files already ingested are not parsed again."""

from __future__ import annotations

import os
import shutil
from datetime import date, timedelta
from pathlib import Path

import pytest

from pipeline import chunking, contract, job, windows
from pipeline.config import Config, CorpusConfig, SourceConfig
from pipeline.corpus import Corpus

SLICE = Path(__file__).parent / "data" / "news-slice"
START = date(2025, 9, 10)


@pytest.fixture
def daily(tmp_path: Path) -> Path:
    folder = tmp_path / "daily"
    shutil.copytree(SLICE / "daily", folder)
    return folder


def _config(data_dir: Path, daily: Path, **corpus) -> Config:
    return Config(data_dir=data_dir, gold=SLICE / "gold.jsonl", sources=(SourceConfig("news", path=daily),),
                  corpus=CorpusConfig(**corpus))


def _state(corpus: Corpus, day: date) -> tuple:
    return ([(s.document, s.content_hash, s.first_seen) for s in corpus.snapshot(day)],
            corpus.counts(day))


def test_replay_skips_unchanged_files_and_gives_the_full_replays_corpus(tmp_path, daily):
    """Differential: day by day, a corpus whose runs skip the files already ingested equals one whose runs
    re-parse every dated file (the validators forgotten before each run), snapshot and counts alike."""
    fast, full = _config(tmp_path / "fast", daily), _config(tmp_path / "full", daily)
    with Corpus.in_dir(fast.data_dir) as skipping, Corpus.in_dir(full.data_dir) as replaying:
        for i in range(6):
            day = START + timedelta(days=i)
            outcomes = job.ingest(fast, skipping, day)
            assert [o.unchanged for o in outcomes] == [True] * i + [False]  # only the day's own file is parsed
            replaying.db.execute("DELETE FROM feed_files")
            job.ingest(full, replaying, day)
            assert _state(skipping, day) == _state(replaying, day)
        again = job.ingest(fast, skipping, day)  # a re-run of the same date parses nothing
        assert all(o.unchanged and o.ok and not o.documents for o in again)
        assert _state(skipping, day) == _state(replaying, day)


def test_a_changed_old_file_is_parsed_again(tmp_path, daily):
    config = _config(tmp_path / "data", daily)
    first = sorted(daily.iterdir())[0]
    with Corpus.in_dir(config.data_dir) as corpus:
        job.ingest(config, corpus, START + timedelta(days=2))
        text = first.read_text(encoding="utf-8")
        first.write_text(text.replace("<title>", "<title>Edited: ", 2), encoding="utf-8")
        outcomes = job.ingest(config, corpus, START + timedelta(days=2))
        assert [o.unchanged for o in outcomes] == [False, True, True]
        titles = [s.document.title for s in corpus.snapshot(START + timedelta(days=2))]
        assert any(t.startswith("Edited: ") for t in titles)


def test_a_touched_file_is_checked_by_content_and_a_past_date_replays(tmp_path, daily):
    config = _config(tmp_path / "data", daily)
    with Corpus.in_dir(config.data_dir) as corpus:
        job.ingest(config, corpus, START + timedelta(days=3))
        # Same bytes, new modification time: parsed again (the validator is size, mtime and hash).
        first = sorted(daily.iterdir())[0]
        os.utime(first, ns=(first.stat().st_atime_ns, first.stat().st_mtime_ns + 10**9))
        assert [o.unchanged for o in job.ingest(config, corpus, START + timedelta(days=3))] == [False] + [True] * 3
        # An earlier date than the files' ingest date re-reads them: the corpus of that date is rebuilt as then.
        assert not any(o.unchanged for o in job.ingest(config, corpus, START + timedelta(days=1)))
        with Corpus.in_dir(tmp_path / "fresh") as fresh:
            job.ingest(config, fresh, START + timedelta(days=1))
            assert _state(corpus, START + timedelta(days=1))[0] == _state(fresh, START + timedelta(days=1))[0]


def test_other_retention_settings_parse_again(tmp_path, daily):
    with Corpus.in_dir(tmp_path / "data") as corpus:
        job.ingest(_config(tmp_path / "data", daily), corpus, START + timedelta(days=2))
        outcomes = job.ingest(_config(tmp_path / "data", daily, max_age_days=30), corpus, START + timedelta(days=2))
        assert not any(o.unchanged for o in outcomes)


@pytest.mark.parametrize("evidently", [False, True])  # with Evidently's sample too, whose rows differ on the current side
def test_near_copies_flagged_only_on_the_kept_rows_give_the_same_drift_rows(tmp_path, daily, embedder, monkeypatch,
                                                                           evidently):
    """Differential: drift rows with only the rows the samples keep read, and near copies looked for among the rows
    window_drift keeps, equal those with every document of both windows read and every row flagged (the previous
    cost: all of the reference window read, and compared with the whole corpus)."""
    import numpy as np

    from pipeline import drift, shifts
    from pipeline.config import DriftConfig
    from pipeline.embeddings import embed_cached

    config = _config(tmp_path / "data", daily).replace(
        drift=DriftConfig(sample_cap=12, permutations=99, min_current=5, min_reference=5, evidently=evidently,
                          duplicate_cosine=0.6))
    day = START + timedelta(days=5)
    with Corpus.in_dir(config.data_dir) as corpus:
        for i in range(6):
            job.ingest(config, corpus, START + timedelta(days=i))
        snapshot = corpus.snapshot(day)
        chunks = chunking.chunk_documents(config, snapshot)
        vectors = embed_cached(corpus, embedder, [c.text for c in chunks]).vectors
        fast = windows.drift_rows(config, corpus, embedder, day, snapshot, chunks, vectors, [])

        def every_row(config, corpus, versions, vectors_of, duplicate, seed, chunked):
            """The side as it was read before: every document of the window, every chunk and its vector,
            every row flagged."""
            documents = corpus.read_versions(versions)
            by_id = {s.document.id: s.document for s in documents}
            sample_chunks = chunking.chunk_documents(config, documents)
            sample_vectors = vectors_of(sample_chunks)
            docs = [by_id[c.doc_id] for c in sample_chunks]
            hashes = {s.document.id: s.content_hash for s in documents}
            return drift.Sample(sample_vectors, [d.categories[0] if d.categories else "" for d in docs],
                                [d.source for d in docs], [d.title for d in docs],
                                duplicate(sample_vectors, sample_chunks), documents=[c.doc_id for c in sample_chunks],
                                languages=[shifts.document_language(hashes[d.id], shifts.document_text(d.title, d.text))
                                           for d in docs])

        monkeypatch.setattr(windows, "_sample", every_row)
        full = windows.drift_rows(config, corpus, embedder, day, snapshot, chunks, vectors, [])
    assert any(r["n_reference"] > 12 for r in full)  # the cap is in play
    dup = [r for r in full if r["statistic"] == contract.DUPLICATE_SHARE]
    assert dup and not np.isnan(dup[0]["value"])
    same = lambda a, b: a == b or (a != a and b != b)  # noqa: E731 - NaN equals NaN here
    assert len(fast) == len(full)
    assert all(a.keys() == b.keys() and all(same(a[k], b[k]) for k in a) for a, b in zip(fast, full))


# --- persisted indexes ------------------------------------------------------------------------------------------


def test_the_job_keeps_the_latest_dates_indexes_and_reruns_rank_the_same(e2e_config, embedder):
    from pipeline import indexes

    config = e2e_config
    days = sorted(p.name[:10] for p in next(s.path for s in config.sources).iterdir())
    last = date.fromisoformat(days[-1])
    first = job.run_day(config, last, embedder=embedder, notify=False)
    sidecar = (config.data_dir / indexes.INDEX_DIR / indexes.SIDECAR).read_text()
    again = job.run_day(config, last, embedder=embedder, notify=False)  # loads the stored indexes (and vectors)
    assert [r["retrieved"] for r in again.per_question] == [r["retrieved"] for r in first.per_question]
    same = lambda a, b: a == b or (a != a and b != b)  # noqa: E731 - NaN equals NaN here
    for name in ("per_question", "metrics", "drift", "signals"):  # the vectors from the index: the same rows
        x, y = getattr(first, name), getattr(again, name)
        assert len(x) == len(y) and all(a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
                                        for a, b in zip(x, y)), name
    assert again.run["chunks_total"] == first.run["chunks_total"] and again.run["chunks_embedded"] == 0
    job.run_day(config, date.fromisoformat(days[0]), embedder=embedder, notify=False)  # a past date
    assert (config.data_dir / indexes.INDEX_DIR / indexes.SIDECAR).read_text() == sidecar  # kept the latest's


def _entered_by_snapshots(corpus: Corpus, start: date, end: date) -> list:
    """The reference definition: the snapshot at `end` less the (id, content hash) pairs of the one at `start`."""
    before = {(s.document.id, s.content_hash) for s in corpus.snapshot(start)}
    return [s for s in corpus.snapshot(end) if (s.document.id, s.content_hash) not in before]


def test_entered_by_sql_equals_comparing_whole_snapshots(tmp_path, daily):
    """Differential: on the news slice ingested day by day, then edited (a text changed, one changed and changed
    back, deletions, an entry first seen on a past date), `entered` found by SQL (with and without documents
    supplied) equals the difference of the two snapshots, for every window of the period."""
    import dataclasses

    config = _config(tmp_path / "data", daily)
    with Corpus.in_dir(config.data_dir) as corpus:
        for i in range(6):
            job.ingest(config, corpus, START + timedelta(days=i))
        docs = corpus.snapshot(START + timedelta(days=5))
        a, b, c = (s.document for s in docs[:3])
        corpus.ingest([dataclasses.replace(a, text=a.text + " corrected")], START + timedelta(days=6))
        corpus.ingest([dataclasses.replace(b, text="changed")], START + timedelta(days=6))
        corpus.ingest([b], START + timedelta(days=7))  # changed back
        corpus.delete([c.id, docs[3].document.id], START + timedelta(days=7), "removed")
        late = dataclasses.replace(docs[4].document, id="late-entry")
        corpus.ingest([late], START + timedelta(days=7))
        corpus.ingest([late], START + timedelta(days=2))  # first seen moved to a past date
        days = [date.min, *(START + timedelta(days=i) for i in range(-1, 10))]
        checked = 0
        for x, start in enumerate(days):
            for end in days[x:]:
                expected = _entered_by_snapshots(corpus, start, end)
                window = windows.Window(start, end)
                assert windows.entered(corpus, window) == expected
                assert windows.entered(corpus, window, corpus.snapshot(end)) == expected
                assert windows.entered(corpus, window, known=corpus.snapshot(START + timedelta(days=3))) == expected
                checked += bool(expected)
        assert checked > 30


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_a_stored_dense_index_gives_back_the_vectors_it_was_built_from(tmp_path, kind):
    """The run takes the chunk vectors from a matching stored index instead of the cache: they must be the
    same float32 values, in order, after a save and a load."""
    import numpy as np

    from pipeline.config import RetrievalConfig
    from pipeline.retrieval import DenseIndex

    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((500, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    DenseIndex(vectors, RetrievalConfig(dense_index=kind)).save(tmp_path / "dense.faiss")
    loaded = DenseIndex.load(tmp_path / "dense.faiss", kind)
    assert loaded.vectors().dtype == np.float32 and np.array_equal(loaded.vectors(), vectors)


def test_near_copy_flags_equal_the_brute_force_comparison():
    """Differential: `_near_copies` (documents as integers, own-document chunks masked by sorted position, the
    corpus's vectors not copied when every document is in the pool) flags what comparing every sample chunk
    with every other document's chunk first seen by the date flags."""
    import numpy as np

    from pipeline.chunking import Chunk
    from pipeline.config import Config, DriftConfig
    from pipeline.corpus import StoredDocument
    from pipeline.sources import Document

    rng = np.random.default_rng(5)
    docs = [StoredDocument(Document(f"d{i}", "", "", "", None, "s", ()), "h", f"2026-03-0{1 + i % 3}")
            for i in range(60)]
    chunks = [Chunk(f"d{i}#{n}", f"d{i}", n, "") for i in rng.permutation(60) for n in range(1 + i % 3)]
    vectors = rng.standard_normal((len(chunks), 16)).astype(np.float32)
    for a, b in rng.integers(0, len(chunks), (25, 2)):  # near copies, some within one document
        vectors[b] = vectors[a] + 0.01 * rng.standard_normal(16)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    config = Config(data_dir=Path("."), gold=Path("g"), drift=DriftConfig(duplicate_cosine=0.9))
    first = {d.document.id: d.first_seen for d in docs}
    sample = list(rng.choice(len(chunks), 40, replace=False))
    outsider = Chunk("elsewhere#0", "elsewhere", 0, "")
    for day in (date(2026, 2, 28), date(2026, 3, 1), date(2026, 3, 2), date(2026, 3, 3)):
        flags = windows._near_copies(config, first, chunks, vectors, day)
        sample_vectors = np.vstack([vectors[sample], vectors[:1]])
        got = flags(sample_vectors, [chunks[i] for i in sample] + [outsider])
        expected = [any(chunks[j].doc_id != c.doc_id and first[chunks[j].doc_id] <= day.isoformat()
                        and float(v @ vectors[j]) >= 0.9 for j in range(len(chunks)))
                    for c, v in zip([chunks[i] for i in sample] + [outsider], sample_vectors)]
        assert list(got) == expected
        assert day < date(2026, 3, 1) or any(expected)


def test_bm25_best_first_equals_sorting_every_matched_chunk():
    """Differential: the BM25 ranking from the best-scored chunks only (ties included) equals collapsing the
    full sort of every matched chunk, with heavy ties, few documents, and depths above the document count."""
    import numpy as np

    from pipeline.chunking import Chunk
    from pipeline.retrieval import ChunkTable, _best_first, _sorted_desc

    rng = np.random.default_rng(11)
    for n_docs, per_doc, levels, depth in ((3000, 2, 7, 10), (400, 5, 1000, 100), (30, 3, 3, 50), (5000, 1, 2, 20)):
        chunks = [Chunk(f"d{i:05d}#{n}", f"d{i:05d}", n, "") for i in range(n_docs) for n in range(per_doc)]
        table = ChunkTable.build(chunks)
        matched = np.sort(rng.choice(len(chunks), len(chunks) * 3 // 4, replace=False))
        scores = rng.integers(0, levels, len(matched)).astype(np.float32) / 3
        assert _best_first(table, scores, matched, depth) == table.collapse(*_sorted_desc(scores, matched), depth)


def test_corpus_chunks_equal_the_snapshots_chunks(tmp_path, daily, monkeypatch):
    """Differential: `corpus_chunks` (the corpus's keys and cached chunk texts in one read, only new versions
    read and split) gives the snapshot's keys and `chunk_documents` of the snapshot: on a first run (nothing
    cached), a second one (all cached), after a changed document, under other settings, on a past date."""
    import dataclasses

    from pipeline.config import ChunkingConfig

    config = _config(tmp_path / "data", daily)

    def check(config, corpus, day):
        snapshot = corpus.snapshot(day)
        keys, chunks, _ = job.corpus_chunks(config, corpus, day, {})
        assert keys == [(s.document.id, s.content_hash, s.first_seen) for s in snapshot]
        assert chunks == chunking.chunk_documents(config, snapshot)
        return chunks

    with Corpus.in_dir(config.data_dir) as corpus:
        for i in range(3):
            job.ingest(config, corpus, START + timedelta(days=i))
        day = START + timedelta(days=2)
        first = check(config, corpus, day)  # nothing cached yet: every version read and split
        keys = [k[:2] for k in corpus.snapshot_keys(day)]
        assert len(corpus.chunk_counts(chunking.chunk_settings(config), keys)) == len(keys)  # the cache filled
        monkeypatch.setattr(corpus, "read_versions", lambda *a, **k: pytest.fail("a cached version read"))
        assert check(config, corpus, day) == first  # all from the cache
        monkeypatch.undo()
        doc = corpus.snapshot(day)[0].document
        corpus.ingest([dataclasses.replace(doc, text=doc.text + " " + "more words " * 200)], day)
        assert len(check(config, corpus, day)) > len(first)
        check(config.replace(chunking=ChunkingConfig(size=20, overlap=5)), corpus, day)
        check(config, corpus, START)  # a past date: its own versions


def test_a_windows_documents_from_the_runs_corpus_equal_the_sql(tmp_path, daily):
    """Differential: `_entered_from` (a window's documents found in the run's corpus) equals
    `Corpus.entered_versions` whenever it answers, over windows before and around a changed and a deleted
    document; and it answers None when a later change makes the run's corpus differ from the window's."""
    import dataclasses

    config = _config(tmp_path / "data", daily)
    with Corpus.in_dir(config.data_dir) as corpus:
        for i in range(6):
            job.ingest(config, corpus, START + timedelta(days=i))
        docs = corpus.snapshot(START + timedelta(days=1))
        changed, gone = docs[0].document, docs[1].document
        corpus.ingest([dataclasses.replace(changed, text=changed.text + " Updated.")], START + timedelta(days=3))
        corpus.delete([gone.id], START + timedelta(days=4), "removed")
        answered = refused = 0
        for r in range(6):
            run = START + timedelta(days=r)
            keys, _, valid_from = job.corpus_chunks(config, corpus, run, {})
            for s in range(-2, r + 1):
                for e in range(s + 1, r + 1):
                    window = windows.Window(START + timedelta(days=s), START + timedelta(days=e))
                    found = windows._entered_from(corpus, window, run, keys, valid_from)
                    if found is None:
                        refused += 1
                        continue
                    answered += 1
                    assert found == corpus.entered_versions(window.start, window.end), (run, window)
        assert answered > 20 and refused > 5  # both cases met
