"""Typed settings read from one TOML file (plus environment overrides); every default lives here."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import math
import os
import re
import tomllib
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from pipeline import PROJECT_URL, __version__, redact
from pipeline.contract import (CLASSIFIER_ACCURACY, DRIFT_FAMILY, DUPLICATE_SHARE, NEW_CATEGORY_SHARE, NEW_SOURCE_SHARE,
                               NOVEL_SHARE)
from pipeline.contract import LANGUAGE_SHARE
from pipeline.errors import DriftwatchError
from pipeline.metrics import DEFAULT_WATCHED, RETRIEVAL_METRICS, default_k, series_name

DEFAULT_CONFIG_FILE = "monitor.toml"
ENV_CONFIG = "DRIFTWATCH_CONFIG"
ENV_DATA_DIR = "DRIFTWATCH_DATA_DIR"

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_RERANKER = "cross-encoder/ms-marco-MiniLM-L-6-v2"
DEFAULT_USER_AGENT = f"driftwatch/{__version__} (+{PROJECT_URL})"

# The retrieval pipelines every run can evaluate; `retrieval.py` implements each name.
PIPELINES = ("bm25", "dense", "hybrid", "hybrid_rerank")
BACKENDS = ("torch", "onnx", "onnx-int8")
ENGINES = ("local", "ray")
# Embedder settings that change no vector (where the model runs, not what it computes): not in config_hash.
_PLACEMENT = ("engine", "ray_address", "ray_workers")
DENSE_INDEXES = ("flat", "hnsw")
BM25_METHODS = ("robertson", "lucene", "atire", "bm25l", "bm25+")
STOPWORDS = ("en", "none")


# Upper bounds of settings that a typo (or an attacker's config) would otherwise make unbounded.
MAX_TIMEOUT = 600.0  # seconds, for fetch.timeout and alerts.webhook_timeout
MAX_WEBHOOK_RETRIES = 10
MAX_TRUNCATE_DIM = 8192  # no sentence embedding model is wider; the load checks the model's own dimension
DEVICES = ("cpu", "cuda", "cuda:N", "mps")  # as messages list them
_HTTP_SCHEMES = ("http://", "https://")

# Retrievers a run watches ([[targets]]); `targets.py` implements each kind.
TARGET_KINDS = ("builtin", "http", "python", "runs", "chroma", "pgvector", "qdrant")
RUN_FORMATS = ("trec", "jsonl", "openinference")
MAX_TARGET_RETRIES = 10
MAX_CONCURRENCY = 64
DEFAULT_BODY = '{"query": {query}, "k": {k}}'


class ConfigError(DriftwatchError):
    """A configuration file that cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class SourceConfig:
    """One feed: an http(s) `url`, or a `path` to a feed file or a folder of dated feed files; or `documents`, a
    folder of Markdown, HTML, text and PDF files, one document each (pipeline/folder_source.py)."""

    name: str
    url: str | None = None
    path: Path | None = None
    documents: Path | None = None
    include: tuple[str, ...] | None = None  # documents: fnmatch patterns of the relative paths read (default: all)


@dataclass(frozen=True)
class TargetConfig:
    """One watched retriever; its `name` is the `pipeline` of every series row it gets. Which keys a kind
    takes is in TARGET_KEYS."""

    name: str
    kind: str
    pipeline: str | None = None  # builtin: one of PIPELINES (default: the name)
    url: str | None = None  # http: the search endpoint, POSTed to
    body: str = DEFAULT_BODY  # http: a JSON body template; {query} becomes a JSON string, {k} the depth
    hits: str = "hits"  # http: dotted path to the hit list in the response ("" for a top-level list)
    id: str = "id"  # http: path to a hit's document id
    score: str = "score"  # http: path to a hit's score
    text: str | None = None  # http: path to a hit's text (optional; used for retrieved-set drift)
    headers: dict[str, str] = field(default_factory=dict)  # http: header -> NAME of the env var holding its value
    timeout: float = 10.0  # http: wall-clock seconds per request (connect to last byte)
    retries: int = 2  # http: further attempts after a timeout, a connection error, 429 or 5xx
    concurrency: int = 4  # http: requests in flight at once
    max_bytes: int = 10_000_000  # http: larger responses are refused
    function: str | None = None  # python: "module:function", called f(query, k)
    python_path: Path | None = None  # python: a folder put first on sys.path (default: the config's folder)
    format: str | None = None  # runs: trec, jsonl or openinference
    path: Path | None = None  # runs: the logged results; "{date}" in it becomes the run date (YYYY-MM-DD)
    # chroma, pgvector, qdrant (pipeline/vectorstores.py): the team's vector store, read only. chroma and qdrant
    # take a server `url` or a local `path`; `id` and `text` name pgvector's columns (`text` is qdrant's payload
    # key; chroma's text is the record's document; qdrant's `id` is the payload key of the record's own id, e.g. a
    # chunk id, read when a point has it, else the point id); `timeout` bounds every call.
    collection: str | None = None  # chroma, qdrant: the collection
    table: str | None = None  # pgvector: the table (schema.table allowed)
    dsn_env: str | None = None  # pgvector: NAME of the env var holding the connection string (never the dsn itself)
    doc_id: str | None = None  # the record's document id (column, metadata or payload key); None: the record id
    vector: str | None = None  # pgvector: the vector column (default "embedding"); qdrant: the named vector
    model_field: str | None = None  # the model stamp (column, metadata or payload key), when records carry one
    model: str = DEFAULT_MODEL  # the embedding model the collection was built with: the gold questions use it
    distance: str = "cosine"  # pgvector: cosine (<=>) or ip (<#>, inner product)
    candidate: bool = False  # any kind: a shadow pipeline, compared with `against` (pipeline/canary.py); never pages
    against: str | None = None  # any kind, a candidate's: the target it is compared with (default: the first watched)
    truncate_dim: int | None = None  # builtin candidate: its own embedder.truncate_dim (its own vectors and index)
    backend: str | None = None  # builtin candidate: its own embedder.backend (torch, onnx or onnx-int8)
    chunk_size: int | None = None  # builtin candidate: its own chunking.size (its own chunks, vectors and index)
    chunk_overlap: int | None = None  # builtin candidate: its own chunking.overlap


# The keys each kind takes besides name and kind; any other is refused.
TARGET_KEYS = {
    "builtin": ("pipeline", "truncate_dim", "backend", "chunk_size", "chunk_overlap"),
    "http": ("url", "body", "hits", "id", "score", "text", "headers", "timeout", "retries", "concurrency",
             "max_bytes"),
    "python": ("function", "python_path"),
    "runs": ("format", "path"),
    "chroma": ("url", "path", "collection", "doc_id", "model_field", "model", "timeout"),
    "pgvector": ("dsn_env", "table", "id", "doc_id", "text", "vector", "model_field", "model", "distance", "timeout"),
    "qdrant": ("url", "path", "collection", "text", "doc_id", "vector", "model_field", "model", "timeout", "id"),
}
# A builtin candidate's embedder settings: the next configuration, searched over the same corpus (pipeline/canary.py).
EMBEDDER_OVERRIDES = ("truncate_dim", "backend")
# A builtin candidate's chunking settings: its target key -> the [chunking] key it replaces for that candidate alone.
CHUNKING_OVERRIDES = {"chunk_size": "size", "chunk_overlap": "overlap"}
OWN_SETTINGS = (*EMBEDDER_OVERRIDES, *CHUNKING_OVERRIDES)
# Keys every kind takes: a candidate (a shadow pipeline, pipeline/canary.py) and the target it is compared with.
CANDIDATE_KEYS = ("candidate", "against")
TARGET_REQUIRED = {"builtin": (), "http": ("url",), "python": ("function",), "runs": ("format", "path"),
                   "chroma": ("collection",), "pgvector": ("dsn_env", "table"), "qdrant": ("collection",)}
VECTOR_STORES = ("chroma", "pgvector", "qdrant")
_STORE_ONLY = ("collection", "table", "dsn_env", "doc_id", "vector", "model_field", "model", "distance")
PG_DISTANCES = ("cosine", "ip")


@dataclass(frozen=True)
class FetchConfig:
    timeout: float = 20.0
    max_bytes: int = 10_000_000
    user_agent: str = DEFAULT_USER_AGENT
    # Caps no real feed meets, so that one hostile feed cannot stall the run: entries taken from one feed (file or
    # URL) per run, in feed order, and characters of one document's text (cut at a word boundary).
    max_entries: int = 5000
    max_document_chars: int = 500_000


@dataclass(frozen=True)
class EmbedderConfig:
    model: str = DEFAULT_MODEL
    batch_size: int = 64
    device: str = "cpu"
    # Keep only the first N dimensions (Matryoshka-style truncation); None keeps them all.
    truncate_dim: int | None = None
    # What runs the model: sentence-transformers on torch, or the model exported to ONNX (fp32, or int8).
    backend: str = "torch"
    # Where the texts a run must encode are embedded: in process, or on Ray Data (a local Ray, or a cluster).
    engine: str = "local"
    ray_address: str | None = None  # a cluster ("ray://head:10001" or "auto"); None starts Ray locally
    ray_workers: int = 2  # model replicas (actors), one CPU each; a local Ray gets this many CPUs


@dataclass(frozen=True)
class ChunkingConfig:
    size: int = 128  # words per chunk
    overlap: int = 32  # words shared by consecutive chunks


@dataclass(frozen=True)
class RetrievalConfig:
    pipelines: tuple[str, ...] = ("bm25", "dense", "hybrid")
    k: tuple[int, ...] = (1, 3, 5, 10)
    candidate_depth: int = 50  # documents each branch contributes (and every pipeline returns)
    fusion_depth: int | None = None  # cut each branch's list to this many before RRF (None: candidate_depth)
    rrf_k: int = 60
    dense_index: str = "flat"
    hnsw_m: int = 32
    hnsw_ef_search: int = 128


@dataclass(frozen=True)
class Bm25Config:
    k1: float = 1.5
    b: float = 0.75
    method: str = "lucene"
    stopwords: str = "en"


@dataclass(frozen=True)
class RerankConfig:
    model: str = DEFAULT_RERANKER
    depth: int = 20  # top documents of the hybrid list re-scored by the cross-encoder
    batch_size: int = 32


@dataclass(frozen=True)
class CorpusConfig:
    # Documents published (or first seen) more than this many days before the run date are
    # marked deleted; None keeps everything.
    max_age_days: int | None = None


@dataclass(frozen=True)
class DriftConfig:
    # What is compared: the chunks that entered in the last `window_days` runs' days (the current window)
    # against those that entered in the `reference_days` days before it (rolling), or in a pinned range
    # (`python -m pipeline rebaseline`). Disjoint samples; every statistic gets a permutation null.
    window_days: int = 1
    max_window_days: int = 7  # the current window grows day by day up to this until it holds min_current chunks
    reference_days: int = 14
    min_current: int = 20  # fewer new chunks even in the longest window: "not enough new data", no verdict
    min_reference: int = 40
    n_components: int = 10  # principal components (fitted on both samples) for PSI, KL and KS
    bins: int = 10  # PSI/KL bins: the reference's quantiles (deciles by default)
    epsilon: float = 1e-4  # share given to an empty bin, so PSI and KL stay finite
    sample_cap: int = 1000  # at most this many chunk embeddings per side (a seeded sample of whole documents)
    # At most this many chunks of one document (evenly spaced over it) enter a side's sample: a document's chunks
    # are alike, so a long document would otherwise outweigh the rest (its chunks move together in the nulls).
    max_chunks_per_document: int = 16
    permutations: int = 500  # draws of the permutation null of every statistic
    alpha: float = 0.05  # family-wise error of one run's verdicts (Holm over the statistics)
    # When a drifted window pages (an alert; otherwise a warning, "drifted, not confirmed"): when it is drifted in
    # `confirm_windows` of the last `confirm_of` disjoint current windows, or on its own at the one-day page level
    # (Holm-adjusted p below `page_alpha`, drawn with `page_permutations` on drifted windows). On a null stream
    # with independent windows a day pages with probability at most page_alpha + alpha * (1 - (1 - alpha) **
    # (confirm_of - 1)) for confirm_windows = 2: 0.0069 at the defaults, 0.62 pages per 90 days, less after the
    # effect lines (bench/corpus_null.py measures it on real news).
    confirm_windows: int = 2
    confirm_of: int = 3
    page_alpha: float = 0.002
    page_permutations: int = 4000
    # The statistics whose drift may page on its own day (at page_alpha): those that say what came in (a domain
    # classifier, novel content, near copies, new categories or sources). PSI and KS on the principal components
    # move with where any day's documents sit, and a day of long documents written together (the PEPs of one
    # era) sits apart from the days before it: they page by confirmation only (bench/corpus_null.py, PEP stream).
    page_statistics: tuple[str, ...] = (CLASSIFIER_ACCURACY, NOVEL_SHARE, DUPLICATE_SHARE, NEW_CATEGORY_SHARE,
                                        NEW_SOURCE_SHARE, LANGUAGE_SHARE)
    # Effect sizes that count as practically large (a verdict needs significance AND its effect size).
    psi_effect: float = 0.2  # PSI above its null mean (the classic 0.2 line, on the bias-corrected PSI)
    ks_effect: float = 0.3  # the largest KS distance over the components
    classifier_effect: float = 0.4  # domain classifier balanced accuracy above its null mean (kNN, leave one out)
    novelty_effect: float = 0.3  # share of new chunks with no close neighbour in the reference, above its null mean
    duplicate_effect: float = 0.25  # share of new chunks with a near copy (above the reference's own rate)
    composition_effect: float = 0.25  # share of new chunks in categories or sources the reference lacks
    # The documents' languages (pipeline/drift.py language_share): the total variation between the two windows' shares
    # of documents per language, above its null mean; a language held by fewer documents than language_min_documents
    # (both windows together) is pooled as "other". Language identification errs on short items: the line keeps one
    # misread item (1 in 13 is 0.08) from drifting (bench/languages.py measures it on the real streams).
    language_effect: float = 0.2
    language_min_documents: int = 3
    duplicate_cosine: float = 0.95  # nearest-neighbour cosine at or above which a chunk is a near copy
    max_deleted_share: float = 0.1  # a run deleting more of the corpus than this alerts
    seed: int = 0
    evidently: bool = True  # Evidently's domain-classifier embedding drift (context; about 1 s a run)
    query_log: Path | None = None  # real user queries: one per line, or JSONL with "query" and "timestamp"
    query_window_days: int = 7  # the current window of the query log
    # Naming what came in with a drifted window (pipeline/shifts.py; the drift alert's message and the Drift page).
    shift_terms: int = 5  # top terms named (class-based TF-IDF of the new documents against the reference's)
    shift_min_documents: int = 3  # a term is named only when at least this many new documents hold it
    shift_language_share: float = 0.1  # languages are named when one's share of documents moved this much
    shift_documents: int = 500  # documents per side read to name the shift at most (a seeded sample)


DRIFT_RULE_KEYS = ("confirm_windows", "confirm_of", "page_alpha", "page_statistics")  # settings of the drift alert rule, not measured

# Relative change that counts as practically large for the drop and slow-drift rules, by criticality preset.
CRITICALITY = {"critical": 0.05, "standard": 0.10, "exploratory": 0.20}


@dataclass(frozen=True)
class AlertsConfig:
    window: int = 7  # runs forming the drop rule's baseline (the tested runs never among them)
    criticality: str = "standard"
    # Series the drop and slow-drift rules watch, as metric@k; empty: hit, recall, mrr and ndcg at the
    # default k, the largest configured k not above 5, else the smallest (see `watched`).
    metrics: tuple[str, ...] = ()
    drop: dict[str, float] = field(default_factory=dict)  # per-metric relative change, e.g. {"recall@5" = 0.05}
    floors: dict[str, float] = field(default_factory=dict)  # absolute limit, e.g. {"recall@5" = 0.6}
    alpha: float = 0.01  # family-wise error per rule and run, Holm over the watched series
    permutations: int = 5000  # Monte Carlo draws of the paired test's null where its decision turns on it
    confirm_days: int = 2  # a drop pages (alert) once it holds this many runs; before that it is a warning
    reference_runs: int = 20  # the slow-drift rule's reference period: the first N runs (from reference_start)
    reference_start: str | None = None  # YYYY-MM-DD: pin the reference period's first run date
    ewma_smoothing: float = 0.25  # weight of the newest run in the slow-drift rule's moving mean
    webhook_url: str | None = None  # Slack-compatible incoming webhook
    webhook_timeout: float = 5.0
    webhook_retries: int = 3
    # Sources (pipeline/source_health.py): silent when the days since its last new item exceed
    # max(silence_min_days, silence_gap_factor x its median gap between days with new items), learned once it has
    # brought new items on silence_min_history days, and the gap its rate of new items leaves below silence_alpha.
    silence_min_days: int = 2
    silence_gap_factor: float = 3.0
    silence_min_history: int = 5
    # The rate line: a source bringing new items on a share p of its days (smoothed) goes g days without one with
    # probability (1 - p) ** g; silent only past the g where that falls below silence_alpha / the sources tested
    # (Bonferroni), so a sparse, bursty source (a topic, an outlet) is not called silent by its short median gap.
    silence_alpha: float = 0.001
    # A spike: a source's new items on a run far above its last spike_window runs (at least spike_min_history),
    # by a negative binomial upper tail, Holm over the sources at spike_alpha, and above spike_factor x its median.
    spike_window: int = 28
    spike_min_history: int = 7
    spike_factor: float = 3.0
    spike_alpha: float = 0.001
    # A segment (pipeline/segments.py) with fewer questions than this on a run is not tested by the segment rules.
    segment_min_n: int = 8
    # Family-wise error per segment rule and run, Holm over every tested segment, pipeline and watched series.
    segment_alpha: float = 0.002
    # The segment rules (a segment x rest permutation test, valid on ordered streams) page; false: the series and the
    # Segments page only.
    segment_alerts: bool = True

    def watched(self, ks: tuple[int, ...]) -> tuple[str, ...]:
        if self.metrics:
            return self.metrics
        k = default_k(ks)
        return tuple(series_name(m, k) for m in DEFAULT_WATCHED)


GENERATION_MODES = ("off", "logged", "generate")
MAX_GENERATION_TOKENS = 100_000


@dataclass(frozen=True)
class GenerationConfig:
    """The answer layer (pipeline/answers/). Off by default: no endpoint is needed for
    anything else. `logged` reads the team's own answers; `generate` answers every gold question from the top
    `k` of `pipeline` with the chat endpoint at `base_url`."""

    mode: str = "off"  # off | logged | generate
    logged: Path | None = None  # logged answers: a JSONL file, or a folder of YYYY-MM-DD.jsonl files
    labels: Path | None = None  # human labels (CSV) the judge and the heuristics are checked against
    base_url: str | None = None  # an OpenAI-compatible endpoint, e.g. http://localhost:8000/v1
    model: str | None = None  # the generator's model name at base_url
    api_key_env: str | None = None  # NAME of the environment variable holding the API key (none: no key)
    temperature: float = 0.0
    max_tokens: int = 512  # per completion
    pipeline: str | None = None  # generate: the target whose top-k is the context (default: the first target)
    k: int = 5  # generate: documents in the context
    judge: bool | None = None  # judge the answers with the LLM (default: when base_url is set)
    judge_model: str | None = None  # default: model
    timeout: float = 60.0  # wall-clock seconds per call, connect to last byte
    retries: int = 2  # further attempts after a timeout, a connection error, 429 or 5xx
    concurrency: int = 4  # calls in flight at once
    max_calls: int = 2000  # per run; past it the rest is not_judged
    max_tokens_per_run: int = 2_000_000  # prompt + completion tokens per run, as the server reports them
    min_kappa: float = 0.6  # a judged metric below this agreement with humans cannot fire an alert or fail a gate
    require_citations: bool | None = None  # flag answers citing no [doc id] (default: in generate mode)

    @property
    def judging(self) -> bool:
        return self.base_url is not None if self.judge is None else self.judge

    @property
    def judge_name(self) -> str:
        return self.judge_model or self.model or ""

    @property
    def citations_required(self) -> bool:
        return self.mode == "generate" if self.require_citations is None else self.require_citations


@dataclass(frozen=True)
class MlflowExportConfig:
    # A folder (relative to the config file; MLflow's file store) or a tracking server's http(s) URL, or any
    # other URI the installed mlflow takes (sqlite:///..., databricks).
    tracking_uri: str = "mlruns"
    experiment: str = "driftwatch"
    timeout: float = 30.0  # wall-clock seconds for one export (every request to the server within it)


@dataclass(frozen=True)
class PrometheusExportConfig:
    path: Path  # the textfile node_exporter's textfile collector reads (a name ending in .prom)


@dataclass(frozen=True)
class WhylogsExportConfig:
    # The day's new chunk embeddings are profiled through a fixed seeded random projection to this many
    # columns (distances roughly kept, comparable from day to day); 0 profiles every dimension.
    projection_dims: int = 16


@dataclass(frozen=True)
class EvidentlyExportConfig:
    # An Evidently local workspace folder (relative to the config file), created when missing; `evidently ui
    # --workspace FOLDER` serves it.
    workspace: Path = Path("evidently-workspace")
    project: str = "driftwatch"  # the workspace's project the runs' snapshots go to (created when missing)


@dataclass(frozen=True)
class ExportConfig:
    """Where the series are published besides the CSV store; a section present turns its exporter on."""

    mlflow: MlflowExportConfig | None = None
    prometheus: PrometheusExportConfig | None = None
    whylogs: WhylogsExportConfig | None = None
    evidently: EvidentlyExportConfig | None = None


@dataclass(frozen=True)
class RunConfig:
    # Wall-clock seconds one run may take; past it the run stops fetching and embedding, writes its runs.csv row
    # with status partial, and releases the lock (see docs/concepts.md).
    deadline_seconds: float = 1800.0


@dataclass(frozen=True)
class IndexHealthConfig:
    """Vector stores read as a corpus each run (pipeline/index_health.py): snapshots, diffs and findings."""

    stores: tuple[str, ...] = ()  # names of [[targets]] whose vector store is snapshotted each run (none: off)
    sample: int = 64  # records with a text re-embedded per store and run (a seeded sample)
    # A sampled record whose stored vector's cosine with its re-embedding is below stale_cosine is stale; between
    # it and generation_cosine it is of another generation of the model (ONNX int8 against fp32). Measured by
    # bench/index_health.py on 300 news texts: the same model (torch batched or not, ONNX fp32) gives 1.000000,
    # ONNX int8 0.990-0.997, a text whose last sentence was replaced 0.07-0.99 (99% below 0.977).
    stale_cosine: float = 0.98
    generation_cosine: float = 0.999
    # Neighbourhood signatures (no re-embedding) read up to neighbourhood_sample records with a text (beyond it,
    # that many by the seeded order; 0: off): the spaces are the components of the graph of vector cosines >=
    # space_cosine, the largest the main one; a record outside it whose text neighbours in the main space (TF-IDF
    # cosine >= text_neighbour) are not near in the stored vectors (mean cosine below neighbour_cosine) is of
    # another generation (another model, a rotated or re-trained one). Measured by bench/generations.py.
    neighbourhood_sample: int = 2000
    text_neighbour: float = 0.15
    neighbour_cosine: float = 0.105
    space_cosine: float = 0.3
    # A component outside the main space is judged only on text neighbours in the main space from at least this many
    # documents, copies of one text counted once: a document's chunks, or one story's copies (a boilerplate chunk, a
    # document indexed twice), are one piece of evidence.
    min_neighbours: int = 3
    # The drift statistics read the vectors of the store of `stores` (exactly one) instead of driftwatch's embedding
    # of the same chunks (its record ids are driftwatch's chunk ids "<doc_id>#<n>", or one-chunk documents' ids).
    drift: bool = False


@dataclass(frozen=True)
class JudgingConfig:
    """The judging loop (pipeline/judging/): the pool of unjudged documents each run, shadows of gold documents,
    the LLM pre-label and drafted questions. The pool and the shadow warning need no endpoint."""

    pool: bool = True  # record the pool (pool.csv) and warn of shadows each run
    pool_depth: int | None = None  # the top k each target's unjudged documents are pooled from (default: default_k)
    # A document is a shadow of a gold document when their texts are near copies (word 3-shingle Jaccard at least
    # shadow_similarity) and differ; calibrated by bench/judging_pool.py.
    shadow_similarity: float = 0.5
    # The LLM pre-label and suggest-questions: an OpenAI-compatible endpoint (default: [generation]'s base_url and
    # api_key_env). The model must not be one a monitored pipeline uses (the generator, a target's model).
    base_url: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    timeout: float = 60.0  # wall-clock seconds per call
    max_calls: int = 500  # per command
    # suggest-questions: a drafted question closer than this cosine to a gold question is a duplicate
    duplicate_cosine: float = 0.9


# The package each exporter needs, and the pip extra that installs it.
EXPORT_PACKAGES = {"mlflow": "mlflow", "prometheus": "prometheus_client", "whylogs": "whylogs",
                   "evidently": "evidently"}
MAX_PROJECTION_DIMS = 1024


@dataclass(frozen=True)
class Config:
    data_dir: Path
    gold: Path
    sources: tuple[SourceConfig, ...] = ()
    fetch: FetchConfig = field(default_factory=FetchConfig)
    embedder: EmbedderConfig = field(default_factory=EmbedderConfig)
    chunking: ChunkingConfig = field(default_factory=ChunkingConfig)
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    bm25: Bm25Config = field(default_factory=Bm25Config)
    rerank: RerankConfig = field(default_factory=RerankConfig)
    corpus: CorpusConfig = field(default_factory=CorpusConfig)
    drift: DriftConfig = field(default_factory=DriftConfig)
    alerts: AlertsConfig = field(default_factory=AlertsConfig)
    targets: tuple[TargetConfig, ...] = ()  # none: the builtin retrieval.pipelines, as before targets existed
    export: ExportConfig = field(default_factory=ExportConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    run: RunConfig = field(default_factory=RunConfig)
    index_health: IndexHealthConfig = field(default_factory=IndexHealthConfig)
    judging: JudgingConfig = field(default_factory=JudgingConfig)
    file: Path | None = None  # where it was read from (not a setting)

    def config_hash(self) -> str:
        """A short hash of every setting that changes what a run measures."""
        settings = {
            name: dataclasses.asdict(getattr(self, name))
            for name in ("embedder", "chunking", "retrieval", "bm25", "rerank", "corpus", "drift")
        }
        for key in _PLACEMENT:
            del settings["embedder"][key]
        for key in DRIFT_RULE_KEYS:  # when a drift pages: the alert rule's, not the measurement's
            del settings["drift"][key]
        if self.embedder.backend == "torch":  # absent for torch, so a config from before backends keeps its hash
            del settings["embedder"]["backend"]
        if self.targets:  # absent when none, so a config from before targets keeps its hash
            # A candidate changes no watched series: adding or dropping one is not a config change.
            settings["targets"] = [{k: v for k, v in _target_settings(t).items()
                                    if k not in (*CANDIDATE_KEYS, *OWN_SETTINGS)}
                                   for t in self.targets if not t.candidate]
        blob = json.dumps(settings, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def replace(self, **changes: Any) -> Config:
        """A copy with whole sections or top-level settings replaced."""
        return dataclasses.replace(self, **changes)


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, where: str, base: Path) -> Any:
    """Check `value` against the annotation `tp`; return it converted (lists to tuples, paths resolved)."""
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, where, base)
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(tp) if a is not type(None)]
        return _coerce(value, options[0], where, base)
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a table of name = value, got {value!r}")
        item = typing.get_args(tp)[1]
        return {str(k): _coerce(v, item, f"{where}.{k}", base) for k, v in value.items()}
    if origin is tuple:
        item = typing.get_args(tp)[0]
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        return tuple(_coerce(v, item, f"{where}[{i}]", base) for i, v in enumerate(value))
    if tp is Path:
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{where}: expected a path string, got {value!r}")
        path = Path(value).expanduser()
        return path if path.is_absolute() else (base / path)
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp in (int, float, str, bool) and (type(value) is not tp):
        raise ConfigError(f"{where}: expected {_type_name(tp)}, got {value!r}")
    return value


def _build(cls: type, table: Any, where: str, base: Path) -> Any:
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: expected a table, got {table!r}")
    prefix = f"{where}." if where else ""
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls) if f.name != "file"}
    unknown = sorted(set(table) - fields)
    if unknown:
        raise ConfigError(f"unknown key {prefix}{unknown[0]} (valid keys here: {', '.join(sorted(fields))})")
    values = {}
    for name, value in table.items():
        values[name] = _coerce(value, hints[name], prefix + name, base)
    try:
        return cls(**values)
    except TypeError:  # a required key is missing
        missing = [f.name for f in dataclasses.fields(cls) if f.name not in values
                   and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        raise ConfigError(f"missing required key {prefix}{missing[0]}") from None


def _is_http(url: str) -> bool:
    return url.lower().startswith(_HTTP_SCHEMES)  # a URL's scheme is case-insensitive (RFC 3986)


def _device_problem(device: str) -> str | None:
    """Why `device` cannot run the models here, or None: cpu, cuda, cuda:N (an existing GPU) or mps."""
    if device in ("cpu", "mps"):
        return None
    kind, _, index = device.partition(":")
    if kind != "cuda" or (index and not index.isdigit()):
        return f"unknown device {device!r} (valid: {', '.join(DEVICES)})"
    import torch

    count = torch.cuda.device_count()
    if int(index or 0) >= count:
        return f"{device!r} needs GPU {int(index or 0)}, but this machine has {count} CUDA device(s)"
    return None


def _check(cfg: Config, src: str) -> None:
    """Value checks that types alone cannot express; every message names the key."""

    def bad(key: str, why: str) -> ConfigError:
        return ConfigError(f"{src}: {key}: {why}")

    for key, seconds in (("fetch.timeout", cfg.fetch.timeout), ("alerts.webhook_timeout", cfg.alerts.webhook_timeout)):
        if not 0 < seconds <= MAX_TIMEOUT:  # also refuses nan
            raise bad(key, f"must be a number of seconds > 0 and <= {MAX_TIMEOUT:g}, got {seconds!r}")
    for key in ("max_bytes", "max_entries", "max_document_chars"):
        if getattr(cfg.fetch, key) <= 0:
            raise bad(f"fetch.{key}", "must be > 0")
    if not 0 < cfg.run.deadline_seconds < math.inf:  # also refuses nan
        raise bad("run.deadline_seconds", f"must be a number of seconds > 0, got {cfg.run.deadline_seconds!r}")
    if cfg.embedder.batch_size <= 0:
        raise bad("embedder.batch_size", "must be > 0")
    if cfg.embedder.truncate_dim is not None and not 0 < cfg.embedder.truncate_dim <= MAX_TRUNCATE_DIM:
        raise bad("embedder.truncate_dim", f"must be > 0 and <= {MAX_TRUNCATE_DIM} (and at most the model's dimension)")
    if cfg.embedder.backend not in BACKENDS:
        raise bad("embedder.backend", f"must be one of {', '.join(BACKENDS)}, got {cfg.embedder.backend!r}")
    if cfg.embedder.backend != "torch" and cfg.embedder.device != "cpu":
        raise bad("embedder.backend", f"the ONNX backends run on the CPU; set embedder.device = \"cpu\" "
                                      f"(got {cfg.embedder.device!r}) or backend = \"torch\"")
    if cfg.embedder.engine not in ENGINES:
        raise bad("embedder.engine", f"must be one of {', '.join(ENGINES)}, got {cfg.embedder.engine!r}")
    if not 1 <= cfg.embedder.ray_workers <= MAX_CONCURRENCY:
        raise bad("embedder.ray_workers", f"must be >= 1 and <= {MAX_CONCURRENCY}")
    device_problem = _device_problem(cfg.embedder.device)
    if device_problem:
        raise bad("embedder.device", device_problem)
    if cfg.chunking.size <= 0:
        raise bad("chunking.size", "must be > 0 words")
    if not 0 <= cfg.chunking.overlap < cfg.chunking.size:
        raise bad("chunking.overlap", f"must be >= 0 and smaller than chunking.size ({cfg.chunking.size})")
    r = cfg.retrieval
    if not r.pipelines:
        raise bad("retrieval.pipelines", f"name at least one of {', '.join(PIPELINES)}")
    for name in r.pipelines:
        if name not in PIPELINES:
            raise bad("retrieval.pipelines", f"unknown pipeline {name!r} (valid: {', '.join(PIPELINES)})")
    if len(set(r.pipelines)) != len(r.pipelines):
        raise bad("retrieval.pipelines", "a pipeline is listed twice")
    if not r.k or any(k <= 0 for k in r.k) or len(set(r.k)) != len(r.k):
        raise bad("retrieval.k", "give distinct positive integers, e.g. [1, 3, 5, 10]")
    if r.candidate_depth < max(r.k):
        raise bad("retrieval.candidate_depth", f"must be >= the largest k ({max(r.k)})")
    if r.fusion_depth is not None and r.fusion_depth <= 0:
        raise bad("retrieval.fusion_depth", "must be > 0")
    if r.rrf_k < 0:
        raise bad("retrieval.rrf_k", "must be >= 0")
    if r.dense_index not in DENSE_INDEXES:
        raise bad("retrieval.dense_index", f"must be one of {', '.join(DENSE_INDEXES)}")
    if r.hnsw_m <= 0 or r.hnsw_ef_search <= 0:
        raise bad("retrieval.hnsw_m", "hnsw_m and hnsw_ef_search must be > 0")
    if cfg.bm25.k1 < 0 or not 0 <= cfg.bm25.b <= 1:
        raise bad("bm25.k1", "k1 must be >= 0 and b within [0, 1]")
    if cfg.bm25.method not in BM25_METHODS:
        raise bad("bm25.method", f"must be one of {', '.join(BM25_METHODS)}")
    if cfg.bm25.stopwords not in STOPWORDS:
        raise bad("bm25.stopwords", f"must be one of {', '.join(STOPWORDS)}")
    if cfg.rerank.depth <= 0 or cfg.rerank.batch_size <= 0:
        raise bad("rerank.depth", "depth and batch_size must be > 0")
    if cfg.corpus.max_age_days is not None and cfg.corpus.max_age_days <= 0:
        raise bad("corpus.max_age_days", "must be > 0 (leave it out to keep everything)")
    d = cfg.drift
    if d.n_components <= 0 or d.bins < 2 or not 0 < d.epsilon < 1 or d.sample_cap < 10:
        raise bad("drift", "need n_components > 0, bins >= 2, 0 < epsilon < 1 and sample_cap >= 10")
    if d.max_chunks_per_document < 1:
        raise bad("drift.max_chunks_per_document", "must be >= 1")
    if not 1 <= d.window_days <= d.max_window_days or d.reference_days < 1 or d.min_current < 2 or d.min_reference < 2:
        raise bad("drift.window_days", "need 1 <= window_days <= max_window_days, reference_days >= 1, "
                                       "min_current and min_reference >= 2")
    if d.permutations < 99 or not 0 < d.alpha < 1:
        raise bad("drift.permutations", "need permutations >= 99 and 0 < alpha < 1")
    if not 1 <= d.confirm_windows <= d.confirm_of:
        raise bad("drift.confirm_windows", "need 1 <= confirm_windows <= confirm_of")
    if not 0 < d.page_alpha <= d.alpha:
        raise bad("drift.page_alpha", f"need 0 < page_alpha <= alpha ({d.alpha})")
    unknown = [name for name in d.page_statistics if name not in DRIFT_FAMILY]
    if unknown:
        raise bad("drift.page_statistics", f"unknown statistics {unknown}: choose among {', '.join(DRIFT_FAMILY)}")
    if d.page_permutations < d.permutations:
        raise bad("drift.page_permutations", f"must be >= permutations ({d.permutations})")
    for key, draws, level in (("permutations", d.permutations, d.alpha),
                              ("page_permutations", d.page_permutations, d.page_alpha)):
        # The smallest Holm-adjusted permutation p of the family is its size / (draws + 1): below it, never drifted.
        size = len(DRIFT_FAMILY)
        if size / (draws + 1) >= level:
            raise bad(f"drift.{key}", f"too few to reach {'alpha' if key == 'permutations' else 'page_alpha'} "
                      f"({level:g}): the smallest Holm-adjusted p of {size} statistics at {draws} "
                      f"draws is {size / (draws + 1):.2g}; need more than {math.ceil(size / level) - 1}")
    for key in ("psi_effect", "ks_effect", "classifier_effect", "novelty_effect", "duplicate_effect",
                "composition_effect", "language_effect", "duplicate_cosine", "max_deleted_share"):
        if not 0 < getattr(d, key) <= (10 if key == "psi_effect" else 1):
            raise bad(f"drift.{key}", "must be > 0 (and at most 1 for shares, cosines and distances)")
    if d.query_window_days <= 0:
        raise bad("drift.query_window_days", "must be > 0")
    for key in ("shift_terms", "shift_min_documents", "shift_documents", "language_min_documents"):
        if getattr(d, key) < 1:
            raise bad(f"drift.{key}", "must be >= 1")
    if not 0 < d.shift_language_share <= 1:
        raise bad("drift.shift_language_share", "must be > 0 and at most 1")
    a = cfg.alerts
    if a.criticality not in CRITICALITY:
        raise bad("alerts.criticality", f"must be one of {', '.join(CRITICALITY)}")
    if a.window < 2:
        raise bad("alerts.window", "must be >= 2 runs")
    for key, names in (("alerts.metrics", a.metrics), ("alerts.drop", a.drop), ("alerts.floors", a.floors)):
        for name in names:
            metric, _, k = name.partition("@")
            if metric not in RETRIEVAL_METRICS or not k.isdigit() or int(k) not in r.k:
                raise bad(key, f"{name!r} is not metric@k with a metric in {', '.join(RETRIEVAL_METRICS)} "
                               f"and k in retrieval.k {list(r.k)}")
    if any(not 0 < v < 1 for v in a.drop.values()):
        raise bad("alerts.drop", "relative drops are fractions between 0 and 1, e.g. 0.1 for 10%")
    if not 0 < a.alpha < 1:
        raise bad("alerts.alpha", "must be within (0, 1), e.g. 0.01")
    if not 999 <= a.permutations <= 1_000_000:
        raise bad("alerts.permutations", "must be between 999 and 1,000,000 draws")
    if a.confirm_days < 1 or a.reference_runs < 2:
        raise bad("alerts.confirm_days", "confirm_days must be >= 1 and reference_runs >= 2")
    if not 0 < a.ewma_smoothing <= 1:
        raise bad("alerts.ewma_smoothing", "must be within (0, 1]")
    if a.segment_min_n < 2:
        raise bad("alerts.segment_min_n", "must be >= 2 questions")
    if not 0 < a.segment_alpha < 1:
        raise bad("alerts.segment_alpha", "must be within (0, 1), e.g. 0.002")
    if a.reference_start is not None:
        try:
            date.fromisoformat(a.reference_start)
        except ValueError:
            raise bad("alerts.reference_start", f"not a YYYY-MM-DD date: {a.reference_start!r}") from None
    if a.webhook_url is not None and not _is_http(a.webhook_url):
        raise bad("alerts.webhook_url", "must be an http(s) URL")
    if not 0 <= a.webhook_retries <= MAX_WEBHOOK_RETRIES:
        raise bad("alerts.webhook_retries", f"must be >= 0 and <= {MAX_WEBHOOK_RETRIES}")
    if not 0 < a.silence_alpha < 1:
        raise bad("alerts.silence_alpha", "must be > 0 and < 1")
    if a.silence_min_days < 1 or a.silence_gap_factor < 1 or a.silence_min_history < 3:
        raise bad("alerts.silence_min_days", "silence_min_days must be >= 1, silence_gap_factor >= 1 and "
                                             "silence_min_history >= 3 days with new items")
    if a.spike_min_history < 3 or a.spike_window < a.spike_min_history or a.spike_factor < 1:
        raise bad("alerts.spike_window", "spike_min_history must be >= 3 runs, spike_window >= spike_min_history "
                                         "and spike_factor >= 1")
    if not 0 < a.spike_alpha < 1:
        raise bad("alerts.spike_alpha", "must be within (0, 1), e.g. 0.01")
    _check_targets(cfg, bad)
    _check_index_health(cfg, bad)
    _check_judging(cfg, bad)
    _check_exports(cfg.export, bad)
    _check_generation(cfg, bad)
    names = [s.name for s in cfg.sources]
    for i, s in enumerate(cfg.sources):
        if not s.name.strip():
            raise bad(f"sources[{i}].name", "must not be empty")
        if [s.url, s.path, s.documents].count(None) != 2:
            raise bad(f"sources[{i}] ({s.name})", "give exactly one of url, path or documents")
        if s.url is not None and not _is_http(s.url):
            raise bad(f"sources[{i}].url", f"only http(s) URLs are supported, got {s.url!r}")
        if s.include is not None and s.documents is None:
            raise bad(f"sources[{i}].include", "selects files of a documents folder: set documents, or remove include")
        if names.count(s.name) > 1:
            raise bad(f"sources[{i}].name", f"duplicate source name {s.name!r}")


def _check_exports(export: ExportConfig, bad: Callable[[str, str], ConfigError]) -> None:
    for name, package in EXPORT_PACKAGES.items():
        if getattr(export, name) is not None and importlib.util.find_spec(package) is None:
            raise bad(f"export.{name}", f"needs the {package} package, which is not installed: "
                                        f"pip install 'driftwatch[{name}]'")
    m = export.mlflow
    if m is not None:
        if not m.tracking_uri.strip():
            raise bad("export.mlflow.tracking_uri", "must not be empty (a folder or a server URL)")
        if not m.experiment.strip():
            raise bad("export.mlflow.experiment", "must not be empty")
        if not 0 < m.timeout <= MAX_TIMEOUT:
            raise bad("export.mlflow.timeout", f"must be a number of seconds > 0 and <= {MAX_TIMEOUT:g}")
    if export.prometheus is not None and export.prometheus.path.suffix != ".prom":
        raise bad("export.prometheus.path", "must end in .prom (node_exporter's textfile collector reads only those)")
    if export.whylogs is not None and not 0 <= export.whylogs.projection_dims <= MAX_PROJECTION_DIMS:
        raise bad("export.whylogs.projection_dims", f"must be >= 0 and <= {MAX_PROJECTION_DIMS} (0: every dimension)")
    if export.evidently is not None and not export.evidently.project.strip():
        raise bad("export.evidently.project", "must not be empty")


_URI_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


def has_scheme(uri: str) -> bool:
    """A URI with a scheme (http://, file:, sqlite:, databricks), not a path (nor a Windows drive letter)."""
    return bool(_URI_SCHEME.match(uri)) and not re.match(r"[A-Za-z]:[\\/]", uri)


def _tracking_uri(uri: str, base: Path) -> str:
    """A tracking URI with a scheme stays as it is; a folder is relative to the config file, like every other
    path."""
    if has_scheme(uri):
        return uri
    path = Path(uri).expanduser()
    return str(path if path.is_absolute() else base / path)


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FUNCTION = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


def render_body(template: str, query: str, k: int) -> str:
    """The request body: {query} becomes the question as a JSON string (quoted or not in the template), {k}
    the depth (a JSON number; a string when quoted)."""
    quoted = json.dumps(query)
    return (template.replace('"{query}"', quoted).replace("{query}", quoted)
            .replace('"{k}"', json.dumps(str(k))).replace("{k}", str(k)))


def _check_target_tables(raw: dict) -> None:
    """Refuse a [[targets]] table with a key its kind does not take, or without one it needs (before the
    typed build, which knows the keys but not which kind takes which)."""
    tables = raw.get("targets", [])
    if not isinstance(tables, list):
        raise ConfigError("targets: expected [[targets]] tables")
    for i, table in enumerate(tables):
        if not isinstance(table, dict):
            raise ConfigError(f"targets[{i}]: expected a table, got {table!r}")
        where = f"targets[{i}]" + (f" ({table['name']})" if isinstance(table.get("name"), str) else "")
        for key in ("name", "kind"):
            if key not in table:
                raise ConfigError(f"missing required key {where}.{key}")
        kind = table["kind"]
        if kind not in TARGET_KINDS:
            raise ConfigError(f"{where}.kind: unknown kind {kind!r} (valid: {', '.join(TARGET_KINDS)})")
        valid = ("name", "kind", *TARGET_KEYS[kind], *CANDIDATE_KEYS)
        unknown = sorted(set(table) - set(valid))
        if unknown:
            raise ConfigError(f"unknown key {where}.{unknown[0]} for kind {kind!r} (valid keys here: "
                              f"{', '.join(valid)})")
        for key in TARGET_REQUIRED[kind]:
            if key not in table:
                raise ConfigError(f"missing required key {where}.{key} (kind {kind!r} needs it)")


def _check_targets(cfg: Config, bad: Callable[[str, str], ConfigError]) -> None:
    names = [t.name for t in cfg.targets]
    for i, t in enumerate(cfg.targets):
        key = f"targets[{i}]"
        if not t.name.strip():
            raise bad(f"{key}.name", "must not be empty")
        if t.name in names[:i]:
            raise bad(f"{key}.name", f"duplicate target name {t.name!r} (first in targets[{names.index(t.name)}])")
        if t.kind == "builtin" and (t.pipeline or t.name) not in PIPELINES:
            raise bad(f"{key}.pipeline", f"unknown builtin pipeline {t.pipeline or t.name!r} "
                                         f"(valid: {', '.join(PIPELINES)})")
        if t.kind == "http":
            if not _is_http(t.url):
                raise bad(f"{key}.url", f"must be an http(s) URL, got {t.url!r}")
            if "{query}" not in t.body:
                raise bad(f"{key}.body", "the body template must contain {query}")
            try:
                json.loads(render_body(t.body, "a question", 10))
            except json.JSONDecodeError as exc:
                raise bad(f"{key}.body", f"not a JSON template once {{query}} and {{k}} are filled in: {exc}") from None
            if not 0 < t.timeout <= MAX_TIMEOUT:
                raise bad(f"{key}.timeout", f"must be a number of seconds > 0 and <= {MAX_TIMEOUT:g}")
            if not 0 <= t.retries <= MAX_TARGET_RETRIES:
                raise bad(f"{key}.retries", f"must be >= 0 and <= {MAX_TARGET_RETRIES}")
            if not 1 <= t.concurrency <= MAX_CONCURRENCY:
                raise bad(f"{key}.concurrency", f"must be >= 1 and <= {MAX_CONCURRENCY}")
            if t.max_bytes <= 0:
                raise bad(f"{key}.max_bytes", "must be > 0")
            for header, env in t.headers.items():
                if not _ENV_NAME.fullmatch(env):
                    raise bad(f"{key}.headers.{header}", "give the NAME of an environment variable holding the "
                                                         "value (secrets are never written in the config)")
        if t.kind == "python" and not _FUNCTION.fullmatch(t.function):
            raise bad(f"{key}.function", f"expected module:function, got {t.function!r}")
        if t.kind == "runs" and t.format not in RUN_FORMATS:
            raise bad(f"{key}.format", f"must be one of {', '.join(RUN_FORMATS)}, got {t.format!r}")
        if t.kind in VECTOR_STORES:
            _check_vector_store(t, key, bad)
    _check_candidates(cfg, bad)


def _target_settings(t: TargetConfig) -> dict:
    """A target's settings for config_hash: the vector-store keys only for a vector store, so that the hash of a
    config from before them is unchanged."""
    settings = dataclasses.asdict(t)
    if t.kind not in VECTOR_STORES:
        for key in _STORE_ONLY:
            del settings[key]
    return settings


def _check_vector_store(t: TargetConfig, key: str, bad: Callable[[str, str], ConfigError]) -> None:
    if t.kind != "pgvector" and (t.url is None) == (t.path is None):
        raise bad(f"{key}.url", f"a {t.kind} target needs a server url or a local path (one of them)")
    if t.url is not None and not _is_http(t.url):
        raise bad(f"{key}.url", f"must be an http(s) URL, got {t.url!r}")
    if t.kind == "pgvector":
        if not _ENV_NAME.fullmatch(t.dsn_env):
            raise bad(f"{key}.dsn_env", "give the NAME of an environment variable holding the connection string "
                                        "(secrets are never written in the config)")
        if t.distance not in PG_DISTANCES:
            raise bad(f"{key}.distance", f"must be one of {', '.join(PG_DISTANCES)}, got {t.distance!r}")
        if not t.table.strip() or t.table.count(".") > 1:
            raise bad(f"{key}.table", f"expected table or schema.table, got {t.table!r}")
    elif not t.collection.strip():
        raise bad(f"{key}.collection", "must not be empty")
    if not 0 < t.timeout <= MAX_TIMEOUT:
        raise bad(f"{key}.timeout", f"must be a number of seconds > 0 and <= {MAX_TIMEOUT:g}")


def _check_candidates(cfg: Config, bad: Callable[[str, str], ConfigError]) -> None:
    """A candidate is compared with a watched (non-candidate) target; `against` belongs to candidates only."""
    watched = [t.name for t in cfg.targets if not t.candidate]
    for i, t in enumerate(cfg.targets):
        if t.against is not None and not t.candidate:
            raise bad(f"targets[{i}].against", "only a candidate (candidate = true) is compared against a target")
        if t.candidate and not watched:
            raise bad(f"targets[{i}].candidate", "a candidate needs a target that is not one to be compared with")
        overrides = [k for k in OWN_SETTINGS if getattr(t, k) is not None]
        if overrides and not t.candidate:
            raise bad(f"targets[{i}].{overrides[0]}", "only a candidate (candidate = true) has its own embedder "
                                                      "or chunking settings; the watched pipelines take "
                                                      "[embedder]'s and [chunking]'s")
        own = candidate_chunking(cfg, t)
        if t.chunk_size is not None and own.size <= 0:
            raise bad(f"targets[{i}].chunk_size", "must be > 0 words")
        if overrides and not 0 <= own.overlap < own.size:
            key = "chunk_overlap" if t.chunk_overlap is not None else "chunk_size"
            raise bad(f"targets[{i}].{key}", f"the candidate's chunk overlap ({own.overlap}) must be >= 0 and smaller "
                                             f"than its chunk size ({own.size})")
        if t.truncate_dim is not None and not 0 < t.truncate_dim <= MAX_TRUNCATE_DIM:
            raise bad(f"targets[{i}].truncate_dim", f"must be > 0 and <= {MAX_TRUNCATE_DIM}")
        if t.backend is not None and t.backend not in BACKENDS:
            raise bad(f"targets[{i}].backend", f"must be one of {', '.join(BACKENDS)}, got {t.backend!r}")
        if t.candidate and t.against is not None and t.against not in watched:
            raise bad(f"targets[{i}].against", f"no watched target {t.against!r}: a candidate is compared with a "
                                               f"target that is not a candidate (valid: {', '.join(watched)})")


def _check_index_health(cfg: Config, bad: Callable[[str, str], ConfigError]) -> None:
    h = cfg.index_health
    names = [t.name for t in cfg.targets]
    kinds = {t.name: t.kind for t in cfg.targets}
    for i, name in enumerate(h.stores):
        if name not in names:
            raise bad(f"index_health.stores[{i}]", f"{name!r} is not the name of a [[targets]] table "
                                                   f"(targets: {', '.join(names) or 'none'})")
        if kinds[name] not in VECTOR_STORES:
            raise bad(f"index_health.stores[{i}]", f"{name!r} is a {kinds[name]} target, not a vector store "
                                                   f"(kinds: {', '.join(VECTOR_STORES)})")
    if h.drift and len(h.stores) != 1:
        raise bad("index_health.drift", f"the drift reads one store's vectors: name exactly one in index_health.stores "
                                        f"(got {len(h.stores)})")
    if h.sample < 0:
        raise bad("index_health.sample", "must be >= 0 records")
    if not 0 < h.stale_cosine < h.generation_cosine <= 1:
        raise bad("index_health.stale_cosine", "need 0 < stale_cosine < generation_cosine <= 1")
    if h.neighbourhood_sample < 0:
        raise bad("index_health.neighbourhood_sample", "must be >= 0 records (0: no neighbourhood signatures)")
    if h.min_neighbours < 1:
        raise bad("index_health.min_neighbours", "must be >= 1 distinct text")
    for key in ("text_neighbour", "neighbour_cosine", "space_cosine"):
        if not 0 < getattr(h, key) < 1:
            raise bad(f"index_health.{key}", "must be a cosine between 0 and 1 (exclusive)")


def _check_judging(cfg: Config, bad: Callable[[str, str], ConfigError]) -> None:
    j = cfg.judging
    if j.pool_depth is not None and not 1 <= j.pool_depth <= max(cfg.retrieval.k):
        raise bad("judging.pool_depth", f"must be between 1 and the largest retrieval.k ({max(cfg.retrieval.k)}), "
                                        f"got {j.pool_depth}")
    if not 0 < j.shadow_similarity < 1:
        raise bad("judging.shadow_similarity", "must be within (0, 1), e.g. 0.5")
    if j.base_url is not None and not _is_http(j.base_url):
        raise bad("judging.base_url", "must be an http(s) URL")
    if j.timeout <= 0 or j.max_calls < 1:
        raise bad("judging.timeout", "timeout must be > 0 seconds and max_calls >= 1")
    if not 0 < j.duplicate_cosine <= 1:
        raise bad("judging.duplicate_cosine", "must be within (0, 1]")
    if j.api_key_env is not None and not _ENV_NAME.fullmatch(j.api_key_env):
        raise bad("judging.api_key_env", "give the NAME of an environment variable holding the key "
                                         "(secrets are never written in the config)")
    refused = monitored_judge(cfg, j.model)
    if refused:
        raise bad("judging.model", refused)


def monitored_uses(cfg: Config) -> dict[str, str]:
    """Each model name a monitored pipeline uses, with the first setting naming it (generation.model,
    generation.judge_model, embedder.model, rerank.model, targets[i].model): the LLM pre-label and drafted
    questions refuse a judge among them (`monitored_judge`). The one owner of that list."""
    found: dict[str, str] = {}
    named = [("generation.model", cfg.generation.model), ("generation.judge_model", cfg.generation.judge_model),
             ("embedder.model", cfg.embedder.model), ("rerank.model", cfg.rerank.model),
             *((f"targets[{i}].model ({t.name})", t.model) for i, t in enumerate(cfg.targets))]
    for key, model in named:
        if model:
            found.setdefault(model, key)
    return found


def monitored_judge(cfg: Config, model: str | None) -> str | None:
    """Why `model` may not judge (a monitored pipeline uses it, and would grade its own results), or None."""
    used = monitored_uses(cfg)
    if model and model in used:
        return f"{model!r} is the model {used[model]} names: a pipeline that is monitored must not judge its own " \
               "results; name another model"
    return None


def judging_endpoint(cfg: Config) -> GenerationConfig:
    """The [judging] endpoint as the chat client reads a section: its base_url, api_key_env, model, timeout and
    max_calls, [generation]'s base_url and api_key_env when [judging] names none; temperature 0. ConfigError
    naming the key when no endpoint or no model is set."""
    j, g = cfg.judging, cfg.generation
    where = cfg.file or "the config"
    base_url = j.base_url or g.base_url
    if base_url is None:
        raise ConfigError(f"{where}: judging.base_url: no OpenAI-compatible endpoint for the judging LLM "
                          "(set [judging] base_url, or [generation] base_url)")
    if not j.model:
        raise ConfigError(f"{where}: judging.model: name the judging LLM's model (one no monitored pipeline uses)")
    key_env = j.api_key_env if j.base_url is not None else (j.api_key_env or g.api_key_env)
    return dataclasses.replace(g, base_url=base_url, model=j.model, judge_model=None, api_key_env=key_env,
                               timeout=j.timeout, max_calls=j.max_calls, temperature=0.0, mode="off")


def _check_generation(cfg: Config, bad: Callable[[str, str], ConfigError]) -> None:
    g = cfg.generation
    if g.mode not in GENERATION_MODES:
        raise bad("generation.mode", f"must be one of {', '.join(GENERATION_MODES)}, got {g.mode!r}")
    if g.mode == "logged" and g.logged is None:
        raise bad("generation.logged", "mode = \"logged\" needs the file (or folder) of logged answers")
    if g.mode == "generate" and g.base_url is None:
        raise bad("generation.base_url", "mode = \"generate\" needs an OpenAI-compatible endpoint")
    if g.base_url is not None and not _is_http(g.base_url):
        raise bad("generation.base_url", f"must be an http(s) URL, got {g.base_url!r}")
    if g.base_url is not None and not (g.judge_model or g.model):
        raise bad("generation.model", "name the model served at generation.base_url")
    if g.judge and g.base_url is None:
        raise bad("generation.judge", "the judge needs generation.base_url")
    if g.api_key_env is not None and not _ENV_NAME.fullmatch(g.api_key_env):
        raise bad("generation.api_key_env", "give the NAME of an environment variable holding the key "
                                            "(secrets are never written in the config)")
    if not 0 <= g.temperature <= 2:
        raise bad("generation.temperature", "must be within [0, 2]")
    if not 0 < g.max_tokens <= MAX_GENERATION_TOKENS:
        raise bad("generation.max_tokens", f"must be > 0 and <= {MAX_GENERATION_TOKENS}")
    if g.k < 1:
        raise bad("generation.k", "must be >= 1")
    if g.mode == "generate":  # pipeline and k choose the context of a generated answer; nothing else reads them
        _check_generate_context(cfg, bad)
    if not 0 < g.timeout <= MAX_TIMEOUT:
        raise bad("generation.timeout", f"must be a number of seconds > 0 and <= {MAX_TIMEOUT:g}")
    if not 0 <= g.retries <= MAX_TARGET_RETRIES:
        raise bad("generation.retries", f"must be >= 0 and <= {MAX_TARGET_RETRIES}")
    if not 1 <= g.concurrency <= MAX_CONCURRENCY:
        raise bad("generation.concurrency", f"must be >= 1 and <= {MAX_CONCURRENCY}")
    if g.max_calls < 0 or g.max_tokens_per_run < 0:
        raise bad("generation.max_calls", "max_calls and max_tokens_per_run must be >= 0")
    if not -1 <= g.min_kappa <= 1:
        raise bad("generation.min_kappa", "Cohen's kappa lies within [-1, 1]")


def _check_generate_context(cfg: Config, bad: Callable[[str, str], ConfigError]) -> None:
    """The rules tying [generation] to the retrieval sections, checked only when answers are generated: the answer
    layer is off by default, and a section that is off must not constrain the sections that are on."""
    g, names = cfg.generation, [t.name for t in target_list(cfg)]
    if g.pipeline is not None and g.pipeline not in names:
        raise bad("generation.pipeline", f"no target {g.pipeline!r} (targets: {', '.join(names)})")
    if g.k > cfg.retrieval.candidate_depth:
        raise bad("generation.k", f"must be >= 1 and <= retrieval.candidate_depth ({cfg.retrieval.candidate_depth})")


def target_list(cfg: Config) -> tuple[TargetConfig, ...]:
    """The retrievers a run evaluates: the [[targets]], else one builtin target per retrieval.pipelines entry."""
    return cfg.targets or tuple(TargetConfig(name=p, kind="builtin", pipeline=p) for p in cfg.retrieval.pipelines)


def candidates(cfg: Config) -> dict[str, str]:
    """Each candidate target's name -> the target it is compared with (its `against`, else the first watched one)."""
    watched = [t.name for t in cfg.targets if not t.candidate]
    return {t.name: t.against or watched[0] for t in cfg.targets if t.candidate and (t.against or watched)}


def own_embedder(target: TargetConfig) -> bool:
    """A builtin candidate with embedder or chunking settings of its own: searched over its own vectors, not the
    run's index."""
    return target.kind == "builtin" and any(getattr(target, k) is not None for k in OWN_SETTINGS)


def candidate_chunking(cfg: Config, target: TargetConfig) -> ChunkingConfig:
    """The chunking a target's corpus is split with: [chunking]'s, with a candidate's `chunk_size`/`chunk_overlap`."""
    return dataclasses.replace(cfg.chunking, **{key: getattr(target, name) for name, key in CHUNKING_OVERRIDES.items()
                                                if getattr(target, name) is not None})


def builtin_pipelines(cfg: Config) -> tuple[str, ...]:
    """The builtin pipelines the targets need over the run's index (each once), in target order."""
    return tuple(dict.fromkeys(t.pipeline or t.name for t in target_list(cfg)
                               if t.kind == "builtin" and not own_embedder(t)))


def require_sources(cfg: Config) -> None:
    """Refuse a config without sources for a run that needs a corpus: one with a builtin target (eval, demo and
    the dashboard supply or need none; external targets bring their own index)."""
    if not cfg.sources and any(t.kind == "builtin" for t in target_list(cfg)):
        raise ConfigError(f"{cfg.file or 'the configuration'}: sources: none configured; a run of the builtin "
                          "pipelines needs at least one [[sources]] table with a name and a url, path or documents")


def _model_path(name: str, base: Path) -> str:
    """A model given as a relative folder (./x, ../x, a/b/c, or a folder that exists beside the config file) is
    relative to the config file like every other path; a hub id (name or owner/name) stays as it is."""
    if name.startswith(("/", "~")):
        return name
    if name.startswith(("./", "../")) or name.count("/") > 1 or (base / name).is_dir():
        return str(base / name)
    return name


def load_config(path: Path | str | None = None, *, data_dir: Path | str | None = None) -> Config:
    """Read and validate a config file.

    `path` defaults to $DRIFTWATCH_CONFIG, then ./monitor.toml. Relative paths inside the file
    are relative to the file's folder. `data_dir` (or $DRIFTWATCH_DATA_DIR) overrides the file's.
    """
    path = Path(path or os.environ.get(ENV_CONFIG) or DEFAULT_CONFIG_FILE)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found (pass --config or set {ENV_CONFIG})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text: {exc}") from None
    base = path.resolve().parent
    try:
        _check_target_tables(raw)
        cfg = _build(Config, raw, "", base)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    cfg = cfg.replace(embedder=dataclasses.replace(cfg.embedder, model=_model_path(cfg.embedder.model, base)),
                      rerank=dataclasses.replace(cfg.rerank, model=_model_path(cfg.rerank.model, base)),
                      targets=tuple(dataclasses.replace(t, model=_model_path(t.model, base)) for t in cfg.targets))
    if cfg.export.mlflow is not None:
        mlflow = dataclasses.replace(cfg.export.mlflow, tracking_uri=_tracking_uri(cfg.export.mlflow.tracking_uri, base))
        cfg = cfg.replace(export=dataclasses.replace(cfg.export, mlflow=mlflow))
    if cfg.export.evidently is not None and not cfg.export.evidently.workspace.is_absolute():  # the default
        evidently = dataclasses.replace(cfg.export.evidently, workspace=base / cfg.export.evidently.workspace)
        cfg = cfg.replace(export=dataclasses.replace(cfg.export, evidently=evidently))
    override = data_dir or os.environ.get(ENV_DATA_DIR)
    if override:
        cfg = cfg.replace(data_dir=Path(override).expanduser().resolve())
    cfg = cfg.replace(file=path)
    _check(cfg, str(path))
    redact.remember(redact.config_secrets(cfg))  # from here on, every written message masks them
    return cfg


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (str, Path)):
        return json.dumps(str(value))  # a JSON string is a valid TOML basic string
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {value!r} as TOML")


def to_toml(cfg: Config) -> str:
    """The config as a TOML file that `load_config` reads back to an equal config (absolute paths)."""
    lines = [f"data_dir = {_toml_value(cfg.data_dir)}", f"gold = {_toml_value(cfg.gold)}"]
    for source in cfg.sources:
        lines += ["", "[[sources]]"] + [f"{k} = {_toml_value(v)}" for k, v in dataclasses.asdict(source).items()
                                        if v is not None]
    for target in cfg.targets:
        lines += ["", "[[targets]]"] + [f"{k} = {_toml_value(v)}" for k, v in dataclasses.asdict(target).items()
                                        if v is not None and (k in ("name", "kind", *CANDIDATE_KEYS)
                                                                  or k in TARGET_KEYS[target.kind])]
    for f in dataclasses.fields(cfg):
        section = getattr(cfg, f.name)
        if dataclasses.is_dataclass(section):
            lines += ["", f"[{f.name}]"] + [f"{k} = {_toml_value(v)}" for k, v in dataclasses.asdict(section).items()
                                            if v is not None]
    return "\n".join(lines) + "\n"
