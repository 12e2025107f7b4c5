"""Daily cost against corpus size, embedding backends against raw torch encode, Ray against in-process,
and the dense quality of each backend on the demo: printed tables (python -m bench.scale [--part ...])."""

from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipeline.config import BACKENDS, Config, EmbedderConfig, RetrievalConfig, load_config  # noqa: E402
from pipeline.corpus import Corpus, text_hash  # noqa: E402
from pipeline.embeddings import Embedder  # noqa: E402

DEMO = ROOT / "bench" / "out" / "demo-clean"


def table(title: str, header: list[str], rows: list[list]) -> None:
    cells = [[str(c) for c in header]] + [[f"{c:.3f}" if isinstance(c, float) else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    print(f"\n{title}")
    for n, r in enumerate(cells):
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))
        if n == 0:
            print("  ".join("-" * w for w in widths))


# --- dense quality of each backend on the demo ----------------------------------------------------------------


def quality(demo: Path) -> None:
    """recall@5 and MRR@5 of the dense pipeline on the demo's last run date, per backend, and every question
    whose value differs from torch's."""
    from pipeline.gold import load_gold
    from pipeline.job import chunk_documents
    from pipeline.metrics import evaluate
    from pipeline.retrieval import Retriever

    config = load_config(demo / "demo.toml", data_dir=demo)
    with Corpus.in_dir(demo, readonly=True) as corpus:
        last = max(r[0] for r in corpus.db.execute("SELECT MAX(first_seen) FROM documents"))
        snapshot = corpus.snapshot(last)
    chunks = chunk_documents(config, snapshot)
    gold = load_gold(config.gold)
    dense = config.replace(retrieval=dataclasses.replace(config.retrieval, pipelines=("dense",)))
    per: dict[str, tuple[list[float], list[float]]] = {}
    seconds: dict[str, float] = {}
    for backend in BACKENDS:
        embedder = Embedder(dataclasses.replace(config.embedder, backend=backend))
        t0 = time.perf_counter()
        vectors = embedder.encode([c.text for c in chunks])
        seconds[backend] = time.perf_counter() - t0
        queries = embedder.encode([q.question for q in gold])
        rankings = Retriever(chunks, vectors, dense).search("dense", [q.question for q in gold], queries)
        result = evaluate([r.doc_ids for r in rankings], [q.relevant for q in gold], (5,))
        per[backend] = (list(result.values[5]["recall"]), list(result.values[5]["rr"]))
    rows = []
    for backend in BACKENDS:
        recall, rr = (float(np.nanmean(v)) for v in per[backend])
        base_recall, base_rr = (float(np.nanmean(v)) for v in per["torch"])
        rows.append([backend, recall, rr, recall - base_recall, rr - base_rr, seconds[backend]])
    table(f"Dense retrieval on the demo ({last}: {len(chunks)} chunks, {len(gold)} questions)",
          ["backend", "recall@5", "MRR@5", "d recall", "d MRR", "encode s"], rows)
    for backend in BACKENDS[1:]:
        diffs = [[q.id, per["torch"][0][i], per[backend][0][i], per["torch"][1][i], per[backend][1][i]]
                 for i, q in enumerate(gold)
                 if (per["torch"][0][i], per["torch"][1][i]) != (per[backend][0][i], per[backend][1][i])]
        table(f"Questions whose recall@5 or RR@5 differ, {backend} against torch ({len(diffs)})",
              ["question", "recall torch", f"recall {backend}", "RR torch", f"RR {backend}"], diffs or [["none"] * 5])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--part", choices=["quality", "throughput", "daily", "ray", "all"], default="all")
    parser.add_argument("--demo", type=Path, default=DEMO, help="a built demo data directory (with demo.toml)")
    args = parser.parse_args(argv)
    if args.part in ("quality", "all"):
        quality(args.demo)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
