"""The PEP day of bench.scale: its data directory seeded from the corpus bench's embedding cache, and timers that
name functions drift.py has."""

from __future__ import annotations

import numpy as np

from bench import scale
from pipeline import drift
from pipeline.corpus import Corpus


def test_the_backfill_is_seeded_with_the_cached_embeddings(tmp_path):
    cache, data_dir = tmp_path / "cache", tmp_path / "data"
    vector = np.arange(4, dtype=np.float32) / 4
    with Corpus.in_dir(cache) as corpus:
        corpus.cache_embeddings("model", {"h1": vector})
    scale._seed_embeddings(data_dir, cache)
    scale._seed_embeddings(data_dir, cache)  # again: nothing twice, no error
    with Corpus.in_dir(data_dir) as corpus:
        found = corpus.cached_embeddings("model", ["h1", "h2"])
    assert list(found) == ["h1"] and np.array_equal(found["h1"], vector)
    scale._seed_embeddings(tmp_path / "other", tmp_path / "nowhere")  # no cache: nothing to seed
    assert not (tmp_path / "other").exists()


def test_the_drift_timers_name_drifts_own_functions():
    def exists(name: str) -> bool:
        owner, _, attr = name.rpartition(".")
        holder = getattr(drift, owner, None) if owner else drift
        return holder is not None and callable(getattr(holder, attr, None))

    assert exists("window_drift") and exists("evidently_embedding_drift")
    assert sum(map(exists, scale.DRIFT_TIMERS)) >= len(scale.DRIFT_TIMERS) // 2  # most statistics timed by name
