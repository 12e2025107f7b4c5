"""The SQLite corpus: upserts by content hash, tombstones, retention, snapshots of past dates, caches."""

from __future__ import annotations

from datetime import date, datetime, timezone

import numpy as np

from pipeline.corpus import Corpus
from pipeline.sources import Document, HttpCacheEntry, http_cache_key


def doc(doc_id: str, text: str = "body", published: str | None = "2026-11-01") -> Document:
    when = datetime.fromisoformat(published).replace(tzinfo=timezone.utc) if published else None
    return Document(id=doc_id, title=f"title {doc_id}", text=text, url=f"https://x.org/{doc_id}",
                    published=when, source="feed", categories=("news",))


def ids(corpus: Corpus, day: str) -> list[str]:
    return [s.document.id for s in corpus.snapshot(day)]


def test_changed_entry_is_updated_not_duplicated(tmp_path):
    with Corpus(tmp_path / "c.sqlite") as corpus:
        corpus.ingest([doc("a", "first text"), doc("b")], "2026-11-02")
        corpus.ingest([doc("a", "first text"), doc("b")], "2026-11-03")  # unchanged
        corpus.ingest([doc("a", "corrected text"), doc("b")], "2026-11-04")
        assert ids(corpus, "2026-11-04") == ["a", "b"]
        assert corpus.snapshot("2026-11-04")[0].document.text == "corrected text"
        assert corpus.snapshot("2026-11-03")[0].document.text == "first text"  # the past is kept
        assert corpus.counts("2026-11-02").new == 2
        assert (corpus.counts("2026-11-03").new, corpus.counts("2026-11-03").updated) == (0, 0)
        assert (corpus.counts("2026-11-04").new, corpus.counts("2026-11-04").updated) == (0, 1)


def test_snapshot_reconstructs_any_past_date(tmp_path):
    with Corpus(tmp_path / "c.sqlite") as corpus:
        corpus.ingest([doc("a")], "2026-11-02")
        corpus.ingest([doc("a"), doc("b")], "2026-11-03")
        corpus.delete(["a"], "2026-11-05", reason="test")
        corpus.ingest([doc("a"), doc("b"), doc("c")], "2026-11-06")  # a feed still carries a: tombstone holds
        assert ids(corpus, "2026-11-01") == []
        assert ids(corpus, "2026-11-02") == ["a"]
        assert ids(corpus, "2026-11-04") == ["a", "b"]
        assert ids(corpus, "2026-11-05") == ["b"]
        assert ids(corpus, "2026-11-06") == ["b", "c"]
        assert corpus.counts("2026-11-05").deleted == 1
        # re-ingesting an earlier date (a re-run) does not disturb what came later
        corpus.ingest([doc("a"), doc("b")], "2026-11-03")
        assert ids(corpus, "2026-11-06") == ["b", "c"] and ids(corpus, "2026-11-04") == ["a", "b"]


def test_retention_deletes_old_documents(tmp_path):
    with Corpus(tmp_path / "c.sqlite") as corpus:
        corpus.ingest([doc("old", published="2026-10-01"), doc("new", published="2026-11-01"),
                       doc("undated", published=None)], "2026-11-02")
        assert corpus.expire(date(2026, 11, 10), max_age_days=30) == 1
        assert ids(corpus, "2026-11-10") == ["new", "undated"]
        assert ids(corpus, "2026-11-09") == ["new", "old", "undated"]


def test_embedding_cache_round_trip(tmp_path):
    with Corpus(tmp_path / "c.sqlite") as corpus:
        v = np.arange(4, dtype=np.float32)
        corpus.cache_embeddings("m", {"h1": v})
        assert corpus.cached_embeddings("m", ["h1", "h2"]).keys() == {"h1"}
        np.testing.assert_array_equal(corpus.cached_embeddings("m", ["h1"])["h1"], v)
        assert corpus.cached_embeddings("other-model", ["h1"]) == {}


def test_http_validators_persist_keyed_by_the_url_s_digest_never_the_url(tmp_path):
    url = "https://x.org/f?token=MARKER-cache-token"
    entry = HttpCacheEntry('"etag-1"', "Mon, 02 Nov 2026 08:00:00 GMT")
    with Corpus(tmp_path / "c.sqlite") as corpus:
        corpus.db.execute("INSERT INTO http_cache VALUES (?, ?, ?, ?)", (url, None, None, "then"))  # an old row
        corpus.save_http_cache({http_cache_key(url): entry}, "2026-11-02T08:00:00+00:00")
    with Corpus(tmp_path / "c.sqlite", readonly=True) as corpus:
        assert corpus.http_cache() == {http_cache_key(url): entry}
    assert b"MARKER-cache-token" not in b"".join(p.read_bytes() for p in tmp_path.iterdir())


def test_lifetimes_list_every_document_ever_held(tmp_path):
    with Corpus(tmp_path / "c.sqlite") as corpus:
        corpus.ingest([doc("a"), doc("b")], "2026-11-02")
        corpus.ingest([doc("a", "changed"), doc("b")], "2026-11-03")
        corpus.delete(["b"], "2026-11-04", reason="test")
        assert corpus.lifetimes() == [("a", "2026-11-02", None, "feed", "news"),
                                      ("b", "2026-11-02", "2026-11-04", "feed", "news")]
