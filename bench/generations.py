"""Mixed embedding generations found by neighbourhood signatures (index_health.other_spaces), on the real streams: each
day's collection (every chunk published up to the day, the default embedder's vectors, no stamp, read up to
`neighbourhood_sample` records by the seeded order) clean, and with a rotated generation injected on day D (that
day's chunks' vectors multiplied by a fixed random orthogonal matrix: same dimension, unit norm, no stamp).
Prints, per stream: the records falsely named over all clean days (expected 0), the cosines that set the lines, and
for each D the days from D on that name the generation and the record recall (of the generation's records read);
then a second real model (static_vectors) injected on the same days: its records named on their day.
Run: python -m bench.generations [--streams news peps] [--every 10] [--cache DIR] [--text-neighbour X ...]
[--min-neighbours N]."""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from datetime import date
from pathlib import Path

import numpy as np

from pipeline.chunking import chunk_document
from pipeline.config import ChunkingConfig, EmbedderConfig, IndexHealthConfig
from pipeline.embeddings import Embedder, normalize
from pipeline.index_health import _rank, other_spaces, spaces, text_similarities

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"  # the project's ../shared
STREAMS = {"news": DATA / "news-2025-autumn" / "articles.jsonl", "peps": DATA / "peps-stream" / "articles.jsonl"}


def chunks(path: Path) -> tuple[list[str], list[str], list[int]]:
    """The stream's chunks at driftwatch's default chunking: ids, texts, publication days (1..n)."""
    size, overlap = ChunkingConfig().size, ChunkingConfig().overlap
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    rows = [r for r in rows if r.get("pack", "base") == "base"]
    days = sorted({r["date"] for r in rows})
    ids, texts, when = [], [], []
    for r in rows:
        for c in chunk_document(r["guid"], r["title"], r["text"], size, overlap):
            ids.append(c.id)
            texts.append(c.text)
            when.append(days.index(r["date"]) + 1)
    return ids, texts, when


def embedded(name: str, texts: list[str], cache: Path) -> np.ndarray:
    """The default embedder's vectors of `texts`, kept in `cache` (keyed by the texts' hash)."""
    digest = hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:12]
    file = cache / f"generations-{name}-{digest}.npy"
    if file.exists():
        return np.load(file)
    vectors = Embedder(EmbedderConfig()).encode(texts)
    cache.mkdir(parents=True, exist_ok=True)
    np.save(file, vectors)
    return vectors


def read(ids: list[str], held: np.ndarray, day: int, cap: int) -> np.ndarray:
    """The records index_health reads on `day`: all those held up to `cap`, else the cap's first by the seeded order."""
    if len(held) <= cap:
        return held
    run = date(2025, 1, 1).fromordinal(date(2025, 1, 1).toordinal() + day)
    return held[np.argsort([_rank(ids[i], "bench", run) for i in held], kind="stable")[:cap]]


def rotation(dim: int, seed: int = 0) -> np.ndarray:
    q, r = np.linalg.qr(np.random.default_rng(seed).normal(size=(dim, dim)))
    return (q * np.sign(np.diag(r))).astype(np.float32)


def static_vectors(texts: list[str]) -> np.ndarray:
    """Another real model of the same dimension: the default model's own token embeddings, mean-pooled over each
    text's tokens and unit-normalised (a static embedding model, as model2vec distils one). Its space is not a rotation
    of the model's: it keeps a correlation with it (the transformer's residual stream carries the token embeddings)."""
    model = Embedder(EmbedderConfig()).model
    table = model[0].auto_model.embeddings.word_embeddings.weight.detach().numpy()
    tokens = model.tokenizer(texts, add_special_tokens=False, truncation=True, max_length=256)["input_ids"]
    return normalize(np.stack([table[t].mean(axis=0) if t else table[0] for t in tokens]).astype(np.float32))


def signatures(texts: list[str], vectors: np.ndarray, settings: IndexHealthConfig, docs: list[str]
               ) -> tuple[np.ndarray, dict[tuple[int, ...], float]]:
    """other_spaces' records named, from one reading of the spaces, and the components' means (by their members)."""
    labels, _, means, _ = spaces(texts, vectors, settings, docs)
    named, _ = other_spaces(texts, vectors, settings, (labels, means), docs)
    return named, {tuple(np.flatnonzero(labels == c).tolist()): m for c, m in means.items()}


def lines(texts: list[str], vectors: np.ndarray, settings: IndexHealthConfig, rotated: np.ndarray) -> str:
    """The cosines that set the lines, over one collection: vector cosines of text-neighbour pairs of one space, of
    pairs across the two spaces (a record and a rotated copy of another), and each vector's best cosine in its space
    against its best cosine to the other space."""
    near = text_similarities(texts) >= settings.text_neighbour
    same = vectors @ vectors.T
    cross = vectors @ (vectors @ rotated.T).T
    np.fill_diagonal(same, -1)
    i, j = np.nonzero(np.triu(near, 1))
    q = [0.01, 0.05, 0.5]
    best = same.max(axis=1)
    return (f"  text-neighbour pairs ({len(i)}): vector cosine p1/p5/p50 same space "
            f"{' '.join(f'{x:.3f}' for x in np.quantile(same[i, j], q))}, across spaces p50/p99/max "
            f"{' '.join(f'{x:.3f}' for x in np.quantile(cross[i, j], [0.5, 0.99, 1.0]))}\n"
            f"  best cosine in its own space p1/p5/p50 {' '.join(f'{x:.3f}' for x in np.quantile(best, q))}; "
            f"best cosine to the other space max {np.abs(cross).max():.3f}")


def run(name: str, path: Path, every: int, cache: Path, settings: IndexHealthConfig) -> None:
    ids, texts, when = chunks(path)
    docs = [i.rsplit("#", 1)[0] for i in ids]  # chunk ids are <doc_id>#<n>
    vectors = embedded(name, texts, cache)
    when = np.asarray(when)
    n_days = int(when.max())
    rotated = rotation(vectors.shape[1])
    print(f"{name}: {len(ids)} chunks over {n_days} days, neighbourhood_sample {settings.neighbourhood_sample}")
    last = read(ids, np.flatnonzero(when <= n_days), n_days, settings.neighbourhood_sample)
    print(lines([texts[i] for i in last], vectors[last], settings, rotated))
    false, clean_means, rotated_means = 0, [], []
    for day in range(1, n_days + 1):
        held = read(ids, np.flatnonzero(when <= day), day, settings.neighbourhood_sample)
        named, means = signatures([texts[i] for i in held], vectors[held], settings, [docs[i] for i in held])
        false += len(named)
        clean_means += means.values()
    print(f"  clean: {false} records falsely named over {n_days} days")
    for injected in range(every, n_days + 1, every):
        stored = vectors.copy()
        stored[when == injected] = stored[when == injected] @ rotated.T
        days_named, recalls, others = 0, [], 0
        for day in range(injected, n_days + 1):
            held = read(ids, np.flatnonzero(when <= day), day, settings.neighbourhood_sample)
            named, means = signatures([texts[i] for i in held], stored[held], settings, [docs[i] for i in held])
            generation = set(held[when[held] == injected].tolist())
            hit = generation & set(held[named].tolist())
            days_named += bool(hit)
            recalls.append(len(hit) / len(generation) if generation else 1.0)
            others += len(set(held[named].tolist()) - generation)
            rotated_means += [m for members, m in means.items() if (when[held[list(members)]] == injected).all()]
        print(f"  rotated generation on day {injected} ({int((when == injected).sum())} chunks): named on "
              f"{days_named} of {n_days - injected + 1} days, record recall on day {injected} {recalls[0]:.3f}, "
              f"mean {np.mean(recalls):.3f}, min {min(recalls):.3f}; other records named {others}")
    static = static_vectors(texts)
    same_text = np.einsum("ij,ij->i", static, vectors)
    static_named, static_total = 0, 0
    for injected in range(every, n_days + 1, every):
        stored = vectors.copy()
        stored[when == injected] = static[when == injected]
        held = read(ids, np.flatnonzero(when <= injected), injected, settings.neighbourhood_sample)
        named, _ = signatures([texts[i] for i in held], stored[held], settings, [docs[i] for i in held])
        generation = set(held[when[held] == injected].tolist())
        static_named += len(generation & set(held[named].tolist()))
        static_total += len(generation)
    print(f"  a static generation (the model's token embeddings mean-pooled) injected on the same days: {static_named} "
          f"of {static_total} records named on their day; its cosine with the model's vector of the same text p50 "
          f"{np.median(same_text):.3f}, max {same_text.max():.3f} (a re-embedded sampled record of it reads as stale)")
    print(f"  components outside the main space, mean vector cosine to their text neighbours in it (the line "
          f"neighbour_cosine): clean {len(clean_means)}, min {min(clean_means, default=np.nan):.3f}; rotated "
          f"{len(rotated_means)}, max {max(rotated_means, default=np.nan):.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--streams", nargs="+", default=list(STREAMS), choices=list(STREAMS))
    parser.add_argument("--every", type=int, default=10, help="inject a rotated generation every this many days")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/driftwatch-bench"))
    for key in ("text_neighbour", "neighbour_cosine", "space_cosine"):  # another line than the default, to compare
        parser.add_argument(f"--{key.replace('_', '-')}", type=float, default=getattr(IndexHealthConfig(), key))
    parser.add_argument("--min-neighbours", type=int, default=IndexHealthConfig().min_neighbours)
    args = parser.parse_args(argv)
    settings = IndexHealthConfig(text_neighbour=args.text_neighbour, neighbour_cosine=args.neighbour_cosine,
                                 space_cosine=args.space_cosine, min_neighbours=args.min_neighbours)
    print(f"lines: text_neighbour {settings.text_neighbour}, neighbour_cosine {settings.neighbour_cosine}, "
          f"space_cosine {settings.space_cosine}, min_neighbours {settings.min_neighbours}")
    for name in args.streams:
        if not STREAMS[name].exists():
            print(f"{STREAMS[name]}: not found", file=sys.stderr)
            return 2
        run(name, STREAMS[name], args.every, args.cache, settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
