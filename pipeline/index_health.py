"""The index health of a vector store read as a corpus: each run's snapshot of its records, the diff with the run
before, and the findings (ghosts, stale vectors, mixed embedding generations, gold documents absent) of index_health.csv."""

from __future__ import annotations

import dataclasses
import hashlib
import heapq
import math
import sqlite3
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline import store
from pipeline.alerts import Alert, plural
from pipeline.config import Config, IndexHealthConfig
from pipeline.contract import (ALERT, COUNT, EXAMPLES, FINDING, FOUND_ADDED, FOUND_CHANGED, FOUND_DELETED,
                               GHOST, GOLD_ABSENT, INDEX_RULES, MAX_ID_LENGTH, MIXED_GENERATIONS, N_RECORDS, RUN_DATE,
                               STALE, STORE, WARNING)
from pipeline.chunking import Chunk
from pipeline.embeddings import Embedder, normalize
from pipeline.errors import DriftwatchError
from pipeline.targets import config_base, store_embedder
from pipeline.vectorstores import StoredVector, VectorStore

SNAPSHOT_FILE = "index_snapshots.sqlite"  # in the data directory: each store's records per run date
MAX_EXAMPLES = 5  # ids named in a row's examples and an alert's message
DIGEST_DECIMALS = 5  # a vector's digest is of its float32 values rounded to this many decimals
UNIT_NORM_TOLERANCE = 1e-3  # a vector of norm within this of 1 is unit-normalised
# The run dates whose snapshots a store keeps (the latest): a re-run of any of the last SNAPSHOTS_KEPT - 1 diffs
# against the snapshot its run had. Older ones are dropped: a store can only be read as it is now, so an older date
# is never read again, and a snapshot holds every record (its size at scale: bench/index_health_scale.py).
SNAPSHOTS_KEPT = 8


class IndexHealthError(DriftwatchError):
    """A store's record that cannot be snapshotted (no id, a vector that is not a finite 1-D array...)."""


def text_hash(text: str | None) -> str:
    return "" if text is None else hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def vector_digest(vector: np.ndarray) -> str:
    """A hash of the float32 values rounded to DIGEST_DECIMALS (+ 0.0 so that -0.0 and 0.0 agree): the same
    vector read back through another client or a float64 payload keeps its digest; any re-embedding changes it."""
    rounded = np.round(np.asarray(vector, dtype=np.float32), DIGEST_DECIMALS) + np.float32(0.0)
    return hashlib.sha256(rounded.astype(np.float32).tobytes()).hexdigest()[:16]


@dataclass(frozen=True)
class RecordKey:
    """One record of a snapshot: what the next run diffs against."""

    id: str
    doc_id: str
    text_hash: str
    vector_digest: str
    model: str
    dim: int
    norm: float
    stale: bool = False  # found stale on its run, and not re-embedded since


_SCHEMA = """CREATE TABLE IF NOT EXISTS records (
    store TEXT NOT NULL, run_date TEXT NOT NULL, id TEXT NOT NULL, doc_id TEXT NOT NULL, text_hash TEXT NOT NULL,
    vector_digest TEXT NOT NULL, model TEXT NOT NULL, dim INTEGER NOT NULL, norm REAL NOT NULL,
    stale INTEGER NOT NULL, PRIMARY KEY (store, run_date, id))"""


class Snapshots:
    """The snapshots' SQLite file: a run date's records of a store are replaced as a whole, in one transaction, which
    drops the store's snapshots older than its SNAPSHOTS_KEPT latest dates."""

    def __init__(self, data_dir: Path) -> None:
        Path(data_dir).mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(Path(data_dir) / SNAPSHOT_FILE)
        self.db.execute(_SCHEMA)

    def close(self) -> None:
        self.db.close()

    def previous(self, name: str, run_date: date) -> tuple[str | None, dict[str, RecordKey]]:
        """The latest snapshot of store `name` before `run_date`: its date (None when there is none) and records."""
        row = self.db.execute("SELECT max(run_date) FROM records WHERE store = ? AND run_date < ?",
                              (name, run_date.isoformat())).fetchone()
        if row[0] is None:
            return None, {}
        rows = self.db.execute("SELECT id, doc_id, text_hash, vector_digest, model, dim, norm, stale FROM records "
                               "WHERE store = ? AND run_date = ?", (name, row[0]))
        return row[0], {r[0]: RecordKey(*r[:7], bool(r[7])) for r in rows}

    def replace(self, name: str, run_date: date, keys: Iterable[RecordKey]) -> None:
        day = run_date.isoformat()
        with self.db:
            self.db.execute("DELETE FROM records WHERE store = ? AND run_date = ?", (name, day))
            self.db.executemany("INSERT INTO records VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                                [(name, day, k.id, k.doc_id, k.text_hash, k.vector_digest, k.model, k.dim, k.norm,
                                  int(k.stale)) for k in keys])
            self.db.execute("DELETE FROM records WHERE store = ? AND run_date < (SELECT min(run_date) FROM (SELECT "
                            "DISTINCT run_date FROM records WHERE store = ? ORDER BY run_date DESC LIMIT ?))",
                            (name, name, SNAPSHOTS_KEPT))


@dataclass(frozen=True)
class Finding:
    kind: str  # one of contract.FINDINGS
    count: int  # records (documents for ghost and gold_absent)
    examples: tuple[str, ...] = ()


@dataclass(frozen=True)
class Health:
    """One store's index health on one run."""

    store: str
    run_date: date
    n_records: int
    findings: tuple[Finding, ...]
    previous_date: str | None  # the snapshot diffed against (None on the store's first run)

    def rows(self) -> list[dict]:
        """index_health.csv's rows: one per finding kind, zero counts included (a tidy series)."""
        return [{RUN_DATE: self.run_date.isoformat(), STORE: self.store, FINDING: f.kind, COUNT: f.count,
                 N_RECORDS: self.n_records, EXAMPLES: " ".join(f.examples)} for f in self.findings]

    def count(self, kind: str) -> int:
        return next(f.count for f in self.findings if f.kind == kind)


def _key(record: StoredVector, name: str) -> tuple[RecordKey, np.ndarray]:
    where = f"store {name!r}, record {record.id!r}"
    if not isinstance(record.id, str) or not record.id or len(record.id) > MAX_ID_LENGTH:
        raise IndexHealthError(f"{where}: the id must be a non-empty string of at most {MAX_ID_LENGTH} characters")
    if not isinstance(record.doc_id, str) or not record.doc_id:
        raise IndexHealthError(f"{where}: no document id")
    vector = np.asarray(record.vector, dtype=np.float32)
    if vector.ndim != 1 or vector.size == 0 or not np.isfinite(vector).all():
        raise IndexHealthError(f"{where}: the vector is not a non-empty 1-D array of finite numbers")
    key = RecordKey(record.id, record.doc_id, text_hash(record.text), vector_digest(vector), record.model or "",
                    int(vector.size), float(np.linalg.norm(vector)))
    return key, vector


def _rank(record_id: str, name: str, run_date: date) -> int:
    """The sampling order: a hash of the id seeded by the store and the date, so that a re-run samples the same
    records whatever order the store returns them in."""
    return int.from_bytes(hashlib.sha256(f"{name}\n{run_date}\n{record_id}".encode()).digest()[:8], "big")


def _keep(heap: list[tuple[int, str, str, np.ndarray]], entry: tuple[int, str, str, np.ndarray], size: int) -> None:
    """Keep in `heap` the `size` entries (-rank, id, text, vector) of the smallest ranks (the largest on top)."""
    if len(heap) < size:
        heapq.heappush(heap, entry)
    elif entry[0] > heap[0][0]:
        heapq.heapreplace(heap, entry)


def read_records(records: Iterable[StoredVector], name: str, run_date: date, sample: int, neighbourhood: int = 0
                 ) -> tuple[dict[str, RecordKey], list[tuple[RecordKey, str, np.ndarray]],
                            list[tuple[RecordKey, str, np.ndarray]]]:
    """Every record's key (validated: IndexHealthError names the record) and a seeded sample of `sample` records
    with a text, (key, text, vector), kept while the store is streamed (the vectors of the rest are not kept). With
    and the records with a text that the neighbourhood signatures read: all of them up to `neighbourhood`, else that
    many by the same seeded order (none when it is 0)."""
    keys: dict[str, RecordKey] = {}
    heap: list[tuple[int, str, str, np.ndarray]] = []  # (-rank, id, text, vector): the smallest ranks, largest on top
    near: list[tuple[int, str, str, np.ndarray]] = []
    for record in records:
        key, vector = _key(record, name)
        if key.id in keys:
            raise IndexHealthError(f"store {name!r}: record id {key.id!r} returned twice by one scan")
        keys[key.id] = key
        if record.text is None:
            continue
        entry = (-_rank(key.id, name, run_date), key.id, record.text, vector)  # ids are unique: no tie reaches vector
        if sample > 0:
            _keep(heap, entry, sample)
        if neighbourhood > 0:
            _keep(near, entry, neighbourhood)
    chosen = [(keys[i], text, vector) for _, i, text, vector in sorted(heap, key=lambda e: -e[0])]
    return keys, chosen, [(keys[i], text, vector) for _, i, text, vector in sorted(near, key=lambda e: -e[0])]


def sample_cosines(sampled: Sequence[tuple[RecordKey, str, np.ndarray]], embedder: Embedder
                   ) -> list[tuple[RecordKey, float]]:
    """Each sampled record's cosine between its stored vector and its text re-embedded with `embedder` (the
    collection's model); records of another dimension are left out (the dimension names their generation)."""
    if not sampled:
        return []
    fresh = embedder.encode([text for _, text, _ in sampled])
    out = []
    for (key, _, vector), again in zip(sampled, fresh):
        if vector.size == again.size:
            out.append((key, float(normalize(vector[None, :])[0] @ again)))
    return out


def _minority(labels: dict[str, str]) -> tuple[list[str], str]:
    """The ids outside the most common label, and the labels' counts in words ("" when there is one label)."""
    counts = Counter(labels.values())
    if len(counts) < 2:
        return [], ""
    main = counts.most_common(1)[0][0]
    return sorted(i for i, label in labels.items() if label != main), ", ".join(f"{label}: {n}" for label, n in
                                                                                counts.most_common())


def text_similarities(texts: Sequence[str]) -> np.ndarray:
    """The texts' pairwise cosines of their TF-IDF word vectors (sublinear counts, English stop words out), fitted
    on the texts themselves; the diagonal is 0."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    try:
        tfidf = TfidfVectorizer(sublinear_tf=True, stop_words="english").fit_transform(texts)
    except ValueError:  # no word in any text (empty, or stop words only)
        return np.zeros((len(texts), len(texts)))
    out = (tfidf @ tfidf.T).toarray()
    np.fill_diagonal(out, 0.0)
    return out


def spaces(texts: Sequence[str], vectors: np.ndarray, settings: IndexHealthConfig,
           docs: Sequence[str] | None = None) -> tuple[np.ndarray, np.ndarray, dict[int, float], int]:
    """The records' vector spaces: each record's component of the graph linking two records whose vectors' cosine is
    at least `space_cosine`, whether it is in the main space (the largest component), and for each other component
    with evidence the mean vector cosine of its records to their text neighbours in the main space (TF-IDF cosine
    >= `text_neighbour`); evidence is text neighbours of at least `min_neighbours` documents (`docs`, the records'
    document ids; without them each text is its own), copies of one text counted once, in the first record's
    document: the chunks of one document, or one story indexed twice, are one piece of evidence, not several; and
    how many records have a text neighbour in the main space."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    unit = normalize(np.asarray(vectors, dtype=np.float32))
    cosines = unit @ unit.T
    np.fill_diagonal(cosines, 0.0)
    _, labels = connected_components(csr_matrix(cosines >= settings.space_cosine), directed=False)
    main = labels == np.bincount(labels).argmax()
    evidence = (text_similarities(texts) >= settings.text_neighbour)[:, main]
    first: dict[str, str] = {}  # a text's document: the first record holding it
    unit = np.array([first.setdefault(t, d) for t, d in zip(texts, texts if docs is None else docs)],
                    dtype=object)[main]  # the main records' units of evidence
    means = {}
    for component in np.unique(labels[~main]):
        members = labels == component
        pairs = evidence[members]
        if len(set(unit[pairs.any(axis=0)])) >= settings.min_neighbours:
            means[int(component)] = float(cosines[np.ix_(members, main)][pairs].mean())
    return labels, main, means, int(evidence.any(axis=1).sum())


def other_spaces(texts: Sequence[str], vectors: np.ndarray, settings: IndexHealthConfig,
                 read_spaces: tuple[np.ndarray, dict[int, float]] | None = None, docs: Sequence[str] | None = None
                 ) -> tuple[np.ndarray, int]:
    """Neighbourhood signatures, no re-embedding: the indices of the records whose vectors sit in another space
    than the collection's main one, and how many records were read with a text neighbour in the main space.
    The spaces (`spaces`): the connected components of the graph of the vectors' cosines >= `space_cosine`, the main
    space the largest; a vector of another model, or the same model's rotated or re-trained, has no such neighbour in
    the main space. A component outside the main space is another generation when its records' text neighbours in
    the main space (TF-IDF cosine >= `text_neighbour`) are not near in the stored vectors (their mean vector cosine
    is below `neighbour_cosine`); a record alone in its corner of the space (text neighbours there in fewer than
    `min_neighbours` documents, `docs`) is never named.
    `read_spaces`: the (labels, means) of `spaces` already read for these records (then the count read is -1)."""
    if len(texts) < 3:
        return np.zeros(0, dtype=int), 0
    if read_spaces is None:
        labels, _, means, read = spaces(texts, vectors, settings, docs)
    else:
        (labels, means), read = read_spaces, -1
    other = [c for c, mean in means.items() if mean < settings.neighbour_cosine]
    return np.flatnonzero(np.isin(labels, other)), read


def generations(keys: dict[str, RecordKey], cosines: Sequence[tuple[RecordKey, float]],
                settings: IndexHealthConfig, neighbourhood: Sequence[tuple[RecordKey, str, np.ndarray]] = ()
                ) -> tuple[list[str], str]:
    """The records outside the collection's main embedding generation and how they were told apart: by the model
    stamps when some records carry one, else by dimension, else by norm (unit-normalised or not); else by the
    neighbourhood signatures of the `neighbourhood` records (`other_spaces`: another model of the same dimension,
    the same model rotated or re-trained) and the sampled records whose re-embedding's cosine is between
    `stale_cosine` and `generation_cosine` (another backend or quantisation of the same model: ONNX int8 against
    fp32), both named."""
    stamped = {i: k.model or "(no stamp)" for i, k in keys.items()}
    if any(k.model for k in keys.values()):
        ids, words = _minority(stamped)
        if ids:
            return ids, f"model stamps {words}"
    for what, label in (("dimensions", lambda k: f"dim {k.dim}"),
                        ("norms", lambda k: "unit" if abs(k.norm - 1) <= UNIT_NORM_TOLERANCE else "not unit")):
        ids, words = _minority({i: label(k) for i, k in keys.items()})
        if ids:
            return ids, f"{what} {words}"
    hows = []
    spaced: list[str] = []
    if neighbourhood:
        named, read = other_spaces([text for _, text, _ in neighbourhood],
                                   np.stack([vector for _, _, vector in neighbourhood]), settings,
                                   docs=[key.doc_id for key, _, _ in neighbourhood])
        spaced = sorted(neighbourhood[i][0].id for i in named)
        if spaced:
            hows.append(f"neighbourhood signatures: {len(spaced)} of {len(neighbourhood)} records read sit in "
                        f"another vector space than their text neighbours ({read} with a text neighbour)")
    band = sorted(k.id for k, c in cosines if settings.stale_cosine <= c < settings.generation_cosine)
    if band:
        hows.append(f"re-embedded sample: {len(band)} of {len(cosines)} with a cosine between "
                    f"{settings.stale_cosine:g} and {settings.generation_cosine:g}")
    return sorted(set(spaced) | set(band)), "; ".join(hows)


def check(records: Iterable[StoredVector], *, name: str, run_date: date, data_dir: Path, present: set[str] | None,
          gold: Iterable[str], embedder: Embedder, settings: IndexHealthConfig) -> Health:
    """One store's index health on `run_date`: its records are read (validated before anything is written),
    diffed with the store's latest snapshot before the date, and snapshotted for the date (a re-run replaces it).
    `present`: the corpus's documents on the date (the source of truth), None when no source is configured (no
    ghost is then looked for); `gold`: the gold set's relevant document ids (those of the corpus on the date, when
    `present` is given: a gold document not yet published is absent from both)."""
    keys, sampled, neighbourhood = read_records(records, name, run_date, settings.sample,
                                                settings.neighbourhood_sample)
    cosines = sample_cosines(sampled, embedder)
    snapshots = Snapshots(data_dir)
    try:
        previous_date, before = snapshots.previous(name, run_date)
        added = sorted(set(keys) - set(before))
        deleted = sorted(set(before) - set(keys))
        changed = sorted(i for i in set(keys) & set(before)
                         if (keys[i].text_hash, keys[i].vector_digest, keys[i].model)
                         != (before[i].text_hash, before[i].vector_digest, before[i].model))
        stale = {i for i in set(keys) & set(before) if keys[i].vector_digest == before[i].vector_digest
                 and (keys[i].text_hash != before[i].text_hash or before[i].stale)}
        mixed, how = generations(keys, cosines, settings, neighbourhood)
        # a sampled record far from its re-embedding is stale, unless it is of another generation (named there)
        stale |= {k.id for k, c in cosines if c < settings.stale_cosine} - set(mixed)
        doc_ids = {k.doc_id for k in keys.values()}
        ghosts = sorted(doc_ids - present) if present is not None else []
        absent = sorted((set(gold) if present is None else set(gold) & present) - doc_ids)
        findings = (Finding(FOUND_ADDED, len(added), tuple(added[:MAX_EXAMPLES])),
                    Finding(FOUND_DELETED, len(deleted), tuple(deleted[:MAX_EXAMPLES])),
                    Finding(FOUND_CHANGED, len(changed), tuple(changed[:MAX_EXAMPLES])),
                    Finding(GHOST, len(ghosts), tuple(ghosts[:MAX_EXAMPLES])),
                    Finding(STALE, len(stale), tuple(sorted(stale)[:MAX_EXAMPLES])),
                    Finding(MIXED_GENERATIONS, len(mixed), (*mixed[:MAX_EXAMPLES], *([f"({how})"] if how else ()))),
                    Finding(GOLD_ABSENT, len(absent), tuple(absent[:MAX_EXAMPLES])))
        snapshots.replace(name, run_date, [dataclasses.replace(k, stale=k.id in stale) for k in keys.values()])
    finally:
        snapshots.close()
    return Health(name, run_date, len(keys), findings, previous_date)


# --- drift on the store's own vectors ------------------------------------------------------------------------------


def aligned_vectors(chunks: Sequence[Chunk], records: Iterable[StoredVector]) -> np.ndarray:
    """The store's vectors in the order of the run's `chunks` (unit-normalised, as driftwatch's own are), for the
    drift statistics (`windows.window_verdicts`' `vectors`) to read the vectors the team serves: a record whose id is
    the chunk's id, else, for a store of whole documents, the record of the chunk's document when the document is one
    chunk. Raises IndexHealthError naming a chunk the store does not hold, or vectors of two dimensions."""
    by_id: dict[str, np.ndarray] = {}
    by_doc: dict[str, np.ndarray] = {}
    for record in records:
        by_id[record.id] = by_doc[record.doc_id] = np.asarray(record.vector, dtype=np.float32)
    per_doc = Counter(c.doc_id for c in chunks)
    rows = []
    for c in chunks:
        vector = by_id.get(c.id, by_doc.get(c.doc_id) if per_doc[c.doc_id] == 1 else None)
        if vector is None:
            raise IndexHealthError(f"chunk {c.id!r}: the store holds no record of it (nor of its document, when "
                                   "that is one chunk)")
        rows.append(vector)
    if len({v.size for v in rows}) > 1:
        raise IndexHealthError(f"the store's vectors have {len({v.size for v in rows})} dimensions: the drift of "
                               "one embedding space cannot be measured over mixed generations")
    return normalize(np.stack(rows)) if rows else np.zeros((0, 0), np.float32)


def drift_vectors(config: Config, chunks: Sequence[Chunk], usual: np.ndarray) -> tuple[np.ndarray, str]:
    """The vectors the run's drift statistics read: with `index_health.drift`, those of its store aligned to the run's
    chunks (`aligned_vectors`), else `usual` (driftwatch's embedding), with the events' note of why when that store
    was named but could not give them (unreachable, a chunk it lacks, another dimension than driftwatch's, whose
    embedding the reference window's changed or deleted documents still get)."""
    if not config.index_health.drift:
        return usual, ""
    name = config.index_health.stores[0]
    try:
        opened = open_store(config, name)
        try:
            vectors = aligned_vectors(chunks, opened.scan())
        finally:
            opened.close()
    except (DriftwatchError, OSError) as exc:
        return usual, f"drift measured on driftwatch's embedding, not on store {name!r}'s vectors: {exc}"
    if usual.size and vectors.shape != usual.shape:
        return usual, (f"drift measured on driftwatch's embedding, not on store {name!r}'s vectors: "
                       f"{vectors.shape[1]} dimensions against the embedder's {usual.shape[1]}")
    return vectors, ""


# --- the alerts: a finding is named on the day it appears or grows ---------------------------------------------

WHAT = {GHOST: "documents with records in the store that the corpus does not hold on the run date",
        STALE: "records whose vector was not re-embedded when their text changed",
        MIXED_GENERATIONS: "records outside the collection's main embedding generation",
        GOLD_ABSENT: "gold documents without a record in the store"}


def index_alerts(day: str, today: pd.Timestamp, health: pd.DataFrame) -> list[Alert]:
    """One alert or warning per store and finding of index_health.csv counted on `today` (`pipeline` the store,
    `metric` the finding, `baseline` its count on the store's run before). A ghost, a mixed generation or an absent
    gold document is an alert on the day its count appears or grows, then a warning while it persists (one streak,
    notified once: `alerts.mark_ongoing`); a stale vector is a warning (retrieval still finds its old text)."""
    if health.empty:
        return []
    days = store.as_days(health[RUN_DATE])
    earlier = health[days < today].sort_values(RUN_DATE)
    out = []
    for name, finding, count, examples in zip(*(health.loc[days == today, c] for c in (STORE, FINDING, COUNT,
                                                                                        EXAMPLES))):
        if finding not in INDEX_RULES or not count > 0:
            continue
        before = earlier.loc[(earlier[STORE] == name) & (earlier[FINDING] == finding), COUNT]
        previous = int(before.iloc[-1]) if len(before) else 0
        grew = count > previous
        severity = ALERT if grew and finding != STALE else WARNING
        change = "appeared" if not previous else "grew" if grew else "persists"
        out.append(Alert(day, INDEX_RULES[finding], name, finding, float(count), float(previous), math.nan, math.nan,
                         severity, f"store {name}: {plural(int(count), 'finding')} of {finding}, {WHAT[finding]} "
                                   f"({change}: {previous} on the store's run before); e.g. {examples}"))
    return out


# --- the job's part: each store configured as a corpus ------------------------------------------------------------


def open_store(config: Config, name: str) -> VectorStore:
    """The vector store of the [[targets]] table `name` (one of `index_health.stores`), opened read-only."""
    from pipeline import vectorstores

    return vectorstores.open_store(next(t for t in config.targets if t.name == name), config_base(config))


def run_stores(config: Config, run_date: date, present: set[str] | None, gold: Iterable[str], embedder: Embedder
               ) -> tuple[list[dict], list[str]]:
    """index_health.csv's rows of the run over every store of `index_health.stores`, and the events' notes of the
    stores that could not be read (a failing store never stops the run: it has no rows that day)."""
    rows: list[dict] = []
    notes: list[str] = []
    gold = list(gold)
    for name in config.index_health.stores:
        try:
            opened = open_store(config, name)
            target = next(t for t in config.targets if t.name == name)
            try:  # the sample is re-embedded with the collection's own model, as its gold questions are
                health = check(opened.scan(), name=name, run_date=run_date, data_dir=config.data_dir,
                               present=present, gold=gold, settings=config.index_health,
                               embedder=store_embedder(target, config.embedder, embedder))
            finally:
                opened.close()
        except (DriftwatchError, OSError) as exc:
            notes.append(f"index health of store {name!r} not read: {exc}")
            continue
        rows += health.rows()
    return rows, notes
