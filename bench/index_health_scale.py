"""What index health costs on a large store: a PostgreSQL table with pgvector (from the pgserver wheel) of N records
(default 100,000: the news stream's 1,040 texts and their vectors, each held by about N/1,040 records of their own
ids, four records to a document), read by `index_health.check` twice, as two daily runs would
(the first snapshot, then the diff against it after 1% of the records were rewritten with another article, text
and vector, and 0.1% deleted).
Prints per run: seconds (the scan, the re-embedded sample and the neighbourhood signatures included), the peak
resident memory of this process, the snapshot file's size and the findings; then the neighbourhood signatures'
records falsely named over --days daily reads of the same clean store, with every text neighbour counted and with
copies of one text counted once (min_neighbours). Every run reads every record: none of
the three stores offers a change feed that a read-only client could follow, so the snapshot is taken whole.
Run: python -m bench.index_health_scale [--n N] (needs the pgvector extra and the pgserver wheel)."""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.contract import MIXED_GENERATIONS, STALE  # noqa: E402
from pipeline.config import EmbedderConfig, IndexHealthConfig, TargetConfig  # noqa: E402
from pipeline.embeddings import Embedder  # noqa: E402
from pipeline.index_health import SNAPSHOT_FILE, check, other_spaces, read_records  # noqa: E402
from pipeline.vectorstores import StoredVector, open_store  # noqa: E402
from tests.vectorstore_support import PgWriter, Records, postgres  # noqa: E402

NEWS = ROOT.parent / "shared" / "data" / "news-2025-autumn" / "articles.jsonl"
DSN_ENV = "DRIFTWATCH_BENCH_PG_DSN"


def base_texts(path: Path) -> list[str]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return [f"{r['title']}\n{r['text']}" for r in rows if r.get("pack", "base") == "base"]


def records(ids: list[str], rows: np.ndarray, articles: np.ndarray, texts: list[str], vectors: np.ndarray,
            model: str) -> Records:
    """Records `rows` holding the news articles `articles` (their texts and vectors as the model embeds them), four
    records to a document."""
    return Records([ids[i] for i in rows], [f"d{i // 4:07d}" for i in rows], [texts[j] for j in articles],
                   vectors[articles], model)


def false_named(texts: list[str], vectors: np.ndarray, source: np.ndarray, days: int) -> None:
    """The neighbourhood signatures on this clean store (one generation) over `days` daily reads of
    `neighbourhood_sample` records by the seeded order: records falsely named, at min_neighbours 1 (every text
    neighbour counted, copies too) and at the default."""
    recs = [StoredVector(f"r{i:07d}", f"d{i // 4:07d}", texts[j], vectors[j], "m") for i, j in enumerate(source)]
    for m in sorted({1, IndexHealthConfig().min_neighbours}):
        settings = IndexHealthConfig(min_neighbours=m)
        named = []
        for d in range(days):
            _, _, near = read_records(recs, "kb", date(2026, 1, 1) + timedelta(days=d), 0,
                                      settings.neighbourhood_sample)
            named.append(len(other_spaces([t for _, t, _ in near], np.stack([v for _, _, v in near]), settings,
                                          docs=[k.doc_id for k, _, _ in near])[0]))
        print(f"neighbourhood signatures, min_neighbours {m}: {sum(named)} records falsely named over {days} daily "
              f"reads of {settings.neighbourhood_sample} of {len(recs):,} records, on {sum(map(bool, named))} days")


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--news", type=Path, default=NEWS)
    parser.add_argument("--days", type=int, default=30, help="daily reads of the signatures' false-naming count")
    args = parser.parse_args(argv)
    texts = base_texts(args.news)
    embedder = Embedder(EmbedderConfig())
    t0 = time.perf_counter()
    vectors = embedder.encode(texts)
    print(f"{len(texts)} news texts embedded in {time.perf_counter() - t0:.1f} s; peak RSS {peak_mb():.0f} MB")
    source = np.arange(args.n) % len(texts)
    with tempfile.TemporaryDirectory() as tmp, postgres() as dsn:
        os.environ[DSN_ENV] = dsn
        writer = PgWriter(dsn, "kb")
        ids = [f"r{i:07d}" for i in range(args.n)]
        t0 = time.perf_counter()
        for s in range(0, args.n, 10_000):
            part = np.arange(s, min(s + 10_000, args.n))
            writer.write(records(ids, part, source[part], texts, vectors, embedder.key), [])
        print(f"{args.n:,} records written to pgvector in {time.perf_counter() - t0:.0f} s (the team's job)")
        target = TargetConfig(name="kb", kind="pgvector", dsn_env=DSN_ENV, table="kb", text="body",
                              doc_id="doc_id", model_field="model")
        settings = IndexHealthConfig(stores=("kb",))
        data = Path(tmp) / "store"
        for run, day in enumerate((date(2026, 1, 1), date(2026, 1, 2))):
            if run:  # 1% of the records now hold another article (text and vector), 0.1% deleted
                moved = np.arange(args.n // 100)
                writer.write(records(ids, moved, (source[moved] + 1) % len(texts), texts, vectors, embedder.key),
                             ids[-(args.n // 1000):])
            t0 = time.perf_counter()
            opened = open_store(target, Path(tmp))
            try:
                health = check(opened.scan(), name="kb", run_date=day, data_dir=data, present=None, gold=(),
                               embedder=embedder, settings=settings)
            finally:
                opened.close()
            seconds = time.perf_counter() - t0
            found = ", ".join(f"{f.kind} {f.count}" for f in health.findings)
            print(f"run {run + 1} ({day}): {health.n_records:,} records read and checked in {seconds:.1f} s "
                  f"({health.n_records / seconds:,.0f} records/s); peak RSS {peak_mb():.0f} MB; snapshot file "
                  f"{(data / SNAPSHOT_FILE).stat().st_size / 1e6:.1f} MB; {found}")
            for f in health.findings:
                if f.kind in (MIXED_GENERATIONS, STALE) and f.count:
                    print(f"  {f.kind}: {' '.join(f.examples)}")
        writer.close()
    false_named(texts, vectors, source, args.days)


if __name__ == "__main__":
    main()
