"""The Ray engine: the texts a run must encode, embedded with Ray Data `map_batches` over a pool of actors that
each load the model once; Ray's batch-inference API is used here only (its arguments changed across versions)."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import numpy as np

from pipeline.config import EmbedderConfig
from pipeline.errors import DriftwatchError

log = logging.getLogger(__name__)

RAY_VERSIONS = ">=2.51,<3"  # ActorPoolStrategy(size=) as map_batches' compute (concurrency= is deprecated)


class RayEngineError(DriftwatchError):
    """Ray is missing or the cluster cannot be reached; the message names the address."""


class _Encode:
    """One actor: the model loaded once, then batch after batch of {"i", "text"} to {"i", "vector"}."""

    def __init__(self, config: EmbedderConfig) -> None:
        from pipeline.embeddings import Embedder

        self.embedder = Embedder(dataclasses.replace(config, engine="local"))

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"i": batch["i"], "vector": self.embedder.encode_here([str(t) for t in batch["text"]])}


def _connect(config: EmbedderConfig):
    try:
        import ray
    except ImportError:
        raise RayEngineError("embedder.engine = \"ray\" needs Ray Data: pip install 'driftwatch[ray]' "
                             f"(ray[data]{RAY_VERSIONS})") from None
    if not ray.is_initialized():
        # The workers import this package from a copy Ray ships to them (a cluster has no checkout of it).
        runtime_env = {"py_modules": [str(Path(__file__).resolve().parent)]}
        try:
            if config.ray_address:
                ray.init(address=config.ray_address, runtime_env=runtime_env, log_to_driver=False)
            else:
                ray.init(num_cpus=config.ray_workers, runtime_env=runtime_env, include_dashboard=False,
                         log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise RayEngineError(f"cannot start or reach Ray at {config.ray_address or 'a local instance'}: "
                                 f"{exc}") from None
    return ray


def embed_on_ray(config: EmbedderConfig, texts: list[str]) -> np.ndarray:
    """L2-normalised float32 vectors of `texts` in their order, computed by `ray_workers` actors of `batch_size`
    texts a batch (the same vectors as the in-process embedder: each actor runs `Embedder.encode_here`)."""
    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    ray = _connect(config)
    dataset = ray.data.from_items([{"i": i, "text": t} for i, t in enumerate(texts)])
    encoded = dataset.map_batches(_Encode, fn_constructor_kwargs={"config": config}, batch_size=config.batch_size,
                                  batch_format="numpy", num_cpus=1,
                                  compute=ray.data.ActorPoolStrategy(size=config.ray_workers))
    out: np.ndarray | None = None
    for batch in encoded.iter_batches(batch_format="numpy", batch_size=None):
        vectors = np.asarray(batch["vector"], dtype=np.float32)
        if out is None:
            out = np.zeros((len(texts), vectors.shape[1]), dtype=np.float32)
        out[np.asarray(batch["i"], dtype=np.int64)] = vectors
    log.info("embedded %d texts on Ray (%d workers)", len(texts), config.ray_workers)
    return out
