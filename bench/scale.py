"""Daily cost against corpus size, the import floor of a run, the real news stream's re-run and no-op day, a day of
the PEP stream's long documents (its drift statistics by function), embedding backends against raw torch encode, Ray
against in-process, and the dense quality of each backend on the demo: printed tables (python -m bench.scale
[--part ...])."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import date, timedelta
from pathlib import Path
from typing import NamedTuple

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
    from pipeline.chunking import chunk_documents
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


# --- daily cost against corpus size ---------------------------------------------------------------------------

DAY0 = date(2026, 3, 1)  # the bulk of the corpus enters on this date
WORDS = ("harbour ferry strike council budget vaccine comet rover election flood bridge tariff court ruling "
         "hospital school rail energy grid wind solar drought harvest market index bank rate inflation museum "
         "festival league final coach transfer storm coast port cargo union wage talks minister treaty border "
         "census survey study trial drug patient clinic virus outbreak research telescope orbit launch satellite").split()


def _text(rng: np.random.Generator, n: int) -> str:
    return " ".join(rng.choice(WORDS, n))


def _rss(items: list[tuple[str, str]], day: date) -> bytes:
    from xml.sax.saxutils import escape

    entries = "".join(f"<item><guid>{escape(i)}</guid><title>{escape(t[:40])}</title><description>{escape(t)}"
                      f"</description><pubDate>{day.strftime('%a, %d %b %Y')} 08:00:00 +0000</pubDate></item>"
                      for i, t in items)
    return f'<?xml version="1.0"?><rss version="2.0"><channel><title>bench</title>{entries}</channel></rss>'.encode()


def build_corpus(folder: Path, n_docs: int, seed: int = 0) -> Path:
    """A data directory of `n_docs` documents entered on DAY0, a dated feed folder whose DAY0+1 file brings
    100 new documents, a 50-question gold set, and every chunk's and question's vector in the embedding cache
    (seeded random unit vectors: these rows measure the run, not the model). Returns the config file."""
    from pipeline.chunking import chunk_document
    from pipeline.config import to_toml
    from pipeline.sources import Document

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    daily = folder / "daily"
    daily.mkdir(exist_ok=True)
    docs = [Document(f"d{i:06d}", f"doc {i}", _text(rng, 90), f"https://bench.invalid/{i}", None, "bench", ("news",))
            for i in range(n_docs)]
    new = [(f"n{i:04d}", _text(rng, 90)) for i in range(100)]
    (daily / f"{DAY0 + timedelta(days=1)}.xml").write_bytes(_rss(new, DAY0 + timedelta(days=1)))
    gold = folder / "gold.jsonl"
    picks = rng.choice(n_docs, 50, replace=False)
    gold.write_text("".join(f'{{"id": "q{j}", "question": "{" ".join(docs[i].text.split()[:8])}?", '
                            f'"relevant": {{"{docs[i].id}": 1}}}}\n' for j, i in enumerate(picks)))
    config = Config(data_dir=folder / "data", gold=gold, sources=(),
                    embedder=EmbedderConfig(), retrieval=RetrievalConfig())
    from pipeline.config import SourceConfig

    config = config.replace(sources=(SourceConfig("bench", path=daily),))
    (folder / "monitor.toml").write_text(to_toml(config))
    key = Embedder(config.embedder).key
    texts = [c.text for d in docs for c in chunk_document(d.id, d.title, d.text, config.chunking.size,
                                                           config.chunking.overlap)]
    texts += [c.text for i, t in new for c in chunk_document(i, t[:40], t, config.chunking.size,
                                                               config.chunking.overlap)]
    from pipeline.gold import load_gold

    texts += [q.question for q in load_gold(gold)]
    with Corpus.in_dir(config.data_dir) as corpus:
        for start in range(0, n_docs, 5000):
            corpus.ingest(docs[start:start + 5000], DAY0)
        vectors = rng.standard_normal((len(texts), 384)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        for start in range(0, len(texts), 20000):
            corpus.cache_embeddings(key, {text_hash(t): v for t, v in zip(texts[start:start + 20000],
                                                                         vectors[start:start + 20000])})
    return folder / "monitor.toml"


# The imports a day with nothing new should not need (the model, the indexes, Evidently, the statistics library,
# the feed parser): a run lists those it made.
HEAVY = ("torch", "sentence_transformers", "faiss", "bm25s", "evidently", "sklearn", "scipy.stats", "feedparser")


class Timed(NamedTuple):
    seconds: float
    peak_mb: float
    heavy: tuple[str, ...]  # the HEAVY modules the run imported


def timed_run(config: Path, day: date, **env: str) -> Timed:
    """Wall-clock seconds of `python -m pipeline run` in a fresh process (imports included), its peak RSS (MB):
    the process's own high-water mark (VmHWM), not `ru_maxrss`, which Linux carries over exec from the forking
    process (this bench, once it has built a large corpus), and the heavy modules it imported."""
    code = ("import sys; from pipeline.cli import main; rc = main(sys.argv[1:]); "
            "print('MAXRSS', [l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0]); "
            f"print('HEAVY', *[m for m in {HEAVY!r} if m in sys.modules]); "
            "sys.exit(rc)")
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code, "run", "--config", str(config), "--date", day.isoformat()],
                          capture_output=True, text=True, cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1", **env})
    seconds = time.perf_counter() - t0
    if done.returncode not in (0, 1):
        raise SystemExit(f"run {day} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    lines = done.stdout.splitlines()
    rss = [line for line in lines if line.startswith("MAXRSS")]
    heavy = [line.split()[1:] for line in lines if line.startswith("HEAVY")]
    return Timed(seconds, int(rss[-1].split()[1]) / 1024 if rss else float("nan"), tuple(heavy[-1]) if heavy else ())


def bytecode() -> str:
    """How the timed processes get pipeline/'s bytecode (for the tables' titles)."""
    return ("no bytecode cache: each process compiles pipeline/" if os.environ.get("PYTHONDONTWRITEBYTECODE")
            else "bytecode cached, as an installed package has it")


def load() -> str:
    """The machine's load averages (1, 5, 15 minutes): on a shared machine the figures move with them."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").exists() else "n/a"


def _spread(values: list[float]) -> str:
    return f"{min(values):.2f}-{max(values):.2f}"


def _copy(folder: Path, to: Path) -> Path:
    """A copy of a bench data directory (its config's paths pointed at the copy); returns the config file."""
    shutil.rmtree(to, ignore_errors=True)
    shutil.copytree(folder, to)
    config = to / "monitor.toml"
    config.write_text(config.read_text(encoding="utf-8").replace(str(folder), str(to)), encoding="utf-8")
    return config


def _fresh_copy(built: Path, to: Path, config_of: Callable[[Path], Config]) -> Path:
    """A fresh copy at `to` of a backfilled data directory, and its config file beside it (returned)."""
    from pipeline.config import to_toml

    shutil.rmtree(to, ignore_errors=True)
    shutil.copytree(built, to)
    config = to.with_suffix(".toml")
    config.write_text(to_toml(config_of(to)), encoding="utf-8")
    return config


NEW_DAY, NONE_NEW, RERUN = "100 new s", "none new s", "re-run s"


def daily(sizes: list[int], out: Path, repeat: int = 5) -> dict[int, dict[str, float]]:
    """Each day's cost at each size; with `repeat` > 1 the days after the first run are run on that many copies
    of the directory as the first run left it (the sizes alternating), and the median is shown with the range:
    a shared machine's noise is a second either way. Returns each size's medians by column."""
    built: dict[int, tuple[Path, float, float]] = {}
    for n in sizes:
        folder = out / f"daily-{n}"
        shutil.rmtree(folder, ignore_errors=True)
        t0 = time.perf_counter()
        config = build_corpus(folder, n)
        setup = time.perf_counter() - t0
        first = timed_run(config, DAY0).seconds  # the first run: every index built, every vector read
        built[n] = (folder, setup, first)
    columns = [NEW_DAY, NONE_NEW, RERUN, "none, no memo s"]
    seen: dict[int, list[list[float]]] = {n: [[] for _ in columns] for n in sizes}
    rss: dict[int, float] = {n: 0.0 for n in sizes}
    heavy: dict[int, list[set[str]]] = {n: [set() for _ in columns] for n in sizes}
    loads = [load()]
    for i in range(repeat):
        for n in sizes:
            folder = built[n][0]
            config = _copy(folder, out / f"daily-{n}-copy") if repeat > 1 else folder / "monitor.toml"
            runs = [timed_run(config, DAY0 + timedelta(days=1)),  # 100 new documents
                    timed_run(config, DAY0 + timedelta(days=2)),  # nothing new
                    timed_run(config, DAY0 + timedelta(days=2)),  # the same date again
                    timed_run(config, DAY0 + timedelta(days=3), DRIFTWATCH_NO_MEMO="1")]  # no memo
            for column, imported, run in zip(seen[n], heavy[n], runs):
                column.append(run.seconds)
                imported.update(run.heavy)
                rss[n] = max(rss[n], run.peak_mb)
    loads.append(load())
    medians = {n: {c: float(np.median(v)) for c, v in zip(columns, seen[n])} for n in sizes}
    rows = [[n, built[n][1], built[n][2], *medians[n].values(), rss[n]] for n in sizes]
    table("Daily cost against corpus size (python -m pipeline run in a fresh process, imports included; "
          f"random unit vectors in the embedding cache; median of {repeat}; {bytecode()}; "
          f"load average {' -> '.join(loads)})",
          ["documents", "setup s", "first run s", *columns, "peak MB"], rows)
    if repeat > 1:
        table("The same runs' range (min to max)", ["documents", *columns],
              [[n, *[_spread(c) for c in seen[n]]] for n in sizes])
        if len(sizes) > 1:
            a, b = sizes[-2], sizes[-1]
            ratios = [y / x for x, y in zip(seen[a][0], seen[b][0])]
            print(f"\n100-new-document day, {b} against {a} documents, run by run: "
                  + ", ".join(f"{r:.2f}x" for r in ratios) + f" (median {float(np.median(ratios)):.2f}x)")
    table("Heavy modules each day imported (of " + ", ".join(HEAVY) + ")", ["documents", *columns],
          [[n, *[" ".join(sorted(h)) or "none" for h in heavy[n]]] for n in sizes])
    return medians


# --- the import floor: what a run costs before it does anything -------------------------------------------

FLOOR_STEPS = (
    ("python -c pass (the interpreter)", "pass"),
    ("import pipeline.cli", "import pipeline.cli"),
    ("import pipeline.cli, pipeline.job (what run imports)", "import pipeline.cli, pipeline.job"),
    ("... and scipy.stats (a new top-1 KS test)", "import pipeline.cli, pipeline.job, scipy.stats"),
)
RUN_FLOOR, KS_FLOOR = FLOOR_STEPS[2][0], FLOOR_STEPS[3][0]


def floor(repeat: int = 5, top: int = 12) -> dict[str, float]:
    """Each step of the floor in a fresh process (the steps alternating, median of `repeat`), and where the
    imports of a run go by `python -X importtime` (self time summed per top-level package). Returns the medians."""
    seen: dict[str, list[float]] = {label: [] for label, _ in FLOOR_STEPS}
    subprocess.run([sys.executable, "-c", FLOOR_STEPS[-1][1]], check=True, cwd=ROOT)  # the bytecode cache filled
    loads = [load()]
    for _ in range(repeat):
        for label, code in FLOOR_STEPS:
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
            seen[label].append(time.perf_counter() - t0)
    loads.append(load())
    medians = {label: float(np.median(v)) for label, v in seen.items()}
    table(f"The import floor (fresh processes, median of {repeat}; {bytecode()}; load average {' -> '.join(loads)})",
          ["what", "median s", "range s"], [[label, medians[label], _spread(v)] for label, v in seen.items()])
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", FLOOR_STEPS[3][1]], capture_output=True,
                          text=True, check=True, cwd=ROOT)
    per_package: dict[str, float] = {}
    for line in done.stderr.splitlines():
        parts = line.removeprefix("import time:").split("|")
        if len(parts) == 3 and parts[0].strip().isdigit():
            package = parts[2].strip().split(".")[0]
            per_package[package] = per_package.get(package, 0.0) + int(parts[0]) / 1e6
    total = sum(per_package.values())
    ranked = sorted(per_package.items(), key=lambda item: -item[1])[:top]
    table(f"python -X importtime -c '{FLOOR_STEPS[3][1]}': self time per top-level package ({total:.2f} s in all, "
          "importtime's own overhead included)", ["package", "s", "share"],
          [[name, seconds, f"{seconds / total:.0%}"] for name, seconds in ranked])
    return medians


def against_floor(days: dict[int, dict[str, float]], floors: dict[str, float]) -> None:
    """The no-op day and the re-run against the floor of the imports each cannot avoid."""
    rows = []
    for n, medians in days.items():
        rows.append([n, NONE_NEW, medians[NONE_NEW], KS_FLOOR, medians[NONE_NEW] / floors[KS_FLOOR]])
        rows.append([n, RERUN, medians[RERUN], RUN_FLOOR, medians[RERUN] / floors[RUN_FLOOR]])
    table("Against the floor (medians)", ["documents", "day", "s", "floor", "x floor"], rows)


# --- the real news stream: re-running its last day, and a day with nothing new ------------------------------

NEWS = ROOT.parent / "shared" / "data" / "news-2025-autumn"


def news(out: Path, repeat: int = 5, stream: Path = NEWS) -> None:
    """The 60-day news backfill (bench.alerts.clean_news: built once per version of pipeline/, cached), then on
    fresh copies of it: its last day run again, and the next day (nothing new), each in a fresh process."""
    from bench.alerts import NEWS_END, clean_news, news_config

    if not stream.is_dir():
        print(f"\n{stream}: not here; the real-news rows are skipped")
        return
    t0 = time.perf_counter()
    clean = clean_news(stream, out, fresh=False)
    built = time.perf_counter() - t0
    days = [("re-run of the last day", NEWS_END), ("next day, none new", NEWS_END + timedelta(days=1)),
            ("next day again", NEWS_END + timedelta(days=1))]
    seen: dict[str, list[float]] = {label: [] for label, _ in days}
    heavy: dict[str, set[str]] = {label: set() for label, _ in days}
    loads = [load()]
    for _ in range(repeat):
        config = _fresh_copy(clean, out / "news-copy", lambda copy: news_config(stream, copy))
        for label, day in days:
            run = timed_run(config, day)
            seen[label].append(run.seconds)
            heavy[label].update(run.heavy)
    loads.append(load())
    table(f"The real news stream ({clean}, 60 days, about 1,040 documents; backfill {built:.0f} s, cached; "
          f"median of {repeat} on fresh copies; {bytecode()}; load average {' -> '.join(loads)})",
          ["day", "median s", "range s", "heavy imports"],
          [[label, float(np.median(v)), _spread(v), " ".join(sorted(heavy[label])) or "none"]
           for label, v in seen.items()])


# --- the PEP stream: a day of long documents, and what its drift statistics cost ---------------------------

PEPS = ROOT.parent / "shared" / "data" / "peps-stream"
PEPS_START, PEPS_END = date(2025, 6, 10), date(2025, 7, 1)  # the backfill before the timed day (every gold PEP in)
# What a run's drift statistics are timed by: functions of pipeline.drift (and methods, as Class.method) wrapped in
# the timed process; those a version of drift.py lacks or does not call are not shown. window_drift holds the others
# but Evidently's; some hold others (novel_shares holds novel's calls).
DRIFT_TIMERS = ("window_drift", "_labels", "project", "_psi_ks_rows", "_psi_rows", "_ks_rows", "_classifier_rows",
                "Neighbours.__init__", "Neighbours.novel_shares", "Neighbours.novel", "_new_label_share", "_duplicates",
                "evidently_embedding_drift")
WHOLE_RUN = "whole run"


def peps_config(stream: Path, data_dir: Path) -> Config:
    from pipeline.config import SourceConfig

    return Config(data_dir=data_dir, gold=(stream / "gold.jsonl").resolve(),
                  sources=(SourceConfig("peps", path=(stream / "daily").resolve()),))


def _seed_embeddings(data_dir: Path, cache: Path) -> None:
    """The embedding cache of `cache` (bench.corpus_null's corpus.sqlite of the PEP chunks, when it exists) copied
    into the data directory's: the backfill then embeds only what bench.corpus_null has not."""
    source = cache / "corpus.sqlite"
    if not source.exists():
        return
    with Corpus.in_dir(data_dir) as corpus:
        corpus.db.execute("ATTACH DATABASE ? AS seed", (str(source),))
        with corpus.db:
            corpus.db.execute("INSERT OR IGNORE INTO embeddings SELECT * FROM seed.embeddings")
        corpus.db.execute("DETACH DATABASE seed")


def peps_store(stream: Path, out: Path) -> Path:
    """The PEP stream backfilled from PEPS_START to PEPS_END by the real job (built once per version of pipeline/
    and of the stream, cached under `out`)."""
    from bench.alerts import _digest, cached_store, code_key
    from pipeline.job import backfill

    data_dir = out / "peps-backfill"
    config = peps_config(stream, data_dir)
    key = {"code": code_key(), "peps": _digest((stream / "daily").glob("*.xml")), "end": PEPS_END.isoformat()}

    def build() -> None:
        _seed_embeddings(data_dir, ROOT / "bench" / "out" / "corpus-null-peps")
        backfill(config, PEPS_START, PEPS_END)

    cached_store(data_dir, key, build, fresh=False)
    return data_dir


def timed_drift_run(config: Path, day: date) -> dict[str, float]:
    """`python -m pipeline run` of `day` in a fresh process, with the DRIFT_TIMERS summed (seconds) and the whole
    run's wall clock (imports included) under WHOLE_RUN."""
    code = f"""
import sys, time, functools, json
began = time.perf_counter()
from pipeline import drift
from pipeline.cli import main
spent = {{}}
def timer(name, f):
    @functools.wraps(f)
    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return f(*args, **kwargs)
        finally:
            spent[name] = spent.get(name, 0.0) + time.perf_counter() - t0
    return timed
for name in {DRIFT_TIMERS!r}:
    owner, _, attr = name.rpartition(".")
    holder = getattr(drift, owner, None) if owner else drift
    if holder is not None and callable(getattr(holder, attr, None)):
        setattr(holder, attr, timer(name, getattr(holder, attr)))
rc = main(sys.argv[1:])
spent[{WHOLE_RUN!r}] = time.perf_counter() - began
print("TIMERS", json.dumps(spent))
sys.exit(rc)
"""
    done = subprocess.run([sys.executable, "-c", code, "run", "--config", str(config), "--date", day.isoformat()],
                          capture_output=True, text=True, cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if done.returncode not in (0, 1):
        raise SystemExit(f"run {day} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(next(line for line in done.stdout.splitlines() if line.startswith("TIMERS")).split(" ", 1)[1])


def peps(out: Path, repeat: int = 3, stream: Path = PEPS) -> None:
    """The PEP stream backfilled to PEPS_END once, then on fresh copies of it the next day (ten new PEPs, about
    270 chunks, against a reference of 14 days of them) in a fresh process: the drift statistics' seconds by
    function and the whole run's."""
    if not (stream / "daily").is_dir():
        print(f"\n{stream}: not here; the PEP rows are skipped")
        return
    t0 = time.perf_counter()
    built = peps_store(stream, out)
    backfilled = time.perf_counter() - t0
    day = PEPS_END + timedelta(days=1)
    seen: dict[str, list[float]] = {}
    loads = [load()]
    for _ in range(repeat):
        config = _fresh_copy(built, out / "peps-copy", lambda copy: peps_config(stream, copy))
        for name, seconds in timed_drift_run(config, day).items():
            seen.setdefault(name, []).append(seconds)
    loads.append(load())
    order = [WHOLE_RUN, *[n for n in DRIFT_TIMERS if n in seen]]
    table(f"A PEP stream day ({day}: ten new PEPs after a backfill {PEPS_START}..{PEPS_END}: {backfilled:.0f} s, "
          f"cached per version of pipeline/; python -m pipeline run in a fresh process; median of {repeat} on fresh "
          f"copies; calls summed per function, window_drift holding the statistics below it but Evidently's; "
          f"{bytecode()}; load average "
          f"{' -> '.join(loads)})", ["what", "median s", "range s"],
          [[name, float(np.median(seen[name])), _spread(seen[name])] for name in order])


# --- embedding throughput and Ray --------------------------------------------------------------------------


def bench_texts(n: int, seed: int = 0, length: int = 128) -> list[str]:
    """`n` texts of `length` words (128: a chunk; 40: a news item of the bundled data, about 35 words and a
    title) drawn from the documentation's words (docs/*.md, by name): real English, reproducible."""
    words = " ".join(p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs").glob("*.md"))).split()
    rng = np.random.default_rng(seed)
    return [" ".join(words[s:s + length]) for s in rng.integers(0, len(words) - length, n)]


def throughput(n: int) -> None:
    """Each backend's cached embedding (what ingest does: hash, encode, store) against raw torch
    `model.encode` on the same texts, models loaded beforehand, in one process."""
    texts = bench_texts(n)
    raw = Embedder(EmbedderConfig()).model
    raw.encode(texts[:8])
    t0 = time.perf_counter()
    raw.encode(texts, batch_size=EmbedderConfig().batch_size)
    base = time.perf_counter() - t0
    rows = [["raw torch model.encode", base, n / base, 1.0]]
    from pipeline.embeddings import embed_cached

    for backend in BACKENDS:
        embedder = Embedder(EmbedderConfig(backend=backend))
        embedder.encode(texts[:8])  # load (and for ONNX export once into the cache)
        with tempfile.TemporaryDirectory() as tmp, Corpus.in_dir(Path(tmp)) as corpus:
            t0 = time.perf_counter()
            embed_cached(corpus, embedder, texts)
            seconds = time.perf_counter() - t0
        rows.append([f"ingest embedding, backend {backend}", seconds, n / seconds, base / seconds])
    table(f"Embedding throughput on {n} texts of 128 words ({os.cpu_count()} CPUs)",
          ["what", "seconds", "texts/s", "x raw torch"], rows)


def ray_against_local(n: int, workers: int, length: int = 128) -> None:
    """The Ray engine (a local Ray of `workers` CPUs, started inside the timing, and without) against the
    in-process embedder on the same `n` texts of `length` words."""
    import ray

    texts = bench_texts(n, seed=1, length=length)
    local = Embedder(EmbedderConfig())
    local.encode(texts[:8])
    t0 = time.perf_counter()
    expected = local.encode(texts)
    here = time.perf_counter() - t0
    on_ray = Embedder(EmbedderConfig(engine="ray", ray_workers=workers))
    t0 = time.perf_counter()
    first = on_ray.encode(texts)  # starts Ray and the actors
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    on_ray.encode(texts)  # Ray up; the actors load the model again (a new dataset)
    warm = time.perf_counter() - t0
    ray.shutdown()
    table(f"Ray Data ({workers} actors) against in-process on {n} texts of {length} words ({os.cpu_count()} CPUs); "
          f"max |difference| {float(np.abs(first - expected).max()):.1e}",
          ["engine", "seconds", "x in-process"],
          [["in-process", here, 1.0], ["ray, cold (ray.init inside)", cold, here / cold],
           ["ray, warm", warm, here / warm]])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--part", choices=["quality", "throughput", "daily", "floor", "noop", "news", "peps", "ray",
                                           "all"], default="all",
                        help="noop: the daily table, the floor and the ratio between them; peps: a PEP stream day")
    parser.add_argument("--demo", type=Path, default=DEMO, help="a built demo data directory (with demo.toml)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000],
                        help="corpus sizes of the daily-cost table")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "scale")
    parser.add_argument("--repeat", type=int, default=5,
                        help="runs of each day of the daily and news tables (on copies) and of each floor step")
    parser.add_argument("--news", type=Path, default=NEWS, help="the news stream folder (with daily/)")
    parser.add_argument("--peps", type=Path, default=PEPS, help="the PEP stream folder (with daily/)")
    parser.add_argument("--texts", type=int, default=2000, help="texts of the throughput table")
    parser.add_argument("--ray-texts", type=int, default=10000, help="texts of the Ray table")
    parser.add_argument("--ray-workers", type=int, default=2)
    parser.add_argument("--ray-words", type=int, default=40,
                        help="words per text of the Ray table (40: a news item; 128: a chunk)")
    parser.add_argument("--no-pyc", action="store_true",
                        help="leave PYTHONDONTWRITEBYTECODE as it is (if set, every timed process compiles pipeline/)")
    args = parser.parse_args(argv)
    if not args.no_pyc:  # the processes timed run as an installed package does: bytecode compiled once, not per run
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        os.environ.setdefault("PYTHONPYCACHEPREFIX", str(args.out / "pycache"))
    if args.part in ("quality", "all"):
        quality(args.demo)
    days = floors = None
    if args.part in ("daily", "noop", "all"):
        days = daily(args.sizes, args.out, args.repeat)
    if args.part in ("floor", "noop", "all"):
        floors = floor(args.repeat)
    if days and floors:
        against_floor(days, floors)
    if args.part in ("news", "all"):
        news(args.out, args.repeat, args.news)
    if args.part in ("peps", "all"):
        peps(args.out, args.repeat, args.peps)
    if args.part in ("throughput", "all"):
        throughput(args.texts)
    if args.part in ("ray", "all"):
        ray_against_local(args.ray_texts, args.ray_workers, args.ray_words)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
