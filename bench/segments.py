"""False segment alerts on null streams: simulated per-question histories (bench/_streams.py, no change) with a real
gold set's segments (the PEP stream's tags and its gold documents' categories), replayed through the real segment
rules; and the stored per-question series of backfilled real streams in their real order, with the delay to a decline
injected in one segment. Run: python -m bench.segments [--quick] [--gold G] [--articles A] | --store DIR [DIR ...]."""

from __future__ import annotations

import argparse
import dataclasses
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
from pipeline.contract import ALERT, QUESTION_ID, RUN_DATE, SEGMENT_QUESTIONS, WARNING
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


def scored_history(data_dir: Path) -> tuple[pd.DataFrame, dict[str, tuple[str, ...]], list[pd.Timestamp]]:
    """A real data directory's per-question series on the runs where no gold document was missing (before a gold
    document arrives its question scores 0: a change of the gold set's coverage, not of retrieval), its latest
    segments, and those run dates."""
    history = store.read_per_question(data_dir)
    members = segments.members_on(store.read(data_dir, SEGMENT_QUESTIONS), history[RUN_DATE].max())
    missing = history.groupby(RUN_DATE)["gold_missing"].sum()
    days = sorted(d for d, n in missing.items() if n == 0)
    return history[history[RUN_DATE].isin(days)], members, days


def ordered_replay(history: pd.DataFrame, members: dict[str, tuple[str, ...]], days: Sequence[pd.Timestamp],
                   config: AlertsConfig) -> dict:
    """Every run of a stored stream in its real order through the segment rules, as the daily job would: the new
    segment alert conditions (marked ongoing as alerts.csv holds them), the runs on which any segment was tested,
    the largest family (segment x pipeline x series per rule) and the first run of each new condition."""
    runs = pd.DataFrame({RUN_DATE: list(days)})
    fired: list[Alert] = []
    armed, family = 0, 0
    for day in days:
        seen = history[history[RUN_DATE] <= day]
        tested = segments.segment_tests(seen, members, config, KS, day)
        armed += bool(tested)
        family = max([family] + [sum(t.rule == r for t in tested) for r in segments.RULE_OF])
        found = segments.alerts_of(f"{day:%Y-%m-%d}", tested, config)
        fired += mark_ongoing(found, day, runs[runs[RUN_DATE] <= day],
                              alerts_frame(fired).astype({RUN_DATE: "datetime64[ns]"}))
    new = [a for a in fired if a.new]
    return {"days": len(days), "armed": armed, "family": family, "alerts": len(new),
            "first": [(pd.Timestamp(a.run_date), a.metric.split(" ", 1)[1]) for a in new], "segments": sorted({a.metric.split(" ", 1)[1] for a in new})}


METRIC_COLUMNS = ("hit", "recall", "precision", "rr", "ndcg")


def injected(history: pd.DataFrame, ids: Sequence[str], start: pd.Timestamp, share: float, seed: int) -> pd.DataFrame:
    """The stream with a decline confined to one segment: from `start` on, a seeded `share` of its questions lose
    their relevant documents on every pipeline (every metric 0), the rest of the questions untouched."""
    rng = np.random.default_rng(seed)
    ids = sorted(ids)
    lost = set(rng.choice(ids, max(1, round(share * len(ids))), replace=False))
    rows = (history[RUN_DATE] >= start) & history[QUESTION_ID].astype(str).isin(lost)
    out = history.copy()
    out.loc[rows, list(METRIC_COLUMNS)] = 0.0
    return out


def stream_table(stores: Sequence[Path], config: AlertsConfig, segment: str | None, share: float,
                 until: str | None = None) -> str:
    """The ordered null of each stored stream, and the delay to a decline injected in one segment (the given one, else
    the smallest tested tag) half way through its armed runs."""
    lines = [f"Segment rules on ordered real streams (segment_alpha {config.segment_alpha:g}, reference_runs "
             f"{config.reference_runs}, segment_min_n {config.segment_min_n}; runs with every gold document present)",
             "| stream | runs | armed runs | largest family | false alerts | per 90 armed runs | segments that fired "
             "| injected decline | delay (runs) |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for data_dir in stores:
        history, members, days = scored_history(data_dir)
        if until is not None:  # a stream's null part only (the demo's stable period, before its drift event)
            days = [d for d in days if d <= pd.Timestamp(until)]
            history = history[history[RUN_DATE].isin(days)]
        null = ordered_replay(history, members, days, config)
        n_questions = history[QUESTION_ID].nunique()
        tags = [s for s, ids in members.items() if config.segment_min_n <= len(ids) < n_questions]
        chosen = segment or min(tags, key=lambda s: (not s.startswith("tag:"), len(members[s])), default=None)
        delay = "-"
        if chosen in members:
            start = days[len(days) - max(1, null["armed"] // 2)]
            hit = ordered_replay(injected(history, members[chosen], start, share, 0), members,
                                 days, config)
            after = sorted(d for d, s in hit["first"] if d >= start and s == chosen)
            runs_after = [d for d in days if d >= start]
            delay = str(runs_after.index(after[0])) if after else f"none in {len(runs_after)}"
            chosen = f"{chosen} ({len(members[chosen])}), {share:.0%} of it from {start:%Y-%m-%d}"
        per90 = null["alerts"] * PER_DAYS / max(null["armed"], 1)
        lines.append(f"| {data_dir.name} | {null['days']} | {null['armed']} | {null['family']} | {null['alerts']} | "
                     f"{per90:.2f} | {', '.join(null['segments']) or '-'} | {chosen or '-'} | {delay} |")
    return "\n".join(lines)


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
    parser.add_argument("--store", type=Path, nargs="+", default=None,
                        help="real data directories (backfilled streams): replay their stored per-question series in "
                             "their real order, and with a decline injected in one segment")
    parser.add_argument("--segment", default=None, help="with --store: the segment to decline (default: the smallest tested tag)")
    parser.add_argument("--share", type=float, default=0.5, help="with --store: the share of its questions that fail")
    parser.add_argument("--until", default=None, help="with --store: replay the runs up to this date only")
    parser.add_argument("--reference-runs", type=int, default=None, help="alerts.reference_runs (default: its default)")
    args = parser.parse_args(argv)
    config = AlertsConfig() if args.alpha is None else AlertsConfig(segment_alpha=args.alpha)
    if args.reference_runs is not None:
        config = dataclasses.replace(config, reference_runs=args.reference_runs)
    if args.store is not None:
        print(stream_table(args.store, config, args.segment, args.share, args.until))
        return 0
    if not args.gold.exists():
        print(f"error: {args.gold}: gold set not found (--gold)", file=sys.stderr)
        return 2
    members = pep_members(args.gold, args.articles)
    n_questions = len(load_gold(args.gold))
    grid = QUICK if args.quick else FULL
    rows = run(members, n_questions, grid if args.p is None else {**grid, "p": tuple(args.p)}, config)
    print(format_report(members, n_questions, rows, config))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
