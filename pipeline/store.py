"""The CSV time-series store: schemas, atomic per-date writes, the run lock and typed readers."""

from __future__ import annotations

from pipeline.errors import DriftwatchError

import fcntl
import io
import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import date, datetime, timezone
from pathlib import Path

import pandas as pd

RUNS = "runs.csv"
METRICS = "metrics.csv"
PER_QUESTION = "per_question.csv"
DRIFT = "drift.csv"
ALERTS = "alerts.csv"
LOCK_FILE = "driftwatch.lock"
# Longest document or question id accepted (characters): ids land in every CSV row and in messages.
MAX_ID_LENGTH = 512
REFERENCE_FILE = "reference.json"  # the pinned reference date of the drift statistics

# Column names that readers select on (the tuples below are the files' full contracts).
RUN_DATE = "run_date"
PIPELINE, K, METRIC, VALUE = "pipeline", "k", "metric", "value"
QUESTION_ID, FIRST_RANK, RETRIEVED = "question_id", "first_relevant_rank", "retrieved"
STATISTIC, REFERENCE_DATE = "statistic", "reference_date"
RULE, SEVERITY, MESSAGE = "rule", "severity", "message"
EVENTS, DOCS_TOTAL = "events", "docs_total"

RUNS_COLUMNS = (
    "run_date", "run_id", "started_at", "finished_at", "status", "feeds_ok", "feeds_failed",
    "docs_new", "docs_updated", "docs_deleted", "docs_total", "chunks_total", "chunks_embedded",
    "seconds", "model", "config_hash", "events",
)
METRICS_COLUMNS = ("run_date", "pipeline", "k", "metric", "value", "n_questions")
PER_QUESTION_COLUMNS = (
    "run_date", "pipeline", "k", "question_id", "hit", "recall", "precision", "rr", "ndcg",
    "unjudged", "first_relevant_rank", "top1_score", "retrieved", "gold_missing",
)
DRIFT_COLUMNS = ("run_date", "statistic", "value", "reference_date", "n_reference", "n_current",
                 "reference_start", "current_start", "p_value", "null_value", "threshold", "verdict", "detail")
ALERTS_COLUMNS = (
    "run_date", "rule", "pipeline", "metric", "value", "baseline", "change_pct", "threshold",
    "severity", "message", "since", "p_value",
)

SCHEMAS: dict[str, tuple[str, ...]] = {
    RUNS: RUNS_COLUMNS,
    METRICS: METRICS_COLUMNS,
    PER_QUESTION: PER_QUESTION_COLUMNS,
    DRIFT: DRIFT_COLUMNS,
    ALERTS: ALERTS_COLUMNS,
}

# Column types for the readers; columns not listed are numbers (float) or, for the text ones below, str.
_TEXT = {"run_id", "started_at", "finished_at", "status", "model", "config_hash", "events", "pipeline",
         "metric", "question_id", "retrieved", "statistic", "reference_date", "rule", "severity", "message",
         "reference_start", "current_start", "verdict", "detail", "since"}
_INT = {"feeds_ok", "feeds_failed", "docs_new", "docs_updated", "docs_deleted", "docs_total",
        "chunks_total", "chunks_embedded", "k", "n_questions", "first_relevant_rank", "gold_missing",
        "n_reference", "n_current"}

# Run status values written to runs.csv.
STATUS_OK = "ok"
STATUS_DEGRADED = "degraded"  # some feeds failed
STATUS_NO_FEEDS = "no_feeds"  # every feed failed: evaluated on the corpus as it was


class StoreSchemaError(DriftwatchError):
    """A CSV whose header is not the contract's; the message names the file and the columns."""


class LockError(Exception):
    """Another run holds the data directory's lock."""


def join_ids(ids: Sequence[str]) -> str:
    """Space-separated doc ids; '%' and whitespace inside an id are percent-encoded."""
    return " ".join(i.replace("%", "%25").replace(" ", "%20").replace("\t", "%09").replace("\n", "%0A")
                    for i in ids)


def split_ids(value: str) -> list[str]:
    if not isinstance(value, str) or not value:
        return []
    return [i.replace("%0A", "\n").replace("%09", "\t").replace("%20", " ").replace("%25", "%")
            for i in value.split(" ")]


def _check_header(path: Path, header: Sequence[str]) -> None:
    expected = SCHEMAS[path.name]
    if tuple(header) != expected:
        missing = [c for c in expected if c not in header]
        extra = [c for c in header if c not in expected]
        raise StoreSchemaError(
            f"{path}: columns do not match the contract (missing: {missing or 'none'}, "
            f"unexpected: {extra or 'none'}, expected order: {', '.join(expected)})")


def _last_run_date(path: Path) -> str | None:
    """The run_date of the file's last line, read from its end (the store keeps rows sorted by date)."""
    with path.open("rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - 65536))
        tail = f.read().rstrip(b"\n").rsplit(b"\n", 1)[-1]
    first = tail.split(b",", 1)[0].decode()
    return None if first == RUN_DATE else first


def _frame(rows: pd.DataFrame | Sequence[dict], name: str) -> pd.DataFrame:
    rows = rows if isinstance(rows, pd.DataFrame) else list(rows)
    frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows, columns=None if rows else SCHEMAS[name])
    columns = SCHEMAS[name]
    missing = [c for c in columns if c not in frame.columns]
    if missing or len(frame.columns) != len(columns):
        extra = [c for c in frame.columns if c not in columns]
        raise StoreSchemaError(f"{name}: rows do not match the contract (missing: {missing}, extra: {extra})")
    return frame.loc[:, list(columns)]


def _atomic_write(path: Path, write) -> None:
    """Write to a temporary file beside `path`, fsync it, then rename over `path`."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def replace_date(data_dir: Path, name: str, run_date: date | str, rows: pd.DataFrame | Sequence[dict]) -> None:
    """Make `rows` the file's rows for `run_date`: earlier rows of that date are dropped.

    The common case (a date after every stored date) copies the file and appends; otherwise
    the file is re-read, filtered and rewritten sorted by date. Either way the new file
    replaces the old one by an atomic rename, so a crash leaves the previous file whole.
    """
    day = str(run_date)
    path = Path(data_dir) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    new = _frame(rows, name)
    if len(new) and not (new[RUN_DATE].astype(str) == day).all():
        raise ValueError(f"{name}: every row must have run_date {day}")
    body = new.to_csv(index=False, header=False, lineterminator="\n").encode()
    if path.exists() and path.stat().st_size > 0:
        with path.open(encoding="utf-8") as f:
            _check_header(path, f.readline().rstrip("\n").split(","))
        last = _last_run_date(path)
        if last is None or last < day:
            def append(f: io.BufferedWriter) -> None:
                with path.open("rb") as old:
                    while block := old.read(1 << 20):
                        f.write(block)
                f.write(body)
            _atomic_write(path, append)
            return
        old = _read_raw(path)
        # The new rows go through the same CSV formatting as the append path, then back to text.
        fresh = pd.read_csv(io.BytesIO(body), header=None, names=list(SCHEMAS[name]), dtype=str,
                            keep_default_na=False, na_filter=False) if body else old.iloc[0:0]
        merged = pd.concat([old[old[RUN_DATE] != day], fresh], ignore_index=True)
        merged = merged.sort_values(RUN_DATE, kind="stable")
        _atomic_write(path, lambda f: f.write(merged.to_csv(index=False, lineterminator="\n").encode()))
        return
    header = (",".join(SCHEMAS[name]) + "\n").encode()
    _atomic_write(path, lambda f: (f.write(header), f.write(body)))


def write_table(data_dir: Path, name: str, rows: pd.DataFrame | Sequence[dict]) -> None:
    """Replace a whole CSV at once, atomically (bulk imports and benchmarks; the job uses `replace_date`)."""
    path = Path(data_dir) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    frame = _frame(rows, name).sort_values(RUN_DATE, kind="stable")
    body = frame.to_csv(index=False, lineterminator="\n").encode()
    _atomic_write(path, lambda f: f.write(body))


def _read_raw(path: Path) -> pd.DataFrame:
    """The file as strings, exactly as stored (so a rewrite does not reformat numbers)."""
    return pd.read_csv(path, dtype=str, keep_default_na=False, na_filter=False)


def read(data_dir: Path, name: str) -> pd.DataFrame:
    """A typed frame of one CSV; an absent file gives an empty frame with the contract's columns."""
    path = Path(data_dir) / name
    columns = SCHEMAS[name]
    if not path.exists() or path.stat().st_size == 0:
        return pd.DataFrame({c: pd.Series(dtype=_dtype(c)) for c in columns})
    frame = pd.read_csv(path, dtype={c: str for c in columns if c in _TEXT or c == RUN_DATE},
                        keep_default_na=False, na_values={c: ["", "nan", "NaN"] for c in columns if c not in _TEXT})
    _check_header(path, list(frame.columns))
    for c in columns:
        if c == RUN_DATE:
            continue
        if c in _INT:
            frame[c] = pd.to_numeric(frame[c], errors="coerce").astype("Int64")
        elif c not in _TEXT:
            frame[c] = pd.to_numeric(frame[c], errors="coerce").astype("float64")
    frame[RUN_DATE] = pd.to_datetime(frame[RUN_DATE], format="%Y-%m-%d")
    return frame


def _dtype(column: str) -> str:
    if column == RUN_DATE:
        return "datetime64[ns]"
    return "object" if column in _TEXT else ("Int64" if column in _INT else "float64")


def read_runs(data_dir: Path) -> pd.DataFrame:
    return read(data_dir, RUNS)


def read_metrics(data_dir: Path) -> pd.DataFrame:
    return read(data_dir, METRICS)


def read_per_question(data_dir: Path) -> pd.DataFrame:
    return read(data_dir, PER_QUESTION)


def read_reference(data_dir: Path) -> date | None:
    """The pinned reference date of the drift statistics, or None (then the first run date is used)."""
    path = Path(data_dir) / REFERENCE_FILE
    if not path.exists():
        return None
    try:
        return date.fromisoformat(json.loads(path.read_text(encoding="utf-8"))["reference_date"])
    except (ValueError, KeyError, TypeError) as exc:
        raise StoreSchemaError(f"{path}: expected {{\"reference_date\": \"YYYY-MM-DD\"}}: {exc}") from None


def write_reference(data_dir: Path, day: date) -> None:
    body = (json.dumps({"reference_date": day.isoformat()}) + "\n").encode()
    _atomic_write(Path(data_dir) / REFERENCE_FILE, lambda f: f.write(body))


@contextmanager
def run_lock(data_dir: Path) -> Iterator[None]:
    """An exclusive lock on the data directory for one run; a second run fails at once with LockError."""
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown process"
            raise LockError(f"{data_dir}: another driftwatch run holds the lock ({holder}); "
                            "wait for it to finish") from None
        os.ftruncate(fd, 0)
        started = datetime.now(timezone.utc).isoformat(timespec="seconds")
        os.pwrite(fd, f"pid {os.getpid()}, started {started}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
