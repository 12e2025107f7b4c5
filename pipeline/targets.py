"""Every retriever a run watches behind one interface: the builtin pipelines, an HTTP search endpoint, a Python
function, and logged results (TREC run files, JSONL rankings, OpenInference retriever spans)."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import http.client
import importlib
import math
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

from pipeline import jsonl, netio
from pipeline.config import VECTOR_STORES, Config, ConfigError, EmbedderConfig, TargetConfig, render_body, target_list
from pipeline.contract import MAX_ID_LENGTH
from pipeline.embeddings import Embedder, EmbedderError, locate_model
from pipeline.errors import DriftwatchError
from pipeline.gold import GoldQuestion
from pipeline.redact import redact
from pipeline.retrieval import Ranking

BUILTIN, HTTP, PYTHON, RUNS = "builtin", "http", "python", "runs"
DATE_FIELD = "{date}"  # in a runs target's path: the run date, YYYY-MM-DD
MAX_BACKOFF = 5.0  # seconds between two attempts of one request at most
MAX_NAMED = 5  # question ids named in a message
# OpenInference semantic conventions (spec/semantic_conventions.md of Arize-ai/openinference).
OI_KIND, OI_RETRIEVER, OI_QUERY = "openinference.span.kind", "RETRIEVER", "input.value"
OI_DOCUMENTS = "retrieval.documents"
OI_ID, OI_SCORE, OI_CONTENT = "document.id", "document.score", "document.content"

Hit = tuple[Any, Any, Any]  # (doc id, score, text or None) as a target gave it, checked by `ranking_of`


class TargetError(DriftwatchError):
    """A target that failed for this run (unreachable, an error status, a malformed answer, a missing log);
    the message names the target and why. The run records it and goes on with the other targets."""


def _named(ids: Sequence[str]) -> str:
    return ", ".join(ids[:MAX_NAMED]) + (f" and {len(ids) - MAX_NAMED} more" if len(ids) > MAX_NAMED else "")


def ranking_of(hits: Iterable[Hit], depth: int, where: str) -> Ranking:
    """Hits, best first, as a Ranking of at most `depth` documents. A document listed again (a second chunk of
    it) keeps its first, best place, as the builtin pipelines collapse chunks. An id is a non-empty string (an
    integer is taken as its decimal string); a score a finite number (None when the log has none: NaN)."""
    ids: list[str] = []
    scores: list[float] = []
    texts: list[str | None] = []
    seen: set[str] = set()
    for n, (doc_id, score, text) in enumerate(hits, start=1):
        if isinstance(doc_id, int) and not isinstance(doc_id, bool):
            doc_id = str(doc_id)
        if not isinstance(doc_id, str) or not doc_id or len(doc_id) > MAX_ID_LENGTH:
            raise TargetError(f"{where}: hit {n}: the document id must be a non-empty string of at most "
                              f"{MAX_ID_LENGTH} characters, got {str(doc_id)[:60]!r}")
        if score is None:
            score = math.nan
        elif isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
            raise TargetError(f"{where}: hit {n} ({doc_id}): the score must be a finite number, got {score!r}")
        if text is not None and not isinstance(text, str):
            raise TargetError(f"{where}: hit {n} ({doc_id}): the text must be a string, got {type(text).__name__}")
        if doc_id in seen:
            continue
        seen.add(doc_id)
        ids.append(doc_id)
        scores.append(float(score))
        texts.append(text)
        if len(ids) == depth:
            break
    return Ranking(tuple(ids), tuple(scores), (), tuple(texts))


class Target:
    """One watched retriever: `rankings` gives one Ranking per gold question (at most `depth` documents each)
    or raises TargetError. `external` targets bring their own index (the run's corpus is not theirs)."""

    external = True

    def __init__(self, config: TargetConfig) -> None:
        self.config = config
        self.name = config.name
        self.kind = config.kind

    def rankings(self, gold: Sequence[GoldQuestion], depth: int, run_date: date) -> list[Ranking]:
        raise NotImplementedError


class BuiltinTarget(Target):
    """One of today's pipelines over the ingested corpus; `search(pipeline)` is the run's retriever."""

    external = False

    def __init__(self, config: TargetConfig, search: Callable[[str], list[Ranking]]) -> None:
        super().__init__(config)
        self.pipeline = config.pipeline or config.name
        self._search = search

    def rankings(self, gold: Sequence[GoldQuestion], depth: int, run_date: date) -> list[Ranking]:
        return self._search(self.pipeline)


def json_path(value: Any, path: str, where: str) -> Any:
    """`value` at a dotted path ("data.hits", "hits.0.id", "" for the value itself); TargetError when absent."""
    for part in path.split(".") if path else ():
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            raise TargetError(f"{where}: the response has no {path!r} (no {part!r} there)")
    return value


class HttpTarget(Target):
    """POST a JSON body per question; the hits are read from the answer by JSON paths. Each request has a
    wall-clock deadline; timeouts, connection errors, 429 and 5xx are retried with backoff."""

    def __init__(self, config: TargetConfig, headers: dict[str, str], backoff: float = 0.25) -> None:
        super().__init__(config)
        self._headers = headers  # values from the environment: never logged, never in a message
        self.backoff = backoff

    def _hits(self, body: bytes, where: str) -> list[Hit]:
        c = self.config
        answer = jsonl.loads_bounded(body, f"{where}: the response", TargetError)
        hits = json_path(answer, c.hits, where)
        if not isinstance(hits, list):
            raise TargetError(f"{where}: {c.hits or 'the response'!r} is not a list of hits")
        out = []
        for n, hit in enumerate(hits, start=1):
            at = f"{where}: hit {n}"
            text = None
            if c.text is not None:
                try:
                    text = json_path(hit, c.text, at)
                except TargetError:
                    text = None  # a text is optional per hit
            out.append((json_path(hit, c.id, at), json_path(hit, c.score, at), text))
        return out

    def search(self, question: GoldQuestion, depth: int) -> Ranking:
        c = self.config
        where = f"target {self.name!r}: {redact(c.url)} (question {question.id})"
        data = render_body(c.body, question.question, depth).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json", **self._headers}
        for attempt in range(c.retries + 1):
            request = urllib.request.Request(c.url, data=data, headers=headers, method="POST")
            try:
                response = netio.exchange(request, timeout=c.timeout, max_bytes=c.max_bytes, follow_redirects=False)
            except urllib.error.HTTPError as exc:
                exc.close()
                why, transient = f"HTTP {exc.code}", exc.code == 429 or exc.code >= 500
            except TimeoutError:
                why, transient = f"no complete answer within {c.timeout:g} s", True
            except netio.BodyError as exc:
                why, transient = str(exc), False
            except (OSError, http.client.HTTPException) as exc:
                why, transient = f"connection failed ({getattr(exc, 'reason', exc)})", True
            else:
                return ranking_of(self._hits(response.body, where), depth, where)
            if not transient or attempt == c.retries:
                tries = f" after {attempt + 1} attempts" if attempt else ""
                raise TargetError(f"{where}: {why}{tries}")
            time.sleep(min(self.backoff * 2 ** attempt, MAX_BACKOFF))
        raise AssertionError("unreachable")

    def rankings(self, gold: Sequence[GoldQuestion], depth: int, run_date: date) -> list[Ranking]:
        failed = threading.Event()  # once one question failed, the target has failed: send no more requests

        def one(question: GoldQuestion) -> Ranking | None:
            if failed.is_set():
                return None
            try:
                return self.search(question, depth)
            except TargetError:
                failed.set()
                raise

        with concurrent.futures.ThreadPoolExecutor(max_workers=self.config.concurrency,
                                                   thread_name_prefix=f"target-{self.name}") as pool:
            futures = [pool.submit(one, q) for q in gold]
        for future in futures:  # the first failure in question order
            if future.exception() is not None:
                raise future.exception()
        return [f.result() for f in futures]


class PythonTarget(Target):
    """`module:function` called as f(query, k) -> [(doc_id, score[, text]), ...]."""

    def __init__(self, config: TargetConfig, function: Callable[[str, int], Any]) -> None:
        super().__init__(config)
        self.function = function

    def rankings(self, gold: Sequence[GoldQuestion], depth: int, run_date: date) -> list[Ranking]:
        out = []
        for q in gold:
            where = f"target {self.name!r}: {self.config.function} (question {q.id})"
            try:
                hits = self.function(q.question, depth)
            except Exception as exc:  # the team's code: any failure is the target's, not driftwatch's
                raise TargetError(f"{where} raised {type(exc).__name__}: {exc}") from exc
            if not isinstance(hits, (list, tuple)):
                raise TargetError(f"{where}: returned {type(hits).__name__}, expected a list of (doc_id, score[, text])")
            rows = []
            for n, hit in enumerate(hits, start=1):
                if not isinstance(hit, (list, tuple)) or len(hit) not in (2, 3):
                    raise TargetError(f"{where}: hit {n} is {hit!r}, expected (doc_id, score[, text])")
                rows.append((hit[0], hit[1], hit[2] if len(hit) == 3 else None))
            out.append(ranking_of(rows, depth, where))
        return out


# Chunk hits fetched per document wanted at first, as the builtin dense pipeline over-fetches (Retriever._dense).
OVER_FETCH = 4


@functools.lru_cache(maxsize=2)
def query_embedder(config: EmbedderConfig) -> Embedder:
    """One Embedder per model for the process: a daily run, or a backfill of many, loads a store's model once."""
    return Embedder(config)


def store_embedder_config(target: TargetConfig, run: EmbedderConfig) -> EmbedderConfig:
    """The embedder settings of a store's collection: the run's (device, batch size) with the store's `model`."""
    return dataclasses.replace(run, model=target.model, backend="torch", truncate_dim=None, engine="local")


def store_embedder(target: TargetConfig, run_config: EmbedderConfig, run: Embedder | None) -> Embedder:
    """The Embedder of a store's collection: the run's loaded one when it computes the same vectors, else one
    loaded once for the process."""
    config = store_embedder_config(target, run_config)
    return run if run is not None and run.config == config else query_embedder(config)


class VectorStoreTarget(Target):
    """The team's vector store (chroma, pgvector, qdrant; pipeline/vectorstores.py), read only: the gold questions
    embedded with the collection's model (L2-normalised, as the builtin dense pipeline's), each searched for its
    top chunks, collapsed to documents by `ranking_of`. Asks for `OVER_FETCH` x depth hits, widening the search
    until `depth` documents are found or the store has no more, as the builtin dense pipeline does."""

    def __init__(self, config: TargetConfig, embedder: EmbedderConfig, base: Path, run: Embedder | None = None
                 ) -> None:
        """`embedder`: the run's settings (device, batch size), with the store's model; `run`: the run's loaded
        Embedder, used when it computes the same vectors."""
        super().__init__(config)
        self.embedder = store_embedder_config(config, embedder)
        self.base = base
        self._run = run if run is not None and run.config == self.embedder else None

    def _search(self, store: Any, vector: np.ndarray, depth: int, where: str) -> Ranking:
        n = depth * OVER_FETCH
        while True:
            hits = store.search(vector, n)
            ranking = ranking_of(hits, depth, where)
            if len(ranking.doc_ids) >= depth or len(hits) < n:
                return ranking
            n *= OVER_FETCH

    def rankings(self, gold: Sequence[GoldQuestion], depth: int, run_date: date) -> list[Ranking]:
        from pipeline.vectorstores import open_store

        try:
            vectors = (self._run or query_embedder(self.embedder)).encode([q.question for q in gold])
        except EmbedderError as exc:
            raise TargetError(f"target {self.name!r}: {exc}") from None
        store = open_store(self.config, self.base)
        try:
            return [self._search(store, v, depth, f"target {self.name!r} (question {q.id})")
                    for q, v in zip(gold, vectors)]
        finally:
            store.close()


def run_file(config: TargetConfig, run_date: date) -> Path:
    """The logged results of `run_date`: the path with {date} filled in."""
    return Path(str(config.path).replace(DATE_FIELD, run_date.isoformat()))


def _trec(path: Path, lines: list[str]) -> dict[str, list[Hit]]:
    """`qid Q0 docid rank score tag` lines, each query's hits by score (highest first), ties by rank."""
    rows: dict[str, list[tuple[float, int, str]]] = {}
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 6:
            raise TargetError(f"{path}:{lineno}: expected 6 fields (qid Q0 docid rank score tag), got {len(parts)}")
        qid, _, doc_id, rank, score, _ = parts
        try:
            rows.setdefault(qid, []).append((float(score), int(rank), doc_id))
        except ValueError:
            raise TargetError(f"{path}:{lineno}: rank must be an integer and score a number") from None
    return {qid: [(d, s, None) for s, _, d in sorted(hits, key=lambda h: (-h[0], h[1]))]
            for qid, hits in rows.items()}


def _ranked_hit(item: Any, where: str) -> Hit:
    """A "ranked" entry: "doc_id", [doc_id, score(, text)] or {"id" (or "doc_id"), "score", "text"}."""
    if isinstance(item, (str, int)) and not isinstance(item, bool):
        return item, None, None
    if isinstance(item, list) and len(item) in (2, 3):
        return item[0], item[1], item[2] if len(item) == 3 else None
    if isinstance(item, dict) and ("id" in item or "doc_id" in item):
        return item.get("id", item.get("doc_id")), item.get("score"), item.get("text")
    raise TargetError(f"{where}: a ranked entry must be a doc id, [doc_id, score(, text)] or an object with "
                      f"id, score and text; got {item!r}"[:300])


def _jsonl(path: Path, lines: list[str]) -> dict[str, list[Hit]]:
    out = {}
    for lineno, _, obj in jsonl.objects(lines, path, TargetError):
        where = f"{path}:{lineno}"
        qid, ranked = obj.get("question_id"), obj.get("ranked")
        if not isinstance(qid, str) or not isinstance(ranked, list):
            raise TargetError(f"{where}: expected {{\"question_id\": \"...\", \"ranked\": [...]}}")
        out[qid] = [_ranked_hit(item, where) for item in ranked]
    return out


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested attributes as the flat dotted keys OTLP uses: {"retrieval": {"documents": [{"document": {"id":
    1}}]}} and {"retrieval.documents": [{"document.id": 1}]} both give "retrieval.documents.0.document.id"."""
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = ((str(i), v) for i, v in enumerate(value))
    else:
        return {prefix: value}
    flat: dict[str, Any] = {}
    for key, item in items:
        flat.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
    return flat


def _openinference(path: Path, lines: list[str], gold: Sequence[GoldQuestion]) -> dict[str, list[Hit]]:
    """Retriever spans (one JSON span per line, attributes flat or nested, at the top or under "attributes"),
    matched to a gold question by the query (`input.value`): its exact text or its id. The last span of a
    question wins."""
    by_text = {q.question: q.id for q in gold} | {q.id: q.id for q in gold}
    out: dict[str, list[Hit]] = {}
    for lineno, _, span in jsonl.objects(lines, path, TargetError):
        attributes = _flatten(span.get("attributes", span))
        if attributes.get(OI_KIND, OI_RETRIEVER) != OI_RETRIEVER:
            continue
        query = attributes.get(OI_QUERY)
        qid = by_text.get(query.strip()) if isinstance(query, str) else None
        if qid is None:
            continue
        hits = []
        for i in range(len(attributes)):
            head = f"{OI_DOCUMENTS}.{i}."
            if head + OI_ID not in attributes:
                break
            hits.append((attributes[head + OI_ID], attributes.get(head + OI_SCORE), attributes.get(head + OI_CONTENT)))
        out[qid] = hits
    return out


class RunsTarget(Target):
    """Logged retrieval results instead of live calls, one file per run date."""

    def rankings(self, gold: Sequence[GoldQuestion], depth: int, run_date: date) -> list[Ranking]:
        path = run_file(self.config, run_date)
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            raise TargetError(f"target {self.name!r}: no logged results for {run_date} ({path} not found)") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise TargetError(f"target {self.name!r}: {path}: cannot read it ({exc})") from None
        fmt = self.config.format
        ranked = (_trec(path, lines) if fmt == "trec" else _jsonl(path, lines) if fmt == "jsonl"
                  else _openinference(path, lines, gold))
        missing = [q.id for q in gold if q.id not in ranked]
        if missing:
            raise TargetError(f"target {self.name!r}: {path}: no results for {len(missing)} of {len(gold)} gold "
                              f"questions ({_named(missing)}); a partial day is not scored")
        return [ranking_of(ranked[q.id], depth, f"{path} (question {q.id})") for q in gold]


def _secret_headers(config: TargetConfig, index: int, source: str) -> dict[str, str]:
    headers = {}
    for header, env in config.headers.items():
        value = os.environ.get(env)
        if value is None:
            raise ConfigError(f"{source}: targets[{index}].headers.{header}: the environment variable {env} is not set")
        headers[header] = value
    return headers


def _function(config: TargetConfig, index: int, source: str, base: Path) -> Callable[[str, int], Any]:
    module_name, _, attribute = config.function.partition(":")
    folder = str(config.python_path or base)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    key = f"{source}: targets[{index}].function"
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # ImportError or the module's own error at import: the config names a bad module
        raise ConfigError(f"{key}: cannot import {module_name!r} (from {folder} or the installed packages): "
                          f"{type(exc).__name__}: {exc}") from None
    function = getattr(module, attribute, None)
    if not callable(function):
        raise ConfigError(f"{key}: {module_name} has no function {attribute!r}")
    return function


def config_base(config: Config) -> Path:
    """The folder a target's relative paths and python modules are under: the configuration file's."""
    return config.file.resolve().parent if config.file else Path.cwd()


def external_targets(config: Config, embedder: Embedder | None = None) -> list[Target]:
    """The configured targets that bring their own index (a vector store embeds the questions with `embedder`, the
    run's, when its model is the run's). Raises ConfigError for what a run cannot start with (an unset environment
    variable of a header, a function that cannot be imported), EmbedderError for a store's model not at hand."""
    source = str(config.file or "the configuration")
    base = config_base(config)
    out: list[Target] = []
    for i, t in enumerate(config.targets):
        if t.kind == HTTP:
            out.append(HttpTarget(t, _secret_headers(t, i, source)))
        elif t.kind == PYTHON:
            out.append(PythonTarget(t, _function(t, i, source, base)))
        elif t.kind == RUNS:
            out.append(RunsTarget(t))
        elif t.kind in VECTOR_STORES:
            locate_model(t.model, f"targets[{i}].model")  # the model at hand now, before the run's first write
            out.append(VectorStoreTarget(t, config.embedder, base, embedder))
    return out


@dataclass(frozen=True)
class Outcome:
    """What one target gave on a run: its rankings, or why it failed."""

    name: str
    kind: str
    rankings: list[Ranking] | None
    seconds: float
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.rankings is not None


def evaluate_target(target: Target, gold: Sequence[GoldQuestion], depth: int, run_date: date) -> Outcome:
    """A target's rankings of the gold set, or its failure (TargetError) recorded with the reason."""
    t0 = time.perf_counter()
    try:
        rankings = target.rankings(gold, depth, run_date)
    except TargetError as exc:
        return Outcome(target.name, target.kind, None, round(time.perf_counter() - t0, 3), redact(exc))
    if len(rankings) != len(gold):
        raise AssertionError(f"target {target.name}: {len(rankings)} rankings for {len(gold)} questions")
    return Outcome(target.name, target.kind, rankings, round(time.perf_counter() - t0, 3))


@dataclass(frozen=True)
class Probe:
    """`check`'s line for one target: reached or not, why, and the gold document ids found in its answers."""

    name: str
    kind: str
    ok: bool
    message: str
    gold_found: tuple[str, ...] = field(default=())
    gold_total: int = 0


def probe(config: Config, gold: Sequence[GoldQuestion], run_date: date | None = None) -> list[Probe]:
    """Ask every external target the gold questions once (nothing is written) and say what came back; a builtin
    target is checked with the sources (its corpus is theirs). Raises ConfigError as `external_targets`."""
    run_date = run_date or date.today()
    relevant = {d for q in gold for d in q.relevant_ids}
    depth = config.retrieval.candidate_depth
    by_name = {t.name: t for t in external_targets(config)}
    out = []
    for t in target_list(config):
        if t.name not in by_name:
            out.append(Probe(t.name, t.kind, True, f"builtin pipeline {t.pipeline or t.name} over the ingested "
                                                   "corpus (see the sources)", (), len(relevant)))
            continue
        outcome = evaluate_target(by_name[t.name], gold, depth, run_date)
        if not outcome.ok:
            out.append(Probe(t.name, t.kind, False, outcome.message, (), len(relevant)))
            continue
        found = sorted(relevant & {d for r in outcome.rankings for d in r.doc_ids})
        out.append(Probe(t.name, t.kind, True, f"answered {len(gold)} questions in {outcome.seconds:.1f} s",
                         tuple(found), len(relevant)))
    return out
