"""The alert calibration benchmark: false alarms of the real rules on null streams (simulated and the
real news) and detection delays of injected events. Run: python -m bench.alerts [--quick] [--fresh]."""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import hashlib
import json
import logging
import math
import os
import random
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from bench._streams import (DECLINE_START, HistoryWindow, StreamSpec, crossing_day, replay_alerts,
                            run_dates, simulated_history)
from pipeline import contract, store
from pipeline.alerts import Alert
from pipeline.contract import ALERT, CORPUS_WIDE, FEEDS_FAILED, GOLD_MISSING, WARNING
from pipeline.cli import _configure_logging as configure_logging
from pipeline.config import AlertsConfig, Config, RetrievalConfig, SourceConfig
from pipeline.corpus import Corpus
from pipeline.demo import DRIFT_DAY, N_DAYS, Article, Outlet, build_demo, demo_date, render_rss
from pipeline.errors import DriftwatchError
from pipeline.job import backfill
from pipeline.simulate import Scenario, simulate, source_config

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]
OUT_DIR = ROOT / "bench" / "out"
DEFAULT_NEWS = ROOT.parent / "shared" / "data" / "news-2025-autumn"  # the project's ../shared
NEWS_GOLD = ROOT / "data" / "news-2025-autumn" / "gold.jsonl"
NEWS_START, NEWS_END = date(2025, 9, 1), date(2025, 10, 30)
EVENT_DAY = date(2025, 10, 1)
PER_DAYS = 90  # false alarms are counted per 90 days per data directory
KS = RetrievalConfig().k
PARTS = ("all", "real", "simulated", "corpus")
_, REAL, SIMULATED, CORPUS = PARTS  # corpus: bench.corpus_null, corpus-drift pages on null streams of real news

# A: the null grid (full / quick).
NULL_QUESTIONS, NULL_P, NULL_DAYS = (20, 50, 200), (0.5, 0.7, 0.8, 0.9, 0.95), 365
# Independent data directories (seeds) per cell: one stream's fixed reference period makes its false alarms
# come in clusters, so a single seed says little; the rate is pooled over the seeds and the worst one shown.
NULL_SEEDS = (0, 1, 2)
QUICK_QUESTIONS, QUICK_P, QUICK_DAYS, QUICK_SEEDS = (50,), (0.7, 0.9), 180, (0,)
DECLINE_HORIZON = 60  # days after the 10% crossing a declining stream runs before "missed"
# D: AlertsConfig settings traded off at 50 questions; a knob the landed AlertsConfig lacks is skipped.
TRADEOFF_QUESTIONS, TRADEOFF_P = 50, 0.8
TRADEOFF_GRID: tuple[dict, ...] = (
    {},
    {"alpha": 0.005},
    {"alpha": 0.05},
    {"confirm_days": 1},
    {"confirm_days": 3},
    {"ewma_smoothing": 0.5},
    {"reference_runs": 10},
    {"reference_runs": 30},
    {"criticality": "critical"},
)
QUICK_GRID = TRADEOFF_GRID[:2]

# C: events injected into the real stream from EVENT_DAY, and demo scenarios.
FLOOD_SIZE = 40
DELETE_SHARE = 0.3
SWAP_DIM = 128
SEED = 0
DEMO_SCENARIOS = (
    Scenario("offtopic", demo_date(DRIFT_DAY)),
    Scenario("near-duplicates", demo_date(DRIFT_DAY)),
    Scenario("delete", demo_date(DRIFT_DAY), share=DELETE_SHARE),
    Scenario("embedder", demo_date(DRIFT_DAY), truncate_dim=SWAP_DIM),
)
NOT_DRIFT = frozenset({GOLD_MISSING, FEEDS_FAILED})  # corpus-wide rules that are not about drift

TARGETS = {
    "null": "<= 1 false alarm per 90 days per data directory",
    "event": "detected on the day it happens (delay 0)",
    "decline": "detected within 7 days of crossing -10%",
}


class BenchError(DriftwatchError):
    """The bench cannot run as asked (missing data); the message names the path."""


# --- what counts ----------------------------------------------------------------------------


def is_retrieval(alert: Alert) -> bool:
    return alert.pipeline != CORPUS_WIDE


def is_drift(alert: Alert) -> bool:
    return alert.pipeline == CORPUS_WIDE and alert.rule not in NOT_DRIFT


def per_90_days(count: int, days: int) -> float:
    return count * PER_DAYS / days


@dataclass(frozen=True)
class Tally:
    """New alerts (severity alert) and new warnings of one stream, per 90 days, with the rules that fired;
    the pages (runs that notify at least one new alert: one webhook message each, the false alarm a team
    feels) and the days on which an alert was open (new or ongoing: what `run --fail-on-alert` exits 1 on)."""

    days: int
    alerts: int
    warnings: int
    rules: dict[str, int]
    days_alerting: int
    pages: int = 0

    @classmethod
    def of(cls, fired: Sequence[Alert], days: int) -> Tally:
        new = [a for a in fired if a.new]
        return cls(days, sum(a.severity == ALERT for a in new), sum(a.severity == WARNING for a in new),
                   dict(Counter(a.rule for a in new if a.severity == ALERT)),
                   len({a.run_date for a in fired if a.severity == ALERT}),
                   len({a.run_date for a in new if a.severity == ALERT}))

    @classmethod
    def pooled(cls, tallies: Sequence[Tally]) -> Tally:
        """Several data directories' tallies as one: counts and days summed."""
        rules: Counter = Counter()
        for t in tallies:
            rules.update(t.rules)
        return cls(sum(t.days for t in tallies), sum(t.alerts for t in tallies), sum(t.warnings for t in tallies),
                   dict(rules), sum(t.days_alerting for t in tallies), sum(t.pages for t in tallies))

    @property
    def alerts_per_90(self) -> float:
        return per_90_days(self.alerts, self.days)

    @property
    def pages_per_90(self) -> float:
        return per_90_days(self.pages, self.days)

    @property
    def warnings_per_90(self) -> float:
        return per_90_days(self.warnings, self.days)


def first_detection(fired: Iterable[Alert], relevant: Callable[[Alert], bool], since: date) -> Alert | None:
    """The first new alert or warning of a relevant rule on or after `since`."""
    hits = [a for a in fired if a.new and relevant(a) and date.fromisoformat(a.run_date) >= since]
    return min(hits, key=lambda a: a.run_date, default=None)


@dataclass(frozen=True)
class Detection:
    event: str
    stream: str
    delay: int | None  # days from the event to the first relevant new alert/warning; None: missed
    rules: tuple[str, ...]  # relevant rules that fired new on the detection day
    note: str = ""

    @property
    def shown(self) -> str:
        return "missed" if self.delay is None else str(self.delay)


def detection(event: str, stream: str, fired: Sequence[Alert], relevant: Callable[[Alert], bool],
              start: date, origin: date, note: str = "") -> Detection:
    """Delay counted from `origin` of the first relevant new alert/warning on or after `start`."""
    first = first_detection(fired, relevant, start)
    if first is None:
        return Detection(event, stream, None, (), note)
    rules = sorted({a.rule for a in fired if a.new and relevant(a) and a.run_date == first.run_date})
    return Detection(event, stream, (date.fromisoformat(first.run_date) - origin).days, tuple(rules), note)


# --- A, C (slow decline) and D on simulated streams ---------------------------------------------------


@dataclass(frozen=True)
class Settings:
    questions: tuple[int, ...]
    p: tuple[float, ...]
    days: int
    grid: tuple[dict, ...]
    window: HistoryWindow | None
    seeds: tuple[int, ...] = NULL_SEEDS


def null_tally(spec: StreamSpec, config: AlertsConfig, window: HistoryWindow | None) -> Tally:
    history = simulated_history(spec)
    return Tally.of(replay_alerts(history, run_dates(spec.days), config, KS, window=window), spec.days)


def decline_delay(n: int, p: float, config: AlertsConfig, window: HistoryWindow | None, seed: int = 0) -> Detection:
    """Days from the 10% crossing of a simulated -1%/day decline to its first retrieval alert/warning."""
    spec = StreamSpec(n, p, days=crossing_day() + DECLINE_HORIZON + 1, decline=True, seed=seed)
    days = run_dates(spec.days)
    start, origin = days[DECLINE_START - 1], days[crossing_day()]

    def found(alert: Alert) -> bool:
        return alert.new and is_retrieval(alert) and date.fromisoformat(alert.run_date) >= start

    fired = replay_alerts(simulated_history(spec), days, config, KS, stop=found, window=window)
    return detection("slow decline -1%/day", spec.label, fired, is_retrieval, start, origin)


def known_knobs(changes: dict) -> dict:
    """The grid entry's settings that the landed AlertsConfig has."""
    names = {f.name for f in dataclasses.fields(AlertsConfig)}
    skipped = sorted(set(changes) - names)
    if skipped:
        log.warning("AlertsConfig has no %s: left out of the trade-off grid", ", ".join(skipped))
    return {k: v for k, v in changes.items() if k in names}


def describe(changes: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in changes.items()) or "defaults"


def _cell(job: tuple[int, float, dict, int, int, HistoryWindow | None]) -> tuple[Tally, Detection]:
    """One data directory of a cell (in a worker process): its null tally and its decline detection."""
    n, p, knobs, seed, days, window = job
    config = dataclasses.replace(AlertsConfig(), **knobs)
    return (null_tally(StreamSpec(n, p, days=days, seed=seed), config, window),
            decline_delay(n, p, config, window, seed))


def _summary(results: Sequence[tuple[Tally, Detection]]) -> tuple[Tally, list[Tally], Detection]:
    """A cell's seeds: the pooled tally, each seed's, and the slowest decline detection (a miss counts as
    slowest), the seeds' delays in its note."""
    tallies = [t for t, _ in results]
    delays = [d for _, d in results]
    worst = max(delays, key=lambda d: math.inf if d.delay is None else d.delay)
    return Tally.pooled(tallies), tallies, dataclasses.replace(worst, note="seeds: " + ", ".join(d.shown for d in delays))


def simulated_part(settings: Settings, progress: Callable[[str], None], workers: int = 1) -> dict:
    """Every cell's seeds as independent jobs over `workers` processes (each stream replays the real rules
    day by day; they share nothing)."""
    cells = [("A", n, p, {}) for n in settings.questions for p in settings.p]
    cells += [("D", TRADEOFF_QUESTIONS, TRADEOFF_P, known_knobs(changes)) for changes in settings.grid]
    jobs = {(n, p, json.dumps(knobs, sort_keys=True), seed): (n, p, knobs, seed, settings.days, settings.window)
            for _, n, p, knobs in cells for seed in settings.seeds}  # D's defaults reuse A's streams
    done: dict = {}
    with concurrent.futures.ProcessPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = {pool.submit(_cell, job): key for key, job in jobs.items()}
        for future in concurrent.futures.as_completed(futures):
            done[futures[future]] = future.result()
    null, declines, tradeoff = [], [], []
    for part, n, p, knobs in cells:
        tally, each, decline = _summary([done[(n, p, json.dumps(knobs, sort_keys=True), s)] for s in settings.seeds])
        worst = round(max(t.pages_per_90 for t in each), 3)
        if part == "A":
            label = StreamSpec(n, p).label
            null.append({"stream": label, "n_questions": n, "p": p, "seeds": len(each), **_tally_json(tally),
                         "worst_pages_per_90": worst})
            declines.append(decline)
            progress(f"A/C simulated {label}: {tally.pages_per_90:.2f} pages ({tally.alerts_per_90:.2f} alerts) / 90 "
                     f"days over {len(each)} seeds (worst {worst:.2f}), decline delay {decline.shown} ({decline.note})")
        else:
            tradeoff.append({"settings": describe(knobs), "seeds": len(each), **_tally_json(tally),
                             "worst_pages_per_90": worst, "decline_delay": decline.delay,
                             "decline_delays": decline.note, "decline_rules": list(decline.rules)})
            progress(f"D {describe(knobs)}: {tally.pages_per_90:.2f} pages / 90 days (worst {worst:.2f}), decline "
                     f"delay {decline.shown} ({decline.note})")
    return {"null": null, "decline": [dataclasses.asdict(d) for d in declines], "tradeoff": tradeoff}


def _tally_json(tally: Tally) -> dict:
    return {"days": tally.days, "pages_per_90": round(tally.pages_per_90, 3), "alerts_per_90": round(tally.alerts_per_90, 3),
            "warnings_per_90": round(tally.warnings_per_90, 3), "rules": tally.rules,
            "days_alerting": tally.days_alerting}


# --- B and C on the real news stream and the demo --------------------------------------------------


def news_config(news: Path, data_dir: Path, daily: Path | None = None) -> Config:
    return Config(data_dir=data_dir, gold=NEWS_GOLD,
                  sources=(SourceConfig("news", path=(daily or news / "daily").resolve()),))


def _digest(paths: Iterable[Path]) -> str:
    h = hashlib.sha256()
    for path in sorted(paths):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


CACHE_FILE = "bench-cache.json"


def cached_store(data_dir: Path, key: dict, build: Callable[[], None], fresh: bool) -> bool:
    """Build `data_dir` unless it holds a finished build of the same key (inputs and pipeline code).
    Returns whether it was rebuilt."""
    marker = data_dir / CACHE_FILE
    if not fresh and marker.exists() and json.loads(marker.read_text(encoding="utf-8")) == key:
        return False
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(parents=True)
    build()
    marker.write_text(json.dumps(key, indent=2) + "\n", encoding="utf-8")
    return True


def code_key() -> str:
    return _digest((ROOT / "pipeline").glob("*.py"))


def stored_alerts(data_dir: Path) -> list[Alert]:
    frame = store.read(data_dir, contract.ALERTS)
    frame[contract.RUN_DATE] = frame[contract.RUN_DATE].dt.strftime("%Y-%m-%d")
    frame["pipeline"] = frame["pipeline"].fillna(CORPUS_WIDE)
    return [Alert(**row) for row in frame[list(contract.ALERTS_COLUMNS)].to_dict("records")]


def clean_news(news: Path, out: Path, fresh: bool) -> Path:
    """The 60-day clean backfill of the news stream, cached under `out`."""
    data_dir = out / "news-clean"
    config = news_config(news, data_dir)
    key = {"code": code_key(), "gold": _digest([NEWS_GOLD]), "news": _digest((news / "daily").glob("*.xml"))}
    cached_store(data_dir, key, lambda: backfill(config, NEWS_START, NEWS_END), fresh)
    return data_dir


def real_null(clean: Path) -> dict:
    fired = stored_alerts(clean)
    days = (NEWS_END - NEWS_START).days + 1
    split = {"drift": [a for a in fired if is_drift(a)], "retrieval": [a for a in fired if is_retrieval(a)],
             "gold_missing / feeds_failed": [a for a in fired if a.pipeline == CORPUS_WIDE and not is_drift(a)]}
    return {name: _tally_json(Tally.of(alerts, days)) for name, alerts in split.items()}


def _near_copy(text: str, n: int) -> str:
    """A few words changed: every number moved by n + 1, "reportedly" added, a source named at the end."""
    shifted = re.sub(r"\d+", lambda m: str(int(m.group()) + n + 1), text)
    first, _, rest = shifted.partition(" ")
    return f"{first} reportedly {rest} according to local media."


def flood_feed(news: Path, day: date) -> bytes:
    """FLOOD_SIZE near-copies of the gold items (cycling over them), as one RSS file of `day`."""
    articles = {json.loads(line)["guid"]: json.loads(line)
                for line in (news / "articles.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()}
    gold = [guid for line in NEWS_GOLD.read_text(encoding="utf-8").splitlines() if line.strip()
            for guid in json.loads(line)["relevant"]]
    copies = []
    for i in range(FLOOD_SIZE):
        item = articles[gold[i % len(gold)]]
        copies.append(Article(id=f"flood-{i:02d}-{item['guid']}", day=0, time=f"{12 + i // 60:02d}:{i % 60:02d}",
                              title=_near_copy(item["title"], i), text=_near_copy(item["text"], i),
                              category=item["category"], story="", kind="near-duplicate"))
    return render_rss(Outlet("flood-wire", "Flood Wire", ()), copies, day)


def _delete_share(data_dir: Path, day: date) -> None:
    with Corpus.in_dir(data_dir) as corpus:
        ids = sorted(s.document.id for s in corpus.snapshot(day))
        doomed = random.Random(SEED).sample(ids, round(len(ids) * DELETE_SHARE))
        corpus.delete(doomed, day, reason=f"bench: deleted {DELETE_SHARE:.0%} of the corpus")


def _injected_daily(news: Path, work: Path, name: str, body: bytes) -> Path:
    daily = work / "daily"
    shutil.copytree(news / "daily", daily)
    (daily / f"{EVENT_DAY.isoformat()}-{name}.xml").write_bytes(body)
    return daily


def _sports_pack(news: Path, work: Path) -> Config:
    daily = _injected_daily(news, work, "offtopic", (news / "offtopic_sports.xml").read_bytes())
    return news_config(news, work / "store", daily)


def _flood(news: Path, work: Path) -> Config:
    return news_config(news, work / "store", _injected_daily(news, work, "flood", flood_feed(news, EVENT_DAY)))


def _deletion(news: Path, work: Path) -> Config:
    _delete_share(work / "store", EVENT_DAY)
    return news_config(news, work / "store")


def _embedder_swap(news: Path, work: Path) -> Config:
    config = news_config(news, work / "store")
    return config.replace(embedder=dataclasses.replace(config.embedder, truncate_dim=SWAP_DIM))


REAL_EVENTS: dict[str, Callable[[Path, Path], Config]] = {
    "off-topic sports pack": _sports_pack,
    f"near-duplicate flood ({FLOOD_SIZE})": _flood,
    f"deletion of {DELETE_SHARE:.0%}": _deletion,
    f"embedder swap (truncate_dim={SWAP_DIM})": _embedder_swap,
}


def real_events(news: Path, clean: Path, out: Path) -> list[Detection]:
    """Each event applied on EVENT_DAY to a copy of the clean store, the rest of the stream re-run;
    detection by a drift rule, not counting what the clean stream raised on the same day."""
    clean_new = {(a.run_date, a.key) for a in stored_alerts(clean) if a.new}
    found = []
    for event, prepare in REAL_EVENTS.items():
        with tempfile.TemporaryDirectory(prefix="bench-event-", dir=out) as tmp:
            work = Path(tmp)
            shutil.copytree(clean, work / "store", ignore=shutil.ignore_patterns(CACHE_FILE))
            results = backfill(prepare(news, work), EVENT_DAY, NEWS_END)
        fired = [a for r in results for a in r.alerts if (a.run_date, a.key) not in clean_new]
        found.append(detection(event, "news", fired, is_drift, EVENT_DAY, EVENT_DAY,
                               note=_fired_on(fired, EVENT_DAY)))
    return found


def _fired_on(fired: Sequence[Alert], day: date) -> str:
    """Every rule with a new alert/warning on `day`, drift or not (e.g. gold_missing after a deletion)."""
    rules = sorted({f"{a.rule}:{a.severity}" for a in fired if a.new and a.run_date == day.isoformat()})
    return "new on the day: " + (", ".join(rules) or "nothing")


def clean_demo(out: Path, fresh: bool) -> tuple[Path, Config]:
    """The demo history with its scripted packs held back to the last day, cached under `out`."""
    data_dir = out / "demo-clean"
    key = {"code": code_key(), "demo": _digest((ROOT / "data" / "demo").rglob("*.jsonl"))}
    base = Config(data_dir=data_dir, gold=Path("."))
    cached_store(data_dir, key, lambda: build_demo(base, data_dir, drift_day=demo_date(N_DAYS)), fresh)
    return data_dir, source_config(data_dir, None)


def demo_events(out: Path, fresh: bool) -> list[Detection]:
    source, config = clean_demo(out, fresh)
    source_new = {(a.run_date, a.key) for a in stored_alerts(source) if a.new}
    scripted = demo_date(N_DAYS)
    found = [detection("scripted packs (demo's own event)", "demo", stored_alerts(source), is_drift,
                       scripted, scripted)]
    for scenario in DEMO_SCENARIOS:
        with tempfile.TemporaryDirectory(prefix="bench-demo-", dir=out) as tmp:
            results = simulate(config, scenario, source, Path(tmp) / "sandbox").results
        fired = [a for r in results for a in r.alerts
                 if (a.run_date, a.key) not in source_new and date.fromisoformat(a.run_date) < scripted]
        found.append(detection(scenario.describe().removeprefix("simulation: "), "demo", fired, is_drift,
                               scenario.start, scenario.start, note=_fired_on(fired, scenario.start)))
    return found


# --- report ---------------------------------------------------------------------------------------


def _rules(rules: dict) -> str:
    return ", ".join(f"{r} {n}" for r, n in sorted(rules.items())) or "-"


def _delay(delay: int | None) -> str:
    return "missed" if delay is None else str(delay)


def _null_table(rows: list[dict]) -> list[str]:
    lines = [f"A. Null streams, simulated (3 pipelines, k {list(KS)}, default AlertsConfig; days summed over the "
             f"seeds, each seed one data directory); target {TARGETS['null']}",
             f"{'stream':<16}{'days':>6}{'pages/90d':>11}{'worst seed':>12}{'alerts/90d':>12}{'warnings/90d':>14}"
             f"{'days alerting':>15}  new alerts per rule"]
    return lines + [f"{r['stream']:<16}{r['days']:>6}{r.get('pages_per_90', math.nan):>11.2f}"
                    f"{r.get('worst_pages_per_90', math.nan):>12.2f}{r['alerts_per_90']:>12.2f}"
                    f"{r['warnings_per_90']:>14.2f}"
                    f"{r.get('days_alerting', '?'):>15}  {_rules(r['rules'])}" for r in rows] + [""]


def _news_table(rows: dict) -> list[str]:
    lines = [f"B. Null stream, real news ({NEWS_START} .. {NEWS_END}, 60 runs, 50 questions); target {TARGETS['null']}",
             f"{'rules':<30}{'pages/90d':>11}{'alerts/90d':>12}{'warnings/90d':>14}{'days alerting':>15}  "
             "new alerts per rule"]
    return lines + [f"{name:<30}{r.get('pages_per_90', math.nan):>11.2f}{r['alerts_per_90']:>12.2f}{r['warnings_per_90']:>14.2f}"
                    f"{r.get('days_alerting', '?'):>15}  {_rules(r['rules'])}" for name, r in rows.items()] + [""]


def _events_table(rows: list[dict]) -> list[str]:
    lines = [f"C. Injected events: delay in days (0 = flagged on the day; negative = an alert before the "
             f"crossing); target: corpus events {TARGETS['event']}, slow decline {TARGETS['decline']}",
             f"{'event':<44}{'stream':<16}{'delay':>7}  relevant rules (and what else was new that day)"]
    return lines + [f"{d['event']:<44}{d['stream']:<16}{_delay(d['delay']):>7}  {', '.join(d['rules']) or '-'}"
                    f"{'; ' + d['note'] if d['note'] else ''}" for d in rows] + [""]


def _tradeoff_table(rows: list[dict]) -> list[str]:
    lines = [f"D. Trade-off of the retrieval rules at {TRADEOFF_QUESTIONS} questions, p={TRADEOFF_P}",
             f"{'settings':<40}{'pages/90d':>11}{'worst seed':>12}{'alerts/90d':>12}{'decline delay':>15}"
             f"  delay per seed"]
    return lines + [f"{r['settings']:<40}{r.get('pages_per_90', math.nan):>11.2f}"
                    f"{r.get('worst_pages_per_90', math.nan):>12.2f}{r['alerts_per_90']:>12.2f}"
                    f"{_delay(r['decline_delay']):>15}  {r.get('decline_delays', '')}"
                    for r in rows] + [""]


def format_report(result: dict) -> str:
    simulated = result.get("simulated", {})
    lines = [*(_null_table(simulated["null"]) if simulated else []),
             *(_news_table(result["news_null"]) if "news_null" in result else []),
             *_events_table(result.get("events", []) + simulated.get("decline", [])),
             *(_tradeoff_table(simulated["tradeoff"]) if simulated else []),
             f"run time {result['seconds']:.0f} s ({result['timing']}); rules saw history: {result['history']}"]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> dict:
    t0 = time.perf_counter()
    window = HistoryWindow(*args.window) if args.window else None
    settings = (Settings(QUICK_QUESTIONS, QUICK_P, args.days or QUICK_DAYS, QUICK_GRID, window, QUICK_SEEDS)
                if args.quick else
                Settings(NULL_QUESTIONS, NULL_P, args.days or NULL_DAYS, TRADEOFF_GRID, window,
                         tuple(range(args.seeds)) if args.seeds else NULL_SEEDS))
    progress = (lambda message: print(message, file=sys.stderr, flush=True))
    result: dict = {}
    timing = []
    if not args.quick and args.part != SIMULATED:  # the real streams first: the figures that matter most
        news = args.news.resolve()
        if not (news / "daily").is_dir():
            raise BenchError(f"{news}: the real news stream is not there (expected daily/*.xml); pass --news DIR "
                             f"or run with --quick for the simulated streams only")
        out = args.out.parent
        out.mkdir(parents=True, exist_ok=True)
        t1 = time.perf_counter()
        clean = clean_news(news, out, args.fresh)
        result["news_null"] = real_null(clean)
        timing.append(f"news backfill {time.perf_counter() - t1:.0f} s")
        progress(f"B news null: {result['news_null']}")
        t1 = time.perf_counter()
        events = real_events(news, clean, out)
        timing.append(f"news events {time.perf_counter() - t1:.0f} s")
        t1 = time.perf_counter()
        events += demo_events(out, args.fresh)
        timing.append(f"demo {time.perf_counter() - t1:.0f} s")
        result["events"] = [dataclasses.asdict(d) for d in events]
        for d in events:
            progress(f"C {d.event} ({d.stream}): delay {d.shown}, {', '.join(d.rules) or '-'}; {d.note}")
    if args.quick or args.part != REAL:
        t1 = time.perf_counter()
        result["simulated"] = simulated_part(settings, progress, args.workers)
        timing.append(f"simulated {time.perf_counter() - t1:.0f} s")
    result["seconds"] = time.perf_counter() - t0
    result["timing"] = ", ".join(timing)
    result["history"] = dataclasses.asdict(window) if window else "full"
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.alerts", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="simulated streams only, few settings")
    parser.add_argument("--part", choices=PARTS, default=PARTS[0],
                        help="run only the real streams (B, C on news and demo), only the simulated ones (A, C, D), "
                             "or only the corpus-drift null streams from real news (bench.corpus_null)")
    parser.add_argument("--days", type=int, default=None,
                        help=f"days of each simulated null stream (default {NULL_DAYS}, {QUICK_DAYS} with --quick)")
    parser.add_argument("--fresh", action="store_true", help="rebuild the cached clean news and demo stores")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="processes for the simulated streams (default: one per CPU)")
    parser.add_argument("--seeds", type=int, default=None,
                        help=f"simulated data directories per cell (default {len(NULL_SEEDS)})")
    parser.add_argument("--news", type=Path, default=DEFAULT_NEWS, help="the real news stream folder")
    parser.add_argument("--out", type=Path, default=OUT_DIR / "alerts.json", help="the JSON result")
    parser.add_argument("--window", type=int, nargs=2, metavar=("FIRST", "LAST"),
                        help="hand the rules only the first FIRST and last LAST runs each day (faster)")
    parser.add_argument("--streams", type=int, default=10,
                        help="corpus part: null streams of each kind (day-order permutation, block bootstrap)")
    args = parser.parse_args(argv)
    configure_logging(verbose=False)
    logging.getLogger().setLevel(logging.WARNING)
    corpus = ["--streams", str(args.streams), "--workers", str(args.workers), "--news", str(args.news)]
    if args.part == CORPUS:
        from bench import corpus_null

        return corpus_null.main(corpus)
    try:
        result = run(args)
    except DriftwatchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")
    print(format_report(result))
    if args.part == PARTS[0] and not args.quick:
        from bench import corpus_null

        print()
        return corpus_null.main(corpus)
    return 0


if __name__ == "__main__":
    sys.exit(main())
