"""The cosines that set index_health's lines: a stored vector against its text re-embedded by the same model and
settings (batch of one vs a batch), by the ONNX fp32 and int8 backends, and after an edit of the text (a sentence
replaced, half replaced, another article). Run: python -m bench.index_health [--n N] [--articles FILE]."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from pipeline.config import EmbedderConfig, IndexHealthConfig
from pipeline.embeddings import Embedder

ROOT = Path(__file__).resolve().parents[1]
NEWS = ROOT.parent / "shared" / "data" / "news-2025-autumn" / "articles.jsonl"  # the project's ../shared


def texts(path: Path, n: int) -> list[str]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()[:n]]
    return [f"{r['title']}\n{r.get('description') or r.get('text') or ''}" for r in rows]


def edits(docs: list[str]) -> dict[str, list[str]]:
    """Edited versions of each text: its last sentence replaced by the next text's first, its second half replaced
    by the next text's, and the next text entirely."""
    nxt = docs[1:] + docs[:1]
    last = [d.rsplit(". ", 1)[0] + ". " + n.split(". ", 1)[0] for d, n in zip(docs, nxt)]
    half = [d[: len(d) // 2] + n[len(n) // 2:] for d, n in zip(docs, nxt)]
    return {"last sentence replaced": last, "second half replaced": half, "another article": nxt}


def summary(name: str, cosines: np.ndarray) -> str:
    """The cosines' quantiles, and the shares read as stale (below stale_cosine) and as another generation."""
    settings = IndexHealthConfig()
    q = np.quantile(cosines, [0.0, 0.01, 0.5, 0.99, 1.0])
    stale = float(np.mean(cosines < settings.stale_cosine))
    band = float(np.mean((cosines >= settings.stale_cosine) & (cosines < settings.generation_cosine)))
    return (f"{name:32s} n={len(cosines):4d}  min {q[0]:.7f}  p1 {q[1]:.7f}  median {q[2]:.7f}  p99 {q[3]:.7f}  "
            f"max {q[4]:.7f}  stale {stale:.3f}  generation {band:.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--articles", type=Path, default=NEWS)
    args = parser.parse_args(argv)
    if not args.articles.exists():
        print(f"{args.articles}: not found", file=sys.stderr)
        return 2
    docs = texts(args.articles, args.n)
    torch = Embedder(EmbedderConfig())
    stored = torch.encode(docs)  # the collection as the team's indexing job wrote it
    rows = [summary("torch, batch of one", np.array([float(torch.encode([d])[0] @ v) for d, v in zip(docs, stored)]))]
    for backend in ("onnx", "onnx-int8"):
        try:
            again = Embedder(EmbedderConfig(backend=backend)).encode(docs)
        except Exception as exc:  # a backend that does not run here is reported, not fatal
            rows.append(f"{backend:32s} did not run: {exc}")
            continue
        rows.append(summary(backend, np.einsum("ij,ij->i", stored, again)))
    for name, edited in edits(docs).items():
        rows.append(summary(f"edited: {name}", np.einsum("ij,ij->i", stored, torch.encode(edited))))
    settings = IndexHealthConfig()
    print(f"index_health lines: stale_cosine {settings.stale_cosine}, generation_cosine {settings.generation_cosine}")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
