"""The team's vector store as a target over the real 60-day news stream: each day the indexing job of the tests loads a
Chroma server, PostgreSQL with pgvector and Qdrant local mode, and a run scores them beside the builtin dense pipeline.
Prints, per store, the values differing from the builtin dense pipeline's and the seconds per run. Run:
python -m bench.vectorstores [--days N] [--news FOLDER]."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipeline import contract, store  # noqa: E402
from pipeline.config import Config, EmbedderConfig, RetrievalConfig, SourceConfig, TargetConfig  # noqa: E402
from pipeline.embeddings import Embedder  # noqa: E402
from tests.vectorstore_support import (ChromaWriter, PgWriter, QdrantWriter, chroma_server, differences,  # noqa: E402
                                       postgres, replay)

NEWS = ROOT.parent / "shared" / "data" / "news-2025-autumn"
GOLD = ROOT / "data" / "news-2025-autumn" / "gold.jsonl"
FIRST = date(2025, 9, 1)
DSN_ENV = "DRIFTWATCH_BENCH_PG_DSN"
STORES = ("chroma", "pgvector", "qdrant")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--days", type=int, default=60)
    parser.add_argument("--news", type=Path, default=NEWS)
    args = parser.parse_args(argv)
    embedder = Embedder(EmbedderConfig())
    with tempfile.TemporaryDirectory() as tmp, chroma_server(Path(tmp) / "chroma") as url, postgres() as dsn:
        root = Path(tmp)
        os.environ[DSN_ENV] = dsn
        keys = {"doc_id": "doc_id", "model_field": "model"}
        cfg = Config(data_dir=root / "store", gold=GOLD, sources=(SourceConfig(name="news", path=args.news / "daily"),),
                     retrieval=RetrievalConfig(pipelines=("dense",)),
                     targets=(TargetConfig(name="dense", kind="builtin"),
                              TargetConfig(name="chroma", kind="chroma", url=url, collection="news", **keys),
                              TargetConfig(name="pgvector", kind="pgvector", dsn_env=DSN_ENV, table="news", text="body",
                                           **keys),
                              TargetConfig(name="qdrant", kind="qdrant", path=root / "qdrant", collection="news",
                                           text="text", **keys)))
        writers = [ChromaWriter(url, "news"), PgWriter(dsn, "news"), QdrantWriter(root / "qdrant", "news")]
        t0 = time.perf_counter()
        replay(cfg, writers, [FIRST + timedelta(days=n) for n in range(args.days)], embedder)
        for writer in writers:
            writer.close()
        seconds = time.perf_counter() - t0
        targets = store.read(cfg.data_dir, contract.TARGETS)
        chunks = int(store.read_runs(cfg.data_dir)["chunks_total"].iloc[-1])
        print(f"{args.days} days of {args.news.name} ({chunks:,} chunks on the last day), "
              f"{len(pd.read_json(GOLD, lines=True))} questions, k {list(cfg.retrieval.k)}, depth "
              f"{cfg.retrieval.candidate_depth}; replay (indexing job + runs) {seconds:.0f} s")
        print(f"{'target':<10} {'ok runs':>8} {'values':>8} {'differing':>10} {'max |top1 diff|':>16} {'s/run':>8}")
        for name in ("dense", *STORES):
            rows = targets[targets["target"] == name]
            ok = int((rows["status"] == contract.TARGET_OK).sum())
            compared, differing, top1 = differences(cfg.data_dir, name) if name != "dense" else (0, 0, 0.0)
            print(f"{name:<10} {ok:>8} {compared:>8} {differing:>10} {top1:>16.2e} {rows['seconds'].mean():>8.3f}")


if __name__ == "__main__":
    main()
