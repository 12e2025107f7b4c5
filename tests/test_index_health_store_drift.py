"""`index_health.drift` over REAL stores (Qdrant local mode; PostgreSQL with pgvector) loaded by the team's indexing
job: the drift rows equal those of driftwatch's own embedding when the store holds the run's vectors, move when its
vectors do, and a store lacking one chunk's record makes that run fall back to driftwatch's embedding and say why."""

from __future__ import annotations

import dataclasses
import os
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline import contract, store
from pipeline.config import Config, DriftConfig, IndexHealthConfig, RetrievalConfig, SourceConfig, TargetConfig
from pipeline.corpus import Corpus
from pipeline.job import ingest, run_day
from tests.vectorstore_support import PgWriter, QdrantWriter, Records, load_stream, postgres

SLICE = Path(__file__).parent / "data" / "news-slice"
DAYS = [date(2025, 9, 10) + timedelta(days=n) for n in range(8)]
MOVED_FROM = DAYS[5]  # the altered store's indexing job writes another generation (noisy vectors) from this day
FELL_BACK = "drift measured on driftwatch's embedding"
VARIANTS = ("usual", "served", "moved", "served_pg")  # usual: drift = false; the others read a store's vectors
DSN_ENV = "DRIFTWATCH_TEST_STORE_DRIFT_DSN"


class MovedWriter(QdrantWriter):
    """The indexing job of another embedding generation from MOVED_FROM on: every new vector gets seeded noise."""

    day: date = DAYS[0]

    def write(self, r: Records, gone: list[str]) -> None:
        if self.day >= MOVED_FROM and len(r.ids):
            noise = np.random.default_rng(self.day.toordinal()).normal(scale=0.02, size=r.vectors.shape)
            r = dataclasses.replace(r, vectors=(r.vectors + noise).astype(np.float32))
        super().write(r, gone)


def variant_config(root: Path, variant: str) -> Config:
    path = root / ("qdrant-moved" if variant == "moved" else "qdrant")
    target = TargetConfig(name="kb", kind="qdrant", path=path, collection="team_kb", text="text", id="chunk_id",
                          doc_id="doc_id", model_field="model")
    if variant == "served_pg":
        target = TargetConfig(name="kb", kind="pgvector", dsn_env=DSN_ENV, table="team_kb", text="body",
                              doc_id="doc_id", model_field="model")
    return Config(data_dir=root / variant, gold=SLICE / "gold.jsonl",
                  sources=(SourceConfig(name="news", path=SLICE / "daily"),),
                  retrieval=RetrievalConfig(pipelines=("dense",), k=(5,), candidate_depth=10), targets=(target,),
                  # sample=0: the index-health findings are not under test here (their re-embedding is the cost)
                  index_health=IndexHealthConfig(stores=("kb",), sample=0, drift=variant != "usual"),
                  drift=DriftConfig(min_current=10, min_reference=20, permutations=99, page_permutations=199,
                                    evidently=False))


@pytest.fixture(scope="module")
def dsn():
    with postgres() as url:
        os.environ[DSN_ENV] = url
        try:
            yield url
        finally:
            del os.environ[DSN_ENV]


@pytest.fixture(scope="module")
def runs(embedder, dsn, tmp_path_factory):
    """Eight days, four jobs: each day the team's indexing job loads three stores (Qdrant with the run's vectors; the
    same but noisy from MOVED_FROM; a pgvector table with the run's vectors), then the job runs without and over each.
    Then one chunk's record is deleted from the first store and the "served" job re-runs the last day. Returns
    (configs by variant, {variant: drift rows}, {variant: {day: events}}, (the deleted chunk id, the re-run's drift
    rows, its events))."""
    root = tmp_path_factory.mktemp("store-drift")
    configs = {v: variant_config(root, v) for v in VARIANTS}
    clean, moved = QdrantWriter(root / "qdrant", "team_kb"), MovedWriter(root / "qdrant-moved", "team_kb")
    table = PgWriter(dsn, "team_kb")
    written: dict[str, str] = {}
    events: dict[str, dict[date, str]] = {v: {} for v in VARIANTS}
    for day in DAYS:
        moved.day = day
        with Corpus.in_dir(configs["usual"].data_dir) as corpus:
            ingest(configs["usual"], corpus, day)
            before = set(written)
            load_stream([clean, moved, table], corpus, day, configs["usual"], embedder, written)
        for variant, config in configs.items():
            events[variant][day] = run_day(config, day, embedder=embedder, notify=False).run["events"]
    table.close()
    rows = {v: drift_rows(c) for v, c in configs.items()}
    deleted = sorted(set(written) - before)[0]  # a chunk new on the last day
    clean.write(Records([], [], [], np.zeros((0, 384), np.float32), embedder.key), [deleted])
    rerun = run_day(configs["served"], DAYS[-1], embedder=embedder, notify=False)
    return configs, rows, events, (deleted, frame(rerun.drift), rerun.run["events"])


def frame(rows) -> pd.DataFrame:
    got = pd.DataFrame(rows)
    got[contract.RUN_DATE] = pd.to_datetime(got[contract.RUN_DATE])
    return got.sort_values([contract.RUN_DATE, "statistic"]).reset_index(drop=True)


def drift_rows(config: Config) -> pd.DataFrame:
    return frame(store.read(config.data_dir, contract.DRIFT))


def test_drift_on_the_stores_vectors_equals_drift_on_driftwatchs_own_when_the_store_holds_them(runs):
    _, rows, events, _ = runs
    usual = rows["usual"]
    assert usual["statistic"].isin(contract.DRIFT_FAMILY).any() and np.isfinite(usual["value"]).sum() > 20
    measured = usual[np.isfinite(usual["value"])]
    assert set(measured[contract.RUN_DATE]) == {pd.Timestamp(d) for d in DAYS[1:]}  # every day with a reference
    for variant in ("served", "served_pg"):
        served = rows[variant]
        assert served[[contract.RUN_DATE, "statistic"]].equals(usual[[contract.RUN_DATE, "statistic"]]), variant
        np.testing.assert_allclose(served["value"], usual["value"], rtol=0, atol=1e-6, err_msg=variant)
        np.testing.assert_allclose(served["p_value"], usual["p_value"], rtol=0, atol=1e-6, err_msg=variant)
        assert not any(FELL_BACK in e for e in events[variant].values()), variant


def test_the_stores_vectors_are_what_is_measured_another_generation_moves_the_drift(runs):
    _, rows, events, _ = runs
    usual, moved = rows["usual"], rows["moved"]
    assert moved[[contract.RUN_DATE, "statistic"]].equals(usual[[contract.RUN_DATE, "statistic"]])
    before = usual[contract.RUN_DATE] < pd.Timestamp(MOVED_FROM)
    np.testing.assert_allclose(moved["value"][before], usual["value"][before], rtol=0, atol=1e-6)
    for day in DAYS[DAYS.index(MOVED_FROM):]:
        on = usual[contract.RUN_DATE] == pd.Timestamp(day)
        assert not np.allclose(moved["value"][on], usual["value"][on], atol=1e-6, equal_nan=True), day
    assert not any(FELL_BACK in e for e in events["moved"].values())


def test_a_store_lacking_one_chunks_record_makes_the_run_fall_back_and_say_why(runs):
    _, rows, _, (deleted, rerun, events) = runs
    assert f"{FELL_BACK}, not on store 'kb''s vectors: chunk {deleted!r}: the store holds no record of it" in events
    last = rows["usual"][rows["usual"][contract.RUN_DATE] == pd.Timestamp(DAYS[-1])].reset_index(drop=True)
    assert rerun["statistic"].tolist() == last["statistic"].tolist()
    np.testing.assert_allclose(rerun["value"], last["value"], rtol=0, atol=1e-6)
