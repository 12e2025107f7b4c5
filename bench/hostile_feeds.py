"""The two hostile feeds of issue 29 served on localhost beside a normal source, through the real daily job:
a 5.3 MB feed of 100,526 tiny entries and one 9.8 MB entry of random words, with the news slice of tests/data as
the normal source. Prints what parsing each feed costs, then each run's seconds, status, what was capped or left,
and whether the normal source's series was written. Run from the repo root: python -m bench.hostile_feeds

Two scenarios: the default settings (the caps, the 1,800 s deadline), and a short deadline (`--deadline`,
60 s) on a fresh data directory followed by a run with the default one, which shows what a partial run leaves
and that the next run encodes only the rest."""

from __future__ import annotations

import argparse
import http.server
import logging
import random
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from pipeline import contract, job, store
from pipeline.config import Config, EmbedderConfig, FetchConfig, RunConfig, SourceConfig
from pipeline.corpus import Corpus
from pipeline.embeddings import Embedder
from pipeline.sources import Caps, read_feed

ROOT = Path(__file__).resolve().parents[1]
NEWS = ROOT / "tests" / "data" / "news-slice"
TINY_ENTRIES = 100_526  # the count
HUGE_BYTES = 9_800_000
SEED = 0
NORMAL = "news"


def tiny_feed(n: int = TINY_ENTRIES) -> bytes:
    """About 5.3 MB: n entries of two random words each."""
    rng = random.Random(SEED)
    vocab = [f"w{i}" for i in range(5000)]
    items = "".join(f"<item><guid>t{i}</guid><title>{rng.choice(vocab)} {rng.choice(vocab)}</title></item>"
                    for i in range(n))
    return f'<?xml version="1.0"?><rss version="2.0"><channel><title>tiny</title>{items}</channel></rss>'.encode()


def huge_feed(size: int = HUGE_BYTES) -> bytes:
    """One entry of random words, `size` bytes in all."""
    rng = random.Random(SEED)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 10))) for _ in range(20_000)]
    head = '<?xml version="1.0"?><rss version="2.0"><channel><title>huge</title><item><guid>huge</guid>' \
           '<title>huge</title><description>'
    tail = "</description></item></channel></rss>"
    words, length = [], len(head) + len(tail)
    while length < size:
        words.append(rng.choice(vocab))
        length += len(words[-1]) + 1
    return (head + " ".join(words) + tail).encode()


@contextmanager
def serving(feeds: dict[str, bytes]) -> Iterator[str]:
    """The feeds on an HTTP server on localhost, at <base>/<name>."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = feeds.get(self.path.lstrip("/"))
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/rss+xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def measure_parsing(feeds: dict[str, bytes]) -> None:
    for name, body in feeds.items():
        for caps in (Caps(), Caps.of(FetchConfig())):
            t0 = time.perf_counter()
            parsed = read_feed(body, source=name, location=name, caps=caps)
            seconds = time.perf_counter() - t0
            longest = max(len(d.title) + len(d.text) for d in parsed.documents)
            print(f"  parse {name} ({len(body) / 1e6:.1f} MB), {'default caps' if caps.max_entries else 'no caps'}: "
                  f"{seconds:.1f} s, {len(parsed.documents):,} documents, longest {longest:,} characters")


def config(data_dir: Path, base: str, deadline: float | None = None) -> Config:
    run = RunConfig() if deadline is None else RunConfig(deadline_seconds=deadline)
    return Config(data_dir=data_dir, gold=NEWS / "gold.jsonl", run=run,
                  sources=(SourceConfig(name=NORMAL, path=NEWS / "daily"),
                           SourceConfig(name="tiny", url=f"{base}/tiny"), SourceConfig(name="huge", url=f"{base}/huge")))


def report(label: str, cfg: Config, embedder: Embedder) -> None:
    today = datetime.now(timezone.utc).date()  # URL sources are fetched only on the current date
    t0 = time.perf_counter()
    result = job.run_day(cfg, today, embedder=embedder, notify=False)
    seconds = time.perf_counter() - t0
    run = result.run
    metrics = store.read_metrics(cfg.data_dir)
    written = metrics[metrics[contract.RUN_DATE] == str(today)]
    with Corpus.in_dir(cfg.data_dir, readonly=True) as corpus:
        by_source: dict[str, int] = {}
        for stored in corpus.snapshot(today):
            by_source[stored.document.source] = by_source.get(stored.document.source, 0) + 1
    print(f"\n{label}: {seconds:.0f} s, status {run['status']}, feeds ok {run['feeds_ok']}, "
          f"failed {run['feeds_failed']}, docs by source {by_source}, chunks {run['chunks_total']:,}, "
          f"embedded this run {run['chunks_embedded']:,}")
    for event in filter(None, run["events"].split("; ")):
        print(f"  event: {event}")
    print(f"  the normal source's series: {len(written)} metrics rows for {today}"
          + (f", hybrid recall@5 {result.mean('hybrid', 'recall', 5):.3f}" if len(written) else " (none)"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deadline", type=float, default=60.0, help="the short deadline of the second scenario")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    feeds = {"tiny": tiny_feed(), "huge": huge_feed()}
    print("parsing alone (feedparser, then the documents):")
    measure_parsing(feeds)
    embedder = Embedder(EmbedderConfig())
    embedder.encode(["warm up"])  # the model loaded once, outside the runs' seconds
    with serving(feeds) as base, tempfile.TemporaryDirectory() as tmp:
        report("default settings", config(Path(tmp) / "default", base), embedder)
        short = Path(tmp) / "short"
        report(f"deadline {args.deadline:g} s", config(short, base, args.deadline), embedder)
        report("the next run, default deadline", config(short, base), embedder)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
