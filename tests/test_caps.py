"""No single feed or document can stall the job (issue 29, item 4): the entry and character caps, the embedding
cache written batch by batch, and the run's deadline (status partial, the lock released, what was left named)."""

from __future__ import annotations

import itertools
import shutil
import time
import zlib
from collections.abc import Sequence
from datetime import date
from pathlib import Path

import numpy as np
import pytest

from pipeline import contract, embeddings, job, store
from pipeline.cli import _summary as cli_summary
from pipeline.config import Config, EmbedderConfig, FetchConfig, RetrievalConfig, RunConfig, SourceConfig
from pipeline.corpus import Corpus, text_hash
from pipeline.embeddings import Embedder, embed_cached, normalize
from pipeline.sources import cut_text

DATA = Path(__file__).parent / "data"
DAY = date(2026, 11, 4)  # the e2e feeds' last file
DIMS = 32


class WordHashEmbedder(Embedder):
    """Each word hashed to one of 32 dimensions, counted and normalised: deterministic vectors without the model
    (what these tests check is which texts get encoded and when, not their meaning). `fail_on` makes that call
    (1-based) raise, as a run killed mid-embedding would stop."""

    def __init__(self, fail_on: int | None = None) -> None:
        super().__init__(EmbedderConfig(model="word-hash-test"))
        self.calls: list[list[str]] = []
        self.fail_on = fail_on

    def check(self) -> None:  # nothing to locate
        pass

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        if len(self.calls) == self.fail_on:
            raise RuntimeError("killed")
        vectors = np.zeros((len(texts), DIMS), np.float32)
        for i, text in enumerate(texts):
            for word in text.lower().split():
                vectors[i, zlib.crc32(word.encode()) % DIMS] += 1
        return normalize(vectors)

    @property
    def encoded(self) -> list[str]:
        return [t for call in self.calls for t in call]


def rss(items: Sequence[tuple[str, str]]) -> str:
    body = "".join(f"<item><title>{title}</title><guid>{guid}</guid><description>{text}</description>"
                   f"<pubDate>Wed, 04 Nov 2026 06:00:00 +0000</pubDate></item>" for guid, title, text in
                   ((f"cap-{i}", title, text) for i, (title, text) in enumerate(items)))
    return f'<?xml version="1.0"?><rss version="2.0"><channel><title>t</title>{body}</channel></rss>'


def make_config(tmp_path: Path, *extra: SourceConfig, **sections) -> Config:
    shutil.copytree(DATA / "e2e", tmp_path / "e2e", dirs_exist_ok=True)
    return Config(data_dir=tmp_path / "store", gold=tmp_path / "e2e" / "gold.jsonl",
                  sources=(SourceConfig(name="ledger", path=tmp_path / "e2e" / "feeds"), *extra),
                  retrieval=RetrievalConfig(pipelines=("bm25", "dense", "hybrid"), k=(1, 3), candidate_depth=10),
                  **sections)


def stored_texts(config: Config) -> dict[str, str]:
    with Corpus.in_dir(config.data_dir) as corpus:
        return {s.document.id: s.document.text for s in corpus.snapshot(DAY)}


def test_a_feed_over_the_entry_cap_is_capped_and_named_in_events(tmp_path):
    flood = tmp_path / "flood.xml"
    flood.write_text(rss([(f"brief {i}", f"word{i}") for i in range(30)]))
    config = make_config(tmp_path, SourceConfig(name="flood", path=flood), fetch=FetchConfig(max_entries=12))
    result = job.run_day(config, DAY, embedder=WordHashEmbedder())
    kept = {d for d in stored_texts(config) if d.startswith("cap-")}
    assert kept == {f"cap-{i}" for i in range(12)}  # the first 12, in feed order
    assert "source 'flood': 30 entries, 12 kept (fetch.max_entries)" in result.run["events"]
    assert result.run["status"] == contract.STATUS_OK  # a cap met is not a failure: the feed's first entries count
    assert store.read_runs(config.data_dir)[contract.EVENTS].iloc[-1] == result.run["events"]


def test_a_document_over_the_character_cap_is_cut_at_a_word_boundary_and_named(tmp_path):
    words = [f"w{i % 97}x{'y' * (i % 5)}" for i in range(3000)]  # about 15,000 characters
    long = tmp_path / "long.xml"
    long.write_text(rss([("Long", " ".join(words)), ("Short", "a short one")]))
    config = make_config(tmp_path, SourceConfig(name="long", path=long), fetch=FetchConfig(max_document_chars=1000))
    result = job.run_day(config, DAY, embedder=WordHashEmbedder())
    text = stored_texts(config)["cap-0"]
    assert len("Long") + len(text) <= 1000
    assert " ".join(words).startswith(text) and " ".join(words)[len(text)] == " "  # whole words only
    assert len(text) > 1000 - len("Long") - max(map(len, words)) - 1  # cut at the last boundary, not before
    assert stored_texts(config)["cap-1"] == "a short one"
    assert (f"source 'long': 1 document of up to {len('Long') + len(' '.join(words)):,} characters cut to 1,000 "
            "(fetch.max_document_chars)") in result.run["events"]


def test_an_interrupted_embedding_keeps_its_finished_batches_and_the_next_call_encodes_only_the_rest(tmp_path,
                                                                                                     monkeypatch):
    monkeypatch.setattr(embeddings, "CACHE_BATCH", 2, raising=False)
    texts = [f"text number {i}" for i in range(5)]
    with Corpus(tmp_path / "c.sqlite") as corpus:
        killed = WordHashEmbedder(fail_on=2)
        with pytest.raises(RuntimeError, match="killed"):
            embed_cached(corpus, killed, texts)
        assert set(corpus.cached_embeddings(killed.key, [text_hash(t) for t in texts])) == \
            {text_hash(t) for t in texts[:2]}  # the first batch, committed before the second began
        again = WordHashEmbedder()
        result = embed_cached(corpus, again, texts)
    assert again.encoded == texts[2:] and result.n_encoded == 3
    np.testing.assert_array_equal(result.vectors, WordHashEmbedder().encode(texts))


@pytest.mark.parametrize(("text", "limit", "cut"), [
    ("aaa bbb ccc", 5, "aaa"),  # inside "bbb": back to the space before it
    ("aaa bbb ccc", 7, "aaa bbb"),  # the limit falls on a space: the words before it
    ("aaa bbb", 7, "aaa bbb"),  # not over: unchanged
    ("aaa\nbbb ccc", 6, "aaa"),  # a line break is a boundary too
    ("aaaaaaa bb", 3, "aaa"),  # one word longer than the limit: cut inside it, the only way to stay under
])
def test_cut_text_keeps_whole_words_within_the_limit(text, limit, cut):
    assert cut_text(text, limit) == cut


def ticking(monkeypatch, step: float) -> None:
    """The deadline's clock advances `step` seconds each time it is read: the k-th question a run asks of its
    deadline (after the one reading that sets it) comes at k * step seconds."""
    counter = itertools.count(0, step)
    monkeypatch.setattr(job, "_clock", lambda: next(counter), raising=False)


def test_a_run_past_its_deadline_is_partial_names_what_was_left_and_releases_the_lock(tmp_path, monkeypatch):
    late = tmp_path / "late.xml"
    late.write_text(rss([("Late news", "the late source's only entry")]))
    config = make_config(tmp_path, SourceConfig(name="late", path=late), run=RunConfig(deadline_seconds=150))
    ticking(monkeypatch, 100)  # source ledger asked at 100 s: fetched; source late at 200 s: past the deadline
    first = WordHashEmbedder()
    result = job.run_day(config, DAY, embedder=first)
    run = store.read_runs(config.data_dir).iloc[-1]
    assert run["status"] == contract.STATUS_PARTIAL == result.run["status"]
    assert "deadline 150 s passed: sources not fetched: 'late'" in run[contract.EVENTS]
    assert "new chunk texts not embedded (0 cached for the next run), so the evaluation was skipped" in run[contract.EVENTS]
    assert run["feeds_ok"] == 1 and run["feeds_failed"] == 0  # not fetched is not failed
    assert first.calls == [] and run["chunks_embedded"] == 0
    assert "cap-0" not in stored_texts(config)
    for name in (contract.METRICS, contract.PER_QUESTION, contract.DRIFT):  # no evaluation, not a zero score
        assert store.read(config.data_dir, name).empty

    summary = cli_summary(result)  # what `run` prints: no metrics table, and why
    assert summary.startswith(f"{DAY}: partial,") and "sources not fetched: 'late'" in summary

    monkeypatch.setattr(job, "_clock", time.monotonic)
    again = job.run_day(config, DAY, embedder=WordHashEmbedder())  # the lock was released: a second run starts
    assert again.run["status"] == contract.STATUS_OK and "deadline" not in again.run["events"]
    assert "cap-0" in stored_texts(config) and not store.read(config.data_dir, contract.METRICS).empty


def test_a_deadline_met_while_embedding_keeps_the_batches_done_for_the_next_run(tmp_path, monkeypatch):
    monkeypatch.setattr(embeddings, "CACHE_BATCH", 2, raising=False)
    config = make_config(tmp_path, run=RunConfig(deadline_seconds=250))
    ticking(monkeypatch, 100)  # the source at 100 s, the first batch at 200 s, the second at 300 s: stopped
    first = WordHashEmbedder()
    result = job.run_day(config, DAY, embedder=first)
    assert result.run["status"] == contract.STATUS_PARTIAL
    assert len(first.encoded) == 2 and result.run["chunks_embedded"] == 2
    total = result.run["chunks_total"]
    assert (f"deadline 250 s passed: {total - 2:,} of {total:,} new chunk texts not embedded (2 cached for the next "
            "run), so the evaluation was skipped") in result.run["events"]

    monkeypatch.setattr(job, "_clock", time.monotonic)
    second = WordHashEmbedder()
    done = job.run_day(config, DAY, embedder=second)
    assert done.run["status"] == contract.STATUS_OK and done.run["chunks_embedded"] == total - 2
    assert not set(first.encoded) & set(second.encoded)  # nothing the stopped run encoded is encoded again
