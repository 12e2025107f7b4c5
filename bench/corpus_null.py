"""Corpus-drift pages on null streams made from real streams (news, long documents), the days injected events are
flagged, and the drift null by chunks per document on simulated windows.

Streams: the 60 real days of ../shared/data/news-2025-autumn (about one chunk per item) and the 63 real days of
../shared/data/peps-stream (ten Python Enhancement Proposals a day, 20 chunks per document at the median, up to
139). Each is reordered into null streams: day-order permutations and moving-block bootstrap resamples (blocks of
BLOCK consecutive days, keeping the stories' continuity), each STREAM_DAYS evaluated days long after a warm-up that
fills the reference window. A real day is never repeated within GAP days of itself, so no window meets a copy of its
own day, and an item is never its own near copy (a repeated item is the same text, not a flood). Each stream day is
measured as the daily job measures it: the current window (grown until it holds min_current chunks) against the
reference_days before it, less the days `windows.left_out` names (a drifted window not followed by a drifted one,
such as a burst, does not stay in the reference), by `drift.window_drift` on the real embeddings, each chunk
labelled with its document (permutations, neighbours and samples move whole documents); the drift rule
(`alerts._drift_alerts` and `mark_ongoing`) then turns the verdicts into warnings and pages, a page being a run that
notifies a new alert. The same verdicts are replayed under other rule settings, which cost no new statistics.

Events, injected into each stream's real order, first warning and first page counted in days from the event:
- a pack on the event day: news, the 43-item sports pack, 40 near copies of gold items and half the sports pack;
  PEPs, the 20 long cooking and gardening texts (8 or 9 chunks each);
- burst then ordinary days: the stream's burst pack on the event day, nothing after it. "later pages" counts the
  runs paging on days +1..+AFTER_BURST_PAGES (0 expected: a paged burst neither confirms a later window nor stays in
  the reference); "drifted after" counts the drifted days among the AFTER_BURST_DRIFT days after it (about the null
  stream's drifted-day rate expected), counting only the days whose current window no longer holds the burst;
- gradual shift: a new topic fed 1, 2, 3, ... items a day (at most SHIFT_MAX a day) from the event day until its
  items run out. News: the items of category SHIFT_CATEGORY, a topic of its own (earthquakes, floods, crashes),
  are held out of the whole stream and fed back in their real order (164 items: 1+2+...+15 in 15 days, then 15,
  15, 14); PEPs: the cooking and gardening pack (20 items: 1+2+3+4+5, then 5). Target: a page within 3 days of the
  shift's start, i.e. day +2 at the latest. The shift's rows are evaluated up to SHIFT_MAX days from its start.
- sustained new topic: the same items fed at a steady rate from the event day (`Shift.steady` a day: news 15, about
  as many as the day's own items, the issue's "about 15 items a day"; PEPs 5, half a day's documents) until they run
  out. Same target.

The synthetic table (`--part synthetic`): windows of a reference of about SYNTH_REFERENCE chunks and a current of
about SYNTH_CURRENT chunks, both drawn from one distribution (nothing changed), by chunks per document and the mean
cosine between chunks of one document: documents' centres are unit vectors of a low-rank mix plus noise (anisotropic,
as sentence embeddings are), a chunk is normalize(sqrt(c) centre + sqrt(1 - c) noise) with isotropic noise of unit
norm, so that the cosine between two chunks of one document is about c (measured and printed). Per cell: the share of
windows with any statistic drifted, and each permutation statistic's raw p < alpha share, against alpha.

Run: python -m bench.corpus_null [--part all|news|peps|synthetic] [--streams 10] [--workers 2] [--quick]."""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import math
import os
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline import contract, drift
from pipeline.alerts import Alert, _drift_alerts, alerts_frame, mark_ongoing
from pipeline.chunking import chunk_document
from pipeline.config import DriftConfig, EmbedderConfig
from pipeline.contract import ALERT, WARNING
from pipeline.sources import parse_feed
from pipeline.windows import Window, _rows, _short, left_out

ROOT = Path(__file__).resolve().parents[1]
OUT_DIR = ROOT / "bench" / "out"
SHARED = ROOT.parent / "shared" / "data"
DEFAULT_NEWS = SHARED / "news-2025-autumn"
DEFAULT_PEPS = SHARED / "peps-stream"
NEWS_START, NEWS_DAYS = date(2025, 9, 1), 60
PEPS_START, PEPS_DAYS = date(2025, 6, 1), 63
EVENT_DAY = date(2025, 10, 1)  # the news stream's event day (day 30)
PEPS_EVENT_DAY = date(2025, 7, 1)  # the PEP stream's (day 30)
STREAM_DAYS = 90  # evaluated days per stream (pages are counted per 90 days)
BLOCK = 7  # the moving-block bootstrap's block length, in days
FAKE_START = date(2030, 1, 1)  # a measured stream's first date
EVENTS_AFTER = 7  # days after the event day a pack's stream is evaluated
AFTER_BURST_PAGES, AFTER_BURST_DRIFT = 7, 14  # days after a burst whose pages, and drifted days, are counted
SHIFT_CATEGORY = "Disasters and accidents"  # the news category held out and fed back as a gradual shift
SHIFT_MAX = 15  # items a day of a gradual shift at most
QUICK_DAYS = 6  # evaluated days per null stream, and days after an event, with --quick
# Rule settings replayed on the same verdicts: (label, changes to DriftConfig).
SETTINGS: tuple[tuple[str, dict], ...] = (
    ("defaults (2 of 3, page p < 0.002)", {}),
    ("any statistic pages on its day (PSI, KS too)", {"page_statistics": contract.DRIFT_FAMILY}),
    ("every drifted day pages (the rule before)", {"confirm_windows": 1}),
    ("2 of 2", {"confirm_of": 2}),
    ("2 of 4", {"confirm_of": 4}),
    ("page p < 0.001", {"page_alpha": 0.001}),
    ("page p < 0.005", {"page_alpha": 0.005}),
    ("no one-day page", {"page_alpha": 1e-9}),
)


@dataclass(frozen=True)
class Item:
    """One item (a document): its id (the original's, shared by its repeats), category, title and its chunks' rows."""

    id: str
    category: str
    title: str
    rows: tuple[int, ...]  # rows of the vectors matrix


@dataclass(frozen=True)
class Shift:
    """A gradual shift: `items` fed 1, 2, 3, ... a day (or `steady` a day); `held_out`: the category taken out of the
    stream's days."""

    label: str
    items: tuple[Item, ...]
    held_out: str = ""
    steady: int = SHIFT_MAX


@dataclass
class Stream:
    """A real stream's days of items and its packs, their chunks' unit vectors, and per chunk the ids of OTHER items
    holding a near copy of it (cosine at or above drift.duplicate_cosine); the events injected on `event_day`."""

    days: list[list[Item]]  # the real days in order
    packs: dict[str, list[Item]]  # each injected on the event day
    vectors: np.ndarray
    near: list[frozenset[str]]
    name: str = "stream"
    source: str = "news"  # every item's source, as in the daily job's single-source configs
    start: date = NEWS_START  # the real first day
    event_day: date = EVENT_DAY
    burst: str = ""  # the pack of the burst-then-ordinary-days rows
    shift: Shift | None = None

    @property
    def length(self) -> int:
        return len(self.days)

    @property
    def event_index(self) -> int:
        return (self.event_day - self.start).days


def _items(documents, texts: list[str], size: int, overlap: int) -> list[Item]:
    items = []
    for doc in documents:
        chunks = [c.text for c in chunk_document(doc.id, doc.title, doc.text, size, overlap)]
        items.append(Item(doc.id, doc.categories[0] if doc.categories else "", doc.title,
                          tuple(range(len(texts), len(texts) + len(chunks)))))
        texts += chunks
    return items


def _parse(path: Path, source: str, data: bytes | None = None) -> list:
    return parse_feed(path.read_bytes() if data is None else data, source=source, location=str(path))


def near_copies(vectors: np.ndarray, owner: Sequence[str], cosine: float, block: int = 2048) -> list[frozenset[str]]:
    """Per row: the owners other than its own of the rows at cosine >= `cosine` to it, the similarities computed
    `block` rows at a time in float32 (17,000 chunks at once would be a 2.3 GB float64 matrix)."""
    unit = np.asarray(vectors, np.float32)
    owners = np.asarray(owner, object)
    near: list[frozenset[str]] = []
    for start in range(0, len(unit), block):
        similarity = unit[start:start + block] @ unit.T
        for i, row in enumerate(similarity, start):
            near.append(frozenset(o for o in owners[np.flatnonzero(row >= cosine)] if o != owners[i]))
    return near


def _embedded(texts: list[str], groups: Sequence[Sequence[Item]], config: DriftConfig, work: Path
              ) -> tuple[np.ndarray, list[frozenset[str]]]:
    """The texts' vectors by the real model (cached in a corpus.sqlite under `work`) and their near copies."""
    from pipeline.corpus import Corpus
    from pipeline.embeddings import Embedder, embed_cached

    work.mkdir(parents=True, exist_ok=True)
    with Corpus.in_dir(work) as corpus:
        vectors = embed_cached(corpus, Embedder(EmbedderConfig()), texts).vectors.astype(np.float64)
    owner = np.empty(len(texts), object)
    for item in (i for group in groups for i in group):
        owner[list(item.rows)] = item.id
    return vectors, near_copies(vectors, owner, config.duplicate_cosine)


def load_news(news: Path, config: DriftConfig, work: Path) -> Stream:
    """The 60 real days, the sports pack, half of it and the flood, chunked as the job chunks and embedded by the
    real model; the gradual shift is the category SHIFT_CATEGORY."""
    from bench.alerts import flood_feed
    from pipeline.config import ChunkingConfig

    chunking, source = ChunkingConfig(), "news"
    texts: list[str] = []
    split = lambda docs: _items(docs, texts, chunking.size, chunking.overlap)
    days = [split(_parse(news / "daily" / f"{NEWS_START + timedelta(days=i)}.xml", source)) for i in range(NEWS_DAYS)]
    sports = split(_parse(news / "offtopic_sports.xml", source))
    flood = split(_parse(news / "flood.xml", source, flood_feed(news, EVENT_DAY)))
    half = random.Random(0).sample(sports, len(sports) // 2)
    vectors, near = _embedded(texts, days + [sports, flood], config, work)
    held = tuple(i for day in days for i in day if i.category == SHIFT_CATEGORY)
    burst = f"sports pack ({len(sports)})"
    return Stream(days, {burst: sports, f"near-copy flood ({len(flood)})": flood, f"half the sports pack ({len(half)})":
                         half}, vectors, near, name="news", source=source, start=NEWS_START, event_day=EVENT_DAY,
                  burst=burst, shift=Shift(f"'{SHIFT_CATEGORY}' held out ({len(held)})", held, SHIFT_CATEGORY, 15))


def load_peps(peps: Path, config: DriftConfig, work: Path) -> Stream:
    """The 63 real days of ten PEPs and the cooking and gardening pack, chunked as the job chunks and embedded by
    the real model; the gradual shift is the pack fed 1, 2, 3, ... a day."""
    from pipeline.config import ChunkingConfig

    chunking, source = ChunkingConfig(), "peps"
    texts: list[str] = []
    split = lambda docs: _items(docs, texts, chunking.size, chunking.overlap)
    days = [split(_parse(peps / "daily" / f"{PEPS_START + timedelta(days=i)}.xml", source)) for i in range(PEPS_DAYS)]
    pack = split(_parse(peps / "offtopic" / "cooking-gardening.xml", source))
    vectors, near = _embedded(texts, days + [pack], config, work)
    burst = f"cooking and gardening pack ({len(pack)})"
    return Stream(days, {burst: pack}, vectors, near, name="peps", source=source, start=PEPS_START,
                  event_day=PEPS_EVENT_DAY, burst=burst, shift=Shift(f"cooking and gardening ({len(pack)})", tuple(pack), steady=5))


# --- streams --------------------------------------------------------------------------------------------------


def gap(config: DriftConfig) -> int:
    """Days within which a real day must not repeat: it would meet a copy of itself in its windows."""
    return config.reference_days + config.max_window_days + 1


def permuted_stream(n: int, seed: int, min_gap: int, length: int) -> list[int]:
    """`n` real days (indices 0..length-1): permutations of the `length` days one after another, each day at least
    `min_gap` days after its last use."""
    rng = random.Random(seed)
    out: list[int] = []
    pool: list[int] = []
    while len(out) < n:
        if not pool:
            pool = rng.sample(range(length), length)
        recent = set(out[-min_gap:])
        pick = next((d for d in pool if d not in recent), None)
        if pick is None:  # the rest of this permutation is too recent: start the next one early
            pool = []
            continue
        pool.remove(pick)
        out.append(pick)
    return out


def shuffled_days(days: Sequence[list[Item]], n: int, seed: int, min_gap: int) -> list[list[Item]]:
    """`n` days of the stream's items shuffled across days (the issue's null "with its PEPs shuffled at random across
    days, so that nothing can drift"): the items of every real day in seeded random orders one after another, as
    many a day as the real days hold on average, an item at least `min_gap` days after its last use."""
    rng = random.Random(seed)
    items = [i for day in days for i in day]
    per_day = max(1, round(len(items) / len(days)))
    last: dict[str, int] = {}
    out: list[list[Item]] = []
    pool: list[Item] = []
    while len(out) < n:
        day: list[Item] = []
        while len(day) < per_day:
            if not pool:
                pool = rng.sample(items, len(items))
            pick = next((i for i in pool if len(out) - last.get(i.id, -min_gap - 1) > min_gap
                         and all(i.id != j.id for j in day)), None)
            if pick is None:  # the rest of this order is too recent: start the next one early
                pool = []
                continue
            pool.remove(pick)
            day.append(pick)
        for item in day:
            last[item.id] = len(out)
        out.append(day)
    return out


def block_stream(n: int, seed: int, min_gap: int, length: int, block: int = BLOCK) -> list[int]:
    """`n` real days (indices 0..length-1) as a moving-block bootstrap: blocks of `block` consecutive real days
    drawn with replacement, a block redrawn when one of its days was used within `min_gap` days."""
    rng = random.Random(seed)
    out: list[int] = []
    while len(out) < n:
        start = rng.randrange(length - block + 1)
        days = list(range(start, start + block))
        if set(days) & set(out[-min_gap:]):
            continue
        out += days
    return out[:n]


def warmup(config: DriftConfig) -> int:
    return config.reference_days + config.max_window_days


def shifted_days(stream: Stream, start: int, steady: bool = False) -> tuple[list[list[Item]], int]:
    """The stream's days with its shift: the held-out category's items taken out of every day, the shift's items
    fed 1, 2, 3, ... (at most SHIFT_MAX) a day from day `start`, or `Shift.steady` a day when `steady`; and the days
    the shift lasts."""
    if stream.shift is None:
        raise ValueError(f"the {stream.name} stream has no gradual shift")
    days = [[i for i in day if i.category != stream.shift.held_out] if stream.shift.held_out else list(day)
            for day in stream.days]
    fed, t = 0, start
    items = stream.shift.items
    while fed < len(items) and t < len(days):
        n = stream.shift.steady if steady else min(SHIFT_MAX, t - start + 1)
        days[t] = days[t] + list(items[fed:fed + n])
        fed, t = fed + n, t + 1
    return days, t - start


# --- one stream, measured as the job measures it -------------------------------------------------------------


def _sample(items: Sequence[Item], stream: Stream, pool: set[str]) -> drift.Sample:
    rows = [r for item in items for r in item.rows]
    owners = [item for item in items for _ in item.rows]
    duplicate = np.array([bool(stream.near[r] & pool) for r in rows], bool)
    return drift.Sample(stream.vectors[rows], [i.category for i in owners], [stream.source] * len(rows),
                        [i.title for i in owners], duplicate, documents=[i.id for i in owners])


def _frame(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=list(contract.DRIFT_COLUMNS))
    frame[contract.RUN_DATE] = pd.to_datetime(frame[contract.RUN_DATE])
    return frame


def left_out_days(rows: list[dict], run_date: date, days: range) -> set[int]:
    """The stream days of `days` (indices, dated from FAKE_START) that `windows.left_out` leaves out of the
    reference of `run_date`, from the drift rows of the days before it."""
    if not rows:  # nothing measured before: nothing to leave out
        return set()
    ranges = left_out(_frame(rows), pd.Timestamp(run_date))
    dated = {d: pd.Timestamp(FAKE_START + timedelta(days=d)) for d in days}
    return {d for d, stamp in dated.items() if any(a <= stamp <= b for a, b in ranges)}


def stream_drift(days: Sequence[list[Item]], stream: Stream, config: DriftConfig, evaluate: Sequence[int]
                 ) -> pd.DataFrame:
    """drift.csv rows of the stream days `evaluate` (indices into `days`, the stream's items per day, in order),
    dated from FAKE_START: each day's current window against its reference window, as `windows.window_verdicts`
    forms them (the near copies' pool: every item seen by the window's end, the item itself excepted), the reference
    less the days `windows.left_out` names from the rows of the days evaluated before."""

    first_seen: dict[str, int] = {}
    for t, items in enumerate(days):
        for item in items:
            first_seen.setdefault(item.id, t)
    rows: list[dict] = []
    names = list(contract.DRIFT_FAMILY)
    for t in evaluate:
        run_date = FAKE_START + timedelta(days=t)
        for k in range(config.window_days, config.max_window_days + 1):
            current_items = [i for d in range(max(0, t - k + 1), t + 1) for i in days[d]]
            if sum(len(i.rows) for i in current_items) >= config.min_current:
                break
        start = max(0, t - k + 1)
        reference_days = range(max(0, start - config.reference_days), start)
        out = left_out_days(rows, run_date, reference_days)
        reference_items = [i for d in reference_days if d not in out for i in days[d]]
        current = _sample(current_items, stream, {i for i, s in first_seen.items() if s <= t})
        reference = _sample(reference_items, stream, {i for i, s in first_seen.items() if s < start})
        why = drift.not_enough(len(reference), len(current), config)
        verdicts = _short(names, why) if why else drift.window_drift(reference, current, config)
        end = FAKE_START + timedelta(days=start - 1)
        rows += _rows(run_date, verdicts, Window(end - timedelta(days=config.reference_days), end),
                      Window(end, run_date), len(reference), len(current))
    return _frame(rows)


def replay(frame: pd.DataFrame, config: DriftConfig) -> list[Alert]:
    """The drift rule over the stream's days in order, each day seeing the rows up to it and the alerts before it
    (as alerts.csv would hold them)."""
    fired: list[Alert] = []
    dates = sorted(frame[contract.RUN_DATE].unique())
    runs = pd.DataFrame({contract.RUN_DATE: dates})
    for today in dates:
        today = pd.Timestamp(today)
        seen = frame[frame[contract.RUN_DATE] <= today]
        previous = alerts_frame(fired).astype({contract.RUN_DATE: "datetime64[ns]"})
        day = f"{today:%Y-%m-%d}"
        fired += mark_ongoing(_drift_alerts(day, today, seen, config), today, runs[runs[contract.RUN_DATE] <= today],
                              previous)
    return fired


@dataclass(frozen=True)
class Count:
    days: int
    drifted_days: int
    warnings: int  # new warnings: drifted, not confirmed
    pages: int  # runs notifying a new alert

    @property
    def pages_per_90(self) -> float:
        return self.pages * STREAM_DAYS / self.days if self.days else math.nan

    @classmethod
    def of(cls, frame: pd.DataFrame, fired: Sequence[Alert]) -> Count:
        drifted = frame[frame["verdict"] == contract.DRIFTED][contract.RUN_DATE].nunique()
        new = [a for a in fired if a.new]
        return cls(int(frame[contract.RUN_DATE].nunique()), int(drifted), sum(a.severity == WARNING for a in new),
                   len({a.run_date for a in new if a.severity == ALERT}))


_STREAM: Stream | None = None  # the stream a worker process measures (set once per process, not per job)


def _hold(stream: Stream) -> None:
    global _STREAM
    _STREAM = stream


def _null_stream(job: tuple[str, int, DriftConfig, int]) -> dict:
    kind, seed, config, evaluated = job
    stream = _STREAM
    n = warmup(config) + evaluated
    if kind == "shuffled":
        days = shuffled_days(stream.days, n, seed, gap(config))
    else:
        order = (permuted_stream if kind == "permutation" else block_stream)(n, seed, gap(config), stream.length)
        days = [stream.days[d] for d in order]
    began = time.perf_counter()
    frame = stream_drift(days, stream, config, range(warmup(config), n))
    counts, pages = {}, []
    for label, changes in SETTINGS:
        fired = replay(frame, dataclasses.replace(config, **changes))
        counts[label] = dataclasses.asdict(Count.of(frame, fired))
        if not changes:  # what the defaults' pages said
            pages = [f"{a.run_date}: {a.message[:240]}" for a in fired if a.new and a.severity == ALERT]
    return {"kind": kind, "seed": seed, "seconds": time.perf_counter() - began, "counts": counts, "pages": pages}


def real_order(stream: Stream, config: DriftConfig, evaluated: int) -> dict:
    """The days in their real order (the days with a full reference window evaluated, at most `evaluated`)."""
    frame = stream_drift(stream.days, stream, config, range(warmup(config), min(stream.length,
                                                                                warmup(config) + evaluated)))
    return {label: dataclasses.asdict(Count.of(frame, replay(frame, dataclasses.replace(config, **changes))))
            for label, changes in SETTINGS}


def _real_order(config: DriftConfig, evaluated: int) -> dict:
    return real_order(_STREAM, config, evaluated)


def _days_from(fired: Sequence[Alert], at: int) -> list[tuple[int, str]]:
    """(day counted from stream day `at`, severity) of the new alerts on or after it."""
    return [((date.fromisoformat(a.run_date) - FAKE_START).days - at, a.severity) for a in fired if a.new
            and (date.fromisoformat(a.run_date) - FAKE_START).days >= at]


def _first(found: Sequence[tuple[int, str]], severity: str) -> int | None:
    return min((day for day, s in found if s == severity), default=None)


def _measured(stream: Stream, days: list[list[Item]], config: DriftConfig, at: int, after: int
              ) -> tuple[pd.DataFrame, list[Alert]]:
    """Stream days `at - confirm_of` (earlier windows for the confirmation) to `at + after` measured and replayed."""
    frame = stream_drift(days, stream, config, range(at - config.confirm_of, min(stream.length, at + after + 1)))
    return frame, replay(frame, config)


def _injected(stream: Stream, pack: str) -> list[list[Item]]:
    """The stream's days with `pack` added on its event day."""
    days = [list(d) for d in stream.days]
    days[stream.event_index] += stream.packs[pack]
    return days


def _event(job: tuple[str, DriftConfig, int]) -> dict:
    """A pack injected on the event day: the first warning and page, in days from it."""
    name, config, after = job
    stream = _STREAM
    at = stream.event_index
    _, fired = _measured(stream, _injected(stream, name), config, at, after)
    found = _days_from(fired, at)
    return {"event": name, "first_warning": _first(found, WARNING), "first_page": _first(found, ALERT),
            "message": next((a.message for a in fired if a.new and a.severity == ALERT
                             and a.run_date >= f"{FAKE_START + timedelta(days=at):%Y-%m-%d}"), "")[:400]}


def _after_burst(config: DriftConfig, after: int) -> dict:
    """The burst pack on the event day, ordinary days after it: the runs paging on days +1..+AFTER_BURST_PAGES and
    the drifted days among the `after` days after it."""
    stream = _STREAM
    at = stream.event_index
    frame, fired = _measured(stream, _injected(stream, stream.burst), config, at, after)
    found = _days_from(fired, at)
    later = sorted({day for day, severity in found if severity == ALERT and 1 <= day <= AFTER_BURST_PAGES})
    day = (frame[contract.RUN_DATE] - pd.Timestamp(FAKE_START)).dt.days - at
    clear = day.ge(1) & (frame["current_start"] > f"{FAKE_START + timedelta(days=at):%Y-%m-%d}")  # burst not in it
    drifted = sorted(set(day[clear & (frame["verdict"] == contract.DRIFTED)]))
    return {"event": stream.burst, "first_page": _first(found, ALERT), "later_pages": later,
            "drifted_after": [int(d) for d in drifted], "days_after": int(day[clear].nunique()),
            "holding_burst": sorted({int(d) for d in day[day.ge(1) & ~clear]}),
            "messages": [a.message[:300] for a in fired if a.new and a.severity == ALERT]}


def _shift(config: DriftConfig, after: int, steady: bool = False) -> dict:
    """The gradual shift (or the sustained one) from the event day: the first warning and page, in days from its
    start."""
    stream = _STREAM
    at = stream.event_index
    days, lasts = shifted_days(stream, at, steady)
    _, fired = _measured(stream, days, config, at, min(after, lasts))
    found = _days_from(fired, at)
    label = (f"sustained new topic, {stream.shift.steady} a day" if steady else "gradual shift, 1, 2, 3... a day")
    return {"event": f"{label}, {stream.shift.label}", "days": lasts, "first_warning": _first(found, WARNING),
            "first_page": _first(found, ALERT),
            "message": next((a.message for a in fired if a.new and a.severity == ALERT), "")[:400]}


# --- the null by chunks per document, simulated --------------------------------------------------------------

SYNTH_CHUNKS = (1, 2, 4, 8, 32)
SYNTH_COSINES = (0.3, 0.5, 0.8)
SYNTH_DIM, SYNTH_RANK = 384, 24
SYNTH_REFERENCE, SYNTH_CURRENT = 1000, 250  # chunks per side, about a real day's
SYNTH_WINDOWS, SYNTH_PERMUTATIONS = 40, 500


@dataclass(frozen=True)
class Synthetic:
    """One cell: windows of a reference of about `reference` chunks and a current of about `current`, documents of
    `per_document` chunks whose chunks have a mean cosine of about `cosine`."""

    per_document: int
    cosine: float
    windows: int = SYNTH_WINDOWS
    permutations: int = SYNTH_PERMUTATIONS
    reference: int = SYNTH_REFERENCE
    current: int = SYNTH_CURRENT
    seed: int = 0


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def synthetic_documents(rng: np.random.Generator, basis: np.ndarray, n_documents: int, per_document: int,
                        cosine: float) -> np.ndarray:
    """(n_documents, per_document, dim) unit chunks: centres from `basis` (a low-rank mix plus a common direction
    and isotropic noise), chunks normalize(sqrt(c) centre + sqrt(1 - c) noise), noise of unit norm on average."""
    rank, dim = basis.shape[0] - 1, basis.shape[1]
    mix = np.hstack([np.ones((n_documents, 1)), rng.standard_normal((n_documents, rank))])
    centres = _unit(mix @ basis + 0.5 * rng.standard_normal((n_documents, dim)) / math.sqrt(dim))
    noise = rng.standard_normal((n_documents, per_document, dim)) / math.sqrt(dim)
    return _unit(math.sqrt(cosine) * centres[:, None, :] + math.sqrt(1 - cosine) * noise)


def synthetic_basis(seed: int, dim: int = SYNTH_DIM, rank: int = SYNTH_RANK) -> np.ndarray:
    """A common direction (row 0) then `rank` directions of decaying scale: anisotropic documents, whose centres
    have a mean cosine of about 0.25, so chunks of two documents one of about 0.25 c (MiniLM's across the demo's
    documents: 0.17)."""
    rng = np.random.default_rng(seed)
    scales = np.r_[1.25, 0.9 * 0.9 ** np.arange(rank)]
    return scales[:, None] * _unit(rng.standard_normal((rank + 1, dim)))


def _side(chunks: np.ndarray, prefix: str) -> drift.Sample:
    n_documents, per_document, dim = chunks.shape
    return drift.Sample(chunks.reshape(-1, dim),
                        documents=[f"{prefix}{d}" for d in range(n_documents) for _ in range(per_document)])


def within_cosine(chunks: np.ndarray) -> float:
    """The mean cosine between two chunks of one document (NaN with one chunk per document)."""
    n, m, _ = chunks.shape
    if m < 2:
        return math.nan
    gram = np.einsum("dik,djk->dij", chunks, chunks)
    return float((gram.sum() - np.trace(gram, axis1=1, axis2=2).sum()) / (n * m * (m - 1)))


def synthetic_null(cell: Synthetic) -> dict:
    """The cell's windows under the null through `drift.window_drift` (page_permutations = permutations: the
    verdicts at `alpha`, not the one-day page level): the share drifted, each statistic's raw p < alpha share."""
    config = DriftConfig(permutations=cell.permutations, page_permutations=cell.permutations, evidently=False)
    rng = np.random.default_rng([cell.seed, cell.per_document, int(cell.cosine * 100)])
    basis = synthetic_basis(cell.seed)
    n_ref = max(2, round(cell.reference / cell.per_document))
    n_cur = max(2, round(cell.current / cell.per_document))
    drifted, low = 0, {}
    within, across = [], []
    began = time.perf_counter()
    for w in range(cell.windows):
        ref = synthetic_documents(rng, basis, n_ref, cell.per_document, cell.cosine)
        cur = synthetic_documents(rng, basis, n_cur, cell.per_document, cell.cosine)
        within.append(within_cosine(ref))
        firsts = ref[:, 0, :]
        across.append(float(((firsts @ firsts.T).sum() - n_ref) / (n_ref * (n_ref - 1))))
        verdicts = drift.window_drift(_side(ref, "r"), _side(cur, "c"), config)
        drifted += any(v.verdict == contract.DRIFTED for v in verdicts)
        for v in verdicts:
            low[v.statistic] = low.get(v.statistic, 0) + (v.p_value < config.alpha)
    return {"per_document": cell.per_document, "cosine": cell.cosine, "windows": cell.windows,
            "chunks": [n_ref * cell.per_document, n_cur * cell.per_document],
            "within": float(np.mean(within)) if cell.per_document > 1 else math.nan,
            "across": float(np.mean(across)), "drifted": drifted / cell.windows,
            "raw_p_low": {s: n / cell.windows for s, n in low.items()}, "alpha": config.alpha,
            "seconds": time.perf_counter() - began}


def synthetic_table(workers: int, windows: int = SYNTH_WINDOWS, permutations: int = SYNTH_PERMUTATIONS,
                    chunks: Sequence[int] = SYNTH_CHUNKS, cosines: Sequence[float] = SYNTH_COSINES) -> list[dict]:
    cells = [Synthetic(m, c, windows, permutations) for m in chunks for c in cosines]
    with concurrent.futures.ProcessPoolExecutor(workers) as pool:
        return list(pool.map(synthetic_null, cells))


def format_synthetic(cells: Sequence[dict]) -> str:
    if not cells:
        return ""
    stats = list(cells[0]["raw_p_low"])
    short = {s: s.replace("_share", "").replace("classifier_accuracy", "classifier")[:12] for s in stats}
    first = cells[0]
    lines = [(f"the drift null by chunks per document (simulated: reference {first['chunks'][0]} and current "
              f"{first['chunks'][1]} chunks at 1 chunk per document, {first['windows']} windows per cell; "
              f"alpha {first['alpha']:g}); drifted = any statistic drifted, then each statistic's raw p < alpha "
              "share"),
             f"{'chunks/doc':>10}{'cosine':>8}{'measured':>10}{'across':>8}{'drifted':>9}"
             + "".join(f"{short[s]:>14}" for s in stats) + f"{'s/window':>10}"]
    for c in cells:
        lines.append(f"{c['per_document']:>10}{c['cosine']:>8.1f}"
                     f"{'-' if math.isnan(c['within']) else format(c['within'], '.3f'):>10}{c['across']:>8.3f}"
                     f"{c['drifted']:>9.3f}" + "".join(f"{c['raw_p_low'].get(s, math.nan):>14.3f}" for s in stats)
                     + f"{c['seconds'] / c['windows']:>10.2f}")
    return "\n".join(lines)


# --- report ---------------------------------------------------------------------------------------------------


def _pooled(results: Sequence[dict], label: str, kind: str | None = None) -> Count:
    """The counts of streams of `kind`, or of the day-order kinds (permutation and block) when None."""
    picked = [r["counts"][label] for r in results if r["kind"] == kind or (kind is None and r["kind"] in DAY_ORDER)]
    return Count(*(sum(c[f] for c in picked) for f in ("days", "drifted_days", "warnings", "pages")))


def _delay(day: int | None) -> str:
    return "not flagged" if day is None else ("on the day" if day == 0 else f"day +{day}")


DAY_ORDER = ("permutation", "block")  # null streams of whole real days; "shuffled" moves the items across days


def format_stream(result: dict) -> str:
    lines = [(f"corpus drift on null streams from the {result['stream']} stream ({result['path']}), "
              f"{result['days']} days each after a {result['warmup']}-day warm-up; a page is a run notifying a new "
              "alert"),
             "", f"{'stream':<26}{'days':>6}{'drifted':>9}{'warnings':>10}{'pages':>7}{'pages/90d':>11}{'s/day':>8}"]
    label = SETTINGS[0][0]
    for r in result["streams"]:
        c = Count(**r["counts"][label])
        lines.append(f"{r['kind'] + ' ' + str(r['seed']):<26}{c.days:>6}{c.drifted_days:>9}{c.warnings:>10}"
                     f"{c.pages:>7}{c.pages_per_90:>11.2f}{r['seconds'] / c.days:>8.1f}")
    lines += [f"  {r['kind']} {r['seed']}, {page}" for r in result["streams"] for page in r.get("pages", [])]
    lines += ["", "pages per 90 days by rule setting (same verdicts replayed):",
              f"{'setting':<44}{'permutation':>12}{'block':>8}{'pooled':>8}{'worst':>7}{'real order':>12}"
              f"{'shuffled':>10}"]
    for label, _ in SETTINGS:
        worst = max((Count(**r["counts"][label]).pages_per_90 for r in result["streams"] if r["kind"] in DAY_ORDER),
                    default=math.nan)
        real = Count(**result["real_order"][label]) if result.get("real_order") else Count(0, 0, 0, 0)
        lines.append(f"{label:<44}{_pooled(result['streams'], label, 'permutation').pages_per_90:>12.2f}"
                     f"{_pooled(result['streams'], label, 'block').pages_per_90:>8.2f}"
                     f"{_pooled(result['streams'], label).pages_per_90:>8.2f}{worst:>7.2f}"
                     f"{real.pages_per_90:>12.2f}{_pooled(result['streams'], label, 'shuffled').pages_per_90:>10.2f}")
    pooled = _pooled(result["streams"], SETTINGS[0][0])
    if not result.get("real_order"):
        return "\n".join(lines)
    lines += ["", f"events injected on {result['event_day']} into the real-order stream (defaults):",
              f"{'event':<66}{'first warning':>15}{'first page':>13}"]
    for e in result["events"]:
        lines.append(f"{e['event']:<66}{_delay(e['first_warning']):>15}{_delay(e['first_page']):>13}")
    for s in [result[key] for key in ("shift", "steady_shift") if result.get(key)]:
        lines.append(f"{s['event'] + ', ' + str(s['days']) + ' days':<66}"
                     f"{_delay(s['first_warning']):>15}{_delay(s['first_page']):>13}")
    if result.get("after_burst"):
        b = result["after_burst"]
        later = ", ".join(f"+{d}" for d in b["later_pages"]) or "none"
        rate = f"{pooled.drifted_days / pooled.days:.2f}" if pooled.days else "n/a"
        lines += [(f"burst then ordinary days ({b['event']}): first page {_delay(b['first_page'])}; "
                   f"pages on days +1..+{AFTER_BURST_PAGES}: {later}"),
                  (f"days after a burst: drifted on {len(b['drifted_after'])} of the {b['days_after']} days after it "
                   f"whose window no longer holds it ({', '.join(f'+{d}' for d in b['drifted_after']) or 'none'}; "
                   f"null streams' drifted-day rate {rate}; days whose window still held it: "
                   f"{', '.join(f'+{d}' for d in b['holding_burst']) or 'none'})")]
    return "\n".join(lines)


def format_report(result: dict) -> str:
    parts = [format_stream(r) for r in result.get("streams", {}).values()]
    if result.get("synthetic"):
        parts.append(format_synthetic(result["synthetic"]))
    return "\n\n".join(parts) + f"\n\n{result['seconds']:.0f} s"


def run_stream(stream: Stream, path: Path, config: DriftConfig, streams: int, workers: int, quick: bool,
               kinds: Sequence[str] = (*DAY_ORDER, "shuffled"), events: bool = True) -> dict:
    """The null streams, the real order and the events of one stream."""
    evaluated = QUICK_DAYS if quick else STREAM_DAYS
    after = QUICK_DAYS if quick else EVENTS_AFTER
    jobs = [(kind, seed, config, evaluated) for kind in kinds for seed in range(streams)]
    packs = (list(stream.packs)[:1] if quick else list(stream.packs)) if events else []
    with concurrent.futures.ProcessPoolExecutor(workers, initializer=_hold, initargs=(stream,)) as pool:
        nulls = pool.map(_null_stream, jobs)
        found = pool.map(_event, [(name, config, after) for name in packs])
        later = {}
        if events:
            later = {"after_burst": pool.submit(_after_burst, config, QUICK_DAYS if quick else AFTER_BURST_DRIFT),
                     "shift": pool.submit(_shift, config, QUICK_DAYS if quick else SHIFT_MAX),
                     "steady_shift": pool.submit(_shift, config, QUICK_DAYS if quick else SHIFT_MAX, True),
                     "real_order": pool.submit(_real_order, config, evaluated)}
        nulls, found = list(nulls), list(found)
        later = {key: value.result() for key, value in later.items()}
    return {"stream": stream.name, "path": str(path), "days": evaluated, "warmup": warmup(config),
            "event_day": str(stream.event_day), "streams": nulls, "events": found, **later}


LOADERS = {"news": load_news, "peps": load_peps}


def run(args: argparse.Namespace) -> dict:
    config = DriftConfig()
    began = time.perf_counter()
    result: dict = {"streams": {}}
    for name in ("news", "peps"):
        if args.part not in ("all", name):
            continue
        path = getattr(args, name)
        loaded = time.perf_counter()
        stream = LOADERS[name](path, config, OUT_DIR / ("corpus-null" if name == "news" else f"corpus-null-{name}"))
        print(f"{name}: {sum(len(d) for d in stream.days)} items, {len(stream.vectors)} chunks with the packs, "
              f"loaded in {time.perf_counter() - loaded:.0f} s"
              + (f"; gradual shift: {stream.shift.label}" if stream.shift else ""), file=sys.stderr)
        result["streams"][name] = run_stream(stream, path, config, args.streams, args.workers, args.quick,
                                             args.kinds.split(","), not args.no_events)
    if args.part in ("all", "synthetic"):
        result["synthetic"] = (synthetic_table(args.workers, windows=8, chunks=(1, 8), cosines=(0.8,)) if args.quick
                               else synthetic_table(args.workers))
    result["seconds"] = time.perf_counter() - began
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.corpus_null", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=("all", "news", "peps", "synthetic"), default="all",
                        help="one real stream, or only the simulated table by chunks per document")
    parser.add_argument("--streams", type=int, default=10, help="null streams of each kind (permutation, block)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--kinds", default="permutation,block,shuffled",
                        help="null streams: day-order permutations, block bootstraps, items shuffled across days")
    parser.add_argument("--no-events", action="store_true", help="the null streams only (no events, no real order)")
    parser.add_argument("--quick", action="store_true",
                        help=f"a smoke run: 1 stream of each kind of {QUICK_DAYS} days, {QUICK_DAYS} days after "
                             "each event, the first pack only, a small synthetic table")
    parser.add_argument("--news", type=Path, default=DEFAULT_NEWS, help="the real news stream folder")
    parser.add_argument("--peps", type=Path, default=DEFAULT_PEPS, help="the PEP stream folder")
    parser.add_argument("--out", type=Path, default=OUT_DIR / "corpus_null.json", help="the JSON result")
    args = parser.parse_args(argv)
    if args.quick:
        args.streams = 1
    for name in ("news", "peps"):
        if args.part in ("all", name) and not (getattr(args, name) / "daily").is_dir():
            print(f"error: {getattr(args, name)}/daily not found (the real {name} stream; see --{name})",
                  file=sys.stderr)
            return 2
    result = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, default=str))
    print(format_report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
