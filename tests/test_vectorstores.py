"""The team's vector store as a target, over real stores started here (a Chroma server, PostgreSQL with pgvector from
the pgserver wheel, Qdrant local mode): the news slice gives the builtin dense pipeline's rankings and metrics."""

from __future__ import annotations

from dataclasses import replace
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline import contract, store
from pipeline.cli import main
from pipeline.config import Config, ConfigError, RetrievalConfig, SourceConfig, TargetConfig, load_config
from pipeline.corpus import Corpus
from pipeline.job import run_day
from pipeline.targets import TargetError, VectorStoreTarget
from pipeline.vectorstores import open_store
from tests.vectorstore_support import (DIM, QUALITY, ChromaWriter, PgWriter, QdrantWriter, Records, by_target,
                                       differences, free_port, replay)
from tests.vectorstore_support import servers as started_servers

SLICE = Path(__file__).parent / "data" / "news-slice"
FIRST, DAYS = date(2025, 9, 10), 3
DSN_ENV = "DRIFTWATCH_TEST_PG_DSN"
STORES = ("chroma", "pgvector", "qdrant")


def store_targets(chroma_url: str, qdrant_path: Path) -> tuple[TargetConfig, ...]:
    keys = {"doc_id": "doc_id", "model_field": "model"}
    return (TargetConfig(name="chroma", kind="chroma", url=chroma_url, collection="news", **keys),
            TargetConfig(name="pgvector", kind="pgvector", dsn_env=DSN_ENV, table="news", text="body", **keys),
            TargetConfig(name="qdrant", kind="qdrant", path=qdrant_path, collection="news", text="text", **keys))


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """A Chroma server and PostgreSQL with pgvector, for the module; torn down after it."""
    with started_servers(tmp_path_factory.mktemp("servers"), DSN_ENV) as started:
        yield started


@pytest.fixture(scope="module")
def history(servers, embedder, tmp_path_factory):
    """DAYS days of the news slice: each day the team's indexing job loads the stores, then a run of the job scores
    the builtin dense pipeline and the three stores on the same vectors. Returns the config (its data_dir holds the
    series)."""
    root = tmp_path_factory.mktemp("history")
    url, dsn = servers
    cfg = Config(data_dir=root / "store", gold=SLICE / "gold.jsonl",
                 sources=(SourceConfig(name="news", path=SLICE / "daily"),),
                 retrieval=RetrievalConfig(pipelines=("dense",), k=(1, 3, 5, 10), candidate_depth=20),
                 targets=(TargetConfig(name="dense", kind="builtin"), *store_targets(url, root / "qdrant")))
    writers = [ChromaWriter(url, "news"), PgWriter(dsn, "news"), QdrantWriter(root / "qdrant", "news")]
    replay(cfg, writers, [FIRST + timedelta(days=n) for n in range(DAYS)], embedder)
    for writer in writers:
        writer.close()
    return cfg


@pytest.mark.parametrize("name", STORES)
def test_each_store_as_a_target_equals_the_builtin_dense_pipeline(history, name):
    targets = store.read(history.data_dir, contract.TARGETS)
    assert set(targets[targets["target"] == name]["status"]) == {contract.TARGET_OK}
    keys = [contract.RUN_DATE, "k", "question_id"]
    questions = store.read_per_question(history.data_dir)
    dense, ours = by_target(questions, "dense", keys), by_target(questions, name, keys)
    assert len(dense) == DAYS * 9 * 4 and ours.index.equals(dense.index)
    assert (dense.xs(10, level="k")["retrieved"].str.split().str.len() == 10).all()  # real rankings
    differing = ours[QUALITY].astype(str) != dense[QUALITY].astype(str)
    assert differing.to_numpy().sum() == 0, pd.concat([dense[differing.any(axis=1)], ours[differing.any(axis=1)]])
    compared, n_differing, top1 = differences(history.data_dir, name)  # the metric values too
    assert compared == dense[QUALITY].size + len(store.read_metrics(history.data_dir)) // 4 and n_differing == 0
    # Scores are the same similarity (cosine of the same float32 vectors), summed in another order.
    assert top1 < 1e-5


@pytest.mark.parametrize("name", STORES)
def test_scan_reads_every_record_with_its_document_text_vector_and_model_stamp(history, name):
    target = next(t for t in history.targets if t.name == name)
    s = open_store(target, Path("/"))
    try:
        records = list(s.scan(batch=50))  # several pages
    finally:
        s.close()
    with Corpus.in_dir(history.data_dir) as corpus:
        docs = {d.document.id for d in corpus.snapshot(FIRST + timedelta(days=DAYS - 1))}
    assert {r.doc_id for r in records} == docs
    assert len({r.id for r in records}) == len(records) > len(docs) - 1
    assert all(r.model == "sentence-transformers/all-MiniLM-L6-v2" for r in records)
    assert all(r.vector.dtype == np.float32 and r.vector.shape == (384,) for r in records)
    assert all(abs(float(np.linalg.norm(r.vector)) - 1) < 1e-3 for r in records)
    assert all(isinstance(r.text, str) and r.text for r in records)


def test_a_stopped_server_or_a_wrong_collection_fails_its_target_and_the_run_goes_on(history, tmp_path, servers,
                                                                                      embedder):
    url, _ = servers
    dead = TargetConfig(name="chroma-down", kind="chroma", url=f"http://127.0.0.1:{free_port()}", collection="news",
                        timeout=5.0)
    targets = (TargetConfig(name="dense", kind="builtin"), dead,
               TargetConfig(name="chroma-wrong", kind="chroma", url=url, collection="nosuch"),
               TargetConfig(name="pg-wrong", kind="pgvector", dsn_env=DSN_ENV, table="nosuch"),
               TargetConfig(name="qdrant-wrong", kind="qdrant", path=history.targets[-1].path, collection="nosuch"),
               TargetConfig(name="qdrant-nofolder", kind="qdrant", path=tmp_path / "none", collection="news"))
    cfg = history.replace(data_dir=tmp_path / "store", targets=targets)
    run_day(cfg, FIRST, embedder=embedder, notify=False)
    rows = store.read(cfg.data_dir, contract.TARGETS).set_index("target")
    assert rows.loc["dense", "status"] == contract.TARGET_OK
    for name in ("chroma-down", "chroma-wrong", "pg-wrong", "qdrant-wrong", "qdrant-nofolder"):
        assert rows.loc[name, "status"] == contract.TARGET_FAILED
        assert f"target '{name}'" in rows.loc[name, "message"]
    assert all("nosuch" in rows.loc[name, "message"] for name in ("chroma-wrong", "pg-wrong", "qdrant-wrong"))
    assert not (tmp_path / "none").exists()  # read only: no empty store made in its place
    assert set(store.read_per_question(cfg.data_dir)[contract.PIPELINE]) == {"dense"}
    for name in ("chroma-down", "pg-wrong"):  # the same failure straight from the connector, as a TargetError
        with pytest.raises(TargetError, match=name):
            open_store(next(t for t in targets if t.name == name), Path("/"))


def test_an_unset_dsn_variable_is_a_target_error_naming_it(monkeypatch):
    monkeypatch.delenv("DW_UNSET_DSN", raising=False)
    config = TargetConfig(name="pg", kind="pgvector", dsn_env="DW_UNSET_DSN", table="t")
    with pytest.raises(TargetError, match="'pg'.*DW_UNSET_DSN"):
        open_store(config, Path("/"))


def _toml(tmp_path: Path, target: str) -> Path:
    path = tmp_path / "monitor.toml"
    path.write_text(f'data_dir = "data"\ngold = "{SLICE / "gold.jsonl"}"\n'
                    f'[[sources]]\nname = "n"\npath = "{SLICE / "daily"}"\n[[targets]]\n{target}\n')
    return path


@pytest.mark.parametrize("target, key", [
    ('name = "c"\nkind = "chroma"\ncollection = "x"', "targets[0].url"),  # neither url nor path
    ('name = "c"\nkind = "chroma"\ncollection = "x"\nurl = "http://h:1"\npath = "p"', "targets[0].url"),  # both
    ('name = "q"\nkind = "qdrant"\npath = "p"', "targets[0] (q).collection"),
    ('name = "p"\nkind = "pgvector"\ntable = "t"\ndsn_env = "postgresql://u:pw@h/db"', "targets[0].dsn_env"),
    ('name = "p"\nkind = "pgvector"\ntable = "t"\ndsn_env = "DSN"\ndistance = "l2"', "targets[0].distance"),
    ('name = "p"\nkind = "pgvector"\ntable = "a.b.c"\ndsn_env = "DSN"', "targets[0].table"),
    ('name = "p"\nkind = "pgvector"\ntable = "t"\ndsn_env = "DSN"\ncollection = "x"', "targets[0] (p).collection"),
    ('name = "q"\nkind = "qdrant"\npath = "p"\ncollection = "x"\ntimeout = 0', "targets[0].timeout"),
])
def test_bad_store_settings_are_refused_naming_the_key(tmp_path, target, key):
    with pytest.raises(ConfigError, match=key.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        load_config(_toml(tmp_path, target))


def test_a_model_that_cannot_be_had_stops_the_run_before_its_first_write(tmp_path, capsys):
    path = _toml(tmp_path, 'name = "q"\nkind = "qdrant"\npath = "q"\ncollection = "x"\nmodel = "./no-such-model"')
    cfg = load_config(path)
    assert cfg.targets[0].model == str(tmp_path / "no-such-model")  # relative to the config file
    assert main(["run", "--config", str(path), "--date", "2025-09-10"]) == 2
    assert "no-such-model" in capsys.readouterr().err
    assert not (tmp_path / "data" / contract.PER_QUESTION).exists()


def test_store_settings_are_in_the_config_hash_only_for_a_store():
    http = TargetConfig(name="h", kind="http", url="http://h/s")
    base = Config(Path("d"), Path("g"), targets=(http,))
    assert base.config_hash() == base.replace(targets=(replace(http, model="other"),)).config_hash()
    q = TargetConfig(name="q", kind="qdrant", path=Path("q"), collection="x")
    assert base.replace(targets=(q,)).config_hash() != base.replace(targets=(replace(q, model="m"),)).config_hash()
    assert VectorStoreTarget(q, base.embedder, Path(".")).embedder.model == q.model


def test_an_embedded_chroma_folder_is_searched_by_cosine_best_first(tmp_path):
    """Three records over two axes: the query e1 scores a (e1) 1, c ((e1 + e2) / sqrt 2) 1/sqrt 2, b (e2) 0."""
    vectors = np.zeros((3, DIM), np.float32)
    vectors[0, 0] = vectors[1, 1] = 1.0
    vectors[2, :2] = 1 / np.sqrt(2)
    writer = ChromaWriter(None, "tiny", path=tmp_path / "chroma")
    writer.write(Records(["a#0", "b#0", "c#0"], ["a", "b", "c"], ["A", "B", "C"], vectors, "m"), [])
    config = TargetConfig(name="tiny", kind="chroma", path=Path("chroma"), collection="tiny", doc_id="doc_id",
                          model_field="model")
    s = open_store(config, tmp_path)
    try:
        hits = s.search(vectors[0], 3)
        records = list(s.scan())
    finally:
        s.close()
    assert [h[0] for h in hits] == ["a", "c", "b"] and [h[2] for h in hits] == ["A", "C", "B"]
    np.testing.assert_allclose([h[1] for h in hits], [1.0, 1 / np.sqrt(2), 0.0], atol=1e-6)
    assert sorted((r.id, r.doc_id, r.text, r.model) for r in records) == [
        ("a#0", "a", "A", "m"), ("b#0", "b", "B", "m"), ("c#0", "c", "C", "m")]


def test_a_pgvector_dsn_from_the_environment_is_masked_like_a_secret(monkeypatch):
    from pipeline import redact

    monkeypatch.setenv("DW_SECRET_DSN", "postgresql://reader:hunter2-pw-1234@db.example/rag")
    cfg = Config(Path("d"), Path("g"), targets=(TargetConfig(name="p", kind="pgvector", dsn_env="DW_SECRET_DSN",
                                                             table="t"),))
    secrets = redact.config_secrets(cfg)
    assert "postgresql://reader:hunter2-pw-1234@db.example/rag" in secrets and "hunter2-pw-1234" in secrets
