"""The pool and the shadow warning (pipeline/judging/pool.py) on the real streams, with the real daily job (BM25 only,
to be fast): pool rows per day and shadows and warnings on the clean streams (every warning there is false), then the
poisoning scenario on one day: 20 near copies of 20 gold documents with one fact changed (a number, else a name), each
opened by its gold question's words so that it outranks the gold document; and 20 plain near copies (the same change,
no question words). Counts what was pooled, found a shadow and warned of, and the seconds per run spent in the pool.

    python bench/judging_pool.py [--news-days 60] [--peps-days 10]
"""

from __future__ import annotations

import argparse
import html
import re
import shutil
import statistics
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline import contract, job, store  # noqa: E402
from pipeline.config import Config, RetrievalConfig, SourceConfig  # noqa: E402
from pipeline.corpus import Corpus  # noqa: E402
from pipeline.embeddings import Embedder  # noqa: E402
from pipeline.gold import load_gold  # noqa: E402
from pipeline.judging import pool  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"  # the project's ../shared
STREAMS = {  # name -> (daily feeds, gold set, first day)
    "news": (SHARED / "news-2025-autumn" / "daily", ROOT / "data" / "news-2025-autumn" / "gold.jsonl",
             date(2025, 9, 1)),
    "peps": (SHARED / "peps-stream" / "daily", SHARED / "peps-stream" / "gold.jsonl", date(2025, 6, 1)),
}
N_POISONED = 20
_NUMBER = re.compile(r"\b\d+\b")
_NAME = re.compile(r"(?<=[a-z,] )[A-Z][a-z]{3,}")


class Timed:
    """pool.build_pool timed: the seconds of each call."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self.build = pool.build_pool

    def __call__(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return self.build(*args, **kwargs)
        finally:
            self.seconds.append(time.perf_counter() - t0)


def config_of(root: Path, daily: Path, gold: Path) -> Config:
    return Config(data_dir=root / "store", gold=gold, sources=(SourceConfig("stream", path=daily),),
                  retrieval=RetrievalConfig(pipelines=("bm25",)))


def changed_fact(text: str) -> str | None:
    """`text` with one fact changed: its first number plus 7, else its first capitalised word inside a sentence
    replaced by another name; None when it has neither."""
    number = _NUMBER.search(text)
    if number:
        return f"{text[:number.start()]}{int(number.group()) + 7}{text[number.end():]}"
    name = _NAME.search(text)
    if name:
        return f"{text[:name.start()]}Hallgrimsson{text[name.end():]}"
    return None


def item(doc_id: str, title: str, text: str, day: date) -> str:
    paragraphs = "".join(f"<p>{html.escape(line)}</p>" for line in text.split("\n") if line.strip())
    return (f"<item><title>{html.escape(title)}</title><link>https://poison.example/{doc_id}</link>"
            f'<guid isPermaLink="false">{doc_id}</guid><pubDate>{day:%a, %d %b %Y} 12:00:00 +0000</pubDate>'
            f"<description>{html.escape(paragraphs)}</description></item>")


def poison_feed(config: Config, day: date, with_question: bool) -> tuple[Path, dict[str, tuple[str, str]]]:
    """A feed file of `day` with N_POISONED near copies of gold documents in the corpus (one fact changed); returns
    it and each copy's (question, gold document)."""
    questions = load_gold(config.gold)
    items, made = [], {}
    with Corpus.in_dir(config.data_dir, readonly=True) as corpus:
        docs = {s.document.id: s.document for s in corpus.snapshot(day - timedelta(days=1))}
        for q in questions:
            gold = next((d for d in q.relevant_ids if d in docs and f"poison-{d}" not in made), None)
            if gold is None or len(made) == N_POISONED:
                continue
            doc = docs[gold]
            altered = changed_fact(doc.text)
            if altered is None:
                continue
            copy = f"poison-{gold}"
            body = f"{q.question}\n{altered}" if with_question else altered
            items.append(item(copy, doc.title, body, day))
            made[copy] = (q.id, gold)
    path = config.sources[0].path / f"{day}-poison.xml"
    path.write_text('<?xml version="1.0" encoding="UTF-8"?>\n<rss version="2.0"><channel><title>poison</title>'
                    f'<link>https://poison.example/</link><description>bench</description>{"".join(items)}'
                    "</channel></rss>\n", encoding="utf-8")
    return path, made


def day_frame(data_dir: Path, name: str, day: date) -> pd.DataFrame:
    found = store.read(data_dir, name)
    return found[store.as_days(found[contract.RUN_DATE]) == pd.Timestamp(day)]


def clean_similarity(config: Config, dates: list[date], depth: int) -> float:
    """The highest word 3-shingle Jaccard, over every clean day, between a question's gold document and another
    document of a top `depth` whose text differs from it: how far below shadow_similarity the clean streams stay."""
    gold = {q.id: q.relevant_ids for q in load_gold(config.gold)}
    pq = store.read_per_question(config.data_dir)
    k = min(k for k in pq["k"].unique() if k >= depth)
    best = 0.0
    with Corpus.in_dir(config.data_dir, readonly=True) as corpus:
        for d in dates:
            rows = pq[(store.as_days(pq[contract.RUN_DATE]) == pd.Timestamp(d)) & (pq["k"] == k)]
            texts: dict[str, str] = {}

            def text(doc_id: str) -> str:
                if doc_id not in texts:
                    texts[doc_id] = corpus.document_text(doc_id, d) or ""
                return texts[doc_id]

            for question, retrieved in zip(rows[contract.QUESTION_ID], rows["retrieved"]):
                for doc in store.split_ids(retrieved)[:depth]:
                    for g in gold.get(question, ()):
                        if doc != g and text(g) and text(doc) != text(g):
                            best = max(best, pool.jaccard(pool.shingles(text(doc)), pool.shingles(text(g))))
    return best


def stream(name: str, days: int, embedder: Embedder, timed: Timed) -> dict:
    daily, gold, first = STREAMS[name]
    work = Path(tempfile.mkdtemp(prefix=f"pool-{name}-"))
    try:
        feeds = work / "daily"
        feeds.mkdir()
        dates = [first + timedelta(days=i) for i in range(days)]
        for d in dates:
            if (daily / f"{d}.xml").exists():
                shutil.copy(daily / f"{d}.xml", feeds / f"{d}.xml")
        config = config_of(work / "clean", feeds, gold)
        timed.seconds.clear()
        t0 = time.perf_counter()
        for d in dates[:-1]:
            job.run_day(config, d, embedder=embedder, notify=False)
        before = shutil.copytree(work / "clean", work / "before")  # the history before the last day
        job.run_day(config, dates[-1], embedder=embedder, notify=False)
        run_seconds = (time.perf_counter() - t0) / len(dates)
        pool_seconds = list(timed.seconds)
        found = store.read(config.data_dir, contract.POOL)
        alerts = store.read(config.data_dir, contract.ALERTS)
        per_day = found.groupby(contract.RUN_DATE).size().reindex(
            pd.to_datetime([d.isoformat() for d in dates]), fill_value=0)
        by_reason = {r: int((found[contract.REASON] == r).sum()) for r in contract.POOL_REASONS}
        result = {
            "stream": name, "days": len(dates), "questions": len(load_gold(gold)),
            "rows_median": statistics.median(per_day), "rows_day1": int(per_day.iloc[0]),
            "rows_median_after_day1": statistics.median(per_day.iloc[1:]), "by_reason": by_reason,
            "clean_shadows": by_reason[contract.SHADOW],
            "clean_warnings": int((alerts["rule"] == contract.GOLD_SHADOWED).sum()),
            "pool_seconds_median": statistics.median(pool_seconds), "pool_seconds_max": max(pool_seconds),
            "run_seconds_mean": run_seconds,
            "clean_max_jaccard": clean_similarity(config, dates, pool.pool_depth(config)),
        }
        last = dates[-1]
        clean_last = day_frame(config.data_dir, contract.POOL, last)
        for label, with_question in (("poisoned", True), ("plain", False)):
            root = work / label
            shutil.copytree(before, root)
            scenario_feeds = work / f"daily-{label}"
            shutil.copytree(feeds, scenario_feeds)
            scenario = config_of(root, scenario_feeds, gold)
            _, made = poison_feed(scenario, last, with_question)
            job.run_day(scenario, last, embedder=embedder, notify=False)
            rows = day_frame(scenario.data_dir, contract.POOL, last)
            warned = day_frame(scenario.data_dir, contract.ALERTS, last)
            warned = warned[warned["rule"] == contract.GOLD_SHADOWED]
            ours = rows[[(q, d) in {(q2, d2) for d2, (q2, _) in made.items()}
                         for q, d in zip(rows[contract.QUESTION_ID], rows[contract.DOC_ID])]]
            shadows = ours[(ours[contract.REASON] == contract.SHADOW)
                           & (ours[contract.GOLD_DOC_ID] == [made[d][1] for d in ours[contract.DOC_ID]])]
            warned_docs = {m.split("/", 1)[1] for m in warned["metric"] if m.split("/", 1)[1] in made}
            similar = [v for v, m in zip(warned["value"], warned["metric"]) if m.split("/", 1)[1] in made]
            result[label] = {"injected": len(made), "min_jaccard": min(similar, default=float("nan")),
                             "pooled": ours[contract.DOC_ID].nunique(),
                             "shadows": shadows[contract.DOC_ID].nunique(), "warned": len(warned_docs),
                             "other_warnings": int(len(warned) - warned["metric"].map(
                                 lambda m: m.split("/", 1)[1] in made).sum()),
                             "extra_rows": len(rows) - len(clean_last)}
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def report(results: list[dict]) -> str:
    lines = ["| stream | days | questions | pool rows/day (median; day 1; later days) | rows by reason | shadows, "
             "warnings (clean) | max Jaccard (clean) | pool s/run (median, max) | run s (mean) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        reasons = ", ".join(f"{k} {v}" for k, v in r["by_reason"].items())
        lines.append(f"| {r['stream']} | {r['days']} | {r['questions']} | {r['rows_median']:g}; {r['rows_day1']}; "
                     f"{r['rows_median_after_day1']:g} | {reasons} | {r['clean_shadows']}, {r['clean_warnings']} | "
                     f"{r['clean_max_jaccard']:.2f} | "
                     f"{r['pool_seconds_median']:.3f}, {r['pool_seconds_max']:.3f} | {r['run_seconds_mean']:.2f} |")
    lines += ["", "| stream | scenario | injected | pooled | shadows | warned | min Jaccard warned | other warnings | "
              "extra pool rows |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        for label in ("poisoned", "plain"):
            s = r[label]
            lines.append(f"| {r['stream']} | {label} | {s['injected']} | {s['pooled']} | {s['shadows']} | "
                         f"{s['warned']} | {s['min_jaccard']:.2f} | {s['other_warnings']} | {s['extra_rows']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--news-days", type=int, default=60)
    parser.add_argument("--peps-days", type=int, default=10)  # long PEPs: about 35 s a run
    args = parser.parse_args(argv)
    embedder = Embedder(Config(data_dir=Path("."), gold=Path(".")).embedder)
    timed = Timed()
    pool.build_pool = timed  # job.run_pool calls pool.build_pool: each call timed
    results = [stream("news", args.news_days, embedder, timed), stream("peps", args.peps_days, embedder, timed)]
    print(report(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
