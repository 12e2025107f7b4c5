"""Drift scenarios run in a sandbox copy of a data directory; the source directory is only read."""

from __future__ import annotations

from pipeline.errors import DriftwatchError

import dataclasses
import fcntl
import json
import os
import random
import shutil
import sqlite3
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path

import pandas as pd

from pipeline import contract, store
from pipeline.alerts import condition_of
from pipeline.contract import ALERT, WARNING
from pipeline.config import Config, ExportConfig, load_config
from pipeline.corpus import CORPUS_FILE, Corpus
from pipeline.demo import DEMO_CONFIG, LOCAL_TZ, pack_articles
from pipeline.job import RunResult, run_day
from pipeline.sources import Document, parse_feed

INJECT = "inject"  # the user's own feed file (--pack) as the injected documents
SCENARIOS = ("offtopic", "near-duplicates", INJECT, "delete", "embedder")
PACK_SCENARIOS = ("offtopic", "near-duplicates")  # the bundled packs
SANDBOX_FILE = "sandbox.json"
SIMULATED_PREFIX = "sim-"  # injected documents' ids: never one of the corpus's own
CAUGHT_COLUMNS = ("rule", "pipeline", "series", "caught", "original", "earlier", "severity", "runs", "answer")


class SimulationError(DriftwatchError):
    """A scenario that cannot run as asked; the message says which option is wrong."""


@dataclass(frozen=True)
class Scenario:
    name: str
    start: date  # the day the change happens; the sandbox's series diverge from here
    n: int = 40  # offtopic / near-duplicates: documents injected
    pack: str | None = None  # inject: the feed file (RSS, Atom or JSON Feed) whose every entry is injected
    share: float | None = None  # delete: share of the corpus removed (seeded)
    before: date | None = None  # delete: remove documents published before this date
    model: str | None = None  # embedder: another model name or folder
    truncate_dim: int | None = None  # embedder: keep only the first N dimensions
    seed: int = 0

    def describe(self) -> str:
        if self.name in PACK_SCENARIOS:
            return f"simulation: injected {self.n} {self.name} documents"
        if self.name == INJECT:
            return f"simulation: injected the entries of {Path(self.pack or '').name}"
        if self.name == "delete":
            what = f"{self.share:.0%} of the documents" if self.share is not None else f"documents published before {self.before}"
            return f"simulation: deleted {what}"
        parts = [p for p in (self.model, self.truncate_dim and f"truncated to {self.truncate_dim} dimensions") if p]
        return f"simulation: embedder swapped ({', '.join(parts)})"

    def check(self) -> None:
        if self.name not in SCENARIOS:
            raise SimulationError(f"unknown scenario {self.name!r} (valid: {', '.join(SCENARIOS)})")
        if self.name in PACK_SCENARIOS:
            available = len(pack_articles(self.name))
            if not 1 <= self.n <= available:
                raise SimulationError(f"--n must be between 1 and {available} for {self.name}, got {self.n}")
        if (self.name == INJECT) != (self.pack is not None):
            raise SimulationError("inject needs --pack FILE" if self.name == INJECT
                                  else f"--pack is for the inject scenario, not {self.name}")
        if self.name == INJECT:
            read_pack(Path(self.pack), self.start)  # a bad file fails here, before the sandbox is made
        if self.name == "delete" and (self.share is None) == (self.before is None):
            raise SimulationError("delete needs exactly one of --share or --before")
        if self.share is not None and not 0 < self.share <= 1:
            raise SimulationError(f"--share must be within (0, 1], got {self.share}")
        if self.name == "embedder" and self.model is None and self.truncate_dim is None:
            raise SimulationError("embedder needs --model and/or --truncate-dim")
        if self.truncate_dim is not None and self.truncate_dim <= 0:
            raise SimulationError(f"--truncate-dim must be > 0, got {self.truncate_dim}")


@dataclass(frozen=True)
class Simulation:
    source: Path
    sandbox: Path
    scenario: Scenario
    results: list[RunResult]


@contextmanager
def _read_lock(data_dir: Path):
    """A shared lock on the source's run lock file, without writing it: no daily run may write meanwhile."""
    path = data_dir / store.LOCK_FILE
    if not path.exists():
        yield
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise store.LockError(f"{data_dir}: a run is writing this directory; simulate after it finishes") from None
        yield
    finally:
        os.close(fd)


def _check_out(source: Path, sandbox: Path) -> None:
    """Refuse a sandbox inside (or holding) the source, a folder that is neither empty nor an earlier sandbox, or a
    source a killed run left unfinished."""
    if not (source / contract.RUNS).exists() or not (source / CORPUS_FILE).exists():
        raise SimulationError(f"{source}: no history to simulate on (no runs.csv / corpus.sqlite)")
    if sandbox == source or source in sandbox.parents or sandbox in source.parents:
        raise SimulationError(f"--out {sandbox} must be outside the source directory {source}")
    if sandbox.exists() and any(sandbox.iterdir()) and not (sandbox / SANDBOX_FILE).is_file():
        raise SimulationError(f"--out {sandbox} is not empty and not an earlier sandbox; choose another folder")
    if store.unfinished(source):  # its files hold a killed run's writes, which only that store's next run rolls back
        raise SimulationError(f"{source}: a run did not finish there (its journal is left); the next run there rolls "
                              "it back: simulate after it")


# What a sandbox copies besides the corpus: every series, the drift reference (or it would reset), and the judging
# loop's ledgers (judgments.jsonl, questions.jsonl: the maintained qrels and the pool read them, so a sandbox's
# maintained series is scored with the source's qrels, not a version of its own).
SANDBOX_FILES = (*contract.SCHEMAS, store.REFERENCE_FILE, contract.JUDGMENTS, contract.QUESTIONS)


def prepare_sandbox(source: Path, sandbox: Path, scenario: Scenario) -> None:
    """Copy the source's series and corpus into `sandbox` (new, empty, or an earlier sandbox, which is replaced)."""
    source, sandbox = Path(source).resolve(), Path(sandbox).resolve()
    _check_out(source, sandbox)
    discard_sandbox(sandbox)
    sandbox.mkdir(parents=True, exist_ok=True)
    with _read_lock(source):
        for name in SANDBOX_FILES:
            if (source / name).exists():
                shutil.copyfile(source / name, sandbox / name)
        # immutable=1: read without creating -wal/-shm files, so the source stays byte-identical
        src = sqlite3.connect(f"file:{source / CORPUS_FILE}?immutable=1", uri=True)
        dst = sqlite3.connect(sandbox / CORPUS_FILE)
        try:
            src.backup(dst)
        finally:
            src.close()
            dst.close()
    meta = {"source": str(source), "scenario": dataclasses.asdict(scenario), "created": datetime.now().isoformat()}
    (sandbox / SANDBOX_FILE).write_text(json.dumps(meta, indent=2, default=str) + "\n", encoding="utf-8")


def discard_sandbox(sandbox: Path) -> bool:
    """Delete a sandbox; only a folder a simulation made (it holds sandbox.json) is ever deleted."""
    sandbox = Path(sandbox)
    if not (sandbox / SANDBOX_FILE).is_file():
        return False
    # Renamed aside first (one atomic step), then deleted: a kill never leaves a half-deleted sandbox at its name.
    aside = _aside(sandbox)
    shutil.rmtree(aside, ignore_errors=True)
    sandbox.rename(aside)
    shutil.rmtree(aside)
    return True


def _aside(sandbox: Path) -> Path:
    """Where a sandbox being replaced or discarded goes before it is deleted (a hidden sibling)."""
    return sandbox.with_name(f".{sandbox.name}.old")


def source_config(source: Path, fallback: Config | None) -> Config:
    """The configuration that built `source`: its demo.toml when it is a demo directory, else `fallback`."""
    if (Path(source) / DEMO_CONFIG).exists():
        return load_config(Path(source) / DEMO_CONFIG)
    if fallback is None:
        raise SimulationError(f"{source}: not a demo directory; pass --config with the settings that built it")
    return fallback


def _arrival(day: date) -> datetime:
    return datetime.combine(day, datetime.min.time(), LOCAL_TZ)


def read_pack(path: Path, start: date) -> list[Document]:
    """Every entry of a feed file as a document injected on `start`: its id prefixed (so it adds to the corpus
    rather than replacing one of its documents), published on `start` like a bundled pack's, its source
    "simulation:<file name>". SimulationError or FeedError naming the file when it cannot be read or parsed."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise SimulationError(f"--pack {path}: no such file") from None
    except OSError as exc:
        raise SimulationError(f"--pack {path}: cannot read: {exc.strerror or exc}") from None
    documents = parse_feed(data, source=f"simulation:{path.name}", location=str(path))
    return [dataclasses.replace(d, id=f"{SIMULATED_PREFIX}{d.id}", published=_arrival(start)) for d in documents]


def _pack_documents(scenario: Scenario) -> list[Document]:
    if scenario.name == INJECT:
        return read_pack(Path(scenario.pack), scenario.start)
    articles = pack_articles(scenario.name)
    chosen = random.Random(scenario.seed).sample(articles, scenario.n)
    return [Document(id=f"{SIMULATED_PREFIX}{a.id}", title=a.title, text=a.text, url="",
                     published=_arrival(scenario.start), source=f"simulation:{scenario.name}",
                     categories=(a.category,)) for a in chosen]


def _apply(scenario: Scenario, corpus: Corpus) -> None:
    if scenario.name in (*PACK_SCENARIOS, INJECT):
        corpus.ingest(_pack_documents(scenario), scenario.start)
    elif scenario.name == "delete":
        present = corpus.snapshot(scenario.start)
        if scenario.share is not None:
            ids = sorted(s.document.id for s in present)
            doomed = random.Random(scenario.seed).sample(ids, round(len(ids) * scenario.share))
        else:
            doomed = [s.document.id for s in present
                      if (s.document.published.date() if s.document.published else date.fromisoformat(s.first_seen))
                      < scenario.before]
        corpus.delete(doomed, scenario.start, reason=scenario.describe())


def _partial(sandbox: Path) -> Path:
    """Where a simulation builds its sandbox before renaming it to `sandbox`: a hidden sibling, so a killed
    simulation never leaves a half-made --out (the next simulation to that --out replaces what it left)."""
    return sandbox.with_name(f".{sandbox.name}.partial")


def last_run(source: Path) -> date:
    """The date of the source's last run (SimulationError without history)."""
    runs = store.read_runs(source)
    if runs.empty:
        raise SimulationError(f"{source}: no history to simulate on (build one with `python -m pipeline demo`)")
    return runs["run_date"].max().date()


def run_dates(source: Path) -> list[date]:
    """The source's run dates, oldest first (SimulationError without history)."""
    last_run(source)
    return sorted(store.read_runs(source)["run_date"].dt.date.unique())


def default_start(days: list[date], window: int) -> date:
    """The default start of a scenario among the run dates `days` (oldest first): `window` runs before the last
    (the alert rules' baseline), so that the re-run days can answer "would the alerts catch this?" (the first
    run date on a shorter history)."""
    return days[max(0, len(days) - 1 - window)]


def simulate(config: Config, scenario: Scenario, source: Path, sandbox: Path,
             progress: Callable[[RunResult], None] | None = None) -> Simulation:
    """Copy `source` to `sandbox`, apply the scenario on its start date and re-run every later date there.

    The sandbox keeps the original rows before the start date, so its series and the source's can be
    compared side by side; the source directory is never written. The sandbox is built in a hidden
    sibling and renamed to `sandbox` once complete; an earlier sandbox there is renamed aside first and deleted
    after, so a kill leaves at `sandbox` the earlier sandbox whole, the new one whole, or nothing.
    """
    scenario.check()
    source, sandbox = Path(source).resolve(), Path(sandbox).resolve()
    _check_out(source, sandbox)
    last = last_run(source)
    if scenario.start > last:
        raise SimulationError(f"--date {scenario.start} is after the last run of {source} ({last}): "
                              "a scenario starts on or before a run date")
    work = _partial(sandbox)
    shutil.rmtree(work, ignore_errors=True)  # left by a killed simulation
    shutil.rmtree(_aside(sandbox), ignore_errors=True)
    prepare_sandbox(source, work, scenario)
    run_dates = sorted(store.read_runs(work)["run_date"].dt.date.unique())
    sim_config = config.replace(data_dir=work, export=ExportConfig())  # a sandbox publishes nothing
    if scenario.name == "embedder":
        embedder = dataclasses.replace(sim_config.embedder, model=scenario.model or sim_config.embedder.model,
                                       truncate_dim=scenario.truncate_dim)
        sim_config = sim_config.replace(embedder=embedder)
    with Corpus.in_dir(work) as corpus:
        _apply(scenario, corpus)
    results = []
    for day in (d for d in run_dates if d >= scenario.start):
        results.append(run_day(sim_config, day, events=scenario.describe() if day == scenario.start else ""))
        if progress:
            progress(results[-1])
    aside = _aside(sandbox)
    if (sandbox / SANDBOX_FILE).is_file():  # the earlier sandbox: renamed aside, deleted once the new one is in
        sandbox.rename(aside)
    elif sandbox.exists():
        sandbox.rmdir()  # an empty folder (checked above)
    work.rename(sandbox)
    shutil.rmtree(aside, ignore_errors=True)
    return Simulation(source, sandbox, scenario, results)


def metric_names(data_dir: Path) -> list[str]:
    """The metrics of a data directory's metrics.csv, which `compare` can show."""
    return sorted(store.read_metrics(data_dir)["metric"].unique())


def check_metric(data_dir: Path, metric: str) -> None:
    names = metric_names(data_dir)
    if metric not in names:
        raise SimulationError(f"--metric {metric!r} is not in {Path(data_dir) / contract.METRICS} "
                              f"(valid: {', '.join(names) or 'none'})")


def compare(source: Path, sandbox: Path, metric: str, k: int) -> pd.DataFrame:
    """One row per date and pipeline: the metric in the original series and in the simulated one."""
    check_metric(source, metric)
    def series(data_dir: Path) -> pd.DataFrame:
        frame = store.read_metrics(data_dir)
        return frame[(frame["metric"] == metric) & (frame["k"] == k)][["run_date", "pipeline", "value"]]

    both = series(source).merge(series(sandbox), on=["run_date", "pipeline"], suffixes=("_original", "_simulated"))
    both["change"] = both["value_simulated"] - both["value_original"]
    return both.sort_values(["run_date", "pipeline"]).reset_index(drop=True)


def results_table(compared: pd.DataFrame, start: date | None = None) -> pd.DataFrame:
    """`compare`'s rows from `start` on, for reading: the run date as a date (not a timestamp)."""
    rows = compared if start is None else compared[compared["run_date"].dt.date >= start]
    return rows.assign(run_date=rows["run_date"].dt.date).reset_index(drop=True)


_RANK = {WARNING: 1, ALERT: 2}


def _firsts(frame: pd.DataFrame, start: date) -> dict[tuple, dict]:
    """Per condition (`alerts.condition_of`) fired on or after `start`: its rows from `start` (oldest first), the
    first date it fired from `start` and its onset: that date, or the first run of its streak (`since`) when the
    streak was already open before `start`."""
    rows = frame[frame[contract.RUN_DATE].dt.date >= start].sort_values(contract.RUN_DATE, kind="stable")
    rows = rows.assign(_condition=[condition_of(r, p, m) for r, p, m in
                                   zip(rows["rule"], rows["pipeline"].fillna(""), rows["metric"])])
    out = {}
    for condition, group in rows.groupby("_condition", sort=False):
        first = group[contract.RUN_DATE].iloc[0].date()
        since = pd.to_datetime(group["since"].iloc[0], errors="coerce") if "since" in group else pd.NaT
        onset = min(first, since.date()) if not pd.isna(since) else first
        out[condition] = {"rows": group, "first": first, "onset": onset}
    return out


def catch_sentence(caught_on: date, original: date | None, start: date) -> str:
    """One condition's answer, date against date: "caught on D (the original: not until D' / never)", or, when the
    original fired it as early or earlier, that it did and when."""
    if original is None:
        return f"caught on {caught_on} (the original: never, from {start} on)"
    if original > caught_on:
        return f"caught on {caught_on} (the original: not until {original})"
    if original == caught_on:
        return f"not earlier: the original fired it too, on the same day ({original})"
    when = f"on {original}, before the change on {start}" if original < start else f"on {original}"
    return f"not earlier: the original fired it too, {when} (the sandbox on {caught_on})"


def compare_conditions(original: pd.DataFrame, simulated: pd.DataFrame, start: date) -> pd.DataFrame:
    """"Would the alerts catch this?", condition by condition and date by date. One row per condition
    (`alerts.condition_of`: a pipeline's drop or slow drift in any of its series, any other rule per series) that
    fired in the sandbox on or after `start`: rule, pipeline, series (the metrics it fired on, in the order they
    did), caught (its first date in the sandbox from `start`), original (the first date the original fired it
    from `start`, or the first run of a streak the original had open at `start`; None: never), earlier (the
    sandbox fired it before the original did, or the original never did), severity (the most severe), runs
    (dates it fired on in the sandbox) and answer (`catch_sentence`). A sandbox streak open before `start` was
    the original's too (the sandbox keeps the original's rows before `start`). Earliest first."""
    before, after = _firsts(original, start), _firsts(simulated, start)
    rows = []
    for condition, fired in after.items():
        theirs = before.get(condition)
        dates = [d for d in (theirs and theirs["onset"], fired["onset"] if fired["onset"] < start else None) if d]
        first_original = min(dates) if dates else None
        group = fired["rows"]
        rows.append({"rule": condition[0], "pipeline": condition[1],
                     "series": ", ".join(dict.fromkeys(group["metric"])), "caught": fired["first"],
                     "original": first_original,
                     "earlier": first_original is None or first_original > fired["first"],
                     "severity": max(group["severity"], key=lambda s: _RANK.get(s, 0)),
                     "runs": group[contract.RUN_DATE].nunique(),
                     "answer": catch_sentence(fired["first"], first_original, start)})
    out = pd.DataFrame(rows, columns=list(CAUGHT_COLUMNS))
    return out.sort_values(["caught", "rule", "pipeline"], kind="stable").reset_index(drop=True)


def catch_verdict(compared: pd.DataFrame, start: date) -> str:
    """The headline of `compare_conditions`: Yes when the sandbox fired a condition before the original did."""
    if compared.empty:
        return f"No: no rule fired in the sandbox from {start} on."
    earlier = int(compared["earlier"].sum())
    if earlier:
        return (f"Yes: {earlier} of the {len(compared)} condition(s) the sandbox fired from {start} on fired there "
                "before the original fired them, or fired there only.")
    return (f"No: each of the {len(compared)} condition(s) the sandbox fired from {start} on fired in the original "
            "too, as early or earlier.")


def caught(source: Path, sandbox: Path, start: date) -> pd.DataFrame:
    """`compare_conditions` for the alerts.csv of a source and its sandbox."""
    return compare_conditions(store.read(source, contract.ALERTS), store.read(sandbox, contract.ALERTS), start)
