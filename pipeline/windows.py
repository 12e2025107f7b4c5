"""The drift windows of a run: which documents entered in the current window and in the reference window
before it, which of the reference's earlier drifted windows it leaves out, the seeded samples of whole documents
each side gives the statistics (only the sampled rows are read), the near-copy flags, and the drift.csv rows."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, timedelta

import numpy as np
import pandas as pd

from pipeline import contract, drift, shifts, store
from pipeline.chunking import Chunk, chunk_documents, chunk_settings
from pipeline.config import Config
from pipeline.corpus import Corpus, StoredDocument
from pipeline.embeddings import Embedder, embed_cached


@dataclass(frozen=True)
class Window:
    """Run dates (start, end], inclusive of end: the chunks of documents that entered or changed in them."""

    start: date  # exclusive
    end: date

    def describe(self) -> tuple[str, str]:
        return (self.start + timedelta(days=1)).isoformat(), self.end.isoformat()


def left_out(drift_rows: pd.DataFrame, today: pd.Timestamp | date) -> list[tuple[pd.Timestamp, pd.Timestamp]]:
    """The current windows, as (current_start, run_date) run dates inclusive, of the runs before `today` whose
    entered documents today's reference leaves out: corpus windows that drifted and were not followed by a
    drifted disjoint window. A burst (drifted, then calm) would otherwise sit in the reference for
    `reference_days` and make ordinary days look drifted against it; a drift not yet followed by any window
    stays out too, so that a shift that goes on is compared with what came before it (a gradual shift pages by
    its second drifted window). A drift followed by another enters the reference: a lasting change is absorbed,
    as a rolling reference means. `drift_rows`: drift.csv's rows (any dates; those from `today` on are ignored)."""
    from pipeline.alerts import drift_windows  # alerts reads the store and the series: not needed at import

    today = pd.Timestamp(today)
    windows = [w for w in drift_windows(drift_rows) if w.run_date < today]
    out = []
    for i, w in enumerate(windows):
        if not w.drifted:
            continue
        following = next((v for v in windows[i + 1:] if v.current_start > w.run_date), None)
        if following is None or not following.drifted:
            out.append((w.current_start, w.run_date))
    return out


def without(versions: Sequence[tuple[str, str, str]], ranges: Sequence[tuple[pd.Timestamp, pd.Timestamp]]
            ) -> list[tuple[str, str, str]]:
    """The versions (doc id, content hash, valid from) that did not enter within any of `ranges` (`left_out`)."""
    spans = [(f"{a:%Y-%m-%d}", f"{b:%Y-%m-%d}") for a, b in ranges]
    return [v for v in versions if not any(a <= v[2] <= b for a, b in spans)]


@dataclass(frozen=True)
class Windows:
    """A run's drift windows: the reference, the current window and its entered versions (doc id, content
    hash, valid from), and the earlier windows the reference leaves out (`left_out`, within the reference)."""

    reference: Window
    current: Window
    versions: list[tuple[str, str, str]]
    left_out: list[tuple[pd.Timestamp, pd.Timestamp]]


def _window_versions(config: Config, corpus: Corpus, run_date: date,
                     count: Callable[[list[tuple[str, str, str]]], int | None]) -> Windows | None:
    """The reference window, the current window and the versions that entered in the current window, found by
    SQL (`Corpus.entered_versions`), and the windows the reference leaves out; `count` gives how many chunks
    some versions hold (None: it cannot tell, and so neither can this).

    The current window is the last `window_days` days up to the run date, grown a day at a time (up to
    `max_window_days`) until its new documents hold `min_current` chunks; the reference window is the
    `reference_days` days just before it, or those ending on the pinned reference date, less the documents
    that entered in the drifted windows `left_out` names (read from drift.csv)."""
    d = config.drift
    for days in range(d.window_days, d.max_window_days + 1):
        current = Window(run_date - timedelta(days=days), run_date)
        versions = corpus.entered_versions(current.start, current.end)
        n = count(versions)
        if n is None:
            return None
        if n >= d.min_current:
            break
    pinned = store.read_reference(config.data_dir)
    end = pinned if pinned is not None and pinned <= current.start else current.start
    reference = Window(end - timedelta(days=d.reference_days), end)
    first, last = pd.Timestamp(reference.start + timedelta(days=1)), pd.Timestamp(reference.end)
    ranges = [(a, b) for a, b in left_out(store.read(config.data_dir, contract.DRIFT), run_date)
              if a <= last and b >= first]
    return Windows(reference, current, versions, ranges)


def entered(corpus: Corpus, window: Window, at_end: Sequence[StoredDocument] | None = None,
            known: Sequence[StoredDocument] = ()) -> list[StoredDocument]:
    """The documents of the corpus at the window's end whose version is not the one of its start, found by SQL
    (`Corpus.entered`). `at_end` (the corpus at the window's end) or `known` (any stored documents, such as the
    run's snapshot) supply the documents they hold instead of reading them again."""
    held = {(s.document.id, s.content_hash): s for s in (at_end if at_end is not None else known)}
    return corpus.entered(window.start, window.end, held)


def _entered_from(corpus: Corpus, window: Window, run_date: date, keys: Sequence[tuple[str, str, str]],
                  valid_from: Sequence[str]) -> list[tuple[str, str, str]] | None:
    """`Corpus.entered_versions` of a window ending on or before the run date, found in the run's corpus
    (`keys`: (doc id, content hash, first seen) on the run date, `valid_from`: each one's version date) instead
    of by SQL over every document first seen in the window (0.5 s for 100,000). It holds when no document was
    deleted after the window's end and no document present at its end got a version since: then the corpus at
    the window's end is the run's less the documents first seen later. None when that does not hold."""
    start, end = window.start.isoformat(), window.end.isoformat()
    if window.end > run_date or corpus.changed_after(end, run_date):
        return None
    # Documents first seen by the window's start whose version dates from within the window: entered only if
    # their content differs from the version in force at the start.
    changed = [k[0] for k, since in zip(keys, valid_from) if k[2] <= start < since]
    before = corpus.content_hashes(changed, window.start)
    return [(doc_id, h, since) for (doc_id, h, seen), since in zip(keys, valid_from)
            if seen <= end and (seen > start or (since > start and before.get(doc_id) != h))]


def _chunk_counts(config: Config, corpus: Corpus, versions: Sequence[tuple[str, str, str]],
                  chunked: dict[tuple[str, str], list[Chunk]], *, read: bool = True) -> list[int] | None:
    """How many chunks each version holds: from the run's chunks (`chunked`), else the corpus's chunk cache,
    else (`read`) the version read and split (and kept in `chunked`); None when `read` is off and a version is
    in neither."""
    pairs = [(doc_id, h) for doc_id, h, _ in versions]
    other = [p for p in pairs if p not in chunked]
    cached = corpus.chunk_counts(chunk_settings(config), other) if other else {}
    unknown = [v for v, p in zip(versions, pairs) if p not in chunked and p not in cached]
    if unknown and not read:
        return None
    if unknown:
        chunk_documents(config, corpus.read_versions(unknown), chunked)
    return [len(chunked[p]) if p in chunked else cached[p] for p in pairs]


def _sample(config: Config, corpus: Corpus, versions: Sequence[tuple[str, str, str]],
            vectors_of: Callable[[list[Chunk]], np.ndarray], duplicate: Callable[[np.ndarray, list[Chunk]], np.ndarray],
            seed: int, chunked: dict[tuple[str, str], list[Chunk]]) -> drift.Sample:
    """One side of the drift comparison: the chunks of these versions in order, of which only the rows the
    samples keep are read (`window_drift`'s seeded sample of drift.sample_cap drawn with `seed`, and Evidently's),
    so a window of 100,000 documents costs what its samples do. Near copies are looked for only among the rows
    `window_drift` keeps; the other rows' flags are never read."""
    d = config.drift
    counts = _chunk_counts(config, corpus, versions, chunked)
    n = int(sum(counts))
    keep = drift.kept_rows(counts, d.sample_cap, seed, d.max_chunks_per_document)
    rows = keep
    if d.evidently:
        rows = np.union1d(keep, evidently_rows(counts, config))
    ends = np.cumsum(np.asarray(counts, np.int64))
    owner = np.searchsorted(ends, rows, side="right")  # the version of each kept row
    needed = sorted(set(owner.tolist()))
    docs = dict(zip(needed, corpus.read_versions([versions[i] for i in needed])))
    chunk_documents(config, list(docs.values()), chunked)  # each needed version's chunks, split at most once
    sample_chunks = [chunked[(versions[o][0], versions[o][1])][int(r - ends[o] + counts[o])]
                     for r, o in zip(rows, owner)]
    vectors = vectors_of(sample_chunks)
    owners = [docs[o].document for o in owner]
    flags = np.zeros(len(rows), bool)
    at = np.searchsorted(rows, keep)
    if len(keep):
        flags[at] = duplicate(vectors[at], [sample_chunks[i] for i in at])
    languages = {o: shifts.document_language(versions[o][1], shifts.document_text(x.document.title, x.document.text))
                 for o, x in docs.items()}
    return drift.Sample(vectors, [x.categories[0] if x.categories else "" for x in owners],
                        [x.source for x in owners], [x.title for x in owners], flags, rows=rows, n=n,
                        documents=[versions[o][0] for o in owner], counts=counts,
                        languages=[languages[o] for o in owner])


def evidently_rows(counts: Sequence[int] | np.ndarray, config: Config) -> np.ndarray:
    """The rows of a side Evidently's classifier (context) is given: a seeded sample of whole documents, as
    `window_drift`'s, capped at drift.EVIDENTLY_SAMPLE_CAP."""
    d = config.drift
    return drift.kept_rows(counts, min(d.sample_cap, drift.EVIDENTLY_SAMPLE_CAP), d.seed, d.max_chunks_per_document)


def _near_copies(config: Config, first_seen: Mapping[str, str], chunks: Sequence[Chunk], vectors: np.ndarray,
                 seen_by: date, owners: tuple[np.ndarray, np.ndarray, dict[str, int]] | None = None
                 ) -> Callable[[np.ndarray, list[Chunk]], np.ndarray]:
    """A function flagging, per chunk, a near copy (cosine >= drift.duplicate_cosine) among the chunks of
    OTHER documents of the corpus first seen by `seen_by` (`first_seen`: each document's first-seen date).
    `owners`: `_chunk_owners(first_seen, chunks)`, when the caller has it (it is the same for every `seen_by`)."""
    first_seen, owner, number = owners or _chunk_owners(first_seen, chunks)
    keep = first_seen <= seen_by.isoformat()
    everything = bool(keep.all())
    pool = vectors if everything else vectors[keep]  # no copy of the whole corpus's vectors when all are in
    pool_owner = owner if everything else owner[keep]
    order = np.argsort(pool_owner, kind="stable")  # the pool's rows grouped by document
    grouped = pool_owner[order]

    def flags(sample: np.ndarray, sample_chunks: list[Chunk]) -> np.ndarray:
        if not len(pool) or not len(sample):
            return np.zeros(len(sample), bool)
        similarity = sample @ pool.T
        mine = np.array([number.get(c.doc_id, -1) for c in sample_chunks], np.int64)
        lo, hi = np.searchsorted(grouped, mine, "left"), np.searchsorted(grouped, mine, "right")
        if (hi > lo).any():  # each row's own document's chunks do not count
            rows = np.repeat(np.arange(len(mine)), hi - lo)
            similarity[rows, order[np.concatenate([np.arange(a, b) for a, b in zip(lo, hi)])]] = -1
        return similarity.max(axis=1) >= config.drift.duplicate_cosine

    return flags


def _chunk_owners(first_seen: Mapping[str, str], chunks: Sequence[Chunk]
                  ) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """Per chunk, its document's first-seen date and its document as an integer (comparing ids as strings was
    seconds), and those integers by document id."""
    number: dict[str, int] = {}
    owner = np.fromiter((number.setdefault(c.doc_id, len(number)) for c in chunks), np.int64, len(chunks))
    dates = np.array([first_seen[c.doc_id] for c in chunks] or [""], dtype=str)[:len(chunks)]
    return dates, owner, number


def _rows(run_date: date, verdicts: Sequence[drift.Verdict], reference: Window, current: Window, n_ref: int,
          n_cur: int, prefix: str = "") -> list[dict]:
    start, end = reference.describe()
    return [{"run_date": run_date.isoformat(), "statistic": prefix + v.statistic, "value": v.value,
             "reference_date": end, "n_reference": n_ref, "n_current": n_cur, "reference_start": start,
             "current_start": current.describe()[0],
             "p_value": v.adjusted_p, "null_value": v.null_q95, "threshold": v.threshold, "verdict": v.verdict,
             "detail": v.detail, "effect_from": v.effect_from} for v in verdicts]


def _short(statistics: Sequence[str], why: str) -> list[drift.Verdict]:
    return [drift.Verdict(name, math.nan, math.nan, math.nan, math.nan, math.nan, math.nan, why,
                          verdict=contract.NOT_ENOUGH_DATA) for name in statistics]


def drift_rows(config: Config, corpus: Corpus, embedder: Embedder, run_date: date,
               snapshot: Sequence[StoredDocument], chunks: Sequence[Chunk], vectors: np.ndarray,
               top1: list[tuple[str, float]], chunked: dict[tuple[str, str], list[Chunk]] | None = None
               ) -> list[dict]:
    """drift.csv rows: what entered in the current window against the reference window (each statistic
    with its null and verdict), Evidently and the top-1 cosines as context, and query-log drift. `chunked`: the
    run's chunk cache (see `chunk_documents`)."""
    first_seen = {s.document.id: s.first_seen for s in snapshot}
    found = window_verdicts(config, corpus, embedder, run_date, first_seen, chunks, vectors, chunked)
    return drift_table(config, corpus, embedder, run_date, found, top1)


@dataclass(frozen=True)
class WindowVerdicts:
    """The corpus drift of a run: its windows, their sizes (chunks), the statistics' verdicts and Evidently's
    (context), and the documents of each window as (doc id, content hash)."""

    reference: Window
    current: Window
    n_reference: int
    n_current: int
    verdicts: list[drift.Verdict]
    evidently: list[drift.Verdict]
    reference_keys: list[tuple[str, str]]
    current_keys: list[tuple[str, str]]
    left_out: list[tuple[pd.Timestamp, pd.Timestamp]] = dataclasses.field(default_factory=list)
    shift: list[drift.Verdict] = dataclasses.field(default_factory=list)  # the named shift (context), when drifted

    def memo(self) -> dict:
        return {"n_reference": self.n_reference, "n_current": self.n_current,
                "verdicts": [dataclasses.asdict(v) for v in self.verdicts],
                "evidently": [dataclasses.asdict(v) for v in self.evidently],
                "shift": [dataclasses.asdict(v) for v in self.shift]}

    @classmethod
    def from_memo(cls, value: dict, windows: Windows) -> WindowVerdicts:
        return cls(windows.reference, windows.current, int(value["n_reference"]), int(value["n_current"]),
                   [drift.Verdict(**v) for v in value["verdicts"]], [drift.Verdict(**v) for v in value["evidently"]],
                   [], [], windows.left_out, [drift.Verdict(**v) for v in value.get("shift", [])])


@dataclass(frozen=True)
class WindowSides:
    """A run's drift windows and each side's sample (`_sample`), with the versions that entered in each window."""

    windows: Windows
    reference_versions: list[tuple[str, str, str]]
    reference: drift.Sample
    current: drift.Sample


def window_sides(config: Config, corpus: Corpus, run_date: date, vectors_of: Callable[[list[Chunk]], np.ndarray],
                 near_copies: Callable[[date], Callable[[np.ndarray, list[Chunk]], np.ndarray]],
                 chunked: dict[tuple[str, str], list[Chunk]] | None = None,
                 versions: tuple[Sequence[tuple[str, str, str]], Sequence[str]] | None = None) -> WindowSides:
    """The windows of a run on `run_date` and the seeded samples of each side (`_sample`): `vectors_of` gives the
    sampled chunks' vectors, `near_copies(seen_by)` the near-copy flags among the documents first seen by then;
    `versions` as in `window_verdicts`."""
    chunked = {} if chunked is None else chunked
    windows = _window_versions(config, corpus, run_date,
                               lambda versions: sum(_chunk_counts(config, corpus, versions, chunked)))
    current = _sample(config, corpus, windows.versions, vectors_of, near_copies(run_date),
                      drift.current_seed(config.drift), chunked)
    reference_versions = (_entered_from(corpus, windows.reference, run_date, *versions) if versions else None)
    if reference_versions is None:
        reference_versions = corpus.entered_versions(windows.reference.start, windows.reference.end)
    reference_versions = without(reference_versions, windows.left_out)
    reference = _sample(config, corpus, reference_versions, vectors_of,  # the run's vectors, else the cache
                        near_copies(windows.reference.end), config.drift.seed, chunked)
    return WindowSides(windows, reference_versions, reference, current)


def evidently_held(side: drift.Sample, config: Config) -> np.ndarray:
    """The positions, among a side's held rows, of the rows Evidently's classifier is given (`evidently_rows`)."""
    return side.held(evidently_rows(side.document_counts(), config))


def evidently_verdicts(reference: drift.Sample, current: drift.Sample, config: Config) -> list[drift.Verdict]:
    """Evidently's domain classifier (context rows of drift.csv) on each side's `evidently_held` rows."""
    picked = reference.vectors[evidently_held(reference, config)], current.vectors[evidently_held(current, config)]
    return [drift.Verdict(name, value, math.nan, math.nan, math.nan, math.nan, math.nan, verdict=contract.CONTEXT)
            for name, value in drift.evidently_embedding_drift(
                *picked, config.drift.seed, max(len(m) for m in picked)).rows()]


def window_verdicts(config: Config, corpus: Corpus, embedder: Embedder, run_date: date,
                    first_seen: Mapping[str, str], chunks: Sequence[Chunk], vectors: np.ndarray,
                    chunked: dict[tuple[str, str], list[Chunk]] | None = None,
                    versions: tuple[Sequence[tuple[str, str, str]], Sequence[str]] | None = None) -> WindowVerdicts:
    """The corpus part of `drift_rows`: the windows and the statistics' verdicts. `first_seen`: the first-seen
    date of each document of the run's corpus, whose `chunks` and their `vectors` are the near copies' pool;
    `versions`: its (doc id, content hash, first seen) and version dates, from which the reference window's
    documents are found when nothing since the window's end changed them (see `_entered_from`)."""
    position = {c.id: i for i, c in enumerate(chunks)}

    def vectors_of(sample_chunks: list[Chunk]) -> np.ndarray:
        """The run's vectors of these chunks when it holds each of them with the same text (a reference
        document may have changed or gone since), else the embedding cache's."""
        at = [position.get(c.id) for c in sample_chunks]
        if all(i is not None and chunks[i].text == c.text for i, c in zip(at, sample_chunks)):
            return vectors[at].reshape(len(sample_chunks), vectors.shape[1])
        return embed_cached(corpus, embedder, [c.text for c in sample_chunks]).vectors

    owners = _chunk_owners(first_seen, chunks)
    sides = window_sides(config, corpus, run_date, vectors_of,
                         lambda seen_by: _near_copies(config, first_seen, chunks, vectors, seen_by, owners),
                         chunked, versions)
    windows, reference, current = sides.windows, sides.reference, sides.current
    n_ref, n_cur = len(reference), len(current)
    why = drift.not_enough(n_ref, n_cur, config.drift)
    names = [s.name for s in drift.FAMILY]
    verdicts = _short(names, why) if why else drift.window_drift(reference, current, config.drift)
    evidently = evidently_verdicts(reference, current, config) if config.drift.evidently and not why else []
    shift = (shift_verdicts(config, corpus, sides.reference_versions, windows.versions)
             if any(v.verdict == contract.DRIFTED for v in verdicts) else [])
    keys = lambda versions: [(doc_id, h) for doc_id, h, _ in versions]  # noqa: E731
    return WindowVerdicts(windows.reference, windows.current, n_ref, n_cur, verdicts, evidently,
                          keys(sides.reference_versions), keys(windows.versions), windows.left_out, shift)


def shift_verdicts(config: Config, corpus: Corpus, reference: Sequence[tuple[str, str, str]],
                   current: Sequence[tuple[str, str, str]]) -> list[drift.Verdict]:
    """The named shift of a drifted window (`shifts.describe`, a context row): each side's documents, a seeded
    sample of at most drift.shift_documents of them, read from the corpus."""
    d = config.drift

    def side(versions: Sequence[tuple[str, str, str]], seed: int) -> shifts.Side:
        picked = [versions[i] for i in shifts.sample(len(versions), d.shift_documents, seed)]
        docs = [s.document for s in corpus.read_versions(picked)]
        return shifts.Side([shifts.document_text(x.title, x.text) for x in docs],
                           [x.categories[0] if x.categories else "" for x in docs], [x.source for x in docs])

    value, detail = shifts.describe(side(reference, d.seed), side(current, drift.current_seed(d)), d)
    return [drift.Verdict(contract.NAMED_SHIFT, value, math.nan, math.nan, math.nan, math.nan, math.nan, detail,
                          verdict=contract.CONTEXT)]


def stale_note(corpus: Corpus, current: Window, run_date: date) -> str:
    """"no new documents since D" when nothing entered on the run date: the current window, grown back to hold
    `min_current` chunks, then holds only earlier days' documents, and its verdict repeats theirs; "" otherwise."""
    if corpus.entered_versions(run_date - timedelta(days=1), run_date):
        return ""
    entered = [since for _, _, since in corpus.entered_versions(current.start, current.end)]
    return f"no new documents since {max(entered)}: the window repeats earlier days' documents" if entered else ""


def drift_table(config: Config, corpus: Corpus, embedder: Embedder, run_date: date, found: WindowVerdicts,
                top1: list[tuple[str, float]]) -> list[dict]:
    """drift.csv rows of a run from its corpus verdicts, the top-1 cosines and the query log."""
    context = [drift.Verdict(name, value, math.nan, math.nan, math.nan, math.nan, math.nan, verdict=contract.CONTEXT)
               for name, value in top1]
    rows = _rows(run_date, [*found.verdicts, *context, *found.evidently, *found.shift], found.reference,
                 found.current, found.n_reference, found.n_current)
    stale = stale_note(corpus, found.current, run_date)
    for row in rows if stale else ():
        if row["verdict"] in (contract.DRIFTED, contract.STABLE):
            row["detail"] = "; ".join(d for d in (row["detail"], stale) if d)
    if config.drift.query_log is not None:
        names = [s.name for s in drift.FAMILY]
        window = drift.read_query_log(config.drift.query_log, run_date, config.drift.query_window_days)
        why = drift.not_enough(len(window.reference), len(window.current), config.drift)
        if why:
            query = _short(names[:4], why)
        else:
            ref_q = embed_cached(corpus, embedder, window.reference).vectors
            cur_q = embed_cached(corpus, embedder, window.current).vectors
            query = drift.window_drift(drift.Sample(ref_q), drift.Sample(cur_q), config.drift)
        query_current = Window(run_date - timedelta(days=config.drift.query_window_days), run_date)
        query_reference = Window(date.min, query_current.start)
        rows += _rows(run_date, query, query_reference, query_current, len(window.reference), len(window.current),
                      contract.QUERY_PREFIX)
    return rows
