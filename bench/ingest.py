"""Benchmark the daily job end to end: ingest throughput against raw model encoding, the cost of a
re-run with nothing new, and peak memory. Run from the repo root: python -m bench.ingest [--docs N]"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import random
import resource
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from email.utils import format_datetime
from pathlib import Path
from typing import Any
from unittest import mock
from xml.sax.saxutils import escape

from pipeline import drift, job, store
from pipeline.chunking import chunk_documents
from pipeline.config import Config, SourceConfig
from pipeline.corpus import CORPUS_FILE, Corpus, text_hash
from pipeline.embeddings import Embedder
from pipeline.retrieval import import_bm25s

DEFAULT_DOCS = 10_000
ITEMS_PER_FILE = 250
GOLD_QUESTIONS = 50
MIN_WORDS, MAX_WORDS = 60, 200
RUN_DATE = date(2026, 3, 2)
SEED = 0
SOURCE = "wire"
SITE = "https://news.example.com"
RATIO_TARGET = 0.8  # ingest chunks/s over raw encode chunks/s
RERUN_TARGET = 0.1  # second run's time as a fraction of the first
REPORT_K = 10
MIB = 1024 * 1024

# --- synthetic news ---------------------------------------------------------------------------

_TOPIC_WORDS = {
    "economy": "budget market price wage loan bank tax factory worker investor profit deficit retailer "
               "company pension",
    "politics": "election minister vote party council senator reform bill campaign lawmaker coalition "
                "mayor court ruling protest",
    "health": "hospital patient doctor nurse vaccine clinic treatment trial virus drug surgeon symptom "
              "infection ward pharmacy",
    "technology": "chip startup server network app device robot satellite sensor platform engineer "
                  "developer outage update battery",
    "science": "study researcher experiment telescope sample fossil glacier laboratory genome planet "
               "particle reef crater volcano microscope",
    "sport": "match player coach team season stadium goal tournament league referee fan transfer "
             "champion medal striker",
    "weather": "storm flood rainfall wind drought forecast heatwave river shelter warning temperature "
               "road bridge evacuation dam",
    "transport": "train airport flight railway station bus port ship tunnel highway passenger ticket "
                 "driver route terminal",
    "energy": "pipeline turbine reactor grid plant tariff mine refinery panel supplier substation "
              "generator well barrel meter",
    "education": "school teacher student university exam course campus degree lecture scholarship "
                 "classroom principal curriculum grant library",
}
TOPIC_NOUNS = {topic: tuple(words.split()) for topic, words in _TOPIC_WORDS.items()}
VERBS = tuple(pair.split("/") for pair in (
    "approve/approved delay/delayed reject/rejected expand/expanded reduce/reduced announce/announced "
    "review/reviewed launch/launched cancel/cancelled fund/funded replace/replaced suspend/suspended "
    "restore/restored inspect/inspected double/doubled postpone/postponed support/supported "
    "challenge/challenged upgrade/upgraded close/closed open/opened finance/financed deliver/delivered "
    "test/tested monitor/monitored repair/repaired hire/hired export/exported limit/limited"
).split())
ADJECTIVES = tuple((
    "new local national regional annual federal private public major small early late final initial "
    "controversial ambitious costly temporary permanent rural urban coastal northern southern digital "
    "independent former senior joint emergency weekly monthly record modest sharp steady historic "
    "remote critical unexpected"
).split())
ROLES = ("director", "chief executive", "spokesperson", "chair", "minister", "economist", "analyst",
         "professor", "governor", "head of operations", "deputy mayor", "chief scientist")
ORGS = ("the Ministry of Finance", "Northwind Bank", "the City Council", "Harbor Health", "Atlas Rail",
        "the Weather Service", "Meridian Energy", "the Teachers Union", "Orion Labs", "Summit Motors",
        "the National Statistics Office", "the Port Authority", "Crescent University", "Pioneer Telecom",
        "the Football Association", "Granite Insurance", "the Environment Agency", "Bluewater Shipping")
CITIES = ("Boston", "Denver", "Leeds", "Lyon", "Osaka", "Porto", "Nairobi", "Perth", "Austin", "Hamburg",
          "Turin", "Krakow", "Dublin", "Seattle", "Glasgow", "Valencia", "Oslo", "Calgary", "Adelaide",
          "Auckland", "Bristol", "Tampa", "Geneva", "Seville", "Bergen", "Lagos", "Quito", "Montreal")
FIRST_NAMES = ("Anna", "Marcus", "Priya", "Tomás", "Elena", "James", "Aisha", "Kenji", "Sofia", "David",
               "Fatima", "Lukas", "Grace", "Omar", "Ingrid", "Samuel", "Mei", "Carlos", "Hannah", "Noah")
LAST_NAMES = ("Okafor", "Lindqvist", "Moreau", "Patel", "Kowalski", "Nakamura", "García", "O'Brien",
              "Schmidt", "Haddad", "Rossi", "Novak", "Fischer", "Mensah", "Silva", "Brennan", "Ivanova",
              "Tanaka", "Dubois", "Walsh")
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December")
SENTENCES = (
    "{person}, the {role} of {org}, said the {adj} {noun} would {verb} {number} {nouns} in {city}.",
    "The {adj} {noun} {verbed} {number} {nouns} on {weekday}, according to {org}.",
    "{org} {verbed} the {noun} after {number} {nouns} were reported in {city}.",
    "Officials in {city} expect the {noun} to {verb} by {month}, {last} said.",
    "{last} told reporters that {number} {nouns} had been {verbed} since {month}.",
    "The {noun} in {city} {verbed} a {adj} plan worth {money} on {weekday}.",
    "Critics argued that the {adj} {noun} could {verb} more {nouns} than {org} had planned.",
    "A spokesperson for {org} declined to comment on the {adj} {noun} in {city}.",
    "{number} {nouns} were {verbed} in {city} last {weekday}, up {percent} from a year earlier.",
    "{person} said the {noun} was {adj} and that {org} would {verb} it in {month}.",
    "Residents of {city} said the {adj} {nouns} had {verbed} their {noun}.",
    "A report by {org} found that {percent} of {nouns} in {city} were {adj}.",
)
TITLES = (
    "{org} {verbs} {adj} {noun} in {city}",
    "{city} {noun} {verbed} as {nouns} {verb}",
    "{person} to {verb} {adj} {noun}",
    "{number} {nouns} {verbed} in {city}",
)


@dataclass(frozen=True)
class SyntheticDoc:
    id: str
    title: str
    paragraphs: tuple[tuple[str, ...], ...]
    topic: str
    published: datetime

    @property
    def sentences(self) -> tuple[str, ...]:
        return tuple(s for p in self.paragraphs for s in p)


def plural(noun: str) -> str:
    if noun.endswith("y") and noun[-2] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + ("es" if noun.endswith(("s", "sh", "ch", "x")) else "s")


def _number(rng: random.Random) -> str:
    return rng.choice((str(rng.randint(2, 99)), str(rng.randint(100, 999)),
                       f"{rng.randint(1, 40)},{rng.randint(0, 999):03d}",
                       rng.choice(("two", "three", "four", "five", "six", "dozens of", "hundreds of"))))


def _slots(rng: random.Random, topic: str) -> dict[str, str]:
    """One random filler per slot; a template uses each slot at most once."""
    base, past = rng.choice(VERBS)
    noun = rng.choice(TOPIC_NOUNS[topic])
    return {
        "noun": noun, "nouns": plural(rng.choice(TOPIC_NOUNS[topic])), "adj": rng.choice(ADJECTIVES),
        "verb": base, "verbed": past, "verbs": base + "s", "org": rng.choice(ORGS), "city": rng.choice(CITIES),
        "person": f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}", "last": rng.choice(LAST_NAMES),
        "role": rng.choice(ROLES), "weekday": rng.choice(WEEKDAYS), "month": rng.choice(MONTHS),
        "number": _number(rng), "percent": f"{rng.randint(1, 60)} percent",
        "money": rng.choice((f"${rng.randint(1, 90)}.{rng.randint(1, 9)} million", f"€{rng.randint(10, 990)},000",
                             f"£{rng.randint(1, 9)}.{rng.randint(1, 9)} billion")),
    }


def _fill(template: str, rng: random.Random, topic: str) -> str:
    text = template.format(**_slots(rng, topic))
    return text[0].upper() + text[1:]


def synthetic_doc(rng: random.Random, n: int, day: date) -> SyntheticDoc:
    topic = rng.choice(tuple(TOPIC_NOUNS))
    target = rng.randint(MIN_WORDS, MAX_WORDS)
    sentences: list[str] = []
    words = 0
    while words < target:
        sentence = _fill(rng.choice(SENTENCES), rng, topic)
        if words >= MIN_WORDS and words + len(sentence.split()) > MAX_WORDS:
            break
        sentences.append(sentence)
        words += len(sentence.split())
    paragraphs = []
    while sentences:
        size = rng.randint(2, 4)
        paragraphs.append(tuple(sentences[:size]))
        sentences = sentences[size:]
    published = datetime.combine(day, datetime.min.time(), tzinfo=timezone.utc) + timedelta(
        minutes=rng.randrange(24 * 60))
    return SyntheticDoc(f"doc-{n:06d}", _fill(rng.choice(TITLES), rng, topic), tuple(paragraphs), topic, published)


def synthetic_docs(n_docs: int, seed: int) -> list[SyntheticDoc]:
    """`n_docs` articles, ITEMS_PER_FILE per day, the last day being the day before RUN_DATE."""
    rng = random.Random(seed)
    n_days = -(-n_docs // ITEMS_PER_FILE)
    first = RUN_DATE - timedelta(days=n_days)
    return [synthetic_doc(rng, n, first + timedelta(days=n // ITEMS_PER_FILE)) for n in range(n_docs)]


def _item_xml(doc: SyntheticDoc) -> str:
    slug = "-".join(doc.title.lower().split())
    link = f"{SITE}/{doc.published:%Y/%m/%d}/{slug}-{doc.id}"
    html = "".join(f"<p>{escape(' '.join(p))}</p>" for p in doc.paragraphs)
    return (f"<item><title>{escape(doc.title)}</title><link>{escape(link)}</link>"
            f"<guid isPermaLink=\"false\">{escape(doc.id)}</guid>"
            f"<pubDate>{format_datetime(doc.published)}</pubDate><category>{escape(doc.topic)}</category>"
            f"<description>{escape(html)}</description></item>\n")


def write_feeds(docs: Sequence[SyntheticDoc], folder: Path) -> list[Path]:
    """One RSS 2.0 file per publication day, named YYYY-MM-DD.xml."""
    folder.mkdir(parents=True)
    by_day: dict[date, list[SyntheticDoc]] = {}
    for doc in docs:
        by_day.setdefault(doc.published.date(), []).append(doc)
    paths = []
    for day, items in sorted(by_day.items()):
        head = ('<?xml version="1.0" encoding="UTF-8"?>\n<rss version="2.0"><channel>'
                f"<title>Synthetic Wire</title><link>{SITE}/</link>"
                f"<description>Generated news for the driftwatch ingest benchmark</description>"
                f"<language>en</language><lastBuildDate>{format_datetime(items[-1].published)}</lastBuildDate>\n")
        path = folder / f"{day.isoformat()}.xml"
        path.write_text(head + "".join(map(_item_xml, items)) + "</channel></rss>\n", encoding="utf-8")
        paths.append(path)
    return paths


def write_gold(docs: Sequence[SyntheticDoc], path: Path, seed: int) -> int:
    """Questions made from one sentence of a sampled document, which is the relevant one."""
    rng = random.Random(seed + 1)
    chosen = rng.sample(list(docs), min(GOLD_QUESTIONS, len(docs)))
    with path.open("w", encoding="utf-8") as out:
        for i, doc in enumerate(chosen, start=1):
            sentence = rng.choice(doc.sentences).rstrip(".")
            question = f"Which report says that {sentence[0].lower()}{sentence[1:]}?"
            out.write(json.dumps({"id": f"q{i}", "question": question, "relevant": [doc.id]},
                                 ensure_ascii=False) + "\n")
    return len(chosen)


# --- measuring --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Stage:
    owner: Any
    attr: str
    label: str


# Names that run_day, and what it calls, look up at call time: patching them times a stage without
# touching the pipeline. A stage called inside another one is reported under it.
STAGES = (
    Stage(job, "ingest", "ingest feeds"),
    Stage(job, "collect", "read + parse feed files (feedparser)"),
    Stage(Corpus, "ingest", "store documents (SQLite)"),
    Stage(Corpus, "snapshot", "corpus snapshot"),
    Stage(job, "chunk_documents", "chunk"),
    Stage(job, "embed_cached", "embed (hash, cache, encode)"),
    Stage(Embedder, "encode", "model encode"),
    Stage(job, "Retriever", "build BM25 + FAISS indexes"),
    Stage(job, "evaluate_pipelines", "evaluate gold questions"),
    Stage(job, "drift_rows", "drift statistics"),
    Stage(drift, "embedding_drift", "PSI / KL / KS"),
    Stage(drift, "evidently_embedding_drift", "Evidently domain classifier"),
    Stage(job, "evaluate_run_alerts", "alert rules"),
    Stage(store, "replace_date", "write CSV rows"),
)
MODEL_ENCODE = "model encode"


class StageTree:
    """Wall seconds per call path of timed stages: ("drift statistics", "chunk") is chunking inside drift."""

    def __init__(self) -> None:
        self.seconds: dict[tuple[str, ...], float] = {}  # in order of first call
        self._open: list[str] = []

    def timed(self, fn: Callable, label: str) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            path = (*self._open, label)
            self.seconds.setdefault(path, 0.0)
            self._open.append(label)
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[path] += time.perf_counter() - start
                self._open.pop()
        return wrapper

    def rows(self) -> list[tuple[tuple[str, ...], float]]:
        """Depth first: each stage right after its parent, siblings in order of first call."""
        first = {path: i for i, path in enumerate(self.seconds)}
        return sorted(self.seconds.items(), key=lambda row: [first[row[0][:n]] for n in range(1, len(row[0]) + 1)])

    def top_level(self) -> float:
        return sum(seconds for path, seconds in self.seconds.items() if len(path) == 1)

    def total(self, label: str) -> float:
        return sum(seconds for path, seconds in self.seconds.items() if path[-1] == label)


@contextmanager
def stage_timers() -> Iterator[StageTree]:
    """Time every stage while the block runs; a stage whose name is gone is skipped with a note."""
    tree = StageTree()
    with ExitStack() as stack:
        for stage in STAGES:
            original = getattr(stage.owner, stage.attr, None)
            if original is None:
                print(f"  (stage {stage.label!r} not timed: {stage.attr} is gone)")
                continue
            stack.enter_context(mock.patch.object(stage.owner, stage.attr, tree.timed(original, stage.label)))
        yield tree


@dataclass
class Timing:
    wall: float = 0.0
    # Process CPU time over all threads: it hardly moves when another process shares the CPUs, unlike wall.
    cpu: float = 0.0


@contextmanager
def clock() -> Iterator[Timing]:
    timing = Timing()
    wall, cpu = time.perf_counter(), time.process_time()
    yield timing
    timing.wall, timing.cpu = time.perf_counter() - wall, time.process_time() - cpu


@dataclass(frozen=True)
class TimedRun:
    run: dict
    timing: Timing  # run_day as a whole, gold loading included
    stages: StageTree
    metrics: dict[str, float]  # pipeline -> hit@REPORT_K


def timed_run(config: Config, embedder: Embedder) -> TimedRun:
    with stage_timers() as stages:
        with clock() as timing:
            result = job.run_day(config, RUN_DATE, embedder=embedder)
    hits = {}
    if REPORT_K in config.retrieval.k:
        hits = {p: result.mean(p, "hit", REPORT_K) for p in config.retrieval.pipelines}
    return TimedRun(result.run, timing, stages, hits)


def warm_up(embedder: Embedder, batch_size: int) -> float:
    """Load the model and run a few batches, so neither timed side pays for loading or first calls."""
    start = time.perf_counter()
    texts = [" ".join(["warm up sentence number", str(i)] * (1 + i % 20)) for i in range(2 * batch_size)]
    embedder.model.encode(texts, batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False)
    return time.perf_counter() - start


def chunk_texts(config: Config) -> list[str]:
    """The texts the run encoded: the snapshot's chunks, each distinct text once (as embed_cached does)."""
    with Corpus.in_dir(config.data_dir, readonly=True) as corpus:
        chunks = chunk_documents(config, corpus.snapshot(RUN_DATE))
    return list({text_hash(c.text): c.text for c in chunks}.values())


def raw_encode(embedder: Embedder, texts: Sequence[str], batch_size: int) -> Timing:
    with clock() as timing:
        embedder.model.encode(list(texts), batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False)
    return timing


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / MIB  # Linux reports KiB


def file_mib(path: Path) -> float:
    return path.stat().st_size / MIB if path.exists() else 0.0


# --- report ---------------------------------------------------------------------------------

def _share(seconds: float, total: float) -> str:
    return f"{seconds:9.2f} s {100 * seconds / total:5.1f} %"


def print_stages(title: str, timed: TimedRun) -> None:
    wall = timed.timing.wall
    print(f"{title}: {wall:.2f} s wall, {timed.timing.cpu:.2f} s CPU")
    for path, seconds in timed.stages.rows():
        indent = "  " * len(path)
        print(f"{indent}{path[-1]:<{48 - len(indent)}} {_share(seconds, wall)}")
    print(f"  {'other (gold load, lock, counts, top-1 cosines)':<46} {_share(wall - timed.stages.top_level(), wall)}",
          flush=True)


def configure_logging() -> None:
    """Warnings only, and no progress bars: the job's own cron setup, minus its INFO lines."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    import_bm25s()  # importing bm25s sets its logger to DEBUG: this puts it back (and keeps JAX out)
    for name, value in (("HF_HUB_DISABLE_PROGRESS_BARS", "1"), ("TRANSFORMERS_VERBOSITY", "error"),
                        ("TOKENIZERS_PARALLELISM", "false")):
        os.environ.setdefault(name, value)


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


@dataclass(frozen=True)
class Results:
    first: TimedRun
    second: TimedRun
    raw: Timing
    n_texts: int
    rss_after_first: float  # MiB
    corpus_mib: float
    wal_mib: float


def print_summary(r: Results) -> None:
    run, wall, cpu = r.first.run, r.first.timing.wall, r.first.timing.cpu
    n_docs, n_chunks = run["docs_total"], run["chunks_total"]
    ingest_cps, raw_cps = n_chunks / wall, r.n_texts / r.raw.wall
    ratio, cpu_ratio = ingest_cps / raw_cps, (n_chunks / cpu) / (r.n_texts / r.raw.cpu)
    rerun, embedded_again = r.second.timing.wall / wall, r.second.run["chunks_embedded"]
    print()
    print(f"== driftwatch ingest benchmark: {os.cpu_count()} CPUs, {load()} ==")
    print(f"ingest {n_docs} docs: {wall:.1f} s, {n_docs / wall:.1f} docs/s, {ingest_cps:.1f} chunks/s "
          f"({n_chunks} chunks, {run['chunks_embedded']} embedded; run's own clock {run['seconds']:.1f} s)")
    print(f"raw encode: {r.n_texts} chunks in {r.raw.wall:.1f} s, {raw_cps:.1f} chunks/s")
    print(f"ratio {ratio:.2f} (target >= {RATIO_TARGET}): {verdict(ratio >= RATIO_TARGET)}")
    print(f"  by CPU time: ingest {cpu:.1f} s, raw encode {r.raw.cpu:.1f} s, ratio {cpu_ratio:.2f} "
          f"(steadier when other processes share the CPUs)")
    in_run = r.first.stages.total(MODEL_ENCODE)
    if in_run:
        print(f"  the run's own model encode: {in_run:.1f} s; everything else: {wall - in_run:.1f} s "
              f"({100 * (wall - in_run) / wall:.1f} % of the run)")
    print(f"re-run, nothing new: {r.second.timing.wall:.2f} s = {rerun:.3f} of the first run "
          f"(target < {RERUN_TARGET}): {verdict(rerun < RERUN_TARGET)}; "
          f"chunks_embedded {embedded_again} (must be 0): {verdict(embedded_again == 0)}")
    print(f"peak RSS after the first run: {r.rss_after_first:.0f} MiB (at the end: {peak_rss_mib():.0f} MiB); "
          f"corpus.sqlite {r.corpus_mib:.1f} MiB (+ WAL {r.wal_mib:.1f} MiB)")
    if r.first.metrics:
        print(f"sanity, hit@{REPORT_K}: " + ", ".join(f"{p} {v:.2f}" for p, v in r.first.metrics.items()))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--docs", type=int, default=DEFAULT_DOCS,
                        help=f"documents to generate (default {DEFAULT_DOCS})")
    parser.add_argument("--seed", type=int, default=SEED, help=f"random seed (default {SEED})")
    args = parser.parse_args(argv)
    if args.docs < 1:
        parser.error("--docs must be at least 1")
    configure_logging()

    with tempfile.TemporaryDirectory(prefix="driftwatch-bench-") as tmp:
        root = Path(tmp)
        with clock() as made:
            docs = synthetic_docs(args.docs, args.seed)
            feeds = write_feeds(docs, root / "feeds")
            n_questions = write_gold(docs, root / "gold.jsonl", args.seed)
        words = sum(len(s.split()) for d in docs for s in d.sentences) / len(docs)
        print(f"generated {len(docs)} docs (mean {words:.0f} words, seed {args.seed}) in {len(feeds)} feed files "
              f"({sum(map(file_mib, feeds)):.1f} MiB) and {n_questions} questions in {made.wall:.1f} s", flush=True)

        config = Config(data_dir=root / "data", gold=root / "gold.jsonl",
                        sources=(SourceConfig(name=SOURCE, path=root / "feeds"),))
        batch_size = config.embedder.batch_size
        embedder = Embedder(config.embedder)
        print(f"model loaded and warmed up in {warm_up(embedder, batch_size):.1f} s (batch size {batch_size}, "
              f"pipelines {', '.join(config.retrieval.pipelines)}); {load()}", flush=True)

        first = timed_run(config, embedder)
        rss_after_first = peak_rss_mib()
        print_stages("first run", first)

        texts = chunk_texts(config)
        raw = raw_encode(embedder, texts, batch_size)
        print(f"raw encode of the same {len(texts)} chunk texts: {raw.wall:.2f} s wall, {raw.cpu:.2f} s CPU",
              flush=True)

        second = timed_run(config, embedder)
        print_stages("second run, nothing new", second)
        print_summary(Results(first, second, raw, len(texts), rss_after_first,
                              file_mib(config.data_dir / CORPUS_FILE),
                              file_mib(config.data_dir / f"{CORPUS_FILE}-wal")))


if __name__ == "__main__":
    main()
