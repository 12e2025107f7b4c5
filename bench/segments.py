"""False segment alerts on null streams: simulated per-question histories (bench/_streams.py, no change) with a real
gold set's segments (the PEP stream's tags and its gold documents' categories), replayed through the real segment
rules. Run: python -m bench.segments [--quick] [--gold G] [--articles A]."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from bench._streams import HistoryWindow, StreamSpec, run_dates, simulated_history
from pipeline import segments, store
from pipeline.alerts import Alert, alerts_frame, mark_ongoing
from pipeline.config import AlertsConfig, RetrievalConfig
from pipeline.contract import ALERT, RUN_DATE, SEGMENT_QUESTIONS, WARNING
from pipeline.gold import load_gold

ROOT = Path(__file__).resolve().parents[1]
PEPS = ROOT.parent / "shared" / "data" / "peps-stream"  # the project's ../shared
PER_DAYS = 90
KS = RetrievalConfig().k
FULL = {"p": (0.7, 0.9), "seeds": (0, 1, 2), "days": 180}
QUICK = {"p": (0.8,), "seeds": (0,), "days": 60}
WINDOW = HistoryWindow(first_runs=30, last_runs=30)  # the rules read the first and the last runs only


def pep_members(gold: Path, articles: Path | None) -> dict[str, tuple[str, ...]]:
    """The segments of the gold set's questions, numbered q000.. in file order as the simulated streams number
    theirs: tags, and the category (`type` in articles.jsonl) of each relevant document when `articles` is given.
    The single source (every question) is the overall series and is never tested, so it is left out."""
    questions = load_gold(gold)
    types = {}
    if articles is not None and articles.exists():
        for line in articles.read_text(encoding="utf-8").splitlines():
            item = json.loads(line)
            types[item["guid"]] = ("", item["type"])
    found = segments.membership(questions, types)
    numbered = {q.id: f"q{i:03d}" for i, q in enumerate(questions)}
    return {s: tuple(numbered[q] for q in ids) for s, ids in found.items()}


def replay(members: dict[str, tuple[str, ...]], spec: StreamSpec, config: AlertsConfig) -> list[Alert]:
    """Every segment alert of every day of a simulated null stream, marked ongoing as alerts.csv would hold them."""
    history = simulated_history(spec)
    fired: list[Alert] = []
    for day in run_dates(spec.days):
        seen = history.until(day, WINDOW)
        today = pd.Timestamp(day)
        found = segments.segment_alerts(day.isoformat(), today, seen.per_question, members, config, KS)
        previous = alerts_frame(fired).astype({RUN_DATE: "datetime64[ns]"})
        fired += mark_ongoing(found, today, seen.runs, previous)
    return fired


def real_replays(data_dir: Path, n_orders: int, config: AlertsConfig) -> list[dict]:
    """The per-question series of a real data directory as null streams: the runs on which no gold document was
    missing, their dates reordered at random (seeded; the first order is the real one), each replayed through the
    segment rules with the directory's latest segments. Per order: pages and the segments that fired."""
    history = store.read_per_question(data_dir)
    members = segments.members_on(store.read(data_dir, SEGMENT_QUESTIONS), history[RUN_DATE].max())
    missing = history.groupby(RUN_DATE)["gold_missing"].sum()
    days = sorted(d for d, n in missing.items() if n == 0)
    history = history[history[RUN_DATE].isin(days)]
    rng = np.random.default_rng(0)
    rows = []
    for order in range(n_orders):
        shuffled = days if order == 0 else list(rng.permutation(days))
        moved = history.assign(**{RUN_DATE: history[RUN_DATE].map(dict(zip(shuffled, days)))})
        moved = moved.sort_values(RUN_DATE, kind="stable")
        runs = pd.DataFrame({RUN_DATE: days})
        fired: list[Alert] = []
        for day in days:
            found = segments.segment_alerts(f"{day:%Y-%m-%d}", day, moved[moved[RUN_DATE] <= day], members, config,
                                            KS)
            fired += mark_ongoing(found, day, runs[runs[RUN_DATE] <= day],
                                  alerts_frame(fired).astype({RUN_DATE: "datetime64[ns]"}))
        new = [a for a in fired if a.new]
        rows.append({"order": "real" if order == 0 else f"shuffled {order}", "days": len(days),
                     "pages": len({a.run_date for a in new if a.severity == ALERT}),
                     "segments": sorted({a.metric.split(" ", 1)[1] for a in new})})
    return rows


def tested_segments(members: dict[str, tuple[str, ...]], n_questions: int, config: AlertsConfig) -> list[str]:
    return [s for s, ids in members.items() if config.segment_min_n <= len(ids) < n_questions]


def run(members: dict[str, tuple[str, ...]], n_questions: int, grid: dict, config: AlertsConfig) -> list[dict]:
    rows = []
    for p in grid["p"]:
        for seed in grid["seeds"]:
            started = time.perf_counter()
            fired = replay(members, StreamSpec(n_questions, p, days=grid["days"], seed=seed), config)
            new = [a for a in fired if a.new]
            rows.append({"p": p, "seed": seed, "days": grid["days"],
                         "pages": len({a.run_date for a in new if a.severity == ALERT}),
                         "alerts": sum(a.severity == ALERT for a in new),
                         "warnings": sum(a.severity == WARNING for a in new),
                         "segments": sorted({a.metric.split(" ", 1)[1] for a in new}),
                         "seconds": round(time.perf_counter() - started, 1)})
    return rows


def format_report(members: dict[str, tuple[str, ...]], n_questions: int, rows: Sequence[dict],
                  config: AlertsConfig) -> str:
    tested = tested_segments(members, n_questions, config)
    lines = [f"Segment rules on null streams (segment_alpha {config.segment_alpha:g}; {n_questions} questions; "
             f"segments tested, n >= {config.segment_min_n}: "
             + ", ".join(f"{s} ({len(members[s])})" for s in tested) + ")",
             "| hit@5 p | seed | days | pages / 90 days | new alerts | new warnings | segments that fired |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['p']:g} | {r['seed']} | {r['days']} | {r['pages'] * PER_DAYS / r['days']:.2f} | "
                     f"{r['alerts']} | {r['warnings']} | {', '.join(r['segments']) or '-'} |")
    days = sum(r["days"] for r in rows)
    pages = sum(r["pages"] for r in rows)
    worst = max((r["pages"] * PER_DAYS / r["days"] for r in rows), default=0.0)
    lines.append(f"pooled: {pages} pages in {days} days = {pages * PER_DAYS / max(days, 1):.2f} per 90 days; "
                 f"worst stream {worst:.2f}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.segments", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one stream of 60 days")
    parser.add_argument("--gold", type=Path, default=PEPS / "gold.jsonl")
    parser.add_argument("--alpha", type=float, default=None, help="alerts.segment_alpha (default: its default)")
    parser.add_argument("--p", type=float, nargs="+", default=None, help="the streams' mean hit@5 (default: 0.7 0.9)")
    parser.add_argument("--articles", type=Path, default=PEPS / "articles.jsonl",
                        help="the PEP stream's articles.jsonl (the categories of the gold documents)")
    parser.add_argument("--store", type=Path, default=None,
                        help="a real data directory: replay its per-question series, in the real and shuffled orders")
    parser.add_argument("--orders", type=int, default=10, help="with --store: the orders replayed (the first real)")
    args = parser.parse_args(argv)
    if args.store is not None:
        config = AlertsConfig() if args.alpha is None else AlertsConfig(segment_alpha=args.alpha)
        print("| order | days | segment pages | segments that fired |\n| --- | --- | --- | --- |")
        for r in real_replays(args.store, args.orders, config):
            print(f"| {r['order']} | {r['days']} | {r['pages']} | {', '.join(r['segments']) or '-'} |")
        return 0
    if not args.gold.exists():
        print(f"error: {args.gold}: gold set not found (--gold)", file=sys.stderr)
        return 2
    members = pep_members(args.gold, args.articles)
    n_questions = len(load_gold(args.gold))
    config = AlertsConfig() if args.alpha is None else AlertsConfig(segment_alpha=args.alpha)
    grid = QUICK if args.quick else FULL
    rows = run(members, n_questions, grid if args.p is None else {**grid, "p": tuple(args.p)}, config)
    print(format_report(members, n_questions, rows, config))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
