"""Time every dashboard page on a year of history: a synthetic but contract-exact store (365 daily runs x 200
questions x 4 pipelines x 3 k) written with pipeline.store's writers, each page rendered by Streamlit's AppTest on
its first visit (caches empty) and again (cached). Run from the repo root: python -m bench.dashboard [--out DIR]"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline import contract, store
from pipeline.config import ENV_CONFIG, ENV_DATA_DIR, Config, RetrievalConfig, to_toml
from pipeline.contract import ALERT, CORPUS_METRIC, CORPUS_WIDE, DRIFT_RULE, DROP, FEEDS_FAILED, WARNING
from pipeline.corpus import Corpus, text_hash
from pipeline.embeddings import Embedder
from pipeline.chunking import chunk_documents
from pipeline.sources import Document

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "app.py"
CONFIG_FILE = "bench.toml"  # the store's settings (pipelines, k, gold file), written beside it
GOLD_FILE = "gold.jsonl"

DAYS = 365
LAST_DAY = date(2026, 11, 22)  # the demo's last run date
FIRST_DAY = LAST_DAY - timedelta(days=DAYS - 1)
QUESTIONS = 200
PIPELINES = ("bm25", "dense", "hybrid", "hybrid_rerank")
DENSE_PIPELINES = ("dense", "hybrid", "hybrid_rerank")  # those with a question-top1 cosine
KS = (1, 5, 10)
TOP = max(KS)  # retrieved ids kept per row
DEPTH = 50  # candidate depth: a first relevant rank beyond it is 0 (not retrieved)
SEED = 0

TOPICS = ("eco", "pol", "hea", "tech", "sci")
SOURCES = {"eco": "harbor-ledger", "pol": "harbor-ledger", "hea": "meridian-health", "tech": "northwind-wire",
           "sci": "northwind-wire"}
WORDS = ("budget", "rate", "vote", "clinic", "chip", "grid", "port", "court", "lab", "wage", "bond", "trial",
         "orbit", "harbour", "levy", "ward")
TWO_ANSWERS = 0.35  # share of the questions with a second (grade 1) relevant document
DOCS_PER_DAY = 10
DRIFT_SOURCE, DRIFT_PREFIX = "coastline-syndicate", "dup"
DRIFT_DAY = 320  # index of the run date from which near-duplicates of the gold answers flow in
DRIFT_DOCS, DRIFT_SPREAD = 120, 3
AFFECTED = 0.35  # share of the questions whose answers get near-duplicates
DEGRADED_DAYS = (41, 42, 203)  # a feed failed on these runs
EVENTS = {90: "harbor-ledger moved its feed URL",
          DRIFT_DAY: f"drift event: {DRIFT_DOCS} near-duplicates of gold answers flow in over {DRIFT_SPREAD} days"}
DIM = 384  # all-MiniLM-L6-v2's, so the Drift page projects vectors of the real size

# The ranking model: how likely a pipeline ranks the answer first, before the decline and the drift event.
BASE_QUALITY = {"bm25": 0.55, "dense": 0.70, "hybrid": 0.75, "hybrid_rerank": 0.82}
DRIFT_HARM = {"bm25": 0.10, "dense": 0.35, "hybrid": 0.25, "hybrid_rerank": 0.15}  # near-duplicates fool embeddings
YEARLY_DECLINE = 0.10  # follow-up stories slowly crowd the answers
CROWDING = {True: 0.5, False: 0.15}  # chance a top slot holds a near-duplicate after the event (affected or not)

# The alert rules as monitor.toml ships them.
WATCHED, WATCHED_K = ("hit", "recall", "mrr", "ndcg"), 5
WINDOW, DROP_THRESHOLD = 7, 0.10  # standard criticality

TARGET_SECONDS = 2.0
TIMEOUT = 300  # seconds per AppTest script run
# Clearing Streamlit's caches outside a script run warns each time, from these two.
QUIET_LOGGERS = ("streamlit.runtime.caching.cache_data_api", "streamlit.runtime.scriptrunner_utils.script_run_context")


def day_iso(day: int) -> str:
    return (FIRST_DAY + timedelta(days=int(day))).isoformat()


# --- the corpus and the questions -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Docs:
    """The corpus in index order: the gold answers (first day), the daily stories, then the near-duplicates."""

    ids: np.ndarray  # str: "<topic>-<index>" or "dup-<n>", nothing store.join_ids would have to encode
    first_seen: np.ndarray  # day index
    topic: np.ndarray  # str
    n_rel: np.ndarray  # relevant documents per question (1 or 2); question q's are ids[first_answer[q]:][:n_rel[q]]
    n_gold: int

    @property
    def first_answer(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.n_rel)[:-1]])

    @property
    def drift_start(self) -> int:
        return self.n_gold + DOCS_PER_DAY * DAYS

    def present(self, day: np.ndarray) -> np.ndarray:
        """Answers and daily stories in the corpus on each day (near-duplicates not counted)."""
        return self.n_gold + DOCS_PER_DAY * (day + 1)

    def drift_present(self, day: np.ndarray) -> np.ndarray:
        return np.clip(day - DRIFT_DAY + 1, 0, DRIFT_SPREAD) * DRIFT_DOCS // DRIFT_SPREAD


def make_docs(rng: np.random.Generator) -> Docs:
    n_rel = np.where(rng.random(QUESTIONS) < TWO_ANSWERS, 2, 1)
    n_gold = int(n_rel.sum())
    n_stories = n_gold + DOCS_PER_DAY * DAYS
    topics = rng.choice(TOPICS, size=n_stories + DRIFT_DOCS)
    ids = [f"{t}-{i:05d}" for i, t in enumerate(topics[:n_stories])] + [f"{DRIFT_PREFIX}-{i:04d}"
                                                                         for i in range(DRIFT_DOCS)]
    first_seen = np.concatenate([np.zeros(n_gold, dtype=int), np.repeat(np.arange(DAYS), DOCS_PER_DAY),
                                 DRIFT_DAY + np.arange(DRIFT_DOCS) * DRIFT_SPREAD // DRIFT_DOCS])
    return Docs(np.array(ids), first_seen, topics, n_rel, n_gold)


def gold_set(docs: Docs) -> list[dict]:
    """The gold set as JSONL records: the first answer graded 2, the second 1."""
    first = docs.first_answer
    return [{"id": f"q{q + 1:03d}", "question": f"Synthetic question {q + 1} on {docs.topic[first[q]]}",
             "relevant": {str(docs.ids[first[q] + j]): 2 - j for j in range(docs.n_rel[q])}}
            for q in range(QUESTIONS)]


@dataclass(frozen=True)
class Ranks:
    """Per (day, pipeline, question), flattened in that order: where the answers landed (0: beyond DEPTH)."""

    a: np.ndarray  # the grade-2 answer
    b: np.ndarray  # the grade-1 answer (0 for questions with one answer)
    quality: np.ndarray

    @property
    def first(self) -> np.ndarray:
        return np.where(self.b > 0, np.minimum(np.where(self.a > 0, self.a, DEPTH + 1), self.b), self.a)


def answer_ranks(rng: np.random.Generator, docs: Docs, affected: np.ndarray) -> Ranks:
    """A fixed latent draw per (pipeline, question), jittered daily, turned into the answer's rank through a
    geometric distribution whose success chance declines over the year and drops for the affected questions
    from the drift day; a second answer sits a few ranks away."""
    shape = (DAYS, len(PIPELINES), QUESTIONS)
    days = np.arange(DAYS)[:, None, None]
    base = np.array([BASE_QUALITY[p] for p in PIPELINES])[None, :, None]
    harm = np.array([DRIFT_HARM[p] for p in PIPELINES])[None, :, None]
    ramp = np.clip((days - DRIFT_DAY + 1) / DRIFT_SPREAD, 0, 1)
    quality = (base + rng.normal(0, 0.15, QUESTIONS) + rng.normal(0, 0.08, shape[1:])
               - YEARLY_DECLINE * days / (DAYS - 1) - harm * ramp * affected)
    quality = np.clip(quality, 0.03, 0.97)
    latent = np.clip(rng.random(shape[1:]) + rng.normal(0, 0.04, shape), 0, 0.999)
    a = 1 + np.floor(np.log1p(-latent) / np.log1p(-quality)).astype(int)
    b = a + rng.choice([-2, -1, 1, 2, 3, 5], size=shape[1:])
    b = np.where(b < 1, a + 1, b) * (docs.n_rel == 2)
    a = np.where(a > DEPTH, 0, a)
    b = np.where((b > DEPTH) | (a == 0), 0, b)
    return Ranks(a.reshape(-1), b.reshape(-1), quality.reshape(-1))


def top_ids(rng: np.random.Generator, docs: Docs, affected: np.ndarray, ranks: Ranks) -> list[list[str]]:
    """Each row's top TOP ids: consecutive stories of that day's corpus (never the question's own answers),
    near-duplicates crowding in after the drift event, and the answers on their ranks. No id repeats in a row."""
    n = len(ranks.a)
    day = np.repeat(np.arange(DAYS), len(PIPELINES) * QUESTIONS)
    question = np.tile(np.arange(QUESTIONS), DAYS * len(PIPELINES))
    present, offsets = docs.present(day)[:, None], np.arange(TOP)[None, :]
    start = (rng.random(n) * present[:, 0]).astype(int)[:, None]
    slots = (start + offsets) % present
    answers = docs.first_answer[question][:, None]
    own = (slots >= answers) & (slots < answers + docs.n_rel[question][:, None])
    slots = np.where(own, (slots + TOP) % present, slots)
    dups = docs.drift_present(day)[:, None]
    crowd = (dups > 0) & (rng.random((n, TOP)) < np.where(affected[question], CROWDING[True], CROWDING[False])[:, None])
    slots = np.where(crowd, docs.drift_start + (start + offsets) % np.maximum(dups, 1), slots)
    rows = np.arange(n)
    for rank, j in ((ranks.a, 0), (ranks.b, 1)):
        shown = (rank >= 1) & (rank <= TOP)
        slots[rows[shown], rank[shown] - 1] = docs.first_answer[question[shown]] + j
    return docs.ids[slots].tolist()


def top1_scores(rng: np.random.Generator, quality: np.ndarray) -> np.ndarray:
    """On each pipeline's own scale: BM25, cosine, RRF, cross-encoder logit."""
    pipeline = np.tile(np.repeat(np.arange(len(PIPELINES)), QUESTIONS), DAYS)
    scales = [6 + 9 * quality, 0.45 + 0.35 * quality, 1 / 61 + 1 / (61 + 20 * (1 - quality)), -2 + 10 * quality]
    return np.select([pipeline == i for i in range(len(PIPELINES))], scales) + rng.normal(0, 0.01, len(quality))


def per_question_frame(rng: np.random.Generator, docs: Docs, gold: list[dict]) -> pd.DataFrame:
    """per_question.csv: each row's metrics follow from its answers' ranks (`check_sample` holds them to
    pipeline.metrics.evaluate on the retrieved ids)."""
    affected = rng.random(QUESTIONS) < AFFECTED
    ranks = answer_ranks(rng, docs, affected)
    top = top_ids(rng, docs, affected, ranks)
    keys = {"run_date": np.repeat([day_iso(d) for d in range(DAYS)], len(PIPELINES) * QUESTIONS),
            "pipeline": np.tile(np.repeat(PIPELINES, QUESTIONS), DAYS),
            "question_id": np.tile([q["id"] for q in gold], DAYS * len(PIPELINES))}
    relevant = np.tile(docs.n_rel, DAYS * len(PIPELINES))
    first, score = ranks.first, top1_scores(rng, ranks.quality)
    frames = []
    for k in KS:
        in_a, in_b = (ranks.a >= 1) & (ranks.a <= k), (ranks.b >= 1) & (ranks.b <= k)
        found = in_a.astype(int) + in_b
        dcg = in_a * 3 / np.log2(np.maximum(ranks.a, 1) + 1.0) + in_b / np.log2(np.maximum(ranks.b, 1) + 1.0)
        ideal = 3 + np.where((relevant == 2) & (k >= 2), 1 / math.log2(3), 0)
        frames.append(pd.DataFrame({
            **keys, "k": k, "hit": (found > 0).astype(float), "recall": found / relevant, "precision": found / k,
            "rr": np.where((first >= 1) & (first <= k), 1 / np.maximum(first, 1), 0.0), "ndcg": dcg / ideal,
            "unjudged": (k - found) / k, "first_relevant_rank": first, "top1_score": score,
            "retrieved": [" ".join(ids[:k]) for ids in top], "gold_missing": 0}))
    return pd.concat(frames, ignore_index=True).sort_values(["run_date", "pipeline", "k", "question_id"],
                                                            kind="stable", ignore_index=True)


def check_sample(per_question: pd.DataFrame, gold: list[dict], n: int = 20_000) -> None:
    """Recompute the metrics of a sample of rows with pipeline.metrics from their retrieved ids and the gold set."""
    from pipeline.metrics import evaluate

    qrels = {q["id"]: q["relevant"] for q in gold}
    sample = per_question.sample(min(n, len(per_question)), random_state=SEED)
    for k, rows in sample.groupby("k"):
        result = evaluate([store.split_ids(r) for r in rows["retrieved"]], [qrels[q] for q in rows["question_id"]],
                          (int(k),))
        for metric in ("hit", "recall", "precision", "rr", "ndcg", "unjudged"):
            if not np.allclose(rows[metric].to_numpy(), result.values[int(k)][metric], rtol=0, atol=1e-12):
                raise RuntimeError(f"synthetic {metric}@{k} disagrees with pipeline.metrics.evaluate")


def metric_frame(per_question: pd.DataFrame) -> pd.DataFrame:
    """metrics.csv: each per-question metric's mean over the questions (rr's is MRR), as the job writes it."""
    means = per_question.groupby(["run_date", "pipeline", "k"])[
        ["hit", "recall", "precision", "rr", "ndcg", "unjudged"]].mean().rename(columns={"rr": "mrr"})
    long = means.stack().rename("value").reset_index().rename(columns={"level_3": "metric"})
    return long.assign(n_questions=QUESTIONS)


# --- corpus.sqlite, runs, drift and alerts --------------------------------------------------------------------


def document(rng: np.random.Generator, docs: Docs, i: int) -> Document:
    topic = str(docs.topic[i])
    day = FIRST_DAY + timedelta(days=int(docs.first_seen[i]))
    return Document(
        id=str(docs.ids[i]), title=f"{topic.upper()} story {i}: " + " ".join(topic + w for w in rng.choice(WORDS, 4)),
        text=" ".join(topic + w for w in rng.choice(WORDS, int(rng.integers(40, 90)))),
        url=f"https://news.example.com/{topic}/{docs.ids[i]}",
        published=datetime.combine(day, datetime.min.time(), timezone(timedelta(hours=1))) + timedelta(hours=7),
        source=DRIFT_SOURCE if i >= docs.drift_start else SOURCES[topic], categories=(topic,))


def run_row(rng: np.random.Generator, day: int, counts, config: Config) -> dict:
    failed = int(day in DEGRADED_DAYS)
    seconds = float(rng.uniform(18, 40))
    start = datetime.combine(FIRST_DAY + timedelta(days=day), datetime.min.time(), UTC)
    start += timedelta(hours=5, seconds=int(rng.integers(0, 60)))
    return {
        "run_date": day_iso(day), "run_id": rng.bytes(6).hex(), "started_at": start.isoformat(timespec="seconds"),
        "finished_at": (start + timedelta(seconds=seconds)).isoformat(timespec="seconds"),
        "status": contract.STATUS_DEGRADED if failed else contract.STATUS_OK,
        "feeds_ok": 3 + (day >= DRIFT_DAY) - failed, "feeds_failed": failed,
        "docs_new": counts.new, "docs_updated": counts.updated, "docs_deleted": counts.deleted,
        "docs_total": counts.total, "chunks_total": counts.total, "chunks_embedded": counts.new,  # one chunk each
        "seconds": round(seconds, 3), "model": config.embedder.model, "config_hash": config.config_hash(),
        "events": EVENTS.get(day, "")}


def embeddings(rng: np.random.Generator, corpus: Corpus, config: Config, docs: Docs) -> int:
    """A cached vector per chunk, as the job leaves them: near its topic's centroid, the near-duplicates off to one
    side, so the Drift page's projection has the real size and something to show."""
    centroids = {t: rng.normal(0, 1, DIM) for t in TOPICS}
    elsewhere = 0.6 * rng.normal(0, 1, DIM) + 0.4 * centroids["pol"]
    topic = dict(zip(docs.ids.tolist(), docs.topic.tolist(), strict=True))
    vectors = {}
    for chunk in chunk_documents(config, corpus.snapshot(LAST_DAY)):
        v = (elsewhere if chunk.doc_id.startswith(DRIFT_PREFIX) else centroids[topic[chunk.doc_id]])
        v = v + rng.normal(0, 1.2, DIM)
        vectors[text_hash(chunk.text)] = (v / np.linalg.norm(v)).astype(np.float32)
    corpus.cache_embeddings(Embedder(config.embedder).key, vectors)
    return len(vectors)


def corpus_and_runs(rng: np.random.Generator, data_dir: Path, config: Config, docs: Docs) -> pd.DataFrame:
    """corpus.sqlite (each document ingested on its first-seen date, its chunk's embedding cached) and runs.csv
    from the corpus's own counts."""
    started = time.perf_counter()
    runs = []
    with Corpus.in_dir(data_dir) as corpus:
        for day in range(DAYS):
            corpus.ingest([document(rng, docs, i) for i in np.flatnonzero(docs.first_seen == day)], day_iso(day))
            runs.append(run_row(rng, day, corpus.counts(day_iso(day)), config))
        vectors = embeddings(rng, corpus, config, docs)
    print(f"  corpus.sqlite: {len(docs.ids):,} documents, {vectors:,} cached chunk embeddings "
          f"({time.perf_counter() - started:.1f} s)")
    return pd.DataFrame(runs)


def drift_frame(rng: np.random.Generator, runs: pd.DataFrame) -> pd.DataFrame:
    """drift.csv: every statistic of the family with a null and a verdict, plus the context rows; the day's new
    chunks against the 14 days before, the near-duplicates drifting the duplicate share on their days."""
    rows = []
    for day, new in enumerate(runs["chunks_embedded"].clip(lower=20)):
        event = DRIFT_DAY <= day < DRIFT_DAY + DRIFT_SPREAD
        n_current, n_reference = int(new), int(14 * 40)
        null = {s: abs(rng.normal(0.3, 0.02)) for s in contract.DRIFT_FAMILY}
        values = {name: q * rng.uniform(0.3, 0.9) for name, q in null.items()}
        if event:
            values[contract.DUPLICATE_SHARE] = 0.7
        for statistic, value in values.items():
            drifted = event and statistic == contract.DUPLICATE_SHARE
            rows.append({"statistic": statistic, "value": value, "null_value": null[statistic],
                         "p_value": 0.002 if drifted else min(1.0, rng.uniform(0.1, 7)), "threshold": 0.25,
                         "verdict": contract.DRIFTED if drifted else contract.STABLE,
                         "detail": f"{DRIFT_DOCS // DRIFT_SPREAD} near copies" if drifted else "",
                         "run_date": day_iso(day), "n_current": n_current})
        for i, p in enumerate(DENSE_PIPELINES[1:]):
            rows.append({"statistic": f"{contract.TOP1_COSINE}_{p}", "verdict": contract.CONTEXT,
                         "value": 0.64 - 0.03 * day / (DAYS - 1) - 0.05 * event - 0.02 * i + rng.normal(0, 0.002),
                         "run_date": day_iso(day), "n_current": n_current})
        for row in rows[-len(values) - 2:]:
            row.update(reference_date=day_iso(max(0, day - 1)), reference_start=day_iso(max(0, day - 14)),
                       current_start=day_iso(day), n_reference=n_reference)
    return pd.DataFrame(rows, columns=list(contract.DRIFT_COLUMNS))


def drop_alerts(metrics: pd.DataFrame) -> list[tuple]:
    found = []
    watched = metrics[(metrics["k"] == WATCHED_K) & metrics["metric"].isin(WATCHED)]
    for (pipeline, metric), series in watched.groupby(["pipeline", "metric"]):
        values = series.sort_values("run_date")
        previous = values["value"].shift(1).rolling(WINDOW, min_periods=3)
        name = f"{metric}@{WATCHED_K}"
        for day, value, mean, n in zip(values["run_date"], values["value"], previous.mean(), previous.count(),
                                       strict=True):
            if n >= 3 and value < mean * (1 - DROP_THRESHOLD):
                change = (value - mean) / mean
                found.append((day, DROP, pipeline, name, value, mean, change * 100, DROP_THRESHOLD * 100, ALERT,
                              (f"{name} of {pipeline} fell {-change:.1%} to {value:.3f} against its {int(n)}-run "
                               f"mean {mean:.3f} (threshold 10%, standard criticality); synthetic data, no test")))
    return found


def drift_alerts(drift: pd.DataFrame) -> list[tuple]:
    drifted = drift[drift["verdict"] == contract.DRIFTED]
    return [(row.run_date, DRIFT_RULE, CORPUS_WIDE, CORPUS_METRIC, row.value, row.null_value, math.nan, row.threshold,
             ALERT, f"corpus drift: {row.statistic} {row.value:.3f} (null 95% {row.null_value:.3f}). New: {row.detail}")
            for row in drifted.itertuples()]


def feed_alerts(runs: pd.DataFrame) -> list[tuple]:
    failing = runs[runs["feeds_failed"] > 0]
    return [(day, FEEDS_FAILED, CORPUS_WIDE, FEEDS_FAILED, float(failed), math.nan, math.nan, 0.0, WARNING,
             f"{failed} of {failed + ok} feeds failed; today's corpus lacks their new documents")
            for day, failed, ok in zip(failing["run_date"], failing["feeds_failed"], failing["feeds_ok"], strict=True)]


def alert_frame(metrics: pd.DataFrame, drift: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """alerts.csv: a drop rule (watched series at k = 5), the drift verdicts and the feed rule applied to the
    synthetic series with the job's wording (without the paired test, and saying so)."""
    alerts = pd.DataFrame([(*row, "", math.nan) for row in drop_alerts(metrics) + drift_alerts(drift) + feed_alerts(runs)],
                          columns=list(contract.ALERTS_COLUMNS))
    return mark_ongoing(alerts.sort_values(["run_date", "rule", "pipeline", "metric"], ignore_index=True))


def mark_ongoing(alerts: pd.DataFrame) -> pd.DataFrame:
    """The job's `since`: the first run date of a condition's streak over consecutive days at a severity at least
    today's (an escalation from warning to alert starts a new streak)."""
    rank = {WARNING: 0, ALERT: 1}
    streaks: dict[tuple, tuple[str, str, str]] = {}  # (rule, pipeline, metric) -> first date, last date, severity
    since = []
    for row in alerts.itertuples(index=False):
        key = (row.rule, row.pipeline, row.metric)
        yesterday = (date.fromisoformat(row.run_date) - timedelta(days=1)).isoformat()
        start, last, severity = streaks.get(key, (row.run_date, "", row.severity))
        start = start if last == yesterday and rank[severity] >= rank[row.severity] else row.run_date
        streaks[key] = (start, row.run_date, row.severity)
        since.append(start)
    return alerts.assign(since=since)


def build_store(data_dir: Path) -> None:
    rng = np.random.default_rng(SEED)
    data_dir.mkdir(parents=True, exist_ok=True)
    config = Config(data_dir=data_dir, gold=data_dir / GOLD_FILE,
                    retrieval=RetrievalConfig(pipelines=PIPELINES, k=KS, candidate_depth=DEPTH))
    (data_dir / CONFIG_FILE).write_text(to_toml(config), encoding="utf-8")
    docs = make_docs(rng)
    gold = gold_set(docs)
    (data_dir / GOLD_FILE).write_text("".join(json.dumps(q) + "\n" for q in gold), encoding="utf-8")
    per_question = per_question_frame(rng, docs, gold)
    check_sample(per_question, gold)
    metrics = metric_frame(per_question)
    runs = corpus_and_runs(rng, data_dir, config, docs)
    drift = drift_frame(rng, runs)
    for name, frame in ((contract.RUNS, runs), (contract.METRICS, metrics), (contract.PER_QUESTION, per_question),
                        (contract.DRIFT, drift), (contract.ALERTS, alert_frame(metrics, drift, runs))):
        store.write_table(data_dir, name, frame)
        print(f"  {name}: {len(frame):,} rows, {(data_dir / name).stat().st_size / 1e6:.1f} MB")


# --- the timing -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PageTime:
    page: str
    first: float
    cached: float
    problems: tuple[str, ...]


def page_files() -> list[str]:
    """Every page file, in the order app.py routes them (files it does not name last)."""
    routes = APP.read_text(encoding="utf-8")
    files = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "pages").glob("*.py") if not p.name.startswith("_"))
    return sorted(files, key=lambda f: routes.find(f'"{f}"') % (len(routes) + 1))


def quiet() -> None:
    from streamlit.testing.v1 import AppTest  # noqa: F401  (creates Streamlit's loggers)

    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


def clear_caches() -> None:
    """Empty Streamlit's caches: they outlive an AppTest."""
    import streamlit as st

    quiet()  # each AppTest run resets Streamlit's log levels
    st.cache_data.clear()
    st.cache_resource.clear()


def problems(at) -> tuple[str, ...]:
    """What would make a timing meaningless: an exception, a red box outside the alert banner, not one title."""
    try:
        banner = {e.proto.body for e in at.get_by_key("alert_banner").error}
    except KeyError:  # no open alert on the latest run
        banner = set()
    titles = [t.value for t in at.title]
    return tuple([f"exception: {e.value}" for e in at.exception]
                 + [f"error: {e.value}" for e in at.error if e.proto.body not in banner]
                 + ([f"titles: {titles}"] if len(titles) != 1 else []))


def render(page: str) -> PageTime:
    """The page's first visit with Streamlit's caches empty (the session's own first run, on the default page,
    is not counted), then a rerun of it with everything cached."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT).run()
    clear_caches()
    at.switch_page(page)
    started = time.perf_counter()
    at.run()
    first = time.perf_counter() - started
    started = time.perf_counter()
    at.run()
    return PageTime(page, first, time.perf_counter() - started, problems(at))


def time_pages(data_dir: Path) -> list[PageTime]:
    quiet()
    os.environ[ENV_DATA_DIR] = str(data_dir)
    os.environ[ENV_CONFIG] = str(data_dir / CONFIG_FILE)
    pages = page_files()
    for page in pages:  # a server imports each page's modules once, so time a process that already has
        render(page)
    return [render(page) for page in pages]


def print_table(times: Sequence[PageTime]) -> None:
    print()
    print("first: the page's first visit with Streamlit's caches empty (in a process that has imported every page);\n"
          "cached: the same page rerun. Script time only (AppTest): a browser adds its own rendering.")
    print(f"{'page':<22} {'first render s':>14} {'cached render s':>15} {'target s':>8}  notes")
    for t in times:
        notes = "; ".join(t.problems)[:120] or ("over target" if max(t.first, t.cached) > TARGET_SECONDS else "")
        print(f"{t.page:<22} {t.first:>14.2f} {t.cached:>15.2f} {TARGET_SECONDS:>8.1f}  {notes}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, help="build the store here and keep it (default: a temporary folder)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    out = args.out.resolve() if args.out else Path(tempfile.mkdtemp(prefix="driftwatch-bench-"))
    try:
        print(f"== driftwatch dashboard benchmark: {os.cpu_count()} CPUs ==")
        print(f"building {DAYS} runs x {QUESTIONS} questions x {len(PIPELINES)} pipelines x {len(KS)} k in {out}")
        started = time.perf_counter()
        build_store(out)
        print(f"  built in {time.perf_counter() - started:.1f} s")
        print_table(time_pages(out))
    finally:
        if not args.out:
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
