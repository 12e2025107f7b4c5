"""`index_health.drift` over a REAL store (Qdrant local mode) loaded by the team's indexing job: the drift rows equal
those of driftwatch's own embedding when the store holds the run's vectors, move when its vectors do, and a store
lacking one chunk's record makes that run fall back to driftwatch's embedding and say why."""

from __future__ import annotations

import dataclasses
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline import contract, store
from pipeline.config import Config, DriftConfig, IndexHealthConfig, RetrievalConfig, SourceConfig, TargetConfig
from pipeline.corpus import Corpus
from pipeline.job import ingest, run_day
from tests.vectorstore_support import QdrantWriter, Records, load_stream

SLICE = Path(__file__).parent / "data" / "news-slice"
DAYS = [date(2025, 9, 10) + timedelta(days=n) for n in range(8)]
MOVED_FROM = DAYS[5]  # the altered store's indexing job writes another generation (noisy vectors) from this day
FELL_BACK = "drift measured on driftwatch's embedding"
VARIANTS = ("usual", "served", "moved", "gappy")  # usual: drift = false; the others read a store's vectors


class MovedWriter(QdrantWriter):
    """The indexing job of another embedding generation from MOVED_FROM on: every new vector gets seeded noise."""

    day: date = DAYS[0]

    def write(self, r: Records, gone: list[str]) -> None:
        if self.day >= MOVED_FROM and len(r.ids):
            noise = np.random.default_rng(self.day.toordinal()).normal(scale=0.02, size=r.vectors.shape)
            r = dataclasses.replace(r, vectors=(r.vectors + noise).astype(np.float32))
        super().write(r, gone)


def variant_config(root: Path, variant: str) -> Config:
    path = root / ("qdrant-moved" if variant == "moved" else "qdrant-gappy" if variant == "gappy" else "qdrant")
    target = TargetConfig(name="kb", kind="qdrant", path=path, collection="team_kb", text="text", id="chunk_id",
                          doc_id="doc_id", model_field="model")
    return Config(data_dir=root / variant, gold=SLICE / "gold.jsonl",
                  sources=(SourceConfig(name="news", path=SLICE / "daily"),),
                  retrieval=RetrievalConfig(pipelines=("dense",), k=(5,), candidate_depth=10), targets=(target,),
                  index_health=IndexHealthConfig(stores=("kb",), drift=variant != "usual"),
                  drift=DriftConfig(min_current=10, min_reference=20, permutations=99, page_permutations=199,
                                    evidently=False))


@pytest.fixture(scope="module")
def runs(embedder, tmp_path_factory):
    """Eight days, four jobs: each day the team's indexing job loads three Qdrant stores (the run's vectors; the same
    but noisy from MOVED_FROM; the run's vectors with one chunk's record deleted on the last day), then the job runs
    over each. Returns (configs by variant, the deleted chunk id, {variant: {day: events}})."""
    root = tmp_path_factory.mktemp("store-drift")
    configs = {v: variant_config(root, v) for v in VARIANTS}
    moved = MovedWriter(root / "qdrant-moved", "team_kb")
    gappy = QdrantWriter(root / "qdrant-gappy", "team_kb")
    writers = [QdrantWriter(root / "qdrant", "team_kb"), moved, gappy]
    written: dict[str, str] = {}
    events: dict[str, dict[date, str]] = {v: {} for v in VARIANTS}
    deleted = ""
    for day in DAYS:
        moved.day = day
        with Corpus.in_dir(configs["usual"].data_dir) as corpus:
            ingest(configs["usual"], corpus, day)
            before = set(written)
            load_stream(writers, corpus, day, configs["usual"], embedder, written)
        if day == DAYS[-1]:
            deleted = sorted(set(written) - before)[0]
            gappy.write(Records([], [], [], np.zeros((0, 384), np.float32), embedder.key), [deleted])
        for variant, config in configs.items():
            events[variant][day] = run_day(config, day, embedder=embedder, notify=False).run["events"]
    return configs, deleted, events


def drift_rows(config: Config) -> pd.DataFrame:
    rows = store.read(config.data_dir, contract.DRIFT)
    return rows.sort_values([contract.RUN_DATE, "statistic"]).reset_index(drop=True)


def test_drift_on_the_stores_vectors_equals_drift_on_driftwatchs_own_when_the_store_holds_them(runs):
    configs, _, events = runs
    usual, served = drift_rows(configs["usual"]), drift_rows(configs["served"])
    assert usual["statistic"].isin(contract.DRIFT_FAMILY).any() and np.isfinite(usual["value"]).sum() > 20
    assert served[[contract.RUN_DATE, "statistic"]].equals(usual[[contract.RUN_DATE, "statistic"]])
    np.testing.assert_allclose(served["value"], usual["value"], rtol=0, atol=1e-6)
    assert not any(FELL_BACK in e for e in events["served"].values())
