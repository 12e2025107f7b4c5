"""A run's drift window as an Evidently report (HTML): the embedding drift by Evidently's own domain classifier on
the rows and vectors the run gave it, the column drift of the window's composition, and the run's retrieval metrics
against the previous week. Evidently (5-20 s to import) is imported only here, inside the functions."""

from __future__ import annotations

import importlib.util
import math
import time
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from pipeline import contract, drift, store
from pipeline.config import Config, load_config
from pipeline.errors import DriftwatchError
from pipeline.report import REPORTS_DIR

EMBEDDINGS = "chunks"  # the embeddings' name in the report
SOURCE, CATEGORY, LENGTH = "source", "category", "document_chunks"  # the composition's columns, per sampled chunk
COMPOSITION = (SOURCE, CATEGORY, LENGTH)
METRICS_DAYS = 7  # the retrieval metrics' reference: the runs of the days before the run date


class EvidentlyReportError(DriftwatchError):
    """A report that cannot be built (no such run, no store, too few chunks); the message names the date or file."""


@dataclass(frozen=True)
class WindowFrames:
    """The rows Evidently's classifier was given on each side (`windows.evidently_held`): one row per sampled
    chunk, its embedding columns and its composition (COMPOSITION), and the windows they come from."""

    reference: pd.DataFrame
    current: pd.DataFrame
    embedding_columns: list[str]
    reference_window: tuple[str, str]  # first and last run date, inclusive
    current_window: tuple[str, str]


@dataclass(frozen=True)
class EvidentlyReport:
    run_date: date
    html: str  # the whole page (Evidently's own template and script, inline)
    drift: object  # evidently.Snapshot of the embedding and composition drift
    metrics: object | None  # evidently.Snapshot of the retrieval metrics against the previous week (None: no week)
    seconds: float

    def embedding_score(self) -> float:
        """The embedding drift score as Evidently's snapshot holds it (its first metric)."""
        return float(self.drift.dict()["metrics"][0]["value"])


def require_evidently() -> None:
    """Raise EvidentlyReportError when the evidently package is not installed (without importing it)."""
    if not can_build():
        raise EvidentlyReportError("the Evidently report needs the evidently package, which is not installed: "
                                   "pip install 'driftwatch[evidently]'")
    from pipeline.exporters import import_quietly

    import_quietly("evidently")  # its usage telemetry off first


def default_path(data_dir: Path, run_date: date) -> Path:
    """Where `evidently-report` writes without --out: the data directory's reports folder, beside the reviews."""
    return Path(data_dir) / REPORTS_DIR / file_name(run_date)


def data_dir_config(data_dir: Path, config_file: Path | str | None = None) -> Config:
    """The settings the runs of `data_dir` used: `config_file` when given, else views.settings (the demo's
    demo.toml, else the config file, else the defaults)."""
    from pipeline.views import settings

    return load_config(config_file, data_dir=data_dir) if config_file else settings(data_dir)


def _run_row(config: Config, run_date: date) -> pd.Series:
    if not (Path(config.data_dir) / contract.RUNS).is_file():
        raise EvidentlyReportError(f"{Path(config.data_dir) / contract.RUNS}: no such file: no history in "
                                   f"{config.data_dir} (run `driftwatch run` or `driftwatch demo` first)")
    runs = store.read_runs(config.data_dir)
    row = runs[runs[contract.RUN_DATE] == pd.Timestamp(run_date)]
    if row.empty:
        dates = [f"{d:%Y-%m-%d}" for d in runs[contract.RUN_DATE]]
        span = f"runs from {dates[0]} to {dates[-1]}" if dates else "no runs"
        raise EvidentlyReportError(f"no run on {run_date} in {config.data_dir} ({span})")
    return row.iloc[-1]


def window_frames(config: Config, run_date: date) -> WindowFrames:
    """The rows and vectors Evidently's classifier was given in the run on `run_date` (`windows.window_sides`
    with the run's windows and seeds, then `windows.evidently_held`), read from the data directory: the corpus
    (opened read-only) and the embedding cache under the run's model. Near-copy flags are not computed (the
    report does not read them)."""
    from pipeline.corpus import CORPUS_FILE, Corpus
    from pipeline.embeddings import Embedder, embed_cached
    from pipeline.windows import evidently_held, window_sides

    run = _run_row(config, run_date)
    embedder = Embedder(config.embedder)
    if str(run["model"]) != embedder.key:
        raise EvidentlyReportError(f"the run on {run_date} embedded with {run['model']!r}, the settings of "
                                   f"{config.data_dir} name {embedder.key!r}: pass the run's --config")
    if not (Path(config.data_dir) / CORPUS_FILE).is_file():
        raise EvidentlyReportError(f"{Path(config.data_dir) / CORPUS_FILE}: no such file: the corpus of "
                                   f"{config.data_dir} is missing")
    with Corpus.in_dir(config.data_dir, readonly=True) as corpus:
        sides = window_sides(config, corpus, run_date,
                             lambda chunks: embed_cached(corpus, embedder, [c.text for c in chunks]).vectors,
                             lambda seen_by: lambda vectors, chunks: np.zeros(len(vectors), bool))
    _check_windows(config.data_dir, run_date, sides.windows.reference.describe(), sides.windows.current.describe())
    why = drift.not_enough(len(sides.reference), len(sides.current), config.drift)
    if why:
        raise EvidentlyReportError(f"the run on {run_date} had too few chunks to compare: {why}")
    frames = [_frame(side, evidently_held(side, config)) for side in (sides.reference, sides.current)]
    return WindowFrames(frames[0], frames[1], [c for c in frames[0].columns if c not in COMPOSITION],
                        sides.windows.reference.describe(), sides.windows.current.describe())


def _check_windows(data_dir: Path, run_date: date, reference: tuple[str, str], current: tuple[str, str]) -> None:
    """Refuse windows other than those the run's drift.csv rows name (a reference pinned by `rebaseline` since,
    or an earlier date re-run): the report would not show what the run compared."""
    rows = store.read(data_dir, contract.DRIFT)
    rows = rows[(rows[contract.RUN_DATE] == pd.Timestamp(run_date)) & (rows[contract.STATISTIC] ==
                                                                       contract.EVIDENTLY_MODEL_AUC)]
    if rows.empty:
        raise EvidentlyReportError(f"the run on {run_date} has no {contract.EVIDENTLY_MODEL_AUC} row in "
                                   f"{Path(data_dir) / contract.DRIFT} (drift.evidently off, or too few chunks)")
    row = rows.iloc[-1]
    day = lambda value: pd.Timestamp(value).date().isoformat()  # noqa: E731
    stored = (day(row["reference_start"]), day(row[contract.REFERENCE_DATE])), (day(row["current_start"]),
                                                                                day(row[contract.RUN_DATE]))
    if stored != (reference, current):
        raise EvidentlyReportError(
            f"the run on {run_date} compared {stored[1][0]} to {stored[1][1]} with {stored[0][0]} to {stored[0][1]} "
            f"({Path(data_dir) / contract.DRIFT}); its windows are now {current[0]} to {current[1]} and {reference[0]} "
            f"to {reference[1]} (a reference pinned by rebaseline since, or an earlier date re-run): re-run "
            f"{run_date} first")


def _frame(side: drift.Sample, held: np.ndarray) -> pd.DataFrame:
    """One row per held position: the embedding (float64, as the run's classifier read it) and the composition."""
    vectors = np.asarray(side.vectors[held], np.float64)
    width = len(str(vectors.shape[1] - 1))
    frame = pd.DataFrame(vectors, columns=[f"e{i:0{width}d}" for i in range(vectors.shape[1])])
    counts = side.document_counts()
    document = np.searchsorted(np.cumsum(counts), side.rows[held], side="right")
    frame[SOURCE] = np.asarray(side.sources, dtype=object)[held]
    frame[CATEGORY] = np.asarray(side.categories, dtype=object)[held]
    frame[LENGTH] = counts[document].astype(np.int64)
    return frame


def metrics_frames(data_dir: Path, run_date: date) -> tuple[pd.DataFrame, pd.DataFrame]:
    """metrics.csv wide, one row per run date and one column per `<pipeline> <metric>@<k>`: the run's row and
    those of the METRICS_DAYS days before it (the reference; empty when none ran)."""
    metrics = store.read_metrics(data_dir)
    metrics = metrics[metrics[contract.VALUE].notna()]
    day = pd.Timestamp(run_date)
    span = metrics[(metrics[contract.RUN_DATE] <= day) & (metrics[contract.RUN_DATE] >= day - timedelta(days=METRICS_DAYS))]
    if span.empty:
        return pd.DataFrame(), pd.DataFrame()
    names = span[contract.PIPELINE].astype(str) + " " + span[contract.METRIC].astype(str) + "@" + \
        span[contract.K].astype(int).astype(str)
    wide = span.assign(series=names).pivot_table(index=contract.RUN_DATE, columns="series", values=contract.VALUE,
                                                 aggfunc="last")
    wide.columns.name = None
    return wide[wide.index == day].reset_index(drop=True), wide[wide.index < day].reset_index(drop=True)


def _midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=timezone.utc)  # noqa: UP017


def drift_snapshot(frames: WindowFrames, run_date: date, tags: list[str] | None = None):
    """Evidently's Report of the window: EmbeddingsDrift with ModelDriftMethod(bootstrap=True) (the method the
    run's `evidently_model_auc` computes) on the embedding columns, ValueDrift of each composition column."""
    from evidently import DataDefinition, Dataset, Report
    from evidently.metrics import EmbeddingsDrift, ValueDrift
    from evidently.metrics.embeddings import ModelDriftMethod

    definition = DataDefinition(embeddings={EMBEDDINGS: frames.embedding_columns},
                                categorical_columns=[SOURCE, CATEGORY], numerical_columns=[LENGTH])
    report = Report([EmbeddingsDrift(embeddings_name=EMBEDDINGS, drift_method=ModelDriftMethod(bootstrap=True)),
                     *[ValueDrift(column=c) for c in COMPOSITION]])
    metadata = {"run_date": run_date.isoformat(), "reference": " to ".join(frames.reference_window),
                "current": " to ".join(frames.current_window)}
    # ModelDriftMethod adds a target column to the frames it is given: hand it copies. A category absent from one
    # side makes scipy's chi-square divide by zero (its p-value is still right): not worth a warning.
    with np.errstate(divide="ignore", invalid="ignore"):
        return report.run(Dataset.from_pandas(frames.current.copy(), data_definition=definition),
                          Dataset.from_pandas(frames.reference.copy(), data_definition=definition),
                          timestamp=_midnight(run_date), metadata=metadata, tags=tags or [],
                          name=f"driftwatch drift window {run_date}")


def metrics_snapshot(data_dir: Path, run_date: date):
    """Evidently's Report of the run's retrieval metrics (MeanValue of each series: the run's value) against the
    previous week's runs (their mean); None when no run in the week before."""
    from evidently import DataDefinition, Dataset, Report
    from evidently.metrics import MeanValue

    current, reference = metrics_frames(data_dir, run_date)
    if current.empty or reference.empty:
        return None
    columns = [c for c in current.columns if current[c].notna().all() and reference[c].notna().any()]
    definition = DataDefinition(numerical_columns=columns)
    return Report([MeanValue(column=c) for c in columns]).run(
        Dataset.from_pandas(current[columns], data_definition=definition),
        Dataset.from_pandas(reference[columns], data_definition=definition),
        timestamp=_midnight(run_date), name=f"driftwatch retrieval metrics {run_date}")


def _html(run_date: date, frames: WindowFrames, drift_run, metrics_run) -> str:
    """One Evidently page of both snapshots' widgets, each section under its title."""
    from evidently.core.metric_types import render_widgets
    from evidently.legacy.renderers.html_widgets import group_widget

    reference, current = (" to ".join(w) for w in (frames.reference_window, frames.current_window))
    # Snapshot.get_html_str renders one snapshot; its widgets (`_widgets`, evidently 0.7.23) are grouped here.
    groups = [group_widget(title=f"Embedding drift and composition, run {run_date}: documents that entered "
                                 f"{current} (current, {len(frames.current)} chunks) against {reference} "
                                 f"(reference, {len(frames.reference)} chunks)", widgets=drift_run._widgets)]
    if metrics_run is not None:
        groups.append(group_widget(title=f"Retrieval metrics of the run on {run_date} (current) against the runs of "
                                         f"the {METRICS_DAYS} days before (reference: their mean)",
                                   widgets=metrics_run._widgets))
    return render_widgets(groups, as_iframe=False)


def render(config: Config, run_date: date) -> EvidentlyReport:
    """The Evidently report of the run on `run_date`, in memory (the dashboard's download); nothing is written."""
    t0 = time.perf_counter()
    require_evidently()
    frames = window_frames(config, run_date)
    # One thread: the t-SNE behind Evidently's embedding plot took 25 s instead of 3 s on two busy cores, its
    # OpenMP workers spinning against each other (and against the dashboard's own threads).
    with threadpool_limits(limits=1):
        drift_run = drift_snapshot(frames, run_date)
        metrics_run = metrics_snapshot(config.data_dir, run_date)
    page = _html(run_date, frames, drift_run, metrics_run)
    return EvidentlyReport(run_date, page, drift_run, metrics_run, time.perf_counter() - t0)


def build_report(config: Config, run_date: date, out: Path | None = None) -> tuple[EvidentlyReport, Path]:
    """`render`, then written to `out` (default: `default_path`) atomically; nothing is written on an error."""
    report = render(config, run_date)
    path = Path(out) if out is not None else default_path(config.data_dir, run_date)
    path.parent.mkdir(parents=True, exist_ok=True)
    store.atomic_write(path, lambda f: f.write(report.html.encode("utf-8")))
    return report, path


def file_name(run_date: date) -> str:
    return f"evidently-{run_date.isoformat()}.html"


def offer(run_date: date) -> str:
    """The dashboard's line above the report's button: what it builds, or how to install Evidently."""
    if not can_build():
        return ("The Evidently report of this window needs the evidently package, which is not installed: "
                "pip install 'driftwatch[evidently]'.")
    return (f"An Evidently report of the run on {run_date}: the embedding drift by Evidently's own domain classifier "
            "on the rows the run compared (its score is the run's evidently_model_auc), the column drift of the "
            "window's sources, categories and document lengths, and the run's retrieval metrics against the week "
            "before. Building it imports Evidently and takes about half a minute; the same file as "
            f"`driftwatch evidently-report --date {run_date}`.")


def can_build() -> bool:
    return importlib.util.find_spec("evidently") is not None


def stored_score(data_dir: Path, run_date: date) -> float:
    """drift.csv's `evidently_model_auc` of the run on `run_date` (NaN when it has none)."""
    rows = store.read(data_dir, contract.DRIFT)
    rows = rows[(rows[contract.RUN_DATE] == pd.Timestamp(run_date)) &
                (rows[contract.STATISTIC] == contract.EVIDENTLY_MODEL_AUC)]
    return float(rows[contract.VALUE].iloc[-1]) if len(rows) else math.nan
