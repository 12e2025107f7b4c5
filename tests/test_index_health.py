"""The index health of a vector store read as a corpus: a store played by a test helper over the real news slice
(real embeddings), with a ghost, a stale vector, a second generation and a deleted gold document injected on their
days, each named in index_health.csv and alerts.csv on its day, and nothing named on the clean days."""

from __future__ import annotations

import dataclasses
import shutil
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline import contract, index_health, job, store, vectorstores
from pipeline.config import (Config, ConfigError, IndexHealthConfig, RetrievalConfig, SourceConfig,
                             TargetConfig, _check)
from pipeline.contract import (ALERT, FOUND_ADDED, FOUND_CHANGED, FOUND_DELETED, GHOST, GOLD_ABSENT, INDEX_RULES,
                               MIXED_GENERATIONS, STALE, WARNING)
from pipeline.corpus import Corpus
from pipeline.embeddings import Embedder, embed_cached, normalize
from pipeline.gold import load_gold
from pipeline.targets import TargetError
from pipeline.vectorstores import StoredVector
from pipeline.windows import window_verdicts

SLICE = Path(__file__).parent / "data" / "news-slice"
START = date(2025, 9, 10)
DAYS = [START + timedelta(days=i) for i in range(6)]
CLEAN, GHOST_DAY, STALE_DAY, GENERATION_DAY, GOLD_DAY = DAYS[1:]
MODEL = "all-MiniLM-L6-v2"
GHOST_ID = "wcep-2025-09-01-deleted-by-the-corpus"
GHOST_TEXT = "A storm closed the port of an island for a day."
TRUNCATE_DIM = 128
PROBLEMS = tuple(INDEX_RULES)


class ListStore:
    """A vector store of the test: the records the team's indexing job (`TeamIndex`) holds on the run date."""

    def __init__(self, name: str, records: list[StoredVector]) -> None:
        self.name, self.records, self.closed = name, records, False

    def search(self, vector: np.ndarray, k: int) -> list[tuple[str, float, str | None]]:
        """Exact inner product over the records of the query's dimension (the "kb" target is searched too)."""
        same = [r for r in self.records if r.vector.size == vector.size]
        scores = [float(r.vector @ vector) for r in same]
        return [(same[i].doc_id, scores[i], same[i].text) for i in np.argsort(scores, kind="stable")[::-1][:k]]

    def scan(self, batch: int = 1000):
        yield from self.records

    def close(self) -> None:
        self.closed = True


class TeamIndex:
    """The team's indexing job: one record per document of the corpus on the date (id = doc id, its title and text,
    its vector by the real model, no model stamp), with the day's injected faults."""

    def __init__(self, data_dir: Path, embedder: Embedder) -> None:
        self.data_dir, self.embedder = data_dir, embedder
        self.vectors: dict[str, np.ndarray] = {}  # text -> vector, each text embedded once
        self.day = START
        self.fail = False
        self.noise = 0.0  # > 0: the store serves each vector moved by this much noise (another backend's vectors)

    def vector(self, text: str) -> np.ndarray:
        if not self.noise:
            return self.vectors[text]
        rng = np.random.default_rng(int.from_bytes(text.encode()[:8].ljust(8), "big"))
        return normalize(self.vectors[text][None, :] + rng.normal(scale=self.noise, size=(1, 384)))[0]

    def records(self, day: date) -> list[StoredVector]:
        with Corpus.in_dir(self.data_dir, readonly=True) as corpus:
            docs = [(s.document.id, f"{s.document.title}\n{s.document.text}".strip(), s.first_seen)
                    for s in corpus.snapshot(day)]
        texts = [t for t in dict.fromkeys([t for _, t, _ in docs] + [GHOST_TEXT]) if t not in self.vectors]
        self.vectors.update(zip(texts, self.embedder.encode(texts)))  # the day's new texts, in one batch
        out = []
        for doc_id, text, first_seen in docs:
            vector = self.vector(text)
            if day >= GENERATION_DAY and first_seen == GENERATION_DAY.isoformat():
                # written with embedder.truncate_dim = 128: what Embedder.encode does, truncate then normalise
                vector = normalize(vector[None, :TRUNCATE_DIM])[0]
            out.append(StoredVector(doc_id, doc_id, text, vector, None))
        if day >= GHOST_DAY:  # a document the corpus never had (or deleted) still in the store
            out.append(StoredVector(GHOST_ID, GHOST_ID, GHOST_TEXT, self.vector(GHOST_TEXT), None))
        if day >= STALE_DAY:  # the first document's text edited, its vector kept
            first = out[0]
            out[0] = dataclasses.replace(first, text="Rewritten: " + out[1].text)
        if day >= GOLD_DAY:
            out = [r for r in out if r.doc_id != GOLD_DELETED]
        return out

    def open(self, target: TargetConfig, base: Path | None = None) -> ListStore:
        if self.fail:
            raise TargetError(f"store {target.name}: connection refused")  # as a real connector raises
        return ListStore(target.name, self.records(self.day))


GOLD_DELETED = "wcep-2025-09-10-74fd82690c"  # question n42's relevant document


@pytest.fixture(scope="module")
def history(tmp_path_factory, embedder):
    """Six runs of the job over the news slice with the store `kb` read as a corpus; returns the config, its
    index_health.csv, alerts.csv and the run results."""
    root = tmp_path_factory.mktemp("index_health")
    folder = root / "daily"
    folder.mkdir()
    for day in DAYS:
        shutil.copy(SLICE / "daily" / f"{day}.xml", folder)
    config = Config(data_dir=root / "store", gold=SLICE / "gold.jsonl", sources=(SourceConfig("news", path=folder),),
                    retrieval=RetrievalConfig(pipelines=("dense",), k=(5,), candidate_depth=10),
                    targets=(TargetConfig("kb", "qdrant", path=Path("qdrant"), collection="kb"),),
                    index_health=IndexHealthConfig(stores=("kb",), sample=8))
    team = TeamIndex(config.data_dir, embedder)
    mp = pytest.MonkeyPatch()
    mp.setattr(vectorstores, "open_store", team.open, raising=False)
    results = {}
    for day in DAYS:
        team.day = day
        results[day] = job.run_day(config, day, embedder=embedder, notify=False)
    yield config, team, results
    mp.undo()


def counts(config: Config, day: date) -> dict[str, int]:
    health = store.read(config.data_dir, contract.INDEX_HEALTH)
    rows = health[health[contract.RUN_DATE] == pd.Timestamp(day)]
    return dict(zip(rows[contract.FINDING], rows[contract.COUNT]))


def index_alerts(config: Config, day: date) -> dict[str, str]:
    alerts = store.read(config.data_dir, contract.ALERTS)
    rows = alerts[(alerts[contract.RUN_DATE] == pd.Timestamp(day)) & alerts["rule"].isin(INDEX_RULES.values())]
    return dict(zip(rows["metric"], rows["severity"]))


def test_every_finding_has_a_row_every_day_in_the_contracts_order(history):
    config, _, _ = history
    health = store.read(config.data_dir, contract.INDEX_HEALTH)
    assert len(health) == len(DAYS) * len(contract.FINDINGS)
    assert list(health[contract.FINDING][: len(contract.FINDINGS)]) == list(contract.FINDINGS)


def test_the_clean_days_name_nothing(history):
    config, _, _ = history
    first, clean = counts(config, START), counts(config, CLEAN)
    assert first[FOUND_ADDED] > 0 and first[FOUND_DELETED] == first[FOUND_CHANGED] == 0
    assert clean[FOUND_ADDED] > 0 and clean[FOUND_DELETED] == clean[FOUND_CHANGED] == 0
    for day_counts in (first, clean):
        assert {f: day_counts[f] for f in PROBLEMS} == dict.fromkeys(PROBLEMS, 0)
    assert index_alerts(config, START) == index_alerts(config, CLEAN) == {}


def test_an_injected_ghost_is_an_alert_on_its_day_then_a_warning(history):
    config, _, results = history
    assert counts(config, GHOST_DAY)[GHOST] == 1
    assert {f: counts(config, GHOST_DAY)[f] for f in PROBLEMS if f != GHOST} == dict.fromkeys(
        [f for f in PROBLEMS if f != GHOST], 0)
    assert index_alerts(config, GHOST_DAY) == {GHOST: ALERT}
    ghost = next(a for a in results[GHOST_DAY].alerts if a.metric == GHOST)
    assert GHOST_ID in ghost.message and ghost.pipeline == "kb" and ghost.new
    later = next(a for a in results[STALE_DAY].alerts if a.metric == GHOST)  # it persists: not paged again
    assert later.severity == WARNING and not later.new and later.since == GHOST_DAY.isoformat()


def test_a_stale_vector_is_named_on_its_day_and_until_it_is_re_embedded(history):
    config, team, _ = history
    stale = counts(config, STALE_DAY)
    assert stale[STALE] == 1 and stale[FOUND_CHANGED] == 1
    assert index_alerts(config, STALE_DAY)[STALE] == WARNING
    assert counts(config, GENERATION_DAY)[STALE] == 1  # its vector still not re-embedded: still stale
    health = store.read(config.data_dir, contract.INDEX_HEALTH)
    row = health[(health[contract.RUN_DATE] == pd.Timestamp(STALE_DAY)) & (health[contract.FINDING] == STALE)]
    assert row[contract.EXAMPLES].item() == team.records(STALE_DAY)[0].id


def test_a_second_generation_written_with_truncate_dim_is_named_by_its_dimension(history):
    config, team, results = history
    with Corpus.in_dir(config.data_dir, readonly=True) as corpus:
        new = [s.document.id for s in corpus.snapshot(GENERATION_DAY) if s.first_seen == GENERATION_DAY.isoformat()]
    assert counts(config, GENERATION_DAY)[MIXED_GENERATIONS] == len(new) > 0
    assert counts(config, STALE_DAY)[MIXED_GENERATIONS] == 0
    assert index_alerts(config, GENERATION_DAY)[MIXED_GENERATIONS] == ALERT
    alert = next(a for a in results[GENERATION_DAY].alerts if a.metric == MIXED_GENERATIONS)
    assert "dim 128" in alert.message and "dim 384" in alert.message


def test_a_deleted_gold_document_is_named_on_its_day(history):
    config, _, results = history
    assert counts(config, GOLD_DAY)[GOLD_ABSENT] == 1 and counts(config, GOLD_DAY)[FOUND_DELETED] == 1
    assert counts(config, GENERATION_DAY)[GOLD_ABSENT] == 0
    alert = next(a for a in results[GOLD_DAY].alerts if a.metric == GOLD_ABSENT)
    assert alert.severity == ALERT and GOLD_DELETED in alert.message
    assert GOLD_DELETED in {d for q in load_gold(config.gold) for d in q.relevant_ids}


def test_a_re_run_replaces_its_snapshot_and_rows_and_a_failing_store_does_not_stop_the_run(history, embedder):
    config, team, _ = history
    before = store.read(config.data_dir, contract.INDEX_HEALTH)
    team.day = GOLD_DAY
    job.run_day(config, GOLD_DAY, embedder=embedder, notify=False)
    pd.testing.assert_frame_equal(store.read(config.data_dir, contract.INDEX_HEALTH), before)
    snapshots = index_health.Snapshots(config.data_dir)
    try:
        n = snapshots.db.execute("SELECT count(*) FROM records WHERE run_date = ?", (GOLD_DAY.isoformat(),)).fetchone()
    finally:
        snapshots.close()
    assert n[0] == len(team.records(GOLD_DAY))
    team.fail = True
    try:
        result = job.run_day(config, GOLD_DAY, embedder=embedder, notify=False)
    finally:
        team.fail = False
    assert "index health of store 'kb' not read: store kb: connection refused" in result.run["events"]
    assert counts(config, GOLD_DAY) == {}  # no rows that day: never a zero count for a store not read
    team.day = GOLD_DAY
    job.run_day(config, GOLD_DAY, embedder=embedder, notify=False)  # leave the module's history as it was


# --- the parts, on records built here -----------------------------------------------------------------------------


def records(embedder: Embedder, texts: list[str], model: str | None = MODEL) -> list[StoredVector]:
    vectors = embedder.encode(texts)
    return [StoredVector(f"d{i}#0", f"d{i}", t, v, model) for i, (t, v) in enumerate(zip(texts, vectors))]


TEXTS = [f"{title}" for title in (
    "The central bank raised interest rates by a quarter point.", "A storm flooded the coastal town overnight.",
    "The football club signed a new striker for a record fee.", "Scientists sequenced the genome of an ancient wheat.",
    "The parliament passed the budget after a long debate.", "A new vaccine against malaria was approved.")]


def check(tmp_path: Path, embedder: Embedder, recs: list[StoredVector], day: date = START, **settings):
    return index_health.check(recs, name="kb", run_date=day, data_dir=tmp_path, present=None, gold=(),
                              embedder=embedder, settings=IndexHealthConfig(**settings))


def test_a_stale_vector_already_stale_at_the_first_snapshot_is_found_by_re_embedding(tmp_path, embedder):
    recs = records(embedder, TEXTS)
    recs[2] = dataclasses.replace(recs[2], text="The orchestra played Mahler's second symphony.")
    health = check(tmp_path, embedder, recs, sample=len(TEXTS))
    assert health.count(STALE) == 1 and health.count(MIXED_GENERATIONS) == 0
    assert check(tmp_path / "none", embedder, recs, sample=0).count(STALE) == 0  # no sample: only the diff sees it


@pytest.mark.parametrize("change, how", [
    (lambda r: dataclasses.replace(r, model="e5-small-v2"), "model stamps"),
    (lambda r: dataclasses.replace(r, vector=r.vector * 0.7), "norms"),
])
def test_a_second_generation_is_named_by_stamp_or_norm(tmp_path, embedder, change, how):
    recs = records(embedder, TEXTS)
    recs[-1] = change(recs[-1])
    health = check(tmp_path, embedder, recs)
    assert health.count(MIXED_GENERATIONS) == 1
    row = next(r for r in health.rows() if r[contract.FINDING] == MIXED_GENERATIONS)
    assert row[contract.EXAMPLES].startswith(f"{recs[-1].id} ({how} ")


def test_the_re_embedded_sample_names_another_backend_between_the_two_lines(tmp_path, embedder):
    """ONNX int8's cosine with fp32 is 0.990-0.997 (bench/index_health.py); a vector moved by that much from its
    re-embedding, with stamps, dimension and norm all alike, is read as another generation, not as stale."""
    recs = records(embedder, TEXTS)
    rng = np.random.default_rng(0)
    v = recs[0].vector
    noise = rng.normal(size=v.size).astype(np.float32)
    noise -= (noise @ v) * v  # orthogonal to v: cos(v + t n, v) = 1 / sqrt(1 + t^2 |n|^2)
    moved = v + noise / np.linalg.norm(noise) * np.float32(np.tan(np.arccos(0.995)))
    recs[0] = dataclasses.replace(recs[0], vector=moved / np.linalg.norm(moved))
    health = check(tmp_path, embedder, recs, sample=len(TEXTS))
    assert health.count(MIXED_GENERATIONS) == 1 and health.count(STALE) == 0


def test_a_store_keeps_its_latest_snapshots_and_a_re_run_of_the_latest_date_still_diffs_against_its_own(
        tmp_path, embedder):
    """A snapshot holds every record (its size at 100,000 records: docs/benchmarks.md): the file keeps each store's
    SNAPSHOTS_KEPT latest dates, not one per run forever. Before, every date stayed."""
    recs = records(embedder, TEXTS)
    days = [START + timedelta(days=n) for n in range(index_health.SNAPSHOTS_KEPT + 3)]
    for n, day in enumerate(days):
        edited = [dataclasses.replace(r, text=f"{r.text} Update {n}.") if r.id == "d0#0" else r for r in recs]
        health = check(tmp_path, embedder, edited, day, sample=0)
    snapshots = index_health.Snapshots(tmp_path)
    try:
        kept = [r[0] for r in snapshots.db.execute("SELECT DISTINCT run_date FROM records ORDER BY run_date")]
    finally:
        snapshots.close()
    assert kept == [d.isoformat() for d in days[-index_health.SNAPSHOTS_KEPT:]]
    again = check(tmp_path, embedder, edited, days[-1], sample=0)
    assert again.previous_date == days[-2].isoformat() and again.count(STALE) == health.count(STALE) == 1


def test_the_digest_ignores_how_the_vector_was_read_back_but_not_a_re_embedding():
    v = np.random.default_rng(1).normal(size=384).astype(np.float32)
    assert index_health.vector_digest(v) == index_health.vector_digest(v.astype(np.float64).tolist())
    assert index_health.vector_digest(v) != index_health.vector_digest(v + np.float32(1e-3))


def test_a_bad_record_is_refused_naming_the_store_and_the_record(tmp_path, embedder):
    recs = records(embedder, TEXTS[:2])
    bad = dataclasses.replace(recs[1], vector=np.array([np.nan, 1.0], dtype=np.float32))
    with pytest.raises(index_health.IndexHealthError, match="store 'kb', record 'd1#0'"):
        check(tmp_path, embedder, [recs[0], bad])
    with pytest.raises(index_health.IndexHealthError, match="'d0#0' returned twice"):
        check(tmp_path, embedder, [recs[0], recs[0]])
    assert not (tmp_path / index_health.SNAPSHOT_FILE).exists()  # validated before the first write


def test_a_store_that_is_no_target_is_a_config_error(tmp_path):
    config = Config(data_dir=tmp_path, gold=tmp_path / "gold.jsonl", index_health=IndexHealthConfig(stores=("kb",)))
    with pytest.raises(ConfigError, match=r"index_health.stores\[0\].*'kb' is not the name of a \[\[targets\]\]"):
        _check(config, "monitor.toml")
    kb = config.replace(targets=(TargetConfig("kb", "builtin", pipeline="dense"),))
    with pytest.raises(ConfigError, match=r"index_health.drift: .* name exactly one in index_health.stores \(got 0\)"):
        _check(kb.replace(index_health=IndexHealthConfig(drift=True)), "monitor.toml")


# --- drift on the store's own vectors -----------------------------------------------------------------------------


def test_the_drift_of_a_stores_vectors_equals_the_drift_of_the_same_vectors_computed_the_usual_way(history, embedder):
    """The store holds driftwatch's chunks with the very vectors driftwatch computes (as float64, in another order):
    the drift verdicts over the store's vectors (`aligned_vectors`) are those of the usual run. With the current
    window's vectors of another generation (ONNX-int8-like noise), they differ: the store's vectors are read."""
    config, _, _ = history
    config = config.replace(drift=dataclasses.replace(config.drift, min_current=10, min_reference=20,
                                                      permutations=199, evidently=False))
    with Corpus.in_dir(config.data_dir) as corpus:
        keys, chunks, valid_from = job.corpus_chunks(config, corpus, GOLD_DAY, {})
        usual = embed_cached(corpus, embedder, [c.text for c in chunks]).vectors
        records = [StoredVector(c.id, c.doc_id, c.text, v.astype(np.float64), None) for c, v in zip(chunks, usual)]
        first_seen = {doc_id: seen for doc_id, _, seen in keys}

        def verdicts(vectors: np.ndarray) -> tuple[list[str], np.ndarray]:
            found = window_verdicts(config, corpus, embedder, GOLD_DAY, first_seen, chunks, vectors, {},
                                    (keys, valid_from))
            return [v.verdict for v in found.verdicts], np.array([(v.value, v.p_value) for v in found.verdicts])

        words, expected = verdicts(usual)
        assert contract.NOT_ENOUGH_DATA not in words
        store_words, got = verdicts(index_health.aligned_vectors(chunks, records[::-1]))
        assert store_words == words
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-9)  # float32 renormalised: last-bit noise
        rng = np.random.default_rng(0)
        moved = [dataclasses.replace(r, vector=r.vector + rng.normal(scale=0.02, size=r.vector.size))
                 if first_seen[r.doc_id] == GOLD_DAY.isoformat() else r for r in records]
        assert not np.allclose(verdicts(index_health.aligned_vectors(chunks, moved))[1], expected, equal_nan=True)


def test_a_chunk_the_store_lacks_is_named():
    from pipeline.chunking import Chunk

    chunks = [Chunk("a#0", "a", 0, "x"), Chunk("b#0", "b", 0, "y"), Chunk("b#1", "b", 1, "z")]
    whole = [StoredVector("a", "a", "x", np.ones(3, np.float32), None),
             StoredVector("b", "b", "y z", np.ones(3, np.float32), None)]
    with pytest.raises(index_health.IndexHealthError, match="chunk 'b#0'"):  # b is two chunks: no one vector
        index_health.aligned_vectors(chunks, whole)
    assert index_health.aligned_vectors(chunks[:1], whole).shape == (1, 3)


def test_the_sample_is_the_same_whatever_order_the_store_returns_its_records_in():
    recs = [StoredVector(f"r{i}", f"d{i}", "t", np.ones(4, np.float32), None) for i in range(200)]
    day = START
    _, sampled, _ = index_health.read_records(recs, "kb", day, 10)
    _, backwards, _ = index_health.read_records(recs[::-1], "kb", day, 10)
    smallest = sorted(recs, key=lambda r: index_health._rank(r.id, "kb", day))[:10]  # the seeded ranks' first ten
    assert [k.id for k, _, _ in sampled] == [k.id for k, _, _ in backwards] == [r.id for r in smallest]
    _, other_day, _ = index_health.read_records(recs, "kb", day + timedelta(days=1), 10)
    assert {k.id for k, _, _ in other_day} != {k.id for k, _, _ in sampled}


def test_a_finding_pages_when_it_appears_or_grows_and_warns_while_it_persists():
    days = [START + timedelta(days=i) for i in range(4)]
    ghosts = [0, 2, 2, 3]  # appears, persists, grows
    stale = [1, 1, 0, 0]
    rows = [{contract.RUN_DATE: d.isoformat(), contract.STORE: "kb", contract.FINDING: f, contract.COUNT: n,
             contract.N_RECORDS: 10, contract.EXAMPLES: ""}
            for d, g, s in zip(days, ghosts, stale) for f, n in ((GHOST, g), (STALE, s))]
    health = pd.DataFrame(rows).astype({contract.RUN_DATE: "datetime64[ns]"})
    got = [{a.metric: (a.severity, a.baseline) for a in index_health.index_alerts(d.isoformat(), pd.Timestamp(d),
                                                                               health)} for d in days]
    assert got == [{STALE: (WARNING, 0.0)}, {GHOST: (ALERT, 0.0), STALE: (WARNING, 1.0)}, {GHOST: (WARNING, 2.0)},
                   {GHOST: (ALERT, 2.0)}]



def test_a_run_with_drift_on_the_store_reads_its_vectors_or_says_why_not(history, embedder):
    """Last in this module (it re-runs two dates with other settings). A run with `index_health.drift` reads
    the store's vectors: moved by noise, they move the drift values; on a day the store holds two dimensions the
    run measures driftwatch's embedding and its events say why (a chunk the store lacks is named likewise)."""
    config, team, _ = history
    small = config.replace(drift=dataclasses.replace(config.drift, min_current=10, min_reference=20,
                                                     permutations=199, evidently=False))
    on_store = small.replace(index_health=dataclasses.replace(config.index_health, drift=True))

    def drift_values(cfg: Config, day: date) -> tuple[np.ndarray, str]:
        team.day = day
        result = job.run_day(cfg, day, embedder=embedder, notify=False)
        rows = [r for r in result.drift if r["statistic"] in contract.DRIFT_FAMILY]
        return np.array([r["value"] for r in rows], float), result.run["events"]

    usual, _ = drift_values(small, STALE_DAY)
    assert np.isfinite(usual).any()
    team.noise = 0.02
    try:
        served, events = drift_values(on_store, STALE_DAY)
        assert "drift measured on driftwatch's embedding" not in events
        assert not np.allclose(served, usual, equal_nan=True)
        mixed, events = drift_values(on_store, GENERATION_DAY)
    finally:
        team.noise = 0.0
    assert "not on store 'kb''s vectors: the store's vectors have 2 dimensions" in events
    np.testing.assert_allclose(mixed, drift_values(small, GENERATION_DAY)[0])


def test_the_sample_is_re_embedded_with_the_collections_own_model(tmp_path, monkeypatch):
    """A store built with another model than [embedder]'s: its sample is re-embedded with the store's `model` (with
    the run's, every sampled vector would read as stale), as its gold questions are; the same model reuses the run's."""
    from types import SimpleNamespace

    from pipeline import targets
    from pipeline.config import EmbedderConfig

    seen = []
    monkeypatch.setattr(index_health, "open_store", lambda config, name: ListStore(name, []))
    monkeypatch.setattr(index_health, "check", lambda records, **kw: seen.append(kw["embedder"]) or
                        SimpleNamespace(rows=lambda: []))
    monkeypatch.setattr(targets, "query_embedder", lambda config: SimpleNamespace(config=config))
    run = SimpleNamespace(config=EmbedderConfig())
    for model in ("team/other-model", EmbedderConfig().model):
        config = Config(data_dir=tmp_path, gold=tmp_path / "gold.jsonl", index_health=IndexHealthConfig(stores=("kb",)),
                        targets=(TargetConfig("kb", "qdrant", path=tmp_path, collection="c", model=model),))
        index_health.run_stores(config, START, None, [], run)
    assert seen[0].config.model == "team/other-model" and seen[1] is run
