"""The named shift's cost and where it shows, on the real days of ../shared/data/news-2025-autumn: a backfill by the
real job and embedder, with an optional pack injected; per run, whether its corpus window drifted, the seconds
`windows.shift_verdicts` took (it runs on drifted windows only) and the named_shift row written; then the naming
forced on every run's windows, to time it on a null day's window too and show what it would have said there (it is
not written: a window that did not drift names nothing).

Run: python -m bench.shifts [--days 60] [--inject 2025-10-15] [--pack offtopic_sports.xml]; the PEP stream:
python -m bench.shifts --data ../shared/data/peps-stream --gold ../shared/data/peps-stream/gold.jsonl
--first 2025-06-01 --days 25."""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path

import numpy as np

from pipeline import contract, store, windows
from pipeline.config import Config, SourceConfig
from pipeline.corpus import CORPUS_FILE, Corpus
from pipeline.job import backfill

ROOT = Path(__file__).resolve().parents[1]
NEWS = ROOT / ".." / "shared" / "data" / "news-2025-autumn"
GOLD = ROOT / "data" / "news-2025-autumn" / "gold.jsonl"
FIRST = date(2025, 9, 1)  # the news stream's first day


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=NEWS)
    parser.add_argument("--gold", type=Path, default=GOLD)
    parser.add_argument("--first", type=date.fromisoformat, default=FIRST, help="first run day")
    parser.add_argument("--days", type=int, default=60)
    parser.add_argument("--inject", type=date.fromisoformat, default=None, help="day the pack is injected on")
    parser.add_argument("--pack", default="offtopic_sports.xml")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-shifts-"))
    daily = work / "daily"
    shutil.copytree(args.data / "daily", daily)
    if args.inject:
        shutil.copy(args.data / args.pack, daily / f"{args.inject.isoformat()}-offtopic.xml")
    config = Config(data_dir=work / "store", gold=args.gold,
                    sources=(SourceConfig(name="news", path=daily),))
    timed: list[float] = []
    named = windows.shift_verdicts

    def timing(config, corpus, reference, current):  # the job's own call, timed
        t0 = time.perf_counter()
        found = named(config, corpus, reference, current)
        timed.append(time.perf_counter() - t0)
        return found

    windows.shift_verdicts = timing
    last = args.first + timedelta(days=args.days - 1)
    t0 = time.perf_counter()
    backfill(config, args.first, last)
    total = time.perf_counter() - t0
    windows.shift_verdicts = named
    drift = store.read(config.data_dir, contract.DRIFT)
    family = drift[drift[contract.STATISTIC].isin(list(contract.DRIFT_FAMILY))]
    drifted = sorted({d.date() for d in family[family[contract.VERDICT] == contract.DRIFTED][contract.RUN_DATE]})
    rows = drift[drift[contract.STATISTIC] == contract.NAMED_SHIFT]
    print(f"backfill {args.first}..{last}: {total:.1f} s for {args.days} runs; drifted windows on {len(drifted)} runs")
    print(f"named_shift rows: {len(rows)}, all on drifted runs: "
          f"{set(d.date() for d in rows[contract.RUN_DATE]) <= set(drifted)}")
    if timed:
        seconds = np.array(timed)
        print(f"naming inside the job: {len(seconds)} calls, median {np.median(seconds):.3f} s, "
              f"max {seconds.max():.3f} s")
    for day, detail in zip(rows[contract.RUN_DATE], rows["detail"]):
        print(f"  {day:%Y-%m-%d} (drifted): {detail}")
    # Forced on every run's windows: the cost on a null day's window and what it would say (not written anywhere).
    print("forced on every run (not written):")
    forced = []
    with Corpus(config.data_dir / CORPUS_FILE, readonly=True) as corpus:
        for i in range(args.days):
            run_date = args.first + timedelta(days=i)
            found = windows._window_versions(config, corpus, run_date,
                                             lambda v: sum(windows._chunk_counts(config, corpus, v, {})))
            reference = windows.without(corpus.entered_versions(found.reference.start, found.reference.end),
                                        found.left_out)
            if not reference or not found.versions:
                continue
            t0 = time.perf_counter()
            (row,) = windows.shift_verdicts(config, corpus, reference, found.versions)
            forced.append(time.perf_counter() - t0)
            state = "drifted" if run_date in drifted else "null"
            print(f"  {run_date} ({state}, {len(found.versions)} new, {len(reference)} reference documents, "
                  f"{forced[-1]:.3f} s): {row.detail or '(nothing named)'}")
    if forced:
        print(f"forced naming: median {np.median(forced):.3f} s, max {max(forced):.3f} s over {len(forced)} runs")


if __name__ == "__main__":
    main()
