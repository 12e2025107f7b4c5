"""Mixed embedding generations of the same dimension and unit norm, with no model stamp, found by neighbourhood
signatures over every record of a REAL Qdrant local store (no re-embedding): the team's indexing job loads the news
slice day by day with the real embedder, and on one day its new chunks go in as a second generation (the same texts'
vectors multiplied by a fixed random orthogonal matrix). Most of that generation is named on its day and after, not
just the re-embedded sample; a clean store names nothing."""

from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pytest

from pipeline import index_health
from pipeline.config import Config, IndexHealthConfig, RetrievalConfig, SourceConfig, TargetConfig
from pipeline.contract import MIXED_GENERATIONS, STALE
from pipeline.corpus import Corpus
from pipeline.job import ingest
from tests.vectorstore_support import QdrantWriter, Records, load_stream

SLICE = Path(__file__).parent / "data" / "news-slice"
DAYS = [date(2025, 9, 10) + timedelta(days=n) for n in range(8)]
ROTATED_DAY = DAYS[5]
SAMPLE = 4  # the re-embedded sample: far fewer records than the generation


def rotation(dim: int, seed: int = 7) -> np.ndarray:
    q, r = np.linalg.qr(np.random.default_rng(seed).normal(size=(dim, dim)))
    return (q * np.sign(np.diag(r))).astype(np.float32)


class RotatingWriter:
    """The team's writer whose vectors go in rotated: another space, same dimension, unit norm, no stamp."""

    def __init__(self, writer: QdrantWriter, matrix: np.ndarray) -> None:
        self.writer, self.matrix = writer, matrix

    def write(self, r: Records, gone: list[str]) -> None:
        self.writer.write(Records(r.ids, r.doc_ids, r.texts, r.vectors @ self.matrix.T, r.model), gone)


def replay(root: Path, embedder, rotate_on: date | None) -> tuple[Config, dict[date, index_health.Health], list[str]]:
    """Each day: the slice's day ingested, its new chunks loaded into the Qdrant store (rotated on `rotate_on`), the
    store read by index_health.check. Returns the config, each day's health and the rotated chunk ids."""
    target = TargetConfig(name="kb", kind="qdrant", path=root / "qdrant", collection="team_kb", text="text",
                          id="chunk_id", doc_id="doc_id")  # no model_field: the store's records carry no stamp
    config = Config(data_dir=root / "store", gold=SLICE / "gold.jsonl",
                    sources=(SourceConfig(name="news", path=SLICE / "daily"),),
                    retrieval=RetrievalConfig(pipelines=("dense",), k=(5,), candidate_depth=10), targets=(target,),
                    index_health=IndexHealthConfig(stores=("kb",), sample=SAMPLE))
    writer = QdrantWriter(root / "qdrant", "team_kb")
    written: dict[str, str] = {}
    healths, rotated = {}, []
    for day in DAYS:
        with Corpus.in_dir(config.data_dir) as corpus:
            ingest(config, corpus, day)
            before = set(written)
            chosen = RotatingWriter(writer, rotation(384)) if day == rotate_on else writer
            load_stream([chosen], corpus, day, config, embedder, written)
        if day == rotate_on:
            rotated = sorted(set(written) - before)
        opened = index_health.open_store(config, "kb")
        try:
            healths[day] = index_health.check(opened.scan(), name="kb", run_date=day, data_dir=config.data_dir,
                                              present=None, gold=(), embedder=embedder, settings=config.index_health)
        finally:
            opened.close()
    return config, healths, rotated


def named(health: index_health.Health) -> tuple[int, list[str], str]:
    """The mixed_generations finding's count, its example ids and how they were told apart."""
    finding = next(f for f in health.findings if f.kind == MIXED_GENERATIONS)
    ids = [e for e in finding.examples if not e.startswith("(")]
    how = " ".join(e for e in finding.examples if e.startswith("("))
    return finding.count, ids, how


@pytest.fixture(scope="module")
def rotated_history(embedder, tmp_path_factory):
    return replay(tmp_path_factory.mktemp("rotated"), embedder, ROTATED_DAY)


def test_a_clean_store_names_no_generation(embedder, tmp_path):
    _, healths, _ = replay(tmp_path, embedder, None)
    for day, health in healths.items():
        assert health.n_records > 0
        assert named(health)[0] == 0, day
        assert health.count(STALE) == 0, day


def test_a_rotated_generation_is_named_on_its_day_most_of_it_not_just_the_sample(rotated_history):
    _, healths, rotated = rotated_history
    assert len(rotated) > 2 * SAMPLE
    for day in DAYS[:DAYS.index(ROTATED_DAY)]:
        assert named(healths[day])[0] == 0, day
    for day in DAYS[DAYS.index(ROTATED_DAY):]:
        count, ids, how = named(healths[day])
        assert count >= 0.6 * len(rotated) and count > SAMPLE, (day, count, len(rotated))
        assert count <= len(rotated) and set(ids) <= set(rotated)
        assert f"(neighbourhood signatures: {count} of " in how
    # The sampled records of the generation are far from their re-embedding: another generation, not stale.
    health = healths[ROTATED_DAY]
    assert health.count(STALE) <= len(rotated) - named(health)[0]


def test_the_signatures_tell_the_spaces_apart_on_the_store_s_own_vectors(rotated_history, embedder):
    """other_spaces on the store's records names exactly the rotated records it has evidence for, and a record
    whose text shares no word with the rest (no text neighbour) is never named, even in a third space."""
    config, _, rotated = rotated_history
    opened = index_health.open_store(config, "kb")
    try:
        records = [r for r in opened.scan() if r.text]
    finally:
        opened.close()
    settings = config.index_health
    vectors = np.stack([r.vector for r in records])
    hits, read = index_health.other_spaces([r.text for r in records], vectors, settings,
                                           docs=[r.doc_id for r in records])
    assert {records[i].id for i in hits} <= set(rotated) and read > len(records) // 2
    lone = [*[r.text for r in records], "Zyxqv plorbt wumble."]
    extra = np.vstack([vectors, rotation(vectors.shape[1], seed=8) @ vectors[0]])
    again, _ = index_health.other_spaces(lone, extra, settings)
    assert len(records) not in set(again.tolist()) and set(again.tolist()) == set(hits.tolist())


def copies_scene(neighbour_texts: list[str]) -> tuple[list[str], np.ndarray]:
    """A main space of 30 records (vectors near one axis, cosines about 0.6, texts sharing no word with the rest)
    plus the given records inside it, and one record X whose vector is orthogonal to all of them (its own space)
    and whose text shares its words with those records (its text neighbours in the main space). X is last."""
    rng = np.random.default_rng(3)
    dim = 16
    main = rng.normal(size=(30 + len(neighbour_texts), dim)) * 0.2
    main[:, 1] = 0.0  # nothing along X's axis
    main[:, 0] = 1.0  # the main axis
    x = np.zeros((1, dim))
    x[0, 1] = 1.0
    texts = [f"filler{i} padding{i} other{i} words{i}" for i in range(30)] + neighbour_texts
    texts.append("ferry harbour island aground storm rescue")
    return texts, np.vstack([main, x]).astype(np.float32)


def test_copies_of_one_text_are_one_text_neighbour_not_the_evidence_of_another_space():
    """A record alone in its corner of the space whose only text neighbour is one story held four times (a chunk
    indexed twice, boilerplate) is not named: the 100,000-record bench named 5 such records of a clean store
    (bench/index_health_scale.py) before copies of one text counted once. Three distinct far neighbours still name
    it."""
    settings = IndexHealthConfig()
    texts, vectors = copies_scene(["ferry harbour island aground storm rescue crew"] * 4)
    named, _ = index_health.other_spaces(texts, vectors, settings)
    assert named.tolist() == []
    texts, vectors = copies_scene([f"ferry harbour island aground storm rescue {w}" for w in ("crew", "coast", "tug")])
    named, _ = index_health.other_spaces(texts, vectors, settings)
    assert named.tolist() == [len(texts) - 1]
    named, _ = index_health.other_spaces(texts, vectors, IndexHealthConfig(min_neighbours=4))
    assert named.tolist() == []


def test_the_chunks_of_one_document_are_one_piece_of_evidence():
    """The document is the unit: three far text neighbours that are chunks of one long document (its own
    vocabulary, chunk after chunk) do not name a record; from three documents they do. Before, each chunk counted."""
    texts, vectors = copies_scene([f"ferry harbour island aground storm rescue {w}" for w in ("crew", "coast", "tug")])
    one = [f"filler{i}" for i in range(30)] + ["manual"] * 3 + ["x"]
    three = [f"filler{i}" for i in range(30)] + ["manual", "guide", "faq"] + ["x"]
    assert index_health.other_spaces(texts, vectors, IndexHealthConfig(), docs=one)[0].tolist() == []
    assert index_health.other_spaces(texts, vectors, IndexHealthConfig(), docs=three)[0].tolist() == [33]
