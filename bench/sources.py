"""The source-health benchmark: the real news and PEP streams replayed through the source rules (sources.csv rows
built from each day's dated file, then the real `evaluate_alerts`): pages per 90 days with no injection, and the
day an injected silence alerts. Run: python -m bench.sources [--news DIR] [--peps DIR]."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections import defaultdict
from collections.abc import Callable, Mapping
from datetime import date, timedelta
from pathlib import Path
from unittest import mock

import numpy as np
import pandas as pd

from pipeline import contract, store
from pipeline.alerts import Alert, alerts_frame, evaluate_alerts
from pipeline.config import AlertsConfig
from pipeline.contract import SOURCE_SILENT, SOURCE_SPIKE
from pipeline import source_health
from pipeline.source_health import silence_line, silent_sources, source_rows
from pipeline.sources import dated_files, read_feed

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"  # the project's ../shared
PER_DAYS = 90
SILENCE_DAYS = 4  # an injected silence: the source brings nothing on this many consecutive days
# How the items of one stream are split into sources: the folder as the one configured source (what the job sees),
# one source per topic (as a site's section feeds), and for the news one per cited outlet (the harshest: many
# irregular sources). Each maps a document to its sources.
Counts = dict[str, dict[date, int]]


def read_stream(folder: Path) -> list[tuple[date, str, tuple[str, ...]]]:
    """(day, document id, categories) of every item of a folder of dated files, read by the job's own reader."""
    out = []
    for day, path in dated_files(folder, date.max):
        for doc in read_feed(path.read_bytes(), source=folder.name, location=str(path)).documents:
            out.append((day, doc.id, doc.categories))
    return out


def outlets(articles: Path) -> dict[str, tuple[str, ...]]:
    """Each news item's cited outlets (articles.jsonl `sources`), by guid."""
    cited = {}
    for line in articles.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        cited[record["guid"]] = tuple(dict.fromkeys(name for name, _ in record.get("sources", [])))
    return cited


def split(items, by: Callable[[str, tuple[str, ...]], tuple[str, ...]]) -> Counts:
    counts: Counts = defaultdict(lambda: defaultdict(int))
    for day, doc_id, categories in items:
        for source in by(doc_id, categories):
            counts[source][day] += 1
    return {s: dict(c) for s, c in counts.items()}


def replay(counts: Mapping[str, Mapping[date, int]], days: list[date], config: AlertsConfig) -> list[Alert]:
    """Every source alert of a daily run over `days`, through the real rules: each day's sources.csv rows as the
    job builds them (the corpus's first-seen counts up to that day), and alerts.csv's history for `since`."""
    names = sorted(counts)
    empty = {name: store.read(Path("/nonexistent"), name) for name in contract.SCHEMAS}
    rows, fired = [], []
    for day in days:
        seen = [(s, f"{d:%Y-%m-%d}", n, n) for s in names for d, n in sorted(counts[s].items()) if d <= day]
        rows += source_rows(seen, names, day)
        frame = pd.DataFrame(rows).astype({contract.RUN_DATE: "datetime64[ns]"})
        runs = pd.DataFrame({contract.RUN_DATE: pd.to_datetime([d for d in days if d <= day])}).reindex(
            columns=list(contract.RUNS_COLUMNS))
        fired += evaluate_alerts(day, empty[contract.METRICS], empty[contract.PER_QUESTION], empty[contract.DRIFT],
                                 runs, config, (5,), alerts_frame(fired).astype({contract.RUN_DATE: "datetime64[ns]"}),
                                 sources=frame)
    return fired


def pages(alerts: list[Alert], rule: str) -> list[Alert]:
    """The alerts that start a condition (notified): `since` is their own run date."""
    return [a for a in alerts if a.rule == rule and a.new]


def silenced(counts: Counts, source: str, start: date, n_days: int) -> Counts:
    """`counts` with `source` bringing nothing from `start` for `n_days` days."""
    out = dict(counts)
    out[source] = {d: n for d, n in counts[source].items() if not 0 <= (d - start).days < n_days}
    return out


def null_table(streams: dict[str, Counts], days: dict[str, list[date]], config: AlertsConfig) -> None:
    print("\n## No injection: source alerts per 90 days (pages: conditions that start)")
    print("| stream | sources | days | silence pages | per 90 days | spike pages | per 90 days | silence pages named |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, counts in streams.items():
        fired = replay(counts, days[name.split(":")[0]], config)
        n = len(days[name.split(":")[0]])
        silent, spikes = pages(fired, SOURCE_SILENT), pages(fired, SOURCE_SPIKE)
        named = ", ".join(f"{a.metric} {a.run_date}" for a in silent[:6]) + (" ..." if len(silent) > 6 else "")
        print(f"| {name} | {len(counts)} | {n} | {len(silent)} | {len(silent) * PER_DAYS / n:.2f} | {len(spikes)} "
              f"| {len(spikes) * PER_DAYS / n:.2f} | {named or '-'} |")
        for a in spikes[:3]:
            print(f"  spike: {a.run_date} {a.message}")


def _bursty(rng: np.random.Generator, days: int) -> np.ndarray:
    """A source that alternates lulls (items on 5% of days) and bursts (80%), switching with probability 0.15 a day."""
    state, out = rng.random() < 0.5, np.zeros(days, bool)
    for i in range(days):
        state = state != (rng.random() < 0.15)
        out[i] = rng.random() < (0.8 if state else 0.05)
    return out


SIMULATED = {  # name: a day-by-day "brings new items" draw for `days` days
    "Bernoulli p=0.95 (daily)": lambda rng, days: rng.random(days) < 0.95,
    "Bernoulli p=0.6": lambda rng, days: rng.random(days) < 0.6,
    "Bernoulli p=0.3 (sparse)": lambda rng, days: rng.random(days) < 0.3,
    "bursty (lulls 5%, bursts 80%)": _bursty,
}


def simulated_pages(draw: Callable, config: AlertsConfig, streams: int, sources: int, days: int) -> int:
    """Silence pages (a source silent on a run and not on the run before) over seeded streams of `sources` sources
    drawn alike, each day's sources.csv rows built by `source_rows` and judged by `silent_sources`."""
    pages = 0
    start = date(2026, 1, 1)
    for seed in range(streams):
        rng = np.random.default_rng(seed)
        names = [f"s{i}" for i in range(sources)]
        active = {name: draw(rng, days) for name in names}
        before: set[str] = set()
        for i in range(days):
            day = start + timedelta(days=i)
            seen = [(name, f"{start + timedelta(days=int(j)):%Y-%m-%d}", 1, 1) for name in names
                    for j in np.flatnonzero(active[name][:i + 1])]
            now = {s.source for s in silent_sources(pd.DataFrame(source_rows(seen, names, day)), config)}
            pages += len(now - before)
            before = now
    return pages


def simulated_table(config: AlertsConfig, streams: int = 8, sources: int = 5, days: int = 90) -> None:
    """Silence pages per 90 days per source on seeded null sources, with the rate line and without it (the rule
    before: max(silence_min_days, silence_gap_factor x median gap))."""
    print(f"\n## Seeded null sources ({streams} streams of {sources} sources, {days} days): silence pages per source "
          "per 90 days")
    print("| sources | with the rate line | without it (the rule before) |")
    print("| --- | --- | --- |")
    for name, draw in SIMULATED.items():
        rate = simulated_pages(draw, config, streams, sources, days)
        with mock.patch.object(source_health, "rate_line", lambda rate, alpha: 0.0):
            before = simulated_pages(draw, config, streams, sources, days)
        per = PER_DAYS / days / (streams * sources)
        print(f"| {name} | {rate * per:.3f} | {before * per:.3f} |")


def tradeoff_table(counts: Counts, days: list[date], config: AlertsConfig) -> None:
    """Silence pages per 90 days on one split against the silence settings (the sparse sources' trade-off)."""
    print("\n## news:topic: silence pages per 90 days against the settings")
    print("| silence_gap_factor | silence_min_history | silence pages | per 90 days |")
    print("| --- | --- | --- | --- |")
    for factor, history in ((3.0, 5), (3.0, 15), (5.0, 5), (5.0, 15)):
        changed = dataclasses.replace(config, silence_gap_factor=factor, silence_min_history=history)
        silent = pages(replay(counts, days, changed), SOURCE_SILENT)
        print(f"| {factor:g} | {history} | {len(silent)} | {len(silent) * PER_DAYS / len(days):.2f} |")


def delay_table(stream: str, counts: Counts, days: list[date], config: AlertsConfig, starts: list[int]) -> None:
    """Each source with a learned usual gap, silent for SILENCE_DAYS days from each start: the silent day the
    alert came on (1 = the silence's first day), or '-' when the silence is shorter than the source's line."""
    print(f"\n## {stream}: a {SILENCE_DAYS}-day silence injected at day N of the stream: the silent day it alerts on")
    print("| source | usual gap (days) | daily rate | line (days; before the rate line) | "
          + " | ".join(f"day {s}" for s in starts) + " |")
    print("| --- | --- | --- | --- | " + " --- |" * len(starts))
    for source in sorted(counts, key=lambda s: -sum(counts[s].values())):
        active = sorted(counts[source])
        if len(active) < config.silence_min_history + 1:
            continue
        gaps = pd.Series([(b - a).days for a, b in zip(active, active[1:])])
        cells = []
        for s in starts:
            start = days[s - 1]
            quiet = silenced(counts, source, start, SILENCE_DAYS)
            window = [d for d in days if d <= days[min(len(days) - 1, s - 1 + SILENCE_DAYS + 2)]]
            fired = [a for a in replay({source: quiet[source]}, window, config)
                     if a.rule == SOURCE_SILENT and date.fromisoformat(a.run_date) >= start]
            cells.append(str((date.fromisoformat(fired[0].run_date) - start).days + 1) if fired else "-")
        rate = source_health.daily_rate(len(active), f"{active[0]:%Y-%m-%d}", f"{active[-1]:%Y-%m-%d}")
        line, before = silence_line(float(gaps.median()), config, rate), silence_line(float(gaps.median()), config)
        print(f"| {source} | {gaps.median():g} | {rate:.2f} | {line:.3g}; {before:g} | " + " | ".join(cells) + " |")


def spike_table(injections: dict[str, tuple[Counts, list[date], date, int]], config: AlertsConfig) -> None:
    """A pack of `n` items injected into a stream's folder source on one day: whether its spike fires."""
    print("\n## A pack injected on one day: the folder source's spike")
    print("| stream | day | items injected | spike | message |")
    print("| --- | --- | --- | --- | --- |")
    for name, (counts, days, day, n) in injections.items():
        [source] = counts
        injected = {source: {**counts[source], day: counts[source].get(day, 0) + n}}
        fired = [a for a in replay(injected, [d for d in days if d <= day], config)
                 if a.rule == SOURCE_SPIKE and a.run_date == f"{day:%Y-%m-%d}"]
        print(f"| {name} | {day} | {n} | {'yes' if fired else 'no'} | {fired[0].message if fired else '-'} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sources", description=__doc__.splitlines()[0])
    parser.add_argument("--news", type=Path, default=SHARED / "news-2025-autumn")
    parser.add_argument("--peps", type=Path, default=SHARED / "peps-stream")
    args = parser.parse_args(argv)
    config = AlertsConfig()
    news, peps = read_stream(args.news / "daily"), read_stream(args.peps / "daily")
    cited = outlets(args.news / "articles.jsonl")
    days = {"news": sorted({d for d, _, _ in news}), "peps": sorted({d for d, _, _ in peps})}
    streams = {
        "news:folder": split(news, lambda _, c: ("news",)),
        "news:topic": split(news, lambda _, c: c[:1]),
        "news:outlet": split(news, lambda doc_id, _: cited.get(doc_id, ())),
        "peps:folder": split(peps, lambda _, c: ("peps",)),
        "peps:type": split(peps, lambda _, c: c[:1]),
    }
    print(f"settings: {config.silence_min_days=}, {config.silence_gap_factor=}, {config.silence_min_history=}, "
          f"{config.silence_alpha=}, "
          f"{config.spike_window=}, {config.spike_min_history=}, {config.spike_factor=}, {config.spike_alpha=}")
    null_table(streams, days, config)
    simulated_table(config)
    sports = len(read_feed((args.news / "offtopic_sports.xml").read_bytes(), source="news", location="").documents)
    cooking = sum(len(read_feed(p.read_bytes(), source="peps", location="").documents)
                  for p in sorted((args.peps / "offtopic").glob("*.xml")))
    spike_table({"news:folder": (streams["news:folder"], days["news"], date(2025, 10, 1), sports),
                 "peps:folder": (streams["peps:folder"], days["peps"], date(2025, 7, 15), cooking),
                 "peps:folder, twice the pack": (streams["peps:folder"], days["peps"], date(2025, 7, 15),
                                                 2 * cooking)}, config)
    tradeoff_table(streams["news:topic"], days["news"], config)
    delay_table("news:folder and news:topic", {**streams["news:folder"], **streams["news:topic"]}, days["news"],
                config, [10, 20, 30, 40, 50])
    delay_table("peps:folder and peps:type", {**streams["peps:folder"], **streams["peps:type"]}, days["peps"],
                config, [10, 20, 30, 40, 50])
    return 0


if __name__ == "__main__":
    sys.exit(main())
