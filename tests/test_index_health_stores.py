"""Index health over REAL vector stores (a Chroma server, PostgreSQL with pgvector, Qdrant local mode): the real job
reads store "kb" as a corpus while the team's indexing job loads it; each fault injected through the store's own
client (a ghost, a stale vector, an ONNX int8 generation, a deleted gold document) is named on its day."""

from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path

import pandas as pd
import pytest

from pipeline import contract, index_health, store
from pipeline.config import (Config, DriftConfig, EmbedderConfig, IndexHealthConfig, RetrievalConfig, SourceConfig,
                             TargetConfig)
from pipeline.contract import (ALERT, FOUND_ADDED, FOUND_CHANGED, FOUND_DELETED, GHOST, GOLD_ABSENT, INDEX_RULES,
                               MIXED_GENERATIONS, STALE, WARNING)
from pipeline.corpus import Corpus
from pipeline.embeddings import Embedder
from pipeline.job import ingest, run_day
from tests.vectorstore_support import (ChromaWriter, PgWriter, QdrantWriter, Records, load_stream, servers)

SLICE = Path(__file__).parent / "data" / "news-slice"
DAYS = [date(2025, 9, 10) + timedelta(days=n) for n in range(5)]
CLEAN, GHOST_DAY, STALE_DAY, GENERATION_DAY, GOLD_DAY = DAYS
DSN_ENV = "DRIFTWATCH_TEST_INDEX_HEALTH_DSN"
STORES = ("chroma", "pgvector", "qdrant")
PROBLEMS = tuple(INDEX_RULES)
GHOST_ID = "wcep-2025-08-01-never-in-the-corpus"
GOLD_DELETED = "wcep-2025-09-10-74fd82690c"  # question n42's relevant document, published on the first day
INT8 = "@onnx-int8"


@pytest.fixture(scope="module")
def started(tmp_path_factory):
    with servers(tmp_path_factory.mktemp("servers"), DSN_ENV) as urls:
        yield urls


@pytest.fixture(scope="module")
def int8() -> Embedder:
    """The second generation: the same model through the ONNX int8 backend (cosine ~0.993 with the torch vectors)."""
    return Embedder(EmbedderConfig(backend="onnx-int8"))


def kb_target(name: str, url: str, qdrant: Path) -> tuple[TargetConfig, object]:
    """The target "kb" over store `name`, and the team's writer of the same collection or table."""
    keys = {"doc_id": "doc_id", "model_field": "model"}
    if name == "chroma":
        return (TargetConfig(name="kb", kind="chroma", url=url, collection="team_kb", **keys),
                ChromaWriter(url, "team_kb"))
    if name == "pgvector":
        import os

        return (TargetConfig(name="kb", kind="pgvector", dsn_env=DSN_ENV, table="team_kb", text="body", **keys),
                PgWriter(os.environ[DSN_ENV], "team_kb"))
    return (TargetConfig(name="kb", kind="qdrant", path=qdrant, collection="team_kb", text="text", id="chunk_id",
                         **keys),
            QdrantWriter(qdrant, "team_kb"))


@pytest.fixture(scope="module", params=STORES)
def history(request, started, embedder, int8, tmp_path_factory):
    """Five runs of the job with store "kb" read as a corpus. Each day the team's indexing job loads the day's new
    chunks, then the day's fault goes in through the store's client: a ghost's record (GHOST_DAY), a record's text
    edited with its vector kept (STALE_DAY), the day's new chunks embedded by ONNX int8 and stamped so (GENERATION_DAY),
    the records of a gold document deleted (GOLD_DAY). Returns (config, the stale record's id, the int8 chunk ids,
    the chunk ids the store holds at the end)."""
    root = tmp_path_factory.mktemp(f"health-{request.param}")
    target, writer = kb_target(request.param, started[0], root / "qdrant")
    config = Config(data_dir=root / "store", gold=SLICE / "gold.jsonl",
                    sources=(SourceConfig(name="news", path=SLICE / "daily"),),
                    retrieval=RetrievalConfig(pipelines=("dense",), k=(5,), candidate_depth=10), targets=(target,),
                    index_health=IndexHealthConfig(stores=("kb",)),
                    drift=DriftConfig(permutations=99, page_permutations=199, evidently=False))  # not under test
    written: dict[str, str] = {}
    stale_id, generation = "", []
    for day in DAYS:
        with Corpus.in_dir(config.data_dir) as corpus:
            ingest(config, corpus, day)
            before = set(written)
            load_stream([writer], corpus, day, config, int8 if day == GENERATION_DAY else embedder, written)
        if day == GHOST_DAY:
            text = ["A ferry ran aground off a small island; nobody was hurt."]
            writer.write(Records([f"{GHOST_ID}#0"], [GHOST_ID], text, embedder.encode(text), embedder.key), [])
        elif day == STALE_DAY:
            stale_id = sorted(i for i in written if not i.startswith(GOLD_DELETED))[0]
            writer.restate(stale_id, "Rewritten by an editor: the council approved a new harbour instead.")
        elif day == GENERATION_DAY:
            generation = sorted(set(written) - before)
        elif day == GOLD_DAY:
            writer.write(Records([], [], [], embedder.encode([]), embedder.key),
                         [i for i in written if i.startswith(f"{GOLD_DELETED}#")])
        run_day(config, day, embedder=embedder, notify=False)
    writer.close()
    held = {i for i in written if not i.startswith(f"{GOLD_DELETED}#")} | {f"{GHOST_ID}#0"}
    return config, stale_id, generation, held


def counts(config: Config, day: date) -> dict[str, int]:
    health = store.read(config.data_dir, contract.INDEX_HEALTH)
    rows = health[(health[contract.RUN_DATE] == pd.Timestamp(day)) & (health[contract.STORE] == "kb")]
    return dict(zip(rows[contract.FINDING], rows[contract.COUNT]))


def examples(config: Config, day: date, finding: str) -> str:
    health = store.read(config.data_dir, contract.INDEX_HEALTH)
    row = health[(health[contract.RUN_DATE] == pd.Timestamp(day)) & (health[contract.FINDING] == finding)]
    return row[contract.EXAMPLES].item()


def index_alerts(config: Config, day: date) -> dict[str, tuple[str, str]]:
    """The day's index alerts of store kb: finding -> (severity, rule)."""
    alerts = store.read(config.data_dir, contract.ALERTS)
    rows = alerts[(alerts[contract.RUN_DATE] == pd.Timestamp(day)) & alerts["rule"].isin(INDEX_RULES.values())]
    assert set(rows["pipeline"]) <= {"kb"}
    return {m: (s, r) for m, s, r in zip(rows["metric"], rows["severity"], rows["rule"])}


def test_each_run_has_its_rows_and_the_clean_day_names_nothing(history):
    config, _, _, _ = history
    health = store.read(config.data_dir, contract.INDEX_HEALTH)
    assert len(health) == len(DAYS) * len(contract.FINDINGS) and set(health[contract.STORE]) == {"kb"}
    first = counts(config, CLEAN)
    assert first[FOUND_ADDED] > 0
    assert first[FOUND_DELETED] == first[FOUND_CHANGED] == 0
    assert {f: first[f] for f in PROBLEMS} == dict.fromkeys(PROBLEMS, 0)
    assert index_alerts(config, CLEAN) == {}
    runs = store.read(config.data_dir, contract.RUNS)
    assert not runs["events"].fillna("").str.contains("index health of store").any()  # every day's scan was read


def test_an_injected_ghost_is_an_alert_on_its_day(history):
    config, _, _, _ = history
    found = counts(config, GHOST_DAY)
    assert found[GHOST] == 1 and examples(config, GHOST_DAY, GHOST) == GHOST_ID
    assert {f: found[f] for f in PROBLEMS if f != GHOST} == dict.fromkeys([f for f in PROBLEMS if f != GHOST], 0)
    assert index_alerts(config, GHOST_DAY) == {GHOST: (ALERT, INDEX_RULES[GHOST])}
    assert index_alerts(config, STALE_DAY)[GHOST] == (WARNING, INDEX_RULES[GHOST])  # it persists: a warning


def test_a_stale_vector_is_named_on_its_day(history):
    config, stale_id, _, _ = history
    found = counts(config, STALE_DAY)
    assert found[STALE] == 1 and found[FOUND_CHANGED] == 1 and examples(config, STALE_DAY, STALE) == stale_id
    assert found[MIXED_GENERATIONS] == found[GOLD_ABSENT] == 0
    assert index_alerts(config, STALE_DAY)[STALE] == (WARNING, INDEX_RULES[STALE])
    assert counts(config, GENERATION_DAY)[STALE] == 1  # never re-embedded: still stale


def test_a_second_embedding_generation_onnx_int8_is_named_on_its_day(history):
    config, _, generation, _ = history
    found = counts(config, GENERATION_DAY)
    assert found[MIXED_GENERATIONS] == len(generation) > 0 and found[GOLD_ABSENT] == 0
    assert counts(config, STALE_DAY)[MIXED_GENERATIONS] == 0
    named = examples(config, GENERATION_DAY, MIXED_GENERATIONS)
    assert named.startswith(" ".join(generation[:5])) and f"{INT8}: {len(generation)}" in named
    assert index_alerts(config, GENERATION_DAY)[MIXED_GENERATIONS] == (ALERT, INDEX_RULES[MIXED_GENERATIONS])


def test_a_deleted_gold_document_is_named_on_its_day(history):
    config, _, _, _ = history
    found = counts(config, GOLD_DAY)
    assert found[GOLD_ABSENT] == 1 and examples(config, GOLD_DAY, GOLD_ABSENT) == GOLD_DELETED
    assert found[FOUND_DELETED] >= 1 and counts(config, GENERATION_DAY)[GOLD_ABSENT] == 0
    assert index_alerts(config, GOLD_DAY)[GOLD_ABSENT] == (ALERT, INDEX_RULES[GOLD_ABSENT])
    assert found[GHOST] == 1 and index_alerts(config, GOLD_DAY)[GHOST][0] == WARNING


def test_the_store_names_its_records_by_the_chunk_ids_the_team_wrote(history):
    """Qdrant's point ids are UUIDs: its records are read by the payload's chunk id (target key `id`), as Chroma's and
    pgvector's are by their own ids, so that findings name chunks and `index_health.drift` can match them."""
    config, _, _, held = history
    opened = index_health.open_store(config, "kb")
    try:
        ids = [r.id for r in opened.scan(batch=7)]  # several pages
    finally:
        opened.close()
    assert len(ids) == len(set(ids)) and set(ids) == held
