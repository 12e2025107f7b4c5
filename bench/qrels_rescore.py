"""Seconds to re-score a history with the maintained qrels (pipeline/judging/qrels.py): the 60 real days of
../shared/data/news-2025-autumn run through the daily job (every builtin pipeline, the default cutoffs) with the
project's news gold set, then a scripted judge grades every unjudged document of each question's top 5 on every day
(judgments.jsonl), and the history is re-scored: whole (a new qrels version), and for one date (the daily run's
incremental step). No retrieval runs again.

Run: python -m bench.qrels_rescore [--store DIR] [--days N] [--repeat R]
  --store DIR: build the history there, or reuse it when DIR already holds one (the build takes minutes)."""

from __future__ import annotations

import argparse
import hashlib
import shutil
import statistics
import tempfile
import time
from datetime import date
from pathlib import Path

from pipeline import contract, store
from pipeline.config import Config, SourceConfig
from pipeline.embeddings import Embedder
from pipeline.gold import load_gold
from pipeline.job import run_day
from pipeline.judging import ledger, qrels
from pipeline.metrics import default_k

ROOT = Path(__file__).resolve().parents[1]
NEWS = ROOT.parent / "shared" / "data" / "news-2025-autumn"  # the project's ../shared
GOLD = ROOT / "data" / "news-2025-autumn" / "gold.jsonl"
TOP = 5


def config_of(root: Path) -> Config:
    return Config(data_dir=root / "store", gold=GOLD, sources=(SourceConfig("news", path=root / "daily"),))


def build(root: Path, days: int) -> Config:
    """The history: one daily run per day of the stream (skipped when `root` already holds it)."""
    config = config_of(root)
    files = sorted((NEWS / "daily").glob("*.xml"))[:days]
    if (root / "daily").exists() and len(store.read_runs(config.data_dir)) == len(files):
        return config
    (root / "daily").mkdir(parents=True, exist_ok=True)
    for path in files:
        shutil.copy(path, root / "daily" / path.name)
    t0 = time.perf_counter()
    done = {store.iso_day(d) for d in store.read_runs(config.data_dir)[contract.RUN_DATE]}
    embedder = Embedder(config.embedder)  # loaded once for every run
    for path in files:
        if path.stem not in done:  # a build cut short goes on where it stopped
            run_day(config, date.fromisoformat(path.stem), embedder=embedder, notify=False)
    print(f"built {len(files)} daily runs in {time.perf_counter() - t0:.0f} s ({config.data_dir})")
    return config


def _grade(question_id: str, doc_id: str) -> int:
    draw = int(hashlib.sha256(f"{question_id} {doc_id}".encode()).hexdigest(), 16) % 8
    return 2 if draw == 0 else 1 if draw == 1 else 0


def judge_everything(config: Config) -> int:
    """A scripted judge: every unjudged document of each question's top 5, on every day and pipeline, graded by a
    hash of the pair (one in four relevant). Returns the judgments appended."""
    gold = {q.id: q.relevant for q in load_gold(config.gold)}
    frame = store.read_per_question(config.data_dir)
    frame = frame[frame[contract.K] == default_k(frame[contract.K].unique())]
    pairs = dict.fromkeys((q, d) for q, r in zip(frame[contract.QUESTION_ID], frame[contract.RETRIEVED])
                          for d in store.split_ids(r)[:TOP] if d not in gold.get(q, {}))
    done = set(ledger.latest(ledger.read_judgments(config.data_dir)))
    made = [ledger.Judgment(q, d, _grade(q, d), "bench", ledger.now(), "") for q, d in pairs if (q, d) not in done]
    ledger.append_judgments(config.data_dir, made)
    return len(made)


def timed(action, repeat: int) -> tuple[float, object]:
    seconds, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = action()
        seconds.append(time.perf_counter() - t0)
    return statistics.median(seconds), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, default=None, help="build (or reuse) the history in this directory")
    parser.add_argument("--days", type=int, default=60)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    root = args.store or Path(tempfile.mkdtemp(prefix="qrels-bench-"))
    config = build(root, args.days)
    added = judge_everything(config)
    per_question = store.read_per_question(config.data_dir)
    dates = sorted({store.iso_day(d) for d in per_question[contract.RUN_DATE]})
    pipelines = sorted(per_question[contract.PIPELINE].unique())
    print(f"history: {len(dates)} run dates ({dates[0]}..{dates[-1]}), pipelines {', '.join(pipelines)}, "
          f"k {', '.join(map(str, sorted(per_question[contract.K].unique())))}, {len(per_question):,} per_question "
          f"rows; {added:,} scripted judgments added ({len(ledger.read_judgments(config.data_dir)):,} in the ledger)")

    first = next(iter(ledger.latest(ledger.read_judgments(config.data_dir))))
    grades = iter(range(1, args.repeat + 1))

    def new_version():  # a judgment changed since the last version: a new version, the whole history re-scored
        ledger.append_judgments(config.data_dir, [ledger.Judgment(*first, next(grades) % 3, "bench", ledger.now(),
                                                                  "")])
        return qrels.rescore(config)

    full, done = timed(new_version, args.repeat)
    assert done.new_version and len(done.dates) == len(dates)
    print(f"whole history, every pipeline, a new version (driftwatch rescore: lock, journal, read, score, write, "
          f"seal): {full:.2f} s median of {args.repeat} ({done.describe()})")
    now = qrels.maintained(config)
    scored, _ = timed(lambda: qrels.score(per_question, now.qrels, 1), args.repeat)
    print(f"  of which scoring alone (per_question.csv already read): {scored:.2f} s")
    last = dates[-1]

    def one_date():
        kept = qrels.read_maintained(config.data_dir)
        store.write_table(config.data_dir, contract.MAINTAINED_METRICS,
                          kept[kept[contract.RUN_DATE] != last].assign(
                              run_date=lambda f: f[contract.RUN_DATE].map(store.iso_day)))
        t0 = time.perf_counter()
        found = qrels.update(config, last, per_question=per_question)  # as run_day calls it
        return time.perf_counter() - t0, found

    runs = [one_date() for _ in range(args.repeat)]
    incremental, found = statistics.median(r[0] for r in runs), runs[-1][1]
    assert found.dates == (last,) and not found.new_version
    print(f"one date, every pipeline (the daily run's step, per_question.csv in memory as the run has it: qrels unchanged, {last} scored): "
          f"{incremental:.2f} s median of {args.repeat}")
    one = per_question[per_question[contract.RUN_DATE] == per_question[contract.RUN_DATE].max()]
    scored_one, _ = timed(lambda: qrels.score(one, now.qrels, 1), args.repeat)
    print(f"  of which scoring alone: {scored_one * 1000:.1f} ms")
    store.seal(config.data_dir)  # the bench's own writes, outside a run


if __name__ == "__main__":
    main()
