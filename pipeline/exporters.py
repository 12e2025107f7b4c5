"""Publishing the series where teams already look (MLflow runs, a Prometheus textfile and endpoint, whylogs
profiles, Evidently workspace snapshots), each optional; the CSV store stays the source of truth and every exporter reads it."""

from __future__ import annotations

import hashlib
import logging
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline import contract, freshness, netio, store
from pipeline.config import (Config, EvidentlyExportConfig, MlflowExportConfig, PrometheusExportConfig,
                             WhylogsExportConfig, has_scheme)
from pipeline.contract import ALERT, DRIFTED, STABLE, WARNING
from pipeline.corpus import Corpus, text_hash
from pipeline.redact import redact

log = logging.getLogger(__name__)

EXPORTERS = ("mlflow", "prometheus", "whylogs", "evidently")
SEVERITIES = (ALERT, WARNING)
PROFILES_DIR = "profiles"  # whylogs profiles, inside the data directory
EMBEDDINGS_PROFILE = "embeddings"
QUESTIONS_PROFILE = "questions"
EPOCH = date(1970, 1, 1)

# Off before mlflow, whylogs and evidently are first imported: each would otherwise phone home without a deadline.
_TELEMETRY_OFF = {"MLFLOW_DISABLE_TELEMETRY": "true", "WHYLOGS_NO_ANALYTICS": "True", "DO_NOT_TRACK": "1"}

# The runs.csv columns published as numbers (MLflow `run.<column>`, Prometheus gauges below).
RUN_NUMBERS = ("docs_total", "docs_new", "docs_updated", "docs_deleted", "chunks_total", "chunks_embedded",
               "feeds_ok", "feeds_failed", "seconds")
SENTINEL = "run.docs_total"  # an MLflow key every exported date has: its steps are the dates logged
MAX_MESSAGE = 400  # characters of an exporter's error kept in runs.csv's events (client errors run long)


class ExportError(Exception):
    """An exporter that could not publish; `export` reports it (never raised to the caller: not bad input)."""


@dataclass(frozen=True)
class ExportOutcome:
    exporter: str
    where: str  # the tracking URI, file or folder written
    error: str | None = None  # None: published

    @property
    def ok(self) -> bool:
        return self.error is None

    def event(self) -> str:
        """The note runs.csv's events gets for a failure."""
        return f"export {self.exporter} failed: {self.error}"


class History:
    """What the exporters read: the store, with the run being written (not yet in runs.csv) included; each
    file is read on first use (a scrape never reads per_question.csv)."""

    def __init__(self, data_dir: Path, pending: dict | None = None) -> None:
        self.data_dir = Path(data_dir)
        runs = store.read_runs(data_dir)
        if pending is not None:
            row = pd.DataFrame([pending]).astype({contract.RUN_DATE: "datetime64[ns]"})
            runs = pd.concat([runs[runs[contract.RUN_DATE] != row[contract.RUN_DATE].iloc[0]], row], ignore_index=True)
            runs = runs.sort_values(contract.RUN_DATE, ignore_index=True)
        self.runs = runs

    @classmethod
    def read(cls, data_dir: Path, pending: dict | None = None) -> History:
        return cls(data_dir, pending)

    @cached_property
    def metrics(self) -> pd.DataFrame:
        return store.read_metrics(self.data_dir)

    @cached_property
    def drift(self) -> pd.DataFrame:
        return store.read(self.data_dir, contract.DRIFT)

    @cached_property
    def alerts(self) -> pd.DataFrame:
        return store.read(self.data_dir, contract.ALERTS)

    @cached_property
    def per_question(self) -> pd.DataFrame:
        return store.read_per_question(self.data_dir)

    @cached_property
    def generation(self) -> pd.DataFrame:
        """The answer layer's per-run rows (generation.csv; none on a run without [generation])."""
        return store.read(self.data_dir, contract.GENERATION)

    def dates(self) -> list[date]:
        return [d.date() for d in self.runs[contract.RUN_DATE]]

    def latest(self) -> date | None:
        return None if self.runs.empty else self.runs[contract.RUN_DATE].max().date()

    def on(self, frame: pd.DataFrame, day: date) -> pd.DataFrame:
        return frame[frame[contract.RUN_DATE] == pd.Timestamp(day)]

    def run(self, day: date) -> pd.Series:
        return self.on(self.runs, day).iloc[-1]

    def alert_counts(self, day: date) -> dict[str, int]:
        """The run's alerts (new and ongoing: what alerts.csv holds for the date) per severity, zeros included."""
        severities = self.on(self.alerts, day)[contract.SEVERITY].value_counts()
        return {s: int(severities.get(s, 0)) for s in SEVERITIES}


def enabled(config: Config) -> list[str]:
    return [name for name in EXPORTERS if getattr(config.export, name) is not None]


def export(config: Config, days: Sequence[date], *, pending: dict | None = None,
           corpus: Corpus | None = None) -> list[ExportOutcome]:
    """Run every enabled exporter over `days` (dates with a run; others are skipped) and return one outcome
    each. A failing exporter is logged with its URI or path and reported, never raised: the store is the truth
    and the run goes on. `pending` is the runs.csv row being written; `corpus` the open corpus (whylogs)."""
    if not enabled(config):
        return []
    history: History | Exception
    try:
        history = History.read(config.data_dir, pending)
        days = sorted(d for d in set(days) if d in set(history.dates()))
    except Exception as exc:  # noqa: BLE001 (every exporter then fails with it, the run does not)
        history = exc
    outcomes = []
    for name in enabled(config):
        section = getattr(config.export, name)
        where = _where(config, name)
        try:
            if isinstance(history, Exception):
                raise history
            if name == "mlflow":
                export_mlflow(section, history, days)
            elif name == "prometheus":
                write_textfile(section, history)
            elif name == "evidently":
                export_evidently(section, history, days)
            else:
                with _corpus(config.data_dir, corpus) as open_corpus:
                    for day in days:
                        write_profiles(config, history, open_corpus, day)
            outcomes.append(ExportOutcome(name, redact(where)))
        except Exception as exc:  # noqa: BLE001 (any failure of a publisher: logged and counted, never fatal)
            message = redact(f"{where}: " + " ".join(str(exc).split())[:MAX_MESSAGE])
            log.warning("export %s failed: %s", name, message)
            outcomes.append(ExportOutcome(name, redact(where), message))
    return outcomes


def _where(config: Config, name: str) -> str:
    if name == "mlflow":
        return config.export.mlflow.tracking_uri
    if name == "prometheus":
        return str(config.export.prometheus.path)
    if name == "evidently":
        return str(config.export.evidently.workspace)
    return str(config.data_dir / PROFILES_DIR)


@contextmanager
def _corpus(data_dir: Path, corpus: Corpus | None) -> Iterator[Corpus]:
    if corpus is not None:
        yield corpus
        return
    with Corpus.in_dir(data_dir, readonly=True) as opened:
        yield opened


def with_events(events: str, outcomes: Iterable[ExportOutcome]) -> str:
    """runs.csv's events with a note per failed exporter."""
    return "; ".join(part for part in (events, *(o.event() for o in outcomes if not o.ok)) if part)


def within(seconds: float, what: str, work: Callable[[], object]) -> object:
    """`work()` given `seconds` of wall-clock time (netio.within): a client library's requests (MLflow's) retry
    and time out per read, so only this bounds the whole exchange. What a call past its deadline still writes,
    the next export checks."""
    try:
        return netio.within(seconds, what, work)
    except TimeoutError as exc:
        raise ExportError(str(exc)) from None


def import_quietly(module: str):
    for name, value in _TELEMETRY_OFF.items():
        os.environ.setdefault(name, value)
    import importlib

    return importlib.import_module(module)


# -- MLflow ------------------------------------------------------------------------------------------

_MLFLOW_NAME = re.compile(r"[^A-Za-z0-9_\-. /]")  # what MLflow accepts in a metric name
BATCH = 1000  # MLflow's limit of metrics per log_batch


def mlflow_key(*parts: str) -> str:
    return ".".join(_MLFLOW_NAME.sub("_", str(p)) for p in parts)


def step_of(day: date) -> int:
    """The MLflow step of a run date: days since 1970-01-01 (the run date itself is the point's timestamp)."""
    return (day - EPOCH).days


def midnight(day: date) -> datetime:
    """A run date as a moment: 00:00 UTC that day (MLflow's point timestamp, whylogs' dataset timestamp)."""
    return datetime(day.year, day.month, day.day, tzinfo=timezone.utc)  # noqa: UP017 (as the rest of the package)


def mlflow_points(history: History, day: date) -> dict[str, float]:
    """The numbers of one run date (MLflow's metrics, the values of its Evidently snapshot): `<pipeline>.<metric>_at_<k>`, `drift.<statistic>`,
    `alerts.<severity>` and `run.<column>`; undefined (NaN) values are left out."""
    points = {mlflow_key(r.pipeline, f"{r.metric}_at_{r.k}"): r.value
              for r in history.on(history.metrics, day).itertuples()}
    points |= {mlflow_key("drift", r.statistic): r.value for r in history.on(history.drift, day).itertuples()}
    points |= {mlflow_key("answers", r.pipeline, r.source, r.metric): r.value
               for r in history.on(history.generation, day).itertuples()}
    points |= {mlflow_key("alerts", s): n for s, n in history.alert_counts(day).items()}
    run = history.run(day)
    points |= {mlflow_key("run", c): run[c] for c in RUN_NUMBERS}
    return {k: float(v) for k, v in points.items() if v is not None and not pd.isna(v) and math.isfinite(float(v))}


def store_key(data_dir: Path) -> str:
    """A tag value naming a data directory, safe inside an MLflow filter string (a path may hold quotes)."""
    return hashlib.sha256(str(Path(data_dir).resolve()).encode()).hexdigest()[:16]


@contextmanager
def _mlflow_settings(uri: str, timeout: float) -> Iterator[None]:
    """MLflow reads its HTTP settings from the environment at each request: a per-request timeout within the
    deadline and no retry schedule (its default backs off for minutes); the file store allowed for a folder."""
    settings = {"MLFLOW_HTTP_REQUEST_TIMEOUT": str(max(1, math.ceil(timeout))),
                "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"}
    if uri.startswith("file:"):
        # mlflow 3 keeps the folder store in maintenance mode and refuses it unless told; it is what
        # mlflow-skinny can write without a database driver.
        settings["MLFLOW_ALLOW_FILE_STORE"] = "true"
    saved = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def tracking_uri(section: MlflowExportConfig) -> str:
    """The URI MLflow is given: a folder becomes a file: URI, anything with a scheme stays."""
    uri = section.tracking_uri
    return uri if has_scheme(uri) else Path(uri).resolve().as_uri()


def mlflow_client(section: MlflowExportConfig):
    mlflow_tracking = import_quietly("mlflow.tracking")
    uri = tracking_uri(section)
    return mlflow_tracking.MlflowClient(tracking_uri=uri, registry_uri=uri)


def export_mlflow(section: MlflowExportConfig, history: History, days: Sequence[date]) -> None:
    """Log `days` to MLflow within the section's deadline (see `_sync_mlflow`)."""
    uri = tracking_uri(section)
    with _mlflow_settings(uri, section.timeout):
        within(section.timeout, "the tracking server", lambda: _sync_mlflow(section, history, days))


def segments(history: History, days: Sequence[date]) -> dict[tuple[str, str], list[date]]:
    """The days grouped by (config_hash, model): one MLflow run each, since a run's params cannot change."""
    grouped: dict[tuple[str, str], list[date]] = {}
    for day in days:
        run = history.run(day)
        grouped.setdefault((str(run["config_hash"]), str(run["model"])), []).append(day)
    return grouped


def _sync_mlflow(section: MlflowExportConfig, history: History, days: Sequence[date]) -> None:
    """One MLflow run per data directory and configuration (config hash and model, the run's params), each
    run date a step. MLflow only appends points, so a date already logged in a run is never logged again
    into it: that run is deleted and rebuilt from the store (the dates it held, plus the new ones)."""
    from mlflow.entities import Metric, RunTag

    client = mlflow_client(section)
    experiment = client.get_experiment_by_name(section.experiment)
    experiment_id = experiment.experiment_id if experiment else client.create_experiment(section.experiment)
    key = store_key(history.data_dir)
    known = set(history.dates())
    for (config_hash, model), todo in segments(history, days).items():
        found = [r for r in client.search_runs([experiment_id], filter_string=(
                     f"tags.`driftwatch.store` = '{key}' and tags.`driftwatch.config_hash` = '{config_hash}'"))
                 if r.data.tags.get("driftwatch.model") == model]
        logged = {EPOCH + timedelta(days=m.step) for old in found
                  for m in client.get_metric_history(old.info.run_id, SENTINEL)}
        if len(found) == 1 and not logged & set(todo):  # only new dates: append
            run_id, dates, span = found[0].info.run_id, sorted(todo), sorted(logged | set(todo))
        else:  # a date logged again (or no run yet): a new run from the store
            for old in found:
                client.delete_run(old.info.run_id)
            dates = span = sorted((logged & known) | set(todo))
            run_id = _new_run(client, experiment_id, history, key, config_hash, model)
        metrics = [Metric(name, value, int(midnight(day).timestamp() * 1000), step_of(day))
                   for day in dates for name, value in mlflow_points(history, day).items()]
        for i in range(0, len(metrics), BATCH):
            client.log_batch(run_id, metrics=metrics[i:i + BATCH])
        client.log_batch(run_id, tags=[RunTag("driftwatch.first_date", span[0].isoformat()),
                                       RunTag("driftwatch.last_date", span[-1].isoformat())])


def _new_run(client, experiment_id: str, history: History, key: str, config_hash: str, model: str) -> str:
    """A run for one data directory and configuration: the configuration as params (immutable in MLflow, hence
    one run per configuration), tags to find it again."""
    from mlflow.entities import Param

    tags = {"driftwatch.store": key, "driftwatch.data_dir": str(history.data_dir),
            "driftwatch.config_hash": config_hash, "driftwatch.model": model}
    run_id = client.create_run(experiment_id, tags=tags, run_name=f"{history.data_dir.name} {config_hash}").info.run_id
    segment = history.runs[(history.runs["config_hash"] == config_hash) & (history.runs["model"] == model)]
    metrics = history.metrics[history.metrics[contract.RUN_DATE].isin(segment[contract.RUN_DATE])]
    params = {"config_hash": config_hash, "model": model, "data_dir": str(history.data_dir),
              "pipelines": ",".join(sorted(set(metrics[contract.PIPELINE].dropna()))),
              "k": ",".join(str(k) for k in sorted({int(k) for k in metrics[contract.K].dropna()}))}
    client.log_batch(run_id, params=[Param(k, v) for k, v in params.items()])
    return run_id


# -- Prometheus ------------------------------------------------------------------------------------

PROMETHEUS_PREFIX = "driftwatch_"


def metric_families(history: History) -> list:
    """The latest run's series as Prometheus gauges (names and labels per Prometheus conventions)."""
    from prometheus_client.core import GaugeMetricFamily

    def gauge(name: str, documentation: str, labels: Sequence[str] = (), unit: str = "") -> GaugeMetricFamily:
        return GaugeMetricFamily(PROMETHEUS_PREFIX + name, documentation, labels=labels, unit=unit)

    day = history.latest()
    if day is None:
        return []
    run = history.run(day)
    retrieval = gauge("retrieval_metric", "Mean of a retrieval metric over the gold set in the latest run "
                                          "(metric@k of a pipeline or target, from metrics.csv).",
                      ("pipeline", "metric", "k"))
    for r in history.on(history.metrics, day).itertuples():
        if not pd.isna(r.value):
            retrieval.add_metric([r.pipeline, r.metric, str(r.k)], float(r.value))
    statistic = gauge("drift_statistic", "A drift statistic of the latest run (drift.csv value).", ("statistic",))
    drifted = gauge("drift_drifted", "1 when the latest run's verdict on the statistic is drifted, else 0.",
                    ("statistic",))
    for r in history.on(history.drift, day).itertuples():
        if not pd.isna(r.value):
            statistic.add_metric([r.statistic], float(r.value))
        if r.verdict in (DRIFTED, STABLE):
            drifted.add_metric([r.statistic], float(r.verdict == DRIFTED))
    answer = gauge("answer_metric", "The answer layer's mean of a metric in the latest run (generation.csv: "
                                    "faithfulness, answer relevance, heuristics; source judge or heuristic).",
                   ("pipeline", "source", "metric"))
    undetermined = gauge("answer_undetermined", "Answers of the latest run the metric could not score "
                                                "(generation.csv undetermined: never folded into the mean).",
                         ("pipeline", "source", "metric"))
    for r in history.on(history.generation, day).itertuples():
        if not pd.isna(r.value):
            answer.add_metric([r.pipeline, r.source, r.metric], float(r.value))
        if not pd.isna(r.undetermined):
            undetermined.add_metric([r.pipeline, r.source, r.metric], float(r.undetermined))
    alerts = gauge("alerts_open", "Alerts of the latest run (new and ongoing) by severity.", ("severity",))
    for severity, n in history.alert_counts(day).items():
        alerts.add_metric([severity], n)
    finished = datetime.fromisoformat(str(run["finished_at"])).timestamp()
    documents = gauge("run_documents", "Documents the latest run added, updated or deleted.", ("change",))
    for change in ("new", "updated", "deleted"):
        documents.add_metric([change], float(run[f"docs_{change}"]))
    feeds = gauge("feeds", "Sources fetched in the latest run, by outcome.", ("outcome",))
    feeds.add_metric(["ok"], float(run["feeds_ok"]))
    feeds.add_metric(["failed"], float(run["feeds_failed"]))
    info = gauge("run_info", "The latest run (always 1): its date, status, model and config hash as labels.",
                 ("run_date", "status", "model", "config_hash"))
    info.add_metric([day.isoformat(), str(run["status"]), str(run["model"]), str(run["config_hash"])], 1)
    single = [GaugeMetricFamily(PROMETHEUS_PREFIX + name, documentation, value=value) for name, documentation, value in (
        ("last_run_timestamp_seconds", "When the latest run finished (Unix time).", finished),
        ("run_seconds", "How long the latest run took (its runs.csv seconds).", float(run["seconds"])),
        ("corpus_documents", "Documents in the corpus after the latest run.", float(run["docs_total"])),
        ("corpus_chunks", "Chunks indexed in the latest run.", float(run["chunks_total"])),
        *_freshness_gauges(history))]
    return [retrieval, statistic, drifted, answer, undetermined, alerts, *single, documents, feeds, info]


def _freshness_gauges(history: History) -> list[tuple[str, str, float]]:
    """(name, documentation, value) of the history's age, cadence and staleness (`pipeline.freshness`)."""
    fresh = freshness.of_directory(history.data_dir, history.runs)
    return [("run_age_days", "Days from the latest run date to today's date.", float(fresh.age_days)),
            ("run_cadence_days", "The usual gap between runs: the median gap between run dates (runs.csv).",
             fresh.cadence_days),
            ("run_stale", f"1 when no run came within {freshness.OVERDUE_FACTOR} x the cadence (the dashboard's "
                          "'no run since' warning), else 0.", float(fresh.stale))]


class StoreCollector:
    """A prometheus_client collector reading a data directory's latest run on every scrape."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir)

    def collect(self) -> list:
        return metric_families(History.read(self.data_dir))


class _Fixed:
    def __init__(self, families: list) -> None:
        self.families = families

    def collect(self) -> list:
        return self.families


def exposition(families: list) -> bytes:
    """The Prometheus text format of `families` (HELP and TYPE lines included)."""
    prometheus_client = import_quietly("prometheus_client")

    registry = prometheus_client.CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(families))
    return prometheus_client.generate_latest(registry)


def write_textfile(section: PrometheusExportConfig, history: History) -> None:
    """The latest run's gauges written atomically (a temporary file in the same folder, then a rename) for
    node_exporter's textfile collector, which would otherwise read a half-written file."""
    body = exposition(metric_families(history))
    section.path.parent.mkdir(parents=True, exist_ok=True)
    store.atomic_write(section.path, lambda f: f.write(body))


def serve(data_dir: Path, port: int, addr: str = "127.0.0.1"):
    """Serve /metrics from the store on `addr:port` (a thread); returns (server, thread)."""
    prometheus_client = import_quietly("prometheus_client")

    registry = prometheus_client.CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(data_dir))
    return prometheus_client.start_http_server(port, addr=addr, registry=registry)


# -- whylogs -----------------------------------------------------------------------------------------

PROJECTION_SEED = 20241  # fixed: the same projection every day, so the profiles compare


def projection(dimension: int, dims: int) -> np.ndarray | None:
    """A seeded Gaussian random projection (dimension x dims, scaled to keep norms on average); None: no
    projection (dims 0, or not fewer columns than the embedding has)."""
    if dims == 0 or dims >= dimension:
        return None
    return np.random.default_rng(PROJECTION_SEED).standard_normal((dimension, dims)) / math.sqrt(dims)


def embedding_frame(vectors: np.ndarray, sources: Sequence[str], dims: int) -> pd.DataFrame:
    """One row per new chunk: its projected (or raw) embedding columns, its norm and its document's source."""
    if len(vectors) == 0:
        return pd.DataFrame({"norm": pd.Series(dtype=float), "source": pd.Series(dtype=object)})
    matrix = projection(vectors.shape[1], dims)
    columns = vectors @ matrix if matrix is not None else vectors
    name = "proj" if matrix is not None else "dim"
    width = len(str(columns.shape[1] - 1))
    frame = pd.DataFrame(columns, columns=[f"{name}_{i:0{width}d}" for i in range(columns.shape[1])])
    frame["norm"] = np.linalg.norm(vectors, axis=1)
    frame["source"] = list(sources)
    return frame


def new_chunk_vectors(config: Config, history: History, corpus: Corpus, day: date) -> tuple[np.ndarray, list[str]]:
    """The embeddings of the chunks that entered the corpus since the previous run (from the embedding cache,
    under the run's model), with their documents' sources."""
    from pipeline.chunking import chunk_documents
    from pipeline.windows import Window, entered

    earlier = [d for d in history.dates() if d < day]
    documents = entered(corpus, Window(earlier[-1] if earlier else date.min, day))
    chunks = chunk_documents(config, documents)
    sources = {s.document.id: s.document.source for s in documents}
    hashes = [text_hash(c.text) for c in chunks]
    cached = corpus.cached_embeddings(str(history.run(day)["model"]), hashes)
    kept = [(cached[h], sources[c.doc_id]) for h, c in zip(hashes, chunks) if h in cached]
    if len(kept) < len(chunks):
        log.warning("%s: %d of %d new chunks have no cached embedding under %s and are not profiled", day,
                    len(chunks) - len(kept), len(chunks), history.run(day)["model"])
    if not kept:
        return np.zeros((0, 0), dtype=np.float32), []
    return np.stack([v for v, _ in kept]), [s for _, s in kept]


def question_frames(history: History, day: date) -> dict[str, pd.DataFrame]:
    """Per pipeline, one row per gold question: each outcome at each k as a column (`recall@5`), the reciprocal
    rank, first relevant rank and top-1 score."""
    rows = history.on(history.per_question, day)
    frames = {}
    for pipeline, part in rows.groupby(contract.PIPELINE, sort=True):
        wide = part.pivot_table(index=contract.QUESTION_ID, columns=contract.K,
                                values=["hit", "recall", "precision", "ndcg", "unjudged"], aggfunc="first")
        wide.columns = [f"{metric}@{k}" for metric, k in wide.columns]
        top = part.sort_values(contract.K).groupby(contract.QUESTION_ID).last()
        for column in ("rr", contract.FIRST_RANK, "top1_score"):
            wide[column] = top[column].astype(float)
        frames[str(pipeline)] = wide.reset_index(drop=True)
    return frames


def profile_path(data_dir: Path, day: date, kind: str, pipeline: str | None = None) -> Path:
    tail = kind if pipeline is None else f"{kind}-{re.sub(r'[^A-Za-z0-9_.-]', '_', pipeline)}"
    return Path(data_dir) / PROFILES_DIR / f"{day.isoformat()}-{tail}.bin"


def _write_profile(path: Path, frame: pd.DataFrame, day: date) -> None:
    why = import_quietly("whylogs")

    profile = why.log(frame).profile()
    profile.set_dataset_timestamp(midnight(day))
    body = profile.view().serialize()
    path.parent.mkdir(parents=True, exist_ok=True)
    store.atomic_write(path, lambda f: f.write(body))


def write_profiles(config: Config, history: History, corpus: Corpus, day: date) -> list[Path]:
    """The day's whylogs profiles beside the series: `profiles/DATE-embeddings.bin` (new chunk embeddings) and
    `profiles/DATE-questions-PIPELINE.bin` (per-question outcomes); re-exporting a date replaces them."""
    section: WhylogsExportConfig = config.export.whylogs
    vectors, sources = new_chunk_vectors(config, history, corpus, day)
    written = [profile_path(history.data_dir, day, EMBEDDINGS_PROFILE)]
    _write_profile(written[0], embedding_frame(vectors, sources, section.projection_dims), day)
    for pipeline, frame in question_frames(history, day).items():
        written.append(profile_path(history.data_dir, day, QUESTIONS_PROFILE, pipeline))
        _write_profile(written[-1], frame, day)
    return written


def read_profile(path: Path):
    """A profile written by `write_profiles`, as a whylogs DatasetProfileView."""
    import_quietly("whylogs")
    from whylogs.core import DatasetProfileView

    return DatasetProfileView.deserialize(Path(path).read_bytes())


# -- Evidently ---------------------------------------------------------------------------------------

EVIDENTLY_STORE, EVIDENTLY_DATE = "driftwatch.store", "driftwatch.run_date"  # a snapshot's metadata keys
EVIDENTLY_PANELS = {"recall": ".recall_at_", "Evidently drift score": "drift.evidently_model_auc"}  # title: series


def evidently_tags(history: History, day: date) -> list[str]:
    """A run's snapshot tags: driftwatch, its date and status, each drifted statistic (`drifted:<statistic>`) and
    each alert of the day (`<severity>:<rule>:<pipeline>:<metric>`)."""
    tags = ["driftwatch", f"run_date:{day.isoformat()}", f"status:{history.run(day)['status']}"]
    tags += [f"drifted:{r.statistic}" for r in history.on(history.drift, day).itertuples() if r.verdict == DRIFTED]
    tags += [f"{r.severity}:{r.rule}:{r.pipeline}:{r.metric}" for r in history.on(history.alerts, day).itertuples()]
    return tags


def evidently_snapshot(history: History, day: date):
    """An Evidently snapshot of one run date: each of `mlflow_points` (retrieval metrics, drift statistics, alert
    counts, run numbers) as the result of a MeanValue over a one-row dataset (that is, the value itself), with
    `evidently_tags` and the store and date as metadata, and one table of counters as its page. Built from the
    results, not by Report.run: its MeanValue draws a histogram of each single value (90% of 5 s a run)."""
    import_quietly("evidently")
    from evidently.core.report import Snapshot
    from evidently.core.serialization import ReportModel, SnapshotModel
    from evidently.legacy.renderers.html_widgets import CounterData, counter
    from evidently.metrics import MeanValue

    points = mlflow_points(history, day)
    run = history.run(day)
    results = {}
    for name, value in points.items():
        calculation = MeanValue(column=name).to_calculation()
        results[calculation.id] = calculation.result(value)
    page = counter(title=f"driftwatch run of {day.isoformat()}",
                   counters=[CounterData(name, f"{value:.4g}") for name, value in points.items()])
    metadata = {EVIDENTLY_STORE: store_key(history.data_dir), EVIDENTLY_DATE: day.isoformat(),
                "data_dir": str(history.data_dir), "config_hash": str(run["config_hash"]), "model": str(run["model"])}
    return Snapshot.load_model(SnapshotModel(
        report=ReportModel(items=[]), name=f"driftwatch {day.isoformat()}", timestamp=datetime(day.year, day.month, day.day),
        metadata=metadata, tags=evidently_tags(history, day), metric_results=results,
        top_level_metrics=list(results), widgets=[page], tests_widgets=[]))


def evidently_project(section: EvidentlyExportConfig, history: History):
    """The workspace (created when missing) and its project named `section.project`, created when missing with a
    dashboard plotting EVIDENTLY_PANELS' series (those of the history's latest run)."""
    import_quietly("evidently")
    from evidently.ui.workspace import Workspace

    section.workspace.mkdir(parents=True, exist_ok=True)
    workspace = Workspace(str(section.workspace))
    found = [p for p in workspace.search_project(section.project) if p.name == section.project]
    if found:
        return workspace, found[0]
    from evidently.sdk.models import PanelMetric
    from evidently.sdk.panels import line_plot_panel

    project = workspace.create_project(section.project, description="driftwatch: one snapshot per daily run")
    latest = mlflow_points(history, history.latest()) if history.latest() else {}
    for title, part in EVIDENTLY_PANELS.items():
        series = [PanelMetric(legend=c, metric="MeanValue", metric_labels={"column": c}) for c in latest if part in c]
        if series:
            project.dashboard.add_panel(line_plot_panel(title=f"driftwatch: {title}", values=series))
    return workspace, project


def export_evidently(section: EvidentlyExportConfig, history: History, days: Sequence[date]) -> None:
    """One snapshot per run date in the workspace's project; a date exported again has its snapshot (of this
    data directory) replaced."""
    workspace, project = evidently_project(section, history)
    key, todo = store_key(history.data_dir), {d.isoformat() for d in days}
    for snapshot_id in workspace.list_runs(project.id):
        metadata = workspace.get_run(project.id, snapshot_id).metadata
        if metadata.get(EVIDENTLY_STORE) == key and metadata.get(EVIDENTLY_DATE) in todo:
            workspace.delete_run(project.id, snapshot_id)
    for day in days:
        workspace.add_run(project.id, evidently_snapshot(history, day))
