"""One daily run (ingest, index, evaluate, write the series) and the backfill over a range of dates."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import logging
import math
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone

import numpy as np
import pandas as pd
import scipy

from pipeline import (answers, canary, contract, drift, folder_source, index_health, indexes, memo, runmemo,
                      segments, signals, store)
from pipeline.alerts import Alert, alerts_frame, evaluate_alerts, plural
from pipeline.notify import deliver, enqueue
from pipeline.chunking import Chunk, chunk_document, chunk_id, chunk_settings
from pipeline.windows import drift_table, window_verdicts
from pipeline.config import (EMBEDDER_OVERRIDES, Config, TargetConfig, builtin_pipelines, candidate_chunking,
                             candidates, own_embedder, require_sources, target_list)
from pipeline.corpus import CORPUS_FILE, Corpus
from pipeline.corpus import check_file as check_corpus
from pipeline.embeddings import Embedded, Embedder, EmbedderError, EmbeddingStopped, embed_cached, locate_model
from pipeline.exporters import export, with_events
from pipeline.gold import GoldQuestion, load_gold
from pipeline.judging import ledger, pool, qrels
from pipeline.judging import questions as drafted
from pipeline.judging.ledger import read_judgments
from pipeline.metrics import METRICS, default_k, evaluate, mean_rows
from pipeline.retrieval import RERANKER, Ranking, Reranker, Retriever
from pipeline.sources import Caps, Document, FeedError, FeedOutcome, collect
from pipeline.targets import Outcome, Target, evaluate_target, external_targets
from pipeline.redact import redact
from pipeline.source_health import source_rows

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunResult:
    run_date: date
    run: dict  # the runs.csv row
    metrics: list[dict]  # the metrics.csv rows
    per_question: list[dict]  # the per_question.csv rows
    failed_feeds: list[FeedOutcome] = field(default_factory=list)
    drift: list[dict] = field(default_factory=list)  # the drift.csv rows
    alerts: list[Alert] = field(default_factory=list)  # every alert of the run (new and ongoing)
    notified: bool | None = None  # outbox delivery: None when nothing was to be sent, False when some stays
    signals: list[dict] = field(default_factory=list)  # the signals.csv rows (label-free early warnings)
    failed_targets: list[Outcome] = field(default_factory=list)  # targets that could not be scored, with why
    answers: answers.AnswerRun | None = None  # the answer layer's rows (None when generation.mode is off)

    def mean(self, pipeline: str, metric: str, k: int) -> float:
        for row in self.metrics:
            if (row["pipeline"], row["metric"], row["k"]) == (pipeline, metric, k):
                return row["value"]
        raise KeyError((pipeline, metric, k))


def _import_early(name: str) -> None:
    """Start importing module `name` on a thread. scipy.stats (about 1 s to import) is first needed late in a
    run, by the top-1 KS signal; imported meanwhile, it overlaps with the indexing and searching (FAISS, SQLite,
    numpy), which release the GIL. Python's import locks make the main thread wait for it if it gets there first.
    A run that reads the memo imports it when a KS test is not in the memo too (the import would mostly hold the
    GIL against that run's pandas and Python work, and a re-run needs none)."""
    if name not in sys.modules:
        threading.Thread(target=importlib.import_module, args=(name,), name=f"import {name}", daemon=True).start()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


_clock = time.monotonic  # the deadline's clock (a module attribute, so that a test can move it)


class Deadline:
    """A run's wall-clock limit (run.deadline_seconds), asked before each source and each embedding batch."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.end = seconds, _clock() + seconds

    def passed(self) -> bool:
        return _clock() >= self.end


def ingest(config: Config, corpus: Corpus, run_date: date, deadline: Deadline | None = None) -> list[FeedOutcome]:
    """Fetch every source, store what it carries; a failing feed is logged and counted, never fatal.

    Each feed is read within the [fetch] caps (`sources.read_feed`: what was over one is in its outcome's
    notes). Once `deadline` has passed, the remaining sources are not fetched: each gets a `deferred` outcome.

    A URL source is fetched only when `run_date` is not in the past (see `_is_past`): a past date
    replays what the corpus stored, since a feed fetched now would put later items into the past.
    Raises ConfigError when no source is configured and FeedError when a source's path does not
    exist, before anything is stored.
    """
    _check_sources(config)
    past = any(source.url for source in config.sources) and _is_past(config, run_date)
    http_cache = corpus.http_cache()
    outcomes: list[FeedOutcome] = []
    clashes = 0
    cutoff = None
    if config.corpus.max_age_days is not None:
        cutoff = run_date - timedelta(days=config.corpus.max_age_days)
    settings = f"max_age_days={config.corpus.max_age_days}"
    for source in config.sources:
        if deadline is not None and deadline.passed():
            log.warning("source %r: not fetched, the run's deadline of %g s has passed", source.name, deadline.seconds)
            outcomes.append(FeedOutcome(source.name, source.url or str(source.path or source.documents), [], None,
                                        deferred=True))
            continue
        if source.url is not None and past:
            log.info("source %r: %s is a past run date: replaying the stored corpus, %s not fetched",
                     source.name, run_date, source.url)
            outcomes.append(FeedOutcome(source.name, source.url, [], None, replayed=True))
            continue
        folder = source.documents is not None or (source.path is not None and source.path.is_dir())
        kept = f"{settings};{folder_source.READER_VERSION}" if source.documents is not None else settings
        known = corpus.known_files(source.name, run_date, kept) if folder else None
        ingested = {}
        scan = (folder_source.scan(source.name, source.documents, run_date, known, Caps.of(config.fetch),
                                   source.include) if source.documents is not None else None)
        for outcome in scan.outcomes if scan is not None else collect(
                source.name, url=source.url, path=source.path, run_date=run_date, http_cache=http_cache,
                timeout=config.fetch.timeout, max_bytes=config.fetch.max_bytes, user_agent=config.fetch.user_agent,
                known=known, caps=Caps.of(config.fetch)):
            outcomes.append(outcome)
            docs = outcome.documents
            if cutoff is not None:  # do not ingest what retention would delete at once
                docs = [d for d in docs if d.published is None or d.published.date() >= cutoff]
            clashes += corpus.ingest(docs, run_date)
            if folder and outcome.ok and not outcome.unchanged and outcome.validator is not None:
                ingested[outcome.location] = outcome.validator
        if ingested:
            corpus.record_files(source.name, ingested, run_date, kept)
        if scan is not None and scan.ids is not None and _is_latest(config, run_date):
            # Only the latest date deletes: a re-run of an earlier date cannot tell when a file went.
            gone = corpus.source_documents(source.name, run_date) - scan.ids
            if gone:
                log.info("source %r: %s removed from %s", source.name, plural(len(gone), "file"), source.documents)
                corpus.delete(sorted(gone), run_date, f"file removed from {source.documents}")
    if clashes:
        log.warning("%s: %d entries carried an id another entry holds and were stored under namespaced ids",
                    run_date, clashes)
    corpus.save_http_cache(http_cache, _now())
    if cutoff is not None:
        corpus.expire(run_date, config.corpus.max_age_days)
    return outcomes


def feed_counts(outcomes: Sequence[FeedOutcome]) -> tuple[int, list[FeedOutcome]]:
    """The ok feeds of a run and the failed outcomes (runs.csv feeds_ok, and feeds_failed their number): each
    outcome fetched for the run (a URL's fetch, a dated file of the run date); a source fetched for nothing but
    whose earlier dated files brought documents into the corpus (a folder's first run) counts once as ok, so that
    a folder beside failing URLs is never reported as "every feed failed". Replayed and deferred outcomes are
    otherwise not counted."""
    fetched = [o for o in outcomes if not o.replayed and not o.deferred]
    counted = {o.source for o in fetched}
    rebuilt = {o.source for o in outcomes if o.replayed and o.ok and o.documents and o.source not in counted}
    failed = [o for o in fetched if not o.ok]
    return len(fetched) - len(failed) + len(rebuilt), failed


def _deferred(outcomes: Sequence[FeedOutcome], deadline: Deadline) -> list[str]:
    """The events' note of the sources `ingest` did not fetch for the deadline (none, or one note)."""
    names = [repr(o.source) for o in outcomes if o.deferred]
    return [f"deadline {deadline.seconds:g} s passed: sources not fetched: {', '.join(names)}"] if names else []


def _check_sources(config: Config) -> None:
    require_sources(config)
    for source in config.sources:
        if source.path is not None and not source.path.exists():
            raise FeedError(f"source {source.name!r}: {source.path}: no such file or directory")
        if source.documents is not None and not source.documents.is_dir():
            raise FeedError(f"source {source.name!r}: documents: {source.documents}: no such folder")


def _is_past(config: Config, run_date: date) -> bool:
    """Before today (the earlier of the local and the UTC date: the command line's default date is the
    local one) or before the latest stored run."""
    today = min(date.today(), datetime.now(timezone.utc).date())
    runs = store.read_runs(config.data_dir)
    latest = runs[contract.RUN_DATE].max().date() if not runs.empty else run_date
    return run_date < today or run_date < latest


def _is_latest(config: Config, run_date: date) -> bool:
    """On or after every stored run date."""
    runs = store.read_runs(config.data_dir)
    return runs.empty or run_date >= runs[contract.RUN_DATE].max().date()


def corpus_chunks(config: Config, corpus: Corpus, run_date: date, chunked: dict[tuple[str, str], list[Chunk]]
                  ) -> tuple[list[tuple[str, str, str]], list[Chunk], list[str]]:
    """The run's corpus as (doc id, content hash, first seen) per document and its chunks in order: what
    `chunk_documents(corpus.snapshot(run_date))` gives, in one read of the documents' keys and cached chunk texts
    (`Corpus.snapshot_chunks`); only the versions not chunked before under the same settings are read, split
    and added to the chunk cache. Each document's chunks are left in `chunked`; the third value is each
    document's version date (valid from), in the keys' order."""
    settings = chunk_settings(config)
    rows = corpus.snapshot_chunks(run_date, settings)
    unchunked = [(doc_id, h, valid_from) for doc_id, h, _, valid_from, texts in rows
                 if texts is None and (doc_id, h) not in chunked]
    if unchunked:
        fresh: dict[tuple[str, str], list[str]] = {}
        for stored in corpus.read_versions(unchunked):
            doc = stored.document
            key = (doc.id, stored.content_hash)
            chunked[key] = chunk_document(doc.id, doc.title, doc.text, config.chunking.size, config.chunking.overlap)
            fresh[key] = [c.text for c in chunked[key]]
        corpus.cache_chunks(settings, fresh)
    chunks: list[Chunk] = []
    for doc_id, h, _, _, texts in rows:
        got = chunked.get((doc_id, h))
        if got is None:
            got = chunked[(doc_id, h)] = ([Chunk(chunk_id(doc_id, n), doc_id, n, text)
                                           for n, text in enumerate(texts.split("\n"))] if texts else [])
        chunks += got
    return [(doc_id, h, first_seen) for doc_id, h, first_seen, _, _ in rows], chunks, [r[3] for r in rows]


def evaluate_pipelines(config: Config, retriever: Retriever, gold: Sequence[GoldQuestion],
                       query_vectors: np.ndarray, present: set[str], run_date: date,
                       rankings_out: dict[str, list[Ranking]] | None = None) -> tuple[list[dict], list[dict]]:
    """metrics.csv and per_question.csv rows for every configured pipeline at every k; each
    pipeline's rankings are left in `rankings_out` when given."""
    questions = [q.question for q in gold]
    cache: dict[str, list[Ranking]] = {}
    metric_rows: list[dict] = []
    question_rows: list[dict] = []
    for pipeline in config.retrieval.pipelines:
        rankings = retriever.search(pipeline, questions, query_vectors, cache)
        if rankings_out is not None:
            rankings_out[pipeline] = rankings
        metrics, per_question = ranking_rows(config, pipeline, rankings, gold, present, run_date)
        metric_rows += metrics
        question_rows += per_question
    return metric_rows, question_rows


def ranking_rows(config: Config, pipeline: str, rankings: Sequence[Ranking], gold: Sequence[GoldQuestion],
                 present: set[str] | None, run_date: date) -> tuple[list[dict], list[dict]]:
    """metrics.csv and per_question.csv rows of one pipeline (or target) at every k. `present` is the corpus's
    documents, for gold_missing; None for a target with its own index, whose documents the run cannot list."""
    qrels = [q.relevant for q in gold]
    missing = [0 if present is None else sum(1 for d in q.relevant_ids if d not in present) for q in gold]
    ks = config.retrieval.k
    day = run_date.isoformat()
    metric_rows: list[dict] = []
    question_rows: list[dict] = []
    result = evaluate([r.doc_ids for r in rankings], qrels, ks)
    metric_rows += mean_rows(result, day, pipeline, ks)
    for k in ks:
        per_k = result.values[k]
        for i, q in enumerate(gold):
            question_rows.append({
                "run_date": day, "pipeline": pipeline, "k": k, "question_id": q.id,
                **{name: per_k[name][i] for name in METRICS},
                "first_relevant_rank": int(result.first_relevant_rank[i]),
                "top1_score": rankings[i].top1_score,
                "retrieved": store.join_ids(rankings[i].doc_ids[:k]),
                "gold_missing": missing[i],
            })
    return metric_rows, question_rows


def _top1_cosines(retriever: Retriever, rankings: dict[str, list[Ranking]],
                  query_vectors: np.ndarray, chunk_vectors: np.ndarray) -> list[tuple[str, float]]:
    """Mean cosine between each question and the best chunk of its top-1 document, per fused pipeline (hybrid,
    hybrid_rerank). Not for `dense`: its top-1 is the nearest chunk, whose cosine cannot fall while documents
    are only added, so it could never signal a decline; not for `bm25`, which has no embeddings."""
    position = {c.id: i for i, c in enumerate(retriever.table.chunks)}
    rows = []
    for pipeline, ranked in rankings.items():
        if pipeline in ("bm25", "dense"):
            continue
        cosines = [float(chunk_vectors[position[r.chunk_ids[0]]] @ q) if r.chunk_ids else float("nan")
                   for r, q in zip(ranked, query_vectors)]
        rows.append((f"{contract.TOP1_COSINE}_{pipeline}", drift.query_top1_cosine(cosines)))
    return rows


class DocumentTexts(Mapping):
    """Each document's "title\ntext" on the run date, read from the corpus when asked (the answer layer asks for
    its contexts' documents only)."""

    def __init__(self, corpus: Corpus, run_date: date) -> None:
        self.corpus, self.run_date, self.read = corpus, run_date, {}

    def __getitem__(self, doc_id: str) -> str:
        if doc_id not in self.read:
            self.read[doc_id] = self.corpus.document_text(doc_id, self.run_date)
        if self.read[doc_id] is None:
            raise KeyError(doc_id)
        return self.read[doc_id]

    def __iter__(self):
        return (doc_id for doc_id, _, _ in self.corpus.snapshot_keys(self.run_date))

    def __len__(self) -> int:
        return len(self.corpus.snapshot_keys(self.run_date))


def evaluate_run_alerts(config: Config, run_date: date, run: dict, per_question: pd.DataFrame | None = None,
                        members: Mapping[str, Sequence[str]] | None = None, more: Sequence[Alert] = ()
                        ) -> tuple[list[Alert], list[Alert]]:
    """The alert rules over the stored series, with this run's runs.csv row (not yet written) included.
    `per_question`: per_question.csv as stored, when the caller has it (see `store.with_rows`); `members`: the
    run's segments (`segments.membership`), else those of segment_questions.csv's latest run up to the date;
    `more`: alerts of the run found elsewhere (the pool's gold_shadowed warnings), marked ongoing with the rest.

    Returns every alert of the run and those to notify: the new ones, less any that an earlier
    execution of the same date already recorded (a re-run does not page anyone twice)."""
    data_dir = config.data_dir
    if per_question is None:
        per_question = store.read_per_question(data_dir)
    watched = functools.partial(_watched, set(candidates(config)))  # a candidate's series never page
    per_question = watched(per_question)
    runs = store.read_runs(data_dir)
    today = pd.DataFrame([run]).astype({"run_date": "datetime64[ns]"})
    runs = pd.concat([runs[runs["run_date"] != pd.Timestamp(run_date)], today], ignore_index=True)
    stored = store.read(data_dir, contract.ALERTS)
    if members is None:
        members = segments.members_on(store.read(data_dir, contract.SEGMENT_QUESTIONS), pd.Timestamp(run_date))
    by_segment = (segments.segment_alerts(run_date.isoformat(), pd.Timestamp(run_date), per_question, members,
                                          config.alerts, config.retrieval.k) if config.alerts.segment_alerts else [])
    by_store = index_health.index_alerts(run_date.isoformat(), pd.Timestamp(run_date),
                                         store.read(data_dir, contract.INDEX_HEALTH))
    per_answer, trusted = answers.alert_inputs(config)
    alerts = evaluate_alerts(run_date, watched(store.read_metrics(data_dir)), per_question,
                             store.read(data_dir, contract.DRIFT), runs, config.alerts, config.retrieval.k,
                             stored[stored["run_date"] < pd.Timestamp(run_date)], config.drift,
                             watched(store.read(data_dir, contract.TARGETS), contract.TARGET),
                             None if per_answer is None else watched(per_answer), trusted,
                             sources=store.read(data_dir, contract.SOURCES), more=[*by_segment, *by_store, *more])
    same_day = stored[stored["run_date"] == pd.Timestamp(run_date)]
    seen = set(zip(same_day["rule"], same_day["pipeline"].fillna(""), same_day["metric"].fillna("")))
    return alerts, [a for a in alerts if a.new and a.key not in seen]


def run_pool(config: Config, run_date: date, gold: Sequence[GoldQuestion], ranked: Mapping[str, Sequence[Ranking]],
             corpus: Corpus, per_question: pd.DataFrame) -> tuple[list[dict], list[Alert], str]:
    """pool.csv's rows of the run, its gold_shadowed warnings and a note for the events: none (and no rows) when
    [judging] pool is off; a failure of the pool is logged and noted, never fatal: the date then has no pool rows (a
    judgments.jsonl line that cannot be read is bad input: it stopped the run before its first write)."""
    if not config.judging.pool:
        return [], [], ""
    t0 = time.perf_counter()
    try:
        found = pool.build_pool(config, run_date, gold, ranked, corpus, per_question,
                                ledger.read_judgments(config.data_dir))
    except Exception as exc:  # the pool is a helper of the judging loop: the run's series go on without it
        log.warning("%s: the pool could not be built: %s", run_date, redact(str(exc)))
        return [], [], f"pool not built: {redact(str(exc))}"
    log.debug("%s: pool of %d rows, %d shadow warnings in %.3f s", run_date, len(found.rows), len(found.alerts),
              time.perf_counter() - t0)
    return found.rows, found.alerts, ""


def own_index_outcome(config: Config, target: TargetConfig, corpus: Corpus, run_date: date,
                      gold: Sequence[GoldQuestion], deadline: Deadline) -> Outcome:
    """A builtin candidate's rankings with its own embedder and chunking settings (`config.OWN_SETTINGS`): the
    corpus's chunks (split its way, the splits cached under its settings) embedded by it (through the embedding
    cache, keyed by its own model key: only new text is encoded) and searched by an index built in memory for the
    run; a deadline that stops its embedding fails it for the day."""
    t0 = time.perf_counter()
    embedder = Embedder(dataclasses.replace(config.embedder, **{k: getattr(target, k) for k in EMBEDDER_OVERRIDES
                                                                 if getattr(target, k) is not None}))
    pipeline = target.pipeline or target.name
    own = config.replace(chunking=candidate_chunking(config, target),
                         retrieval=dataclasses.replace(config.retrieval, pipelines=(pipeline,)))
    _, chunks, _ = corpus_chunks(own, corpus, run_date, {})  # its own chunking: cached under its own settings
    try:
        vectors = embed_cached(corpus, embedder, [c.text for c in chunks], stop=deadline.passed).vectors
    except EmbeddingStopped as stopped:
        return Outcome(target.name, target.kind, None, round(time.perf_counter() - t0, 3),
                       f"deadline {deadline.seconds:g} s passed with {stopped.left:,} chunk texts not embedded by "
                       f"{embedder.key}")
    except EmbedderError as exc:  # its model or backend cannot be had: the candidate fails, the run goes on
        return Outcome(target.name, target.kind, None, round(time.perf_counter() - t0, 3), str(exc))
    questions = [q.question for q in gold]
    reranker = Reranker(config.rerank, config.embedder.device) if pipeline == "hybrid_rerank" else None
    rankings = Retriever(chunks, vectors, own, reranker).search(pipeline, questions,
                                                                embed_cached(corpus, embedder, questions).vectors)
    return Outcome(target.name, target.kind, rankings, round(time.perf_counter() - t0, 3))


def _watched(shadow: set[str], frame: pd.DataFrame, column: str = contract.PIPELINE) -> pd.DataFrame:
    """The frame without the rows of the `shadow` targets (the candidates): what the alert rules read."""
    return frame[~frame[column].isin(shadow)] if shadow and column in frame else frame


def check_inputs(config: Config, run_date: date, embedder: Embedder, accept_edits: bool = False
                 ) -> tuple[list[GoldQuestion], list[Target]]:
    """Check everything a run reads before its first write: the sources, the gold set, the store's files,
    the corpus file, the query log, the models (located, not loaded) and the external targets (their header
    variables set, their functions importable). Returns the gold set and the external targets; raises the
    domain error that names the bad input (a store edited since its seal, unless `accept_edits`)."""
    _check_sources(config)
    gold = load_gold(config.gold)
    answers.check_inputs(config, gold)
    store.validate(config.data_dir, accept_edits)
    check_corpus(config.data_dir / CORPUS_FILE)
    if config.drift.query_log is not None:
        drift.read_query_log(config.drift.query_log, run_date, config.drift.query_window_days)
    embedder.check()
    if "hybrid_rerank" in builtin_pipelines(config):
        locate_model(config.rerank.model, RERANKER)
    return gold, external_targets(config, embedder)


def returned_documents(outcome: Outcome) -> list[Document]:
    """The texts an external target returned, as documents of a corpus named after it: with no source
    configured, drift is measured on them (the retrieved set of the gold questions)."""
    docs: dict[str, Document] = {}
    for ranking in outcome.rankings or ():
        for doc_id, text in zip(ranking.doc_ids, ranking.texts):
            if text and doc_id not in docs:
                docs[doc_id] = Document(doc_id, "", text, "", None, outcome.name, ())
    return list(docs.values())


def _exact_dense(config: Config, chunks: Sequence[Chunk], vectors: np.ndarray, questions: list[str],
                 query_vectors: np.ndarray) -> list[Ranking]:
    """The dense pipeline's rankings by exact search (a flat index over the same vectors)."""
    flat = config.replace(retrieval=dataclasses.replace(config.retrieval, pipelines=("dense",), dense_index="flat"))
    return Retriever(chunks, vectors, flat).search("dense", questions, query_vectors)


def target_row(run_date: date, target: TargetConfig, outcome: Outcome | None, n_questions: int) -> dict:
    ok = outcome is None or outcome.ok
    return {"run_date": run_date.isoformat(), "target": target.name, "kind": target.kind,
            "status": contract.TARGET_OK if ok else contract.TARGET_FAILED, "n_questions": n_questions if ok else 0,
            "seconds": outcome.seconds if outcome else math.nan, "message": outcome.message if outcome else ""}


def run_day(config: Config, run_date: date, *, events: str = "", embedder: Embedder | None = None,
            notify: bool = True, accept_edits: bool = False) -> RunResult:
    """The daily job for one date. Re-running a date replaces that date's rows.

    Every target (the builtin pipelines, or the [[targets]]) is evaluated the same way; a target that fails
    is recorded in targets.csv (and alerted) and gets no metric rows that day, the others go on.
    Order of writes: per_question, added_per_question (the accepted drafted questions, once one is), metrics, drift,
    signals, targets, (answers, sources, index health), pool, alerts, the [export.*] exporters (a failure is noted
    in the row's events, never fatal; `seconds` stops before them), then runs, all under the run journal
    (`store.run_journal`): a run killed or failed before its end leaves the date's rows as they were, and a runs.csv
    row means the date's other rows are complete. Notification comes last and never fails the run.
    A store edited outside driftwatch since the last run's seal stops the run before its first write
    (StoreEditedError naming the files and dates), unless `accept_edits`: then the edits are named in the events.
    """
    started, t0 = _now(), time.perf_counter()
    deadline = Deadline(config.run.deadline_seconds)
    data_dir = config.data_dir
    embedder = embedder or Embedder(config.embedder)
    # Bad input (an edited store too) stops the run before anything is written.
    gold, externals = check_inputs(config, run_date, embedder, accept_edits)
    added = drafted.accepted_gold(data_dir, run_date)  # accepted drafted questions: added_per_question.csv
    read_judgments(data_dir)  # a bad judgments.jsonl line (JudgmentError naming it) stops the run here too
    builtin = builtin_pipelines(config)
    depth = config.retrieval.candidate_depth
    with (store.run_lock(data_dir), Corpus.in_dir(data_dir) as corpus,
          store.run_journal(data_dir, run_date, accept_edits) as notes):
        events = "; ".join(e for e in (events, *notes) if e)  # what recover did (a roll back, a quarantine)
        # The external targets first: they do not need the corpus, and without sources their texts make it.
        answered = {t.name: evaluate_target(t, gold, depth, run_date) for t in externals}
        for outcome in answered.values():
            if not outcome.ok:
                log.warning("%s: %s", run_date, redact(outcome.message))
        outcomes = ingest(config, corpus, run_date, deadline)
        if not config.sources:
            for outcome in answered.values():
                corpus.ingest(returned_documents(outcome), run_date)
        rankings: dict[str, list[Ranking]] = {}
        metric_rows: list[dict] = []
        question_rows: list[dict] = []
        added_rows: list[dict] = []
        top1: list[tuple[str, float]] = []
        signal_rows: list[dict] = []
        stored_questions = store.read_per_question(data_dir)  # read once: the signals' history, the alert rules'
        history = stored_questions[stored_questions[contract.RUN_DATE] < pd.Timestamp(run_date)]
        indexed = config.replace(retrieval=dataclasses.replace(config.retrieval, pipelines=builtin))
        counts = corpus.counts(run_date)
        # A store's vectors change without the corpus: its drift is never read from, nor kept in, the memo.
        memoizing = builtin and not config.index_health.drift and not added  # the memo holds the gold set's only
        memoized = runmemo.memoized(config, corpus, run_date, gold, counts) if memoizing else None
        late = _deferred(outcomes, deadline)  # what the deadline left undone, for the events
        n_encoded, evaluate = 0, True
        if memoized is not None:  # nothing the retrieval or the corpus drift reads has changed: no index, no vector
            log.debug("%s: the corpus, settings and questions are those of the memo: its rankings and drift", run_date)
            rankings, top1, n_chunks = memoized.rankings, memoized.top1, memoized.chunks_total
            for pipeline in builtin:
                metrics, per_question = ranking_rows(indexed, pipeline, rankings[pipeline], gold, memoized.present,
                                                     run_date)
                metric_rows += metrics
                question_rows += per_question
            signal_rows += [{**r, "run_date": run_date.isoformat()} for r in memoized.hnsw]
            drift_found = memoized.drift
        else:
            _import_early("scipy.stats")  # for the top-1 KS tests, while the corpus is indexed and evaluated
            chunked: dict[tuple[str, str], list[Chunk]] = {}  # each document split once per run
            keys, chunks, valid_from = corpus_chunks(config, corpus, run_date, chunked)
            n_chunks = len(chunks)
            latest = _is_latest(config, run_date)  # the latest date's indexes are updated and kept; a past date's not

            def vectors_of(some: Sequence[Chunk]) -> Embedded:  # the run's dominant cost: while the deadline allows
                return embed_cached(corpus, embedder, [c.text for c in some], stop=deadline.passed)

            try:
                prepared = (indexes.prepare(data_dir, chunks, indexed, embedder.key, vectors_of, reuse=latest)
                            if builtin else None)
                embedded = prepared.embedded if prepared is not None else vectors_of(chunks)
                n_encoded = embedded.n_encoded
            except EmbeddingStopped as stopped:
                n_encoded, evaluate = stopped.encoded, False
                late.append(f"deadline {deadline.seconds:g} s passed: {stopped.left:,} of "
                            f"{stopped.left + stopped.encoded:,} new chunk texts not embedded ({stopped.encoded:,} "
                            "cached for the next run), so the evaluation was skipped")
        if memoized is None and evaluate:
            hnsw_rows: list[dict] = []
            if builtin:
                queries = embed_cached(corpus, embedder, [q.question for q in gold])
                reranker = (Reranker(config.rerank, config.embedder.device) if "hybrid_rerank" in builtin else None)
                retriever = Retriever(chunks, embedded.vectors, indexed, reranker, prepared.dense, prepared.bm25)
                if latest:
                    indexes.keep(data_dir, prepared)
                present = {doc_id for doc_id, _, _ in keys}
                metric_rows, question_rows = evaluate_pipelines(indexed, retriever, gold, queries.vectors, present,
                                                                run_date, rankings)
                if added:  # searched apart: the gold set's rows, and so per_question.csv, are as without them
                    added_rows = evaluate_pipelines(indexed, retriever, added, embed_cached(
                        corpus, embedder, [q.question for q in added]).vectors, present, run_date)[1]
                top1 = _top1_cosines(retriever, rankings, queries.vectors, embedded.vectors)
                if retriever.dense is not None and retriever.dense.kind == "hnsw":
                    exact = _exact_dense(config, chunks, embedded.vectors, [q.question for q in gold],
                                         queries.vectors)
                    approximate = retriever.search("dense", [q.question for q in gold], queries.vectors,
                                                   dict(rankings))
                    hnsw_rows = signals.hnsw_recall_rows(run_date.isoformat(), approximate, exact, gold,
                                                         config.retrieval.k)
                    signal_rows += hnsw_rows
            drift_vectors, unaligned = index_health.drift_vectors(config, chunks, embedded.vectors)
            events = "; ".join(e for e in (events, unaligned) if e)
            drift_found = window_verdicts(config, corpus, embedder, run_date,
                                          {doc_id: first_seen for doc_id, _, first_seen in keys}, chunks,
                                          drift_vectors, chunked, (keys, valid_from))
            if memoizing:
                runmemo.keep(config, corpus, run_date, gold, keys, rankings, top1, hnsw_rows, n_chunks, drift_found)
        for note in late:
            log.warning("%s: %s", run_date, note)
        events = "; ".join(e for e in (events, *(n for o in outcomes for n in o.notes), *late) if e)
        target_rows = []
        by_pipeline_metrics = {p: [r for r in metric_rows if r["pipeline"] == p] for p in builtin}
        by_pipeline_questions = {p: [r for r in question_rows if r["pipeline"] == p] for p in builtin}
        by_pipeline_added = {p: [r for r in added_rows if r["pipeline"] == p] for p in builtin}
        metric_rows, question_rows, added_rows = [], [], []
        ranked_by_target: dict[str, list[Ranking]] = {}
        # The top-1 KS tests of a re-run are those of the run before (and scipy.stats, 1 s to import, is not needed).
        ks = memo.Calls(data_dir, "top1_ks", scipy=scipy.__version__)
        if evaluate:  # a builtin candidate with its own embedder: its own vectors and index over the same corpus
            answered.update({t.name: own_index_outcome(config, t, corpus, run_date, gold, deadline)
                             for t in target_list(config) if own_embedder(t)})
        for target in target_list(config) if evaluate else ():  # a run the deadline stopped has no rankings
            if target.kind == "builtin" and not own_embedder(target):
                pipeline = target.pipeline or target.name
                metric_rows += [{**r, "pipeline": target.name} for r in by_pipeline_metrics[pipeline]]
                question_rows += [{**r, "pipeline": target.name} for r in by_pipeline_questions[pipeline]]
                added_rows += [{**r, "pipeline": target.name} for r in by_pipeline_added[pipeline]]
                ranked = rankings[pipeline]
                target_rows.append(target_row(run_date, target, None, len(gold)))
            else:
                outcome = answered[target.name]
                target_rows.append(target_row(run_date, target, outcome, len(gold)))
                if not outcome.ok:
                    continue
                ranked = outcome.rankings
                metrics, per_question = ranking_rows(config, target.name, ranked, gold, None, run_date)
                metric_rows += metrics
                question_rows += per_question
            ranked_by_target[target.name] = ranked
            signal_rows += signals.signal_rows(run_date.isoformat(), target.name, ranked, gold, config.retrieval.k,
                                               history, config.alerts.window, functools.partial(ks, signals.top1_ks))
        drift_rows_ = drift_table(config, corpus, embedder, run_date, drift_found, top1) if evaluate else []
        feeds_ok, failed = feed_counts(outcomes)  # sources.collect has logged each failure with its URL
        status = (contract.STATUS_PARTIAL if late else contract.STATUS_OK if not failed else
                  contract.STATUS_NO_FEEDS if not feeds_ok else contract.STATUS_DEGRADED)
        run = {
            "run_date": run_date.isoformat(), "run_id": uuid.uuid4().hex[:12], "started_at": started,
            "finished_at": _now(), "status": status, "feeds_ok": feeds_ok,
            "feeds_failed": len(failed), "docs_new": counts.new, "docs_updated": counts.updated,
            "docs_deleted": counts.deleted, "docs_total": counts.total, "chunks_total": n_chunks,
            "chunks_embedded": n_encoded, "seconds": round(time.perf_counter() - t0, 3),
            "model": embedder.key, "config_hash": config.config_hash(), "events": events,
        }
        answered_run = answers.run_answers(config, run_date, gold, ranked_by_target,
                                           DocumentTexts(corpus, run_date),
                                           lambda texts: embed_cached(corpus, embedder, list(texts)).vectors
                                           ) if evaluate else None
        if answered_run is not None:
            run["events"] = "; ".join(e for e in (events, *answered_run.events) if e)
        store.replace_date(data_dir, contract.PER_QUESTION, run_date, question_rows)
        if added or (data_dir / contract.ADDED_PER_QUESTION).exists():  # none accepted yet: no file
            store.replace_date(data_dir, contract.ADDED_PER_QUESTION, run_date, added_rows)
        store.replace_date(data_dir, contract.METRICS, run_date, metric_rows)
        store.replace_date(data_dir, contract.DRIFT, run_date, drift_rows_)
        store.replace_date(data_dir, contract.SIGNALS, run_date, signal_rows)
        members = segments.membership(gold, corpus.labels([d for q in gold for d in q.relevant_ids]))
        store.replace_date(data_dir, contract.SEGMENTS, run_date, segments.series_rows(question_rows, members))
        store.replace_date(data_dir, contract.SEGMENT_QUESTIONS, run_date,
                           segments.member_rows(run_date.isoformat(), members))
        ks.save()
        if config.targets:
            store.replace_date(data_dir, contract.TARGETS, run_date, target_rows)
        if candidates(config) or (data_dir / contract.CANARY).exists():  # a candidate dropped: its date's rows go
            store.replace_date(data_dir, contract.CANARY, run_date,
                               canary.canary_rows(run_date.isoformat(), question_rows, candidates(config),
                                                  default_k(config.retrieval.k)))
        if answered_run is not None:
            answers.write_run(data_dir, run_date, answered_run)
        if config.sources:  # each source's freshness and volume, read from the corpus: a re-run writes the same rows
            store.replace_date(data_dir, contract.SOURCES, run_date,
                               source_rows(corpus.new_by_source(run_date), [s.name for s in config.sources], run_date,
                                           {o.source for o in failed}))
        if config.index_health.stores:  # each vector store read as a corpus: its snapshot, diff and findings
            health_rows, unread = index_health.run_stores(
                config, run_date, {d for d, _, _ in corpus.snapshot_keys(run_date)} if config.sources else None,
                [d for q in gold for d in q.relevant_ids], embedder)
            store.replace_date(data_dir, contract.INDEX_HEALTH, run_date, health_rows)
            run["events"] = "; ".join(e for e in (run["events"], *unread) if e)
        shadowed: list[Alert] = []
        if config.judging.pool or (data_dir / contract.POOL).exists():  # the pool turned off: its date's rows go
            pool_rows, shadowed, note = run_pool(config, run_date, gold, ranked_by_target, corpus, stored_questions)
            store.replace_date(data_dir, contract.POOL, run_date, pool_rows)
            run["events"] = "; ".join(e for e in (run["events"], note) if e)
        now_questions = store.with_rows(stored_questions, contract.PER_QUESTION, run_date, question_rows)
        alerts, to_notify = evaluate_run_alerts(config, run_date, run, now_questions, members, shadowed)
        notifying = notify and config.alerts.webhook_url is not None
        if notifying:  # before alerts.csv: a run killed from here on still leaves them to deliver
            enqueue(data_dir, to_notify)
        store.replace_date(data_dir, contract.ALERTS, run_date, alerts_frame(alerts))
        # The maintained series (the gold set plus the human judgments), re-scored from the stored rankings.
        rescored = qrels.update(config, run_date, per_question=now_questions)
        if rescored is not None and rescored.new_version:
            run["events"] = "; ".join(e for e in (run["events"], rescored.describe()) if e)
        run["seconds"] = round(time.perf_counter() - t0, 3)
        run["finished_at"] = _now()
        run["events"] = with_events(run["events"], export(config, [run_date], pending=run, corpus=corpus))
        store.replace_date(data_dir, contract.RUNS, run_date, [run])
    notified = None
    if notifying:  # this run's new alerts and any an earlier run could not deliver
        notified = deliver(data_dir, config.alerts.webhook_url, timeout=config.alerts.webhook_timeout,
                           retries=config.alerts.webhook_retries)
    failed_targets = [o for o in answered.values() if not o.ok]
    return RunResult(run_date, run, metric_rows, question_rows, failed, drift_rows_, alerts, notified,
                     signal_rows, failed_targets, answered_run)


def date_range(start: date, end: date) -> list[date]:
    if end < start:
        raise ValueError(f"end date {end} is before start date {start}")
    return [start + timedelta(days=i) for i in range((end - start).days + 1)]


def backfill(config: Config, start: date, end: date, *, progress: Callable[[RunResult], None] | None = None,
             events: Mapping[date, str] | None = None, embedder: Embedder | None = None) -> list[RunResult]:
    """One run per day from `start` to `end`, sharing one loaded model; `events` annotates some dates."""
    embedder = embedder or Embedder(config.embedder)
    results = []
    for day in date_range(start, end):
        result = run_day(config, day, embedder=embedder, events=(events or {}).get(day, ""))
        results.append(result)
        if progress:
            progress(result)
    return results
