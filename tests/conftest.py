"""Shared fixtures: the real embedding model (loaded once per session) and small configs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pipeline.config import Config, EmbedderConfig, RetrievalConfig, SourceConfig
from pipeline.embeddings import Embedder

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    """The real all-MiniLM-L6-v2, loaded once for every test that needs it."""
    emb = Embedder(EmbedderConfig())
    emb.model  # load now, so the first test using it is not charged for it
    return emb


@pytest.fixture()
def e2e_config(tmp_path: Path) -> Config:
    """A copy of the small end-to-end feed folder and gold set, with a fresh data directory."""
    shutil.copytree(DATA / "e2e", tmp_path / "e2e")
    return Config(
        data_dir=tmp_path / "store",
        gold=tmp_path / "e2e" / "gold.jsonl",
        sources=(SourceConfig(name="ledger", path=tmp_path / "e2e" / "feeds"),),
        retrieval=RetrievalConfig(pipelines=("bm25", "dense", "hybrid"), k=(1, 3, 5), candidate_depth=10),
    )
