"""Corpus-drift pages on null streams made from real news, and the day injected bursts are flagged.

The null streams are the 60 real days of ../shared/data/news-2025-autumn reordered: day-order permutations and
moving-block bootstrap resamples (blocks of BLOCK consecutive days, keeping the stories' continuity), each
STREAM_DAYS evaluated days long after a warm-up that fills the reference window. A real day is never repeated
within GAP days of itself, so no window meets a copy of its own day, and a document is never its own near copy
(a repeated item is the same news, not a flood). Each stream day is measured as the daily job measures it: the
current window (grown until it holds min_current chunks) against the reference_days before it, by
`drift.window_drift` on the real embeddings; the drift rule (`alerts._drift_alerts` and `mark_ongoing`) then
turns the verdicts into warnings and pages, a page being a run that notifies a new alert. The same verdicts are
replayed under other rule settings (the rule before confirmation among them), which cost no new statistics.

Events are injected into the real-order stream on EVENT_DAY: the 43-item sports pack, the flood of 40 near
copies of gold items (bench.alerts.flood_feed) and half the sports pack; the table gives the first warning and
the first page of each. Run: python -m bench.corpus_null [--streams 10] [--workers 2] [--quick]."""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
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

ROOT = Path(__file__).resolve().parents[1]
OUT_DIR = ROOT / "bench" / "out"
DEFAULT_NEWS = ROOT.parent / "shared" / "data" / "news-2025-autumn"
NEWS_START = date(2025, 9, 1)
EVENT_DAY = date(2025, 10, 1)
STREAM_DAYS = 90  # evaluated days per stream (pages are counted per 90 days)
BLOCK = 7  # the moving-block bootstrap's block length, in days
SOURCE = "news"  # every item of the stream comes from one source, as in the daily job's news_config
FAKE_START = date(2030, 1, 1)  # a resampled stream's first date
EVENTS_AFTER = 7  # days after EVENT_DAY an injected stream is evaluated
# Rule settings replayed on the same verdicts: (label, changes to DriftConfig).
SETTINGS: tuple[tuple[str, dict], ...] = (
    ("defaults (2 of 3, page p < 0.002)", {}),
    ("every drifted day pages (the rule before)", {"confirm_windows": 1}),
    ("2 of 2", {"confirm_of": 2}),
    ("2 of 4", {"confirm_of": 4}),
    ("page p < 0.001", {"page_alpha": 0.001}),
    ("page p < 0.005", {"page_alpha": 0.005}),
    ("no one-day page", {"page_alpha": 1e-9}),
)


@dataclass(frozen=True)
class Item:
    """One news item: its id (the original's, shared by its repeats), category and its chunks' rows."""

    id: str
    category: str
    title: str
    rows: tuple[int, ...]  # rows of the vectors matrix


@dataclass
class News:
    """Every item of the stream and the packs, their chunks' unit vectors, and per chunk the ids of OTHER items
    holding a near copy of it (cosine at or above drift.duplicate_cosine)."""

    days: list[list[Item]]  # the 60 real days in order
    packs: dict[str, list[Item]]
    vectors: np.ndarray
    near: list[frozenset[str]]


def _items(documents, chunks: list[str], size: int, overlap: int) -> list[Item]:
    items = []
    for doc in documents:
        texts = [c.text for c in chunk_document(doc.id, doc.title, doc.text, size, overlap)]
        items.append(Item(doc.id, doc.categories[0] if doc.categories else "", doc.title,
                          tuple(range(len(chunks), len(chunks) + len(texts)))))
        chunks += texts
    return items


def _parse(path: Path, data: bytes | None = None) -> list:
    return parse_feed(path.read_bytes() if data is None else data, source=SOURCE, location=str(path))


def load_news(news: Path, config: DriftConfig, work: Path) -> News:
    """The 60 real days, the sports pack, half of it and the flood, chunked as the job chunks and embedded by the
    real model (cached in a corpus.sqlite under `work`)."""
    from bench.alerts import flood_feed
    from pipeline.config import ChunkingConfig
    from pipeline.corpus import Corpus
    from pipeline.embeddings import Embedder, embed_cached

    chunking = ChunkingConfig()
    texts: list[str] = []
    days = [_items(_parse(news / "daily" / f"{NEWS_START + timedelta(days=i)}.xml"), texts, chunking.size,
                   chunking.overlap) for i in range(60)]
    sports = _items(_parse(news / "offtopic_sports.xml"), texts, chunking.size, chunking.overlap)
    flood = _items(_parse(news / "flood.xml", flood_feed(news, EVENT_DAY)), texts, chunking.size, chunking.overlap)
    half = random.Random(0).sample(sports, len(sports) // 2)
    work.mkdir(parents=True, exist_ok=True)
    with Corpus.in_dir(work) as corpus:
        vectors = embed_cached(corpus, Embedder(EmbedderConfig()), texts).vectors.astype(np.float64)
    owner = np.empty(len(texts), object)
    for item in [i for day in days for i in day] + sports + flood:
        owner[list(item.rows)] = item.id
    similarity = vectors @ vectors.T
    near = [frozenset(owner[j] for j in np.flatnonzero(row >= config.duplicate_cosine) if owner[j] != owner[i])
            for i, row in enumerate(similarity)]
    return News(days, {"sports pack (43)": sports, f"near-copy flood ({len(flood)})": flood,
                       f"half the sports pack ({len(half)})": half}, vectors, near)


# --- streams --------------------------------------------------------------------------------------------------


def gap(config: DriftConfig) -> int:
    """Days within which a real day must not repeat: it would meet a copy of itself in its windows."""
    return config.reference_days + config.max_window_days + 1


def permuted_stream(n: int, seed: int, min_gap: int) -> list[int]:
    """`n` real days (indices 0..59): permutations of the 60 days one after another, each day at least `min_gap`
    days after its last use."""
    rng = random.Random(seed)
    out: list[int] = []
    pool: list[int] = []
    while len(out) < n:
        if not pool:
            pool = rng.sample(range(60), 60)
        recent = set(out[-min_gap:])
        pick = next((d for d in pool if d not in recent), None)
        if pick is None:  # the rest of this permutation is too recent: start the next one early
            pool = []
            continue
        pool.remove(pick)
        out.append(pick)
    return out


def block_stream(n: int, seed: int, min_gap: int, block: int = BLOCK) -> list[int]:
    """`n` real days as a moving-block bootstrap: blocks of `block` consecutive real days drawn with replacement,
    a block redrawn when one of its days was used within `min_gap` days."""
    rng = random.Random(seed)
    out: list[int] = []
    while len(out) < n:
        start = rng.randrange(60 - block + 1)
        days = list(range(start, start + block))
        if set(days) & set(out[-min_gap:]):
            continue
        out += days
    return out[:n]


def warmup(config: DriftConfig) -> int:
    return config.reference_days + config.max_window_days


# --- one stream, measured as the job measures it -------------------------------------------------------------


def _sample(items: Sequence[Item], news: News, pool: set[str]) -> drift.Sample:
    rows = [r for item in items for r in item.rows]
    owners = [item for item in items for _ in item.rows]
    duplicate = np.array([bool(news.near[r] & pool) for r in rows], bool)
    return drift.Sample(news.vectors[rows], [i.category for i in owners], [SOURCE] * len(rows),
                        [i.title for i in owners], duplicate)


def stream_drift(days: Sequence[list[Item]], news: News, config: DriftConfig, evaluate: Sequence[int]
                 ) -> pd.DataFrame:
    """drift.csv rows of the stream days `evaluate` (indices into `days`, the stream's items per day), dated from
    FAKE_START: each day's current window against its reference window, as `windows.window_verdicts` forms them
    (the near copies' pool: every item seen by the window's end, the item itself excepted)."""
    from pipeline.windows import Window, _rows, _short

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
        reference_items = [i for d in range(max(0, start - config.reference_days), start) for i in days[d]]
        current = _sample(current_items, news, {i for i, s in first_seen.items() if s <= t})
        reference = _sample(reference_items, news, {i for i, s in first_seen.items() if s < start})
        why = drift.not_enough(len(reference), len(current), config)
        verdicts = _short(names, why) if why else drift.window_drift(reference, current, config)
        end = FAKE_START + timedelta(days=start - 1)
        rows += _rows(run_date, verdicts, Window(end - timedelta(days=config.reference_days), end),
                      Window(end, run_date), len(reference), len(current))
    frame = pd.DataFrame(rows, columns=list(contract.DRIFT_COLUMNS))
    frame[contract.RUN_DATE] = pd.to_datetime(frame[contract.RUN_DATE])
    return frame


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
        return self.pages * STREAM_DAYS / self.days

    @classmethod
    def of(cls, frame: pd.DataFrame, fired: Sequence[Alert]) -> Count:
        drifted = frame[frame["verdict"] == contract.DRIFTED][contract.RUN_DATE].nunique()
        new = [a for a in fired if a.new]
        return cls(int(frame[contract.RUN_DATE].nunique()), int(drifted), sum(a.severity == WARNING for a in new),
                   len({a.run_date for a in new if a.severity == ALERT}))


def _null_stream(job: tuple[str, int, News, DriftConfig]) -> dict:
    kind, seed, news, config = job
    n = warmup(config) + STREAM_DAYS
    order = (permuted_stream if kind == "permutation" else block_stream)(n, seed, gap(config))
    days = [news.days[d] for d in order]
    began = time.perf_counter()
    frame = stream_drift(days, news, config, range(warmup(config), n))
    counts, pages = {}, []
    for label, changes in SETTINGS:
        fired = replay(frame, dataclasses.replace(config, **changes))
        counts[label] = dataclasses.asdict(Count.of(frame, fired))
        if not changes:  # what the defaults' pages said
            pages = [f"{a.run_date}: {a.message[:240]}" for a in fired if a.new and a.severity == ALERT]
    return {"kind": kind, "seed": seed, "seconds": time.perf_counter() - began, "counts": counts, "pages": pages}


def real_order(news: News, config: DriftConfig) -> dict:
    """The 60 days in their real order (the days with a full reference window evaluated)."""
    frame = stream_drift(news.days, news, config, range(warmup(config), 60))
    return {label: dataclasses.asdict(Count.of(frame, replay(frame, dataclasses.replace(config, **changes))))
            for label, changes in SETTINGS}


def _event(job: tuple[str, News, DriftConfig]) -> dict:
    name, news, config = job
    at = (EVENT_DAY - NEWS_START).days
    days = [list(d) for d in news.days]
    days[at] = days[at] + news.packs[name]
    evaluate = range(at - config.confirm_of, min(60, at + EVENTS_AFTER))  # earlier windows for the confirmation
    frame = stream_drift(days, news, config, evaluate)
    fired = [a for a in replay(frame, config) if a.new and a.run_date >= f"{FAKE_START + timedelta(days=at):%Y-%m-%d}"]
    first = lambda severity: min((int((date.fromisoformat(a.run_date) - FAKE_START).days) - at  # noqa: E731
                                  for a in fired if a.severity == severity), default=None)
    return {"event": name, "first_warning": first(WARNING), "first_page": first(ALERT),
            "message": next((a.message for a in fired if a.severity == ALERT), "")[:400]}


# --- report ---------------------------------------------------------------------------------------------------


def _pooled(results: Sequence[dict], label: str, kind: str | None = None) -> Count:
    picked = [r["counts"][label] for r in results if kind in (None, r["kind"])]
    return Count(*(sum(c[f] for c in picked) for f in ("days", "drifted_days", "warnings", "pages")))


def _delay(day: int | None) -> str:
    return "not flagged" if day is None else ("on the day" if day == 0 else f"day +{day}")


def format_report(result: dict) -> str:
    lines = [f"corpus drift on null streams from real news ({result['news']}), {STREAM_DAYS} days each after a "
             f"{result['warmup']}-day warm-up; a page is a run notifying a new alert", ""]
    lines.append(f"{'stream':<26}{'days':>6}{'drifted':>9}{'warnings':>10}{'pages':>7}{'pages/90d':>11}")
    label = SETTINGS[0][0]
    for r in result["streams"]:
        c = Count(**r["counts"][label])
        lines.append(f"{r['kind'] + ' ' + str(r['seed']):<26}{c.days:>6}{c.drifted_days:>9}{c.warnings:>10}"
                     f"{c.pages:>7}{c.pages_per_90:>11.2f}")
    lines += [f"  {r['kind']} {r['seed']}, {page}" for r in result["streams"] for page in r.get("pages", [])]
    lines += ["", "pages per 90 days by rule setting (same verdicts replayed):",
              f"{'setting':<44}{'permutation':>12}{'block':>8}{'pooled':>8}{'worst':>7}{'real order':>12}"]
    for label, _ in SETTINGS:
        worst = max(Count(**r["counts"][label]).pages_per_90 for r in result["streams"])
        real = Count(**result["real_order"][label])
        lines.append(f"{label:<44}{_pooled(result['streams'], label, 'permutation').pages_per_90:>12.2f}"
                     f"{_pooled(result['streams'], label, 'block').pages_per_90:>8.2f}"
                     f"{_pooled(result['streams'], label).pages_per_90:>8.2f}{worst:>7.2f}"
                     f"{real.pages_per_90:>12.2f}")
    lines += ["", f"events injected on {EVENT_DAY} into the real-order stream (defaults):",
              f"{'event':<32}{'first warning':>15}{'first page':>13}"]
    for e in result["events"]:
        lines.append(f"{e['event']:<32}{_delay(e['first_warning']):>15}{_delay(e['first_page']):>13}")
    lines.append(f"\n{result['seconds']:.0f} s")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> dict:
    config = DriftConfig()
    began = time.perf_counter()
    news = load_news(args.news, config, OUT_DIR / "corpus-null")
    jobs = [(kind, seed, news, config) for kind in ("permutation", "block") for seed in range(args.streams)]
    with concurrent.futures.ProcessPoolExecutor(args.workers) as pool:
        streams = pool.map(_null_stream, jobs)
        events = pool.map(_event, [(name, news, config) for name in news.packs])
        streams, events = list(streams), list(events)
    return {"news": str(args.news), "warmup": warmup(config), "streams": streams,
            "real_order": real_order(news, config), "events": events, "seconds": time.perf_counter() - began}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.corpus_null", description=__doc__)
    parser.add_argument("--streams", type=int, default=10, help="null streams of each kind (permutation, block)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--news", type=Path, default=DEFAULT_NEWS, help="the real news stream folder")
    parser.add_argument("--out", type=Path, default=OUT_DIR / "corpus_null.json", help="the JSON result")
    args = parser.parse_args(argv)
    if not (args.news / "daily").is_dir():
        print(f"error: {args.news}/daily not found (the real news stream; see --news)", file=sys.stderr)
        return 2
    result = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, default=str))
    print(format_report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
