"""`driftwatch init`: a commented starter monitor.toml written from config.py's defaults (so it cannot drift from
them), a three-question gold set template, and the cron line and GitHub Actions workflow that run it."""

from __future__ import annotations

import dataclasses
import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline import PROJECT_URL, __version__
from pipeline.config import (DEFAULT_CONFIG_FILE, Config, EvidentlyExportConfig, MlflowExportConfig, WhylogsExportConfig,
                             _toml_value)
from pipeline.errors import DriftwatchError

STARTER_DATA_DIR = "data"
STARTER_GOLD = "gold.jsonl"
WORKFLOW_FILE = Path(".github") / "workflows" / "driftwatch.yml"
COMMENT_COLUMN = 38

# One line of meaning per key, by section ("" for the top level). A key config.py gains without a note here is
# caught by a test, so the starter always lists every key.
NOTES: dict[str, dict[str, str]] = {
    "": {
        "data_dir": "corpus.sqlite and the CSV series ($DRIFTWATCH_DATA_DIR overrides)",
        "gold": "the gold set: one JSON question per line",
        "sources": "one [[sources]] table per feed or documents folder, with a name and a url, path or documents",
        "targets": ("the retrievers watched, each a name and a kind: builtin (a pipeline over the sources), http "
                    "(a search endpoint), python (module:function), runs (logged results) or a vector store "
                    "(chroma, pgvector, qdrant); none: the builtin retrieval.pipelines (see \"Your own retriever\" in "
                    "the documentation)"),
    },
    "fetch": {
        "timeout": "seconds for a whole request (connect, headers and body)",
        "max_bytes": "larger feed bodies are refused",
        "user_agent": "sent with every request (default: driftwatch's name and version)",
        "max_entries": "entries taken from one feed per run, in feed order; the rest is skipped and named",
        "max_document_chars": "a longer document's text is cut here, at a word boundary, and named",
    },
    "embedder": {
        "model": "a hub id or a local folder (relative to this file); the default works offline",
        "batch_size": "texts encoded at once",
        "device": "cpu, cuda, cuda:N or mps",
        "truncate_dim": "keep only the first N dimensions (default: all)",
        "backend": "torch, onnx (the model exported to ONNX, same vectors) or onnx-int8 (quantised, not the same)",
        "engine": "local, or ray: the texts a run must encode are embedded on Ray Data (pip install driftwatch[ray])",
        "ray_address": "a Ray cluster (ray://head:10001 or auto); default: Ray started on this machine",
        "ray_workers": "model replicas on Ray, one CPU each",
    },
    "chunking": {
        "size": "words per chunk",
        "overlap": "words shared by consecutive chunks",
    },
    "retrieval": {
        "pipelines": "also: \"hybrid_rerank\" (a cross-encoder, see [rerank])",
        "k": "cutoffs every metric is computed at",
        "candidate_depth": "documents each branch returns before fusion (>= the largest k)",
        "fusion_depth": "cut each branch's list to this many before RRF (default: candidate_depth)",
        "rrf_k": "reciprocal rank fusion: 1 / (rrf_k + rank)",
        "dense_index": "\"flat\" (exact) or \"hnsw\" (approximate, for large corpora)",
        "hnsw_m": "HNSW graph degree",
        "hnsw_ef_search": "HNSW search breadth",
    },
    "bm25": {
        "k1": "term-frequency saturation",
        "b": "document-length normalisation",
        "method": "robertson, lucene, atire, bm25l or bm25+",
        "stopwords": "\"en\" or \"none\"",
    },
    "rerank": {
        "model": "the cross-encoder of the hybrid_rerank pipeline",
        "depth": "top hybrid documents re-scored",
        "batch_size": "pairs scored at once",
    },
    "corpus": {
        "max_age_days": "documents older than this are marked deleted (default: keep all)",
    },
    "drift": {
        "window_days": "days of new chunks in the current window",
        "max_window_days": "the current window grows up to this until it holds min_current chunks",
        "reference_days": "days of new chunks in the reference window before it",
        "min_current": "fewer new chunks: \"not enough new data\", no verdict",
        "min_reference": "fewer reference chunks: no verdict",
        "n_components": "PSI and KS on principal components fitted on both windows",
        "bins": "PSI bins: the reference's quantiles",
        "epsilon": "share given to an empty bin",
        "sample_cap": "chunks per side at most (a seeded sample of whole documents)",
        "max_chunks_per_document": "chunks of one document in a side's sample at most (evenly spaced)",
        "permutations": "draws of each statistic's permutation null",
        "alpha": "family-wise error of a run's verdicts (Holm over the statistics)",
        "confirm_windows": "a drifted window pages when drifted in this many of the last confirm_of windows",
        "confirm_of": "disjoint current windows (today's included) looked at to confirm a drift",
        "page_alpha": "a drift pages on its own day when its Holm-adjusted p is below this",
        "page_permutations": "permutation draws on a drifted window, so its p can reach page_alpha",
        "page_statistics": "the statistics whose drift may page on its own day (PSI and KS page by confirmation)",
        "psi_effect": "PSI above its null mean that counts as drift",
        "ks_effect": "largest KS distance that counts as drift",
        "classifier_effect": "domain classifier's balanced accuracy above its null mean",
        "novelty_effect": "share of new chunks unlike anything in the reference, above its null mean",
        "duplicate_effect": "share of new chunks with a near copy, above the reference's own share",
        "composition_effect": "share of new chunks in categories or sources the reference lacks",
        "language_effect": "total variation of the documents' language shares, above its null mean",
        "language_min_documents": "a language held by fewer documents (both windows) is pooled as other",
        "duplicate_cosine": "nearest-neighbour cosine at or above which a chunk is a near copy",
        "max_deleted_share": "a run deleting more of the corpus than this alerts",
        "seed": "seed of every sample and permutation",
        "evidently": "Evidently's domain classifier as context",
        "query_log": "real user queries, one per line or JSONL with query and timestamp (default: none)",
        "query_window_days": "the current window of the query log",
        "shift_terms": "top terms a drifted window's message names (c-TF-IDF against the reference)",
        "shift_min_documents": "a term is named only when at least this many new documents hold it",
        "shift_language_share": "languages are named when one's share of documents moved this much",
        "shift_documents": "documents per side read to name a drifted window's shift at most",
    },
    "alerts": {
        "window": "runs forming the drop rule's baseline",
        "criticality": "critical (5%), standard (10%) or exploratory (20%) change counts",
        "metrics": "series the drop and slow-drift rules watch (empty: hit, recall, mrr, ndcg at the default k: the largest k <= 5, else the smallest)",
        "drop": "per-metric relative drop, e.g. {\"recall@5\" = 0.05}",
        "floors": "absolute limit per metric@k, e.g. {\"recall@5\" = 0.5}",
        "alpha": "family-wise error per rule and run (Holm over the watched series)",
        "permutations": "Monte Carlo draws of the paired test's null",
        "confirm_days": "a drop warns on its first run and alerts once it holds this many",
        "reference_runs": "the slow-drift rule's reference period: the first N runs",
        "reference_start": "pin the reference period's first run date (default: the first run)",
        "ewma_smoothing": "weight of the newest run in the slow-drift moving mean",
        "webhook_url": "a Slack-compatible incoming webhook; only new alerts are sent (default: none)",
        "webhook_timeout": "seconds for one webhook request",
        "webhook_retries": "retries of a failed webhook request",
        "silence_min_days": "a source is silent after at least this many days without a new item",
        "silence_gap_factor": "... and after this many times its median gap between days with new items",
        "silence_min_history": "days with new items a source needs before its usual gap is learned",
        "silence_alpha": "... and after the gap its rate of new items leaves below this (Bonferroni over sources)",
        "spike_window": "the runs of a source's history its volume spike is tested against",
        "spike_min_history": "the runs of history a source needs before a spike can fire",
        "spike_factor": "a spike is also above this many times the source's median new items",
        "spike_alpha": "family-wise error of the spike test per run (Holm over the sources)",
        "segment_min_n": "segments (gold tags, gold documents' sources and categories) under this n are not tested",
        "segment_alpha": "family-wise error per segment rule and run (Holm over segments, pipelines and series)",
        "segment_alerts": "run the segment rules (segment_drop, segment_slow_drift); the series are always written",
    },
    "export": {  # each an [export.NAME] table, shown inline; present: the exporter is on (docs/exports.md)
        "mlflow": "MLflow runs (pip install 'driftwatch[mlflow]'); tracking_uri: a folder or a server URL",
        "prometheus": "a Prometheus textfile for node_exporter (pip install 'driftwatch[prometheus]')",
        "whylogs": "whylogs profiles in profiles/ of the data directory (pip install 'driftwatch[whylogs]')",
        "evidently": "a snapshot per run in an Evidently workspace folder (pip install 'driftwatch[evidently]')",
    },
    "generation": {
        "mode": "the answer layer: \"off\", \"logged\" (your RAG system's answers) or \"generate\" (an endpoint answers)",
        "logged": "logged answers: a JSONL file or a folder of YYYY-MM-DD.jsonl files",
        "labels": "human labels (CSV) the judge and the heuristics are checked against",
        "base_url": "an OpenAI-compatible endpoint (vLLM, Ollama, llama.cpp, a hosted API)",
        "model": "the model served at base_url",
        "api_key_env": "NAME of the environment variable holding the API key (default: no key)",
        "temperature": "of every generation and judge call",
        "max_tokens": "per completion",
        "pipeline": "generate: the target whose top k is the context (default: the first non-candidate)",
        "k": "generate: documents in the context",
        "judge": "judge the answers with the LLM (default: when base_url is set)",
        "judge_model": "the judge's model at base_url (default: model)",
        "timeout": "wall-clock seconds per call",
        "retries": "further attempts after a time-out, a connection error, 429 or 5xx",
        "concurrency": "calls in flight at once",
        "max_calls": "calls per run; the rest is not_judged",
        "max_tokens_per_run": "tokens per run; the rest is not_judged",
        "min_kappa": "a judged metric agreeing less with the labels cannot fire an alert or fail a gate",
        "require_citations": "flag answers citing no [doc id] (default: in generate mode)",
    },
    "run": {
        "deadline_seconds": "past it a run stops fetching and embedding and ends with status partial",
    },
    "index_health": {
        "stores": "[[targets]] whose vector store is read as a corpus each run: snapshot, ghosts, stale vectors",
        "sample": "records with a text re-embedded per store and run (seeded)",
        "stale_cosine": "a sampled vector below this cosine with its re-embedding is stale",
        "generation_cosine": "between stale_cosine and this: another generation of the model (ONNX int8)",
        "neighbourhood_sample": "records read by the neighbourhood signatures (all up to it, then seeded; 0: off)",
        "text_neighbour": "TF-IDF cosine at which two stored texts are neighbours",
        "neighbour_cosine": "below this mean vector cosine to its text neighbours a record sits in another space",
        "space_cosine": "vector cosine linking records into one space (the main space: the largest)",
        "min_neighbours": "documents among a component's text neighbours needed to judge its space (copies once)",
        "drift": "the drift statistics read the store's own vectors (one store; ids: chunk ids or document ids)",
    },
    "judging": {
        "pool": "record each run's unjudged documents in any target's top k (pool.csv) and warn of shadows",
        "pool_depth": "the top k the pool is drawn from (default: default_k)",
        "shadow_similarity": "word 3-shingle Jaccard at which a differing document is a near copy of a gold one",
        "base_url": "OpenAI-compatible endpoint for the pre-label and suggest-questions (default: [generation]'s)",
        "model": "the judging model; never one a monitored pipeline uses",
        "api_key_env": "NAME of the environment variable holding the key (default: [generation]'s)",
        "timeout": "wall-clock seconds per call",
        "max_calls": "calls per command",
        "duplicate_cosine": "a drafted question this close to a gold question is a duplicate",
    },
}

# What a commented-out key shows where its default is "none" (it cannot be written in TOML), or is computed.
EXAMPLES = {
    ("embedder", "truncate_dim"): 128,
    ("embedder", "ray_address"): "ray://head:10001",
    ("retrieval", "fusion_depth"): 50,
    ("corpus", "max_age_days"): 30,
    ("drift", "query_log"): "queries.jsonl",
    ("alerts", "reference_start"): "2026-01-01",
    ("alerts", "webhook_url"): "https://hooks.slack.com/services/...",
    ("export", "mlflow"): dataclasses.asdict(MlflowExportConfig()),
    ("export", "prometheus"): {"path": "/var/lib/node_exporter/textfile/driftwatch.prom"},
    ("export", "whylogs"): dataclasses.asdict(WhylogsExportConfig()),
    ("export", "evidently"): {k: str(v) for k, v in dataclasses.asdict(EvidentlyExportConfig()).items()},
    ("generation", "logged"): "answers.jsonl",
    ("generation", "labels"): "labels.csv",
    ("generation", "base_url"): "http://localhost:8000/v1",
    ("generation", "model"): "llama-3.1-8b-instruct",
    ("generation", "api_key_env"): "OPENAI_API_KEY",
    ("generation", "pipeline"): "hybrid",
    ("generation", "judge"): True,
    ("generation", "judge_model"): "llama-3.1-70b-instruct",
    ("judging", "pool_depth"): 5,
    ("judging", "base_url"): "http://localhost:8000/v1",
    ("judging", "model"): "qwen2.5-72b-instruct",
    ("judging", "api_key_env"): "OPENAI_API_KEY",
    ("generation", "require_citations"): True,
}
COMMENTED = {("fetch", "user_agent")}  # its default names the running version: an upgrade should bring the new one

GOLD_TEMPLATE = [
    {"id": "q1", "question": "What does the new parental leave policy say?", "relevant": ["doc-id-1"]},
    {"id": "q2", "question": "When does the spring release ship?", "relevant": {"doc-id-2": 2, "doc-id-3": 1}},
    {"id": "q3", "question": "Who approved budget item B-17?", "relevant": ["doc-id-4"], "tags": ["identifier"]},
]


class InitError(DriftwatchError):
    """`init` would overwrite a file (without --force)."""


@dataclass(frozen=True)
class Starter:
    written: tuple[Path, ...]
    config: Path
    cron: str
    workflow: str


def _line(assignment: str, note: str) -> str:
    return f"{assignment:<{COMMENT_COLUMN - 1}} # {note}"


@dataclass(frozen=True)
class StarterKey:
    """One key of a [section] as the starter writes it (the configuration reference lists the same)."""

    section: str
    name: str
    default: Any  # config.py's default; None: none
    shown: Any  # the value written: the default, else an example (EXAMPLES)
    commented: bool  # written commented out: the default cannot be written in TOML, or names the running version
    note: str


def section_keys() -> dict[str, list[StarterKey]]:
    """Every [section] of Config (the dataclass-valued fields, in order) with its keys, defaults and notes."""
    sections = {}
    for f in dataclasses.fields(Config):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else None
        if not dataclasses.is_dataclass(default):
            continue
        keys = []
        for key in dataclasses.fields(default):
            value = getattr(default, key.name)
            shown = EXAMPLES[f.name, key.name] if value is None else value
            commented = value is None or (f.name, key.name) in COMMENTED
            keys.append(StarterKey(f.name, key.name, value, shown, commented, NOTES[f.name][key.name]))
        sections[f.name] = keys
    return sections


def starter_toml() -> str:
    """The starter monitor.toml: every key of config.py with its default (commented out where the default cannot
    be written) and one line of meaning."""
    top = NOTES[""]
    lines = [
        f"# driftwatch configuration (written by `driftwatch init`, driftwatch {__version__}).",
        "# Relative paths are relative to this file. Every key shows its default: delete a line to keep the",
        "# default, change it to tune. Unknown keys are refused. `driftwatch check` validates this file,",
        "# reaches every source once and reports the gold ids it finds, without writing anything.",
        "",
        _line(f"data_dir = {_toml_value(STARTER_DATA_DIR)}", top["data_dir"]),
        _line(f"gold = {_toml_value(STARTER_GOLD)}", top["gold"]),
        "",
        f"# [[sources]]: {top['sources']}: `url` (http/https,",
        "# fetched with conditional GET) or `path` (a feed file, or a folder of dated files YYYY-MM-DD[-name].xml",
        "# replayed up to the run date), or `documents` (a folder of Markdown, HTML, text and PDF files, one",
        "# document each, e.g. a wiki export). A run needs at least one.",
        "# [[sources]]",
        '# name = "my-feed"',
        '# url = "https://example.org/rss.xml"',
        "# [[sources]]",
        '# name = "archive"',
        '# path = "feeds/archive"',
        "# [[sources]]",
        '# name = "wiki"',
        '# documents = "wiki-export"',
    ]
    sections = section_keys()
    for f in dataclasses.fields(Config):
        if f.name in ("data_dir", "gold", "sources", "file"):
            continue
        if f.name not in sections:  # a list of tables another part of driftwatch defines
            lines += ["", f"# [[{f.name}]]  {top[f.name]}"]
            continue
        lines += ["", f"[{f.name}]"]
        for key in sections[f.name]:
            lines.append(_line(f"{'# ' if key.commented else ''}{key.name} = {_toml_value(key.shown)}", key.note))
    return "\n".join(lines) + "\n"


def gold_template() -> str:
    return "".join(json.dumps(q) + "\n" for q in GOLD_TEMPLATE)


def cron_line(config: Path) -> str:
    """A crontab line for the daily job: this interpreter (cron has no venv on its PATH), an absolute config."""
    log = config.parent / "driftwatch.log"
    command = f"{shlex.quote(sys.executable)} -m pipeline run --config {shlex.quote(str(config))}"
    return f"17 6 * * * {command} >> {shlex.quote(str(log))} 2>&1"


def workflow(config: str, gold: str) -> str:
    """A GitHub Actions workflow gating pull requests with `driftwatch eval` against the main branch's report
    (kept in the Actions cache), as the repository's own retrieval-gate.yml does; paths relative to the repository."""
    gate = (f"driftwatch eval --config {config} --gold {gold} --docs docs/ --k 5 --min-recall-at-k 0.6 "
            "--max-drop 0.03 --baseline reports/main.json --baseline-optional --out reports/pr.json")
    return f"""# {WORKFLOW_FILE}: the driftwatch gate on every pull request
name: driftwatch
on:
  pull_request:
  push:
    branches: [main]
jobs:
  gate:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with: {{python-version: "3.11"}}
      # Install driftwatch the way your team gets it: a git URL, a wheel or a vendored copy.
      - run: pip install "driftwatch @ git+{PROJECT_URL}"
      - name: Baseline report of main
        uses: actions/cache/restore@v4
        with:
          path: reports/main.json
          key: driftwatch-baseline-${{{{ github.event.pull_request.base.sha || github.sha }}}}
          restore-keys: driftwatch-baseline-
      - name: Gate
        # --docs: the documents your gold set's ids point at (feed files or folders of them).
        run: {gate}
      - name: The new baseline (main only)
        if: github.ref == 'refs/heads/main'
        run: cp reports/pr.json reports/main.json
      - name: Store the new baseline (main only)
        if: github.ref == 'refs/heads/main'
        uses: actions/cache/save@v4
        with:
          path: reports/main.json
          key: driftwatch-baseline-${{{{ github.sha }}}}
"""


def init(directory: Path, *, force: bool = False) -> Starter:
    """Write monitor.toml and gold.jsonl into `directory` (created when missing). Refuses, before writing
    anything, to overwrite either file unless `force`."""
    directory = Path(directory).expanduser().resolve()
    files = {directory / DEFAULT_CONFIG_FILE: starter_toml(), directory / STARTER_GOLD: gold_template()}
    if directory.exists() and not directory.is_dir():
        raise InitError(f"{directory}: not a directory")
    if not force:
        for path in files:
            if path.exists():
                raise InitError(f"{path} already exists: not overwritten (pass --force to replace it)")
    directory.mkdir(parents=True, exist_ok=True)
    for path, text in files.items():
        path.write_text(text, encoding="utf-8")
    config = directory / DEFAULT_CONFIG_FILE
    return Starter(tuple(files), config, cron_line(config), workflow(DEFAULT_CONFIG_FILE, STARTER_GOLD))
