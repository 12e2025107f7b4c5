"""The CSV time-series store: atomic per-date writes of the files `pipeline.contract` defines, the run lock, the seal
and typed readers."""

from __future__ import annotations

import csv
import fcntl
import hashlib
import hmac
import io
import json
import logging
import os
import re
import secrets
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import date, datetime, timezone
from pathlib import Path

import pandas as pd

from pipeline import jsonl, memo
from pipeline.redact import redact
from pipeline.contract import (ADDED_COLUMNS, AGREEMENT, ALERTS, ANSWERS_DIR, DRIFT, GENERATION, INT_COLUMNS,
                               MAINTAINED_METRICS, METRICS, PER_ANSWER, QRELS_VERSIONS, PER_QUESTION, RUN_DATE, RUNS, SCHEMAS, SIGNALS, SOURCES, TARGETS,
                               TEXT_COLUMNS, UPSTREAM_TEXT_COLUMNS)
from pipeline.contract import SEGMENT_QUESTIONS, SEGMENTS
from pipeline.contract import ADDED_PER_QUESTION, CANARY, POOL
from pipeline.errors import DriftwatchError

log = logging.getLogger(__name__)

QUARANTINE_DIR = "quarantine"  # rows recover cannot account for, moved out of the CSVs (see `quarantine_orphans`)
LOCK_FILE = "driftwatch.lock"
REFERENCE_FILE = "reference.json"  # the pinned reference date of the drift statistics


class StoreSchemaError(DriftwatchError):
    """A data directory or CSV that breaks the store's contract; the message names the file (and line)."""


class StoreEditedError(StoreSchemaError):
    """The store's files differ from what the last finished run sealed (edited outside driftwatch), or the seal
    itself does not authenticate; nothing is written until the user accepts the store as it is."""


class LockError(Exception):
    """Another run holds the data directory's lock."""


# Characters percent-encoded inside a joined id ('%' first when encoding, last when decoding).
_ID_ESCAPES = (("%", "%25"), (" ", "%20"), ("\t", "%09"), ("\n", "%0A"), ("\r", "%0D"))


def join_ids(ids: Sequence[str]) -> str:
    """Space-separated doc ids; '%' and whitespace inside an id are percent-encoded."""
    def encode(doc_id: str) -> str:
        for char, code in _ID_ESCAPES:
            doc_id = doc_id.replace(char, code)
        return doc_id
    return " ".join(encode(i) for i in ids)


def split_ids(value: str) -> list[str]:
    if not isinstance(value, str) or not value:
        return []
    if "%" not in value:  # every escape starts with '%': nothing to decode (most rows; a year of history is 10^5)
        return value.split(" ")

    def decode(doc_id: str) -> str:
        for char, code in reversed(_ID_ESCAPES):
            doc_id = doc_id.replace(code, char)
        return doc_id
    return [decode(i) for i in value.split(" ")]


_BLOCK = 1 << 20  # bytes read at a time when scanning a file
_BOM = b"\xef\xbb\xbf"
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_TEMPORARY = re.compile(r"\..+\.(?P<pid>\d+)\.tmp")  # what `atomic_write` leaves when killed
# The files whose rows belong to a run: a date they hold without a runs.csv row is one no finished run wrote.
RUN_PARTS = (PER_QUESTION, ADDED_PER_QUESTION, METRICS, DRIFT, ALERTS, SIGNALS, TARGETS, GENERATION, PER_ANSWER,
             AGREEMENT, SOURCES, SEGMENTS, SEGMENT_QUESTIONS, CANARY, POOL)
# The files a run rewrites whole (not by date): the run journal keeps each as it was (a hard link: every write of them
# replaces the file by a rename, so the link keeps the old bytes) and a roll back puts it back.
WHOLE_PARTS = (QRELS_VERSIONS, MAINTAINED_METRICS)


def _legacy_columns(name: str) -> tuple[str, ...] | None:
    """The columns of the file as an earlier driftwatch wrote it, before contract.ADDED_COLUMNS (None: none added)."""
    added = ADDED_COLUMNS.get(name, ())
    return SCHEMAS[name][:-len(added)] if added else None


def _check_header(path: Path, header: Sequence[str]) -> None:
    expected = SCHEMAS[path.name]
    if tuple(header) != expected and tuple(header) != _legacy_columns(path.name):
        missing = [c for c in expected if c not in header]
        extra = [c for c in header if c not in expected]
        raise StoreSchemaError(
            f"{path}:1: columns do not match the contract (missing: {missing or 'none'}, "
            f"unexpected: {extra or 'none'}, expected order: {', '.join(expected)})")


def _width(path: Path) -> int:
    """The number of fields of the file's rows: its header's (the contract's, or an earlier contract's)."""
    with _open_bytes(path) as f:
        return f.readline().count(b",") + 1


def is_legacy(path: Path) -> bool:
    """The file was written before columns were added to its contract (its header ends before them)."""
    path = Path(path)
    legacy = _legacy_columns(path.name)
    if legacy is None or not path.exists() or _size(path) == 0:
        return False
    with _open_bytes(path) as f:
        return f.readline().decode("utf-8", "replace").rstrip("\n").split(",") == list(legacy)


def _check_edges(path: Path) -> None:
    """The cheap checks: a header line of plain UTF-8 (no byte order mark) naming the contract's columns in
    order, and a last line ended by a newline (else a write or copy was cut short)."""
    with _open_bytes(path) as f:
        first = f.readline()
        f.seek(-1, os.SEEK_END)
        if f.read(1) != b"\n":
            raise _truncated(path, _size(path))
    if first.startswith(_BOM):
        raise StoreSchemaError(f"{path}:1: starts with a UTF-8 byte order mark; save it as UTF-8 without BOM")
    try:
        header = first.decode("utf-8").rstrip("\n").split(",")
    except UnicodeDecodeError as exc:
        raise StoreSchemaError(f"{path}:1: not UTF-8 text ({exc.reason})") from None
    _check_header(path, header)


def _line_at(path: Path, offset: int) -> int:
    """The line number (from 1) of the byte at `offset`."""
    lines = 1
    with _open_bytes(path) as f:
        while offset > 0 and (block := f.read(min(_BLOCK, offset))):
            lines += block.count(b"\n")
            offset -= len(block)
    return lines


def _truncated(path: Path, offset: int) -> StoreSchemaError:
    return StoreSchemaError(f"{path}:{_line_at(path, offset)}: the last row is cut short (the file does not end "
                            "with a complete row): restore the file or delete its partial last line")


def _last_row_offset(path: Path, start: int = 0) -> int:
    """Where the file's last CSV row starts (0: the header is the only row), from one pass over its bytes (from
    `start`, where a row starts, when the bytes before it are known to be whole rows).

    A newline ends a row only outside quotes, that is after an even number of '"' (a quote inside a quoted
    field is doubled), so no field content (newlines, commas, multi-byte text, any length) can fool it.
    A file cut short (no final newline, or an open quoted field) is refused.
    """
    quoted, offset = False, start
    ends = [start, start]  # offsets just after the last two row-ending newlines
    with _open_bytes(path) as f:
        f.seek(start)
        while block := f.read(_BLOCK):
            position = offset
            for piece in block.split(b'"'):
                if not quoted and (last := piece.rfind(b"\n")) >= 0:
                    before = piece.rfind(b"\n", 0, last)  # a piece may end two rows
                    ends = [position + before + 1 if before >= 0 else ends[1], position + last + 1]
                position += len(piece) + 1
                quoted = not quoted
            quoted = not quoted  # the split added one toggle too many: the block does not end in a quote
            offset += len(block)
    if quoted or ends[1] != offset:
        raise _truncated(path, ends[1])
    return ends[0]


def _row_end(data: bytes, start: int) -> int:
    """Where the CSV row that starts at `start` ends, just after its newline: the first newline after an even
    number of '"' (as in `_last_row_offset`: a quote inside a quoted field is doubled)."""
    end = data.find(b"\n", start)
    while end >= 0 and data.count(b'"', start, end) % 2:
        end = data.find(b"\n", end + 1)
    return len(data) if end < 0 else end + 1


def _rows_after_header(data: bytes) -> Iterator[bytes]:
    """Each CSV row of a store file's bytes after its header line, with its newline (`_row_end`)."""
    at = _row_end(data, 0)
    while at < len(data):
        end = _row_end(data, at)
        yield data[at:end]
        at = end


def _date_span(data: bytes, day: str) -> tuple[int, int]:
    """The bytes of the rows of `day` in a store file (`data`: a header, then rows sorted by run_date, each ending
    with a newline), found by searching for the date rather than parsing the rows before it; an empty span where
    they would go when the file has none."""
    first = _row_end(data, 0)
    key = b"\n" + day.encode() + b","
    counted, quotes = first, 0
    at = data.find(key, first - 1)
    while at >= 0:
        quotes += data.count(b'"', counted, at)
        counted = max(counted, at)
        if quotes % 2 == 0:  # a row starts here, not a line inside a quoted field
            start = end = at + 1
            while data.startswith(key[1:], end):
                end = _row_end(data, end)
            return start, end
        at = data.find(key, at + 1)
    start = first
    while start < len(data) and data[start:start + len(key) - 2] < key[1:-1]:
        start = _row_end(data, start)
    return start, start


def _parse_row(path: Path, offset: int) -> list[str]:
    """The CSV row starting at `offset`, checked against the contract (field count, run_date)."""
    with _open_bytes(path) as f:
        f.seek(offset)
        raw = f.read()
    try:
        rows = list(csv.reader(io.StringIO(raw.decode("utf-8"), newline=""), strict=True))
    except (UnicodeDecodeError, csv.Error) as exc:
        raise StoreSchemaError(f"{path}:{_line_at(path, offset)}: not a CSV row of UTF-8 text ({exc})") from None
    width = _width(path)
    if len(rows) != 1 or len(rows[0]) != width or not _is_date(rows[0][0]):
        raise StoreSchemaError(f"{path}:{_line_at(path, offset)}: the last row is not {width} fields "
                               "starting with a YYYY-MM-DD run_date")
    return rows[0]


def _is_date(text: str) -> bool:
    if not _DATE.fullmatch(text):
        return False
    try:
        date.fromisoformat(text)
    except ValueError:
        return False
    return True


def _last_run_date(path: Path) -> str | None:
    """The run_date of the file's last row (the store keeps rows sorted by date); None when it has none."""
    offset = _last_row_offset(path)
    return None if offset == 0 else _parse_row(path, offset)[0]


def check_file(path: Path) -> str:
    """Stream one CSV of the store: UTF-8 without BOM, the contract's header, then rows of the contract's
    width sorted by a YYYY-MM-DD run_date, ending with a newline. Returns the last row's run_date ("" when it has
    no row); raises StoreSchemaError naming file:line."""
    path = Path(path)
    if _size(path) == 0:
        return ""
    _check_edges(path)
    with _open_bytes(path) as f:
        header_end = len(f.readline())
    return _check_rows(path, header_end, "")


def _check_rows(path: Path, start: int, previous: str) -> str:
    """`check_file`'s rules for the rows from byte `start` (where a row starts) to the end, their dates not before
    `previous` (the run_date of the row before them); returns the last run_date."""
    width = _width(path)

    def line() -> int:  # the line of the row read last, counted only for a message
        return _line_at(path, start) - 1 + reader.line_num

    raw = _open_bytes(path)
    raw.seek(start)
    try:
        with io.TextIOWrapper(raw, encoding="utf-8", newline="") as f:
            reader = csv.reader(f, strict=True)
            for row in reader:
                if len(row) != width:
                    raise StoreSchemaError(f"{path}:{line()}: {len(row)} fields, the contract has {width}")
                if row[0] == previous:  # most rows: a date checked on its first row
                    continue
                if not _is_date(row[0]):
                    raise StoreSchemaError(f"{path}:{line()}: run_date {row[0]!r} is not a date (YYYY-MM-DD)")
                if row[0] < previous:
                    raise StoreSchemaError(f"{path}:{line()}: run_date {row[0]!r} after {previous!r}: "
                                           "rows must be sorted by run_date")
                previous = row[0]
    except UnicodeDecodeError as exc:
        raise StoreSchemaError(f"{path}:{_bad_utf8_line(path)}: not UTF-8 text ({exc.reason})") from None
    except csv.Error as exc:
        raise StoreSchemaError(f"{path}:{line()}: not valid CSV ({exc})") from None
    _last_row_offset(path, start)  # a row cut inside its last field can still have the right width
    return previous


def _bad_utf8_line(path: Path) -> int:
    with _open_bytes(path) as f:
        for lineno, line in enumerate(f, start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                return lineno
    return 0


def validate(data_dir: Path, accept_edits: bool = False) -> None:
    """Check everything of the store a run reads, before it writes anything: the directory, every CSV
    (`check_file`, unless it is byte for byte as the last finished run sealed it) and the reference date; then that
    no file changed since the seal (`edits`: StoreEditedError naming each file and its dates, unless
    `accept_edits`). Streams each file once; raises StoreSchemaError."""
    data_dir = Path(data_dir)
    if data_dir.exists() and not data_dir.is_dir():
        raise StoreSchemaError(f"{data_dir}: the data directory is a file, not a directory")
    above = next((p for p in data_dir.absolute().parents if p.exists() and not p.is_dir()), None)
    if above is not None:
        raise StoreSchemaError(f"{data_dir}: the data directory is under {above}, a file, not a directory")
    sealed = (_sealed(data_dir) if memo.enabled() else None) or {}
    for name in SCHEMAS:
        path = data_dir / name
        if path.is_dir():
            raise StoreSchemaError(f"{path}: a directory where the store keeps a CSV file")
        if path.exists() and (name not in sealed or _digest(path) != sealed[name]["sha256"]):  # as sealed: checked
            check_file(path)
    read_reference(data_dir)
    if not accept_edits and not unfinished(data_dir):  # a killed run's writes are not edits: recover rolls back
        refuse_edits(data_dir, edits(data_dir))


def _frame(rows: pd.DataFrame | Sequence[dict], name: str) -> pd.DataFrame:
    rows = rows if isinstance(rows, pd.DataFrame) else list(rows)
    frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows, columns=None if rows else SCHEMAS[name])
    columns = SCHEMAS[name]
    missing = [c for c in columns if c not in frame.columns]
    if missing or len(frame.columns) != len(columns):
        extra = [c for c in frame.columns if c not in columns]
        raise StoreSchemaError(f"{name}: rows do not match the contract (missing: {missing}, extra: {extra})")
    return _redacted(_without_carriage_returns(frame.loc[:, list(columns)]))


def _redacted(frame: pd.DataFrame) -> pd.DataFrame:
    """The free-text columns with their secrets masked: every CSV row is written through here."""
    for column in UPSTREAM_TEXT_COLUMNS.intersection(frame.columns):
        frame[column] = frame[column].map(lambda v: redact(v) if isinstance(v, str) else v)
    return frame


def _without_carriage_returns(frame: pd.DataFrame) -> pd.DataFrame:
    """Text with a carriage return stored with newlines instead: pandas writes a lone CR unquoted, and its
    reader ends a row there."""
    for column in frame.columns:
        if frame[column].dtype != object:
            continue
        has_cr = frame[column].map(lambda v: isinstance(v, str) and "\r" in v)
        if has_cr.any():
            frame[column] = frame[column].where(~has_cr, frame[column][has_cr].str.replace("\r\n?", "\n", regex=True))
    return frame


def atomic_write(path: Path, write) -> None:
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
    _fsync_dir(path.parent)


def replace_date(data_dir: Path, name: str, run_date: date | str, rows: pd.DataFrame | Sequence[dict]) -> None:
    """Make `rows` the file's rows for `run_date`: earlier rows of that date are dropped.

    The common case (a date after every stored date) appends the rows in place, O(rows of that date), under
    a rollback journal (`_append`); otherwise the file is re-read, filtered and rewritten sorted by date, and
    replaces the old one by an atomic rename. Either way a crash leaves the previous rows whole and readers
    never see a partial row. A file of an earlier contract (`is_legacy`) is first upgraded (`upgrade_file`).
    """
    day = str(run_date)
    path = Path(data_dir) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    _roll_back(path)  # an append a killed writer left unfinished, before reading the header
    upgrade_file(path)  # a file of an earlier contract first gains the columns the rows have
    _put(path, day, _body(name, day, rows))


def _put(path: Path, day: str, body: bytes) -> None:
    """Make `body` (CSV lines of run date `day`, or nothing) the file's rows of `day`, as `replace_date` says
    (the rows as they are: a run journal puts back rows of an earlier contract into the file as it was)."""
    _roll_back(path)  # an append a killed writer left unfinished
    if path.exists() and path.stat().st_size > 0:
        _check_edges(path)
        last = _last_run_date(path)
        if last is None or last < day:
            _append(path, body)
            return
        # The other dates' rows are copied as stored, byte for byte: no parsing, no formatting again.
        old = path.read_bytes()
        start, end = _date_span(old, day)
        atomic_write(path, lambda f: (f.write(old[:start]), f.write(body), f.write(old[end:])))
        return
    header = (",".join(SCHEMAS[path.name]) + "\n").encode()
    atomic_write(path, lambda f: (f.write(header), f.write(body)))


def upgrade_file(path: Path) -> bool:
    """Rewrite a file of an earlier contract (`is_legacy`) with the columns added since, empty in every row (they
    are appended at the end: each row gains as many empty fields), atomically. True when it did."""
    path = Path(path)
    if not is_legacy(path):
        return False
    added = b"," * len(ADDED_COLUMNS[path.name])
    rows = [_header_line(SCHEMAS[path.name]),
            *(row[:-1] + added + b"\n" for row in _rows_after_header(path.read_bytes()))]
    atomic_write(path, lambda f: f.writelines(rows))
    log.info("%s: upgraded to the current contract (added %s, empty in the earlier rows)", path,
             ", ".join(ADDED_COLUMNS[path.name]))
    return True


def _as_legacy(path: Path) -> bytes | None:
    """What an upgraded file (`upgrade_file`) held before the upgrade, when every row's added fields are empty
    (None otherwise): how the seal recognises an upgrade killed before its seal."""
    legacy = _legacy_columns(path.name)
    if legacy is None:
        return None
    data = path.read_bytes()
    if data[:_row_end(data, 0)] != _header_line(SCHEMAS[path.name]):
        return None
    tail = b"," * len(ADDED_COLUMNS[path.name]) + b"\n"
    rows = list(_rows_after_header(data))
    if not all(row.endswith(tail) for row in rows):
        return None
    return b"".join([_header_line(legacy), *(row[:-len(tail)] + b"\n" for row in rows)])


def _header_line(columns: Sequence[str]) -> bytes:
    return (",".join(columns) + "\n").encode()


def upgrade(data_dir: Path) -> list[str]:
    """Upgrade every file of an earlier contract in the store (`upgrade_file`); a note per file upgraded."""
    return [f"{name}: upgraded to the current contract (added {', '.join(ADDED_COLUMNS[name])})"
            for name in ADDED_COLUMNS if upgrade_file(Path(data_dir) / name)]


def _body(name: str, day: str, rows: pd.DataFrame | Sequence[dict]) -> bytes:
    """The CSV lines (no header) of `rows`, every one of which must have run_date `day`."""
    new = _frame(rows, name)
    if len(new) and not (new[RUN_DATE].astype(str) == day).all():
        raise ValueError(f"{name}: every row must have run_date {day}")
    return new.to_csv(index=False, header=False, lineterminator="\n").encode()


def with_rows(frame: pd.DataFrame, name: str, run_date: date | str, rows: pd.DataFrame | Sequence[dict]
              ) -> pd.DataFrame:
    """What `read` gives after `replace_date(data_dir, name, run_date, rows)`, from what it gave before (`frame`),
    without reading the file again: the rows go through the same CSV text and typed parsing."""
    day = pd.Timestamp(str(run_date))
    body = _body(name, str(run_date), rows)
    new = _parse(io.BytesIO(body), name, header=False) if body else _empty(name)
    kept = frame[frame[RUN_DATE] != day]
    if kept.empty or new.empty:  # (concatenating an empty frame warns in pandas)
        return (new if kept.empty else kept).reset_index(drop=True)
    merged = pd.concat([kept, new], ignore_index=True)
    # As stored, rows are sorted by date: after the last date (a day's run) the rows go at the end, else in place.
    return merged if kept[RUN_DATE].iloc[-1] < day else merged.sort_values(RUN_DATE, kind="stable", ignore_index=True)


def _journal(path: Path) -> Path:
    return path.with_name(f".{path.name}.append")


def _committed(path: Path) -> int | None:
    """The file's length before an append in progress (or killed), from its journal; None when there is none.
    An unreadable journal was being written when its writer died, before the append began: it counts for none."""
    try:
        return int(_journal(path).read_bytes())
    except (FileNotFoundError, ValueError):
        return None


def _size(path: Path) -> int:
    committed = _committed(path)
    return path.stat().st_size if committed is None else committed


def _open_bytes(path: Path) -> io.BufferedIOBase:
    """The file's committed bytes: all of it, or while an append is pending only the rows before it."""
    committed = _committed(path)
    if committed is None:
        return path.open("rb")
    with path.open("rb") as f:
        return io.BytesIO(f.read(committed))


def _fsync_dir(folder: Path) -> None:
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _append(path: Path, body: bytes) -> None:
    """Append `body` in place: first a journal holding the current length (written and synced atomically),
    then the rows (synced), then the journal is removed. Until then readers see only the old length, and
    `_roll_back` (every run's `recover`, and every write) cuts whatever a killed append left."""
    journal = _journal(path)
    size = path.stat().st_size
    atomic_write(journal, lambda f: f.write(str(size).encode()))
    with path.open("r+b") as f:
        f.seek(size)
        f.write(body)
        f.flush()
        os.fsync(f.fileno())
    journal.unlink()
    _fsync_dir(path.parent)


def _roll_back(path: Path) -> bool:
    """Cut the file back to the length its append journal records and remove the journal; True if one was there."""
    journal = _journal(path)
    if not journal.exists():
        return False
    committed = _committed(path)
    if committed is not None and path.exists() and path.stat().st_size > committed:
        with path.open("r+b") as f:
            f.truncate(committed)
            os.fsync(f.fileno())
        log.warning("%s: cut the rows of an append that did not finish (a killed run)", path)
    journal.unlink()
    _fsync_dir(path.parent)
    return True


def roll_back_appends(data_dir: Path) -> list[Path]:
    """`_roll_back` every CSV of the store; returns the files that had an unfinished append."""
    return [Path(data_dir) / name for name in SCHEMAS if _roll_back(Path(data_dir) / name)]


def write_table(data_dir: Path, name: str, rows: pd.DataFrame | Sequence[dict]) -> None:
    """Replace a whole CSV at once, atomically (bulk imports, benchmarks and the files of WHOLE_PARTS; the job's
    per-date files use `replace_date`)."""
    path = Path(data_dir) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    frame = _frame(rows, name).sort_values(RUN_DATE, kind="stable")
    body = frame.to_csv(index=False, lineterminator="\n").encode()
    atomic_write(path, lambda f: f.write(body))


def add_rows(data_dir: Path, name: str, rows: pd.DataFrame | Sequence[dict]) -> None:
    """Add `rows` after the file's rows, whose bytes are kept as they are (an append-only file of WHOLE_PARTS), by
    an atomic rewrite, never in place: a run journal's hard link keeps the file as it was. The rows' run dates
    must not be before the file's last one (the store keeps rows sorted by date)."""
    path = Path(data_dir) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    frame = _frame(rows, name)
    if frame.empty:
        return
    first = min(str(d)[:10] for d in frame[RUN_DATE])
    old = path.read_bytes() if path.exists() and _size(path) else b""
    if old:
        _check_edges(path)
        last = _last_run_date(path)
        if last is not None and first < last:
            raise ValueError(f"{name}: rows of {first} cannot follow the file's last date, {last}")
    body = frame.to_csv(index=False, header=not old, lineterminator="\n").encode()
    atomic_write(path, lambda f: (f.write(old), f.write(body)))


def read(data_dir: Path, name: str) -> pd.DataFrame:
    """A typed frame of one CSV; an absent file gives an empty frame with the contract's columns."""
    path = Path(data_dir) / name
    if not path.exists() or _size(path) == 0:
        return _empty(name)
    _check_edges(path)
    try:
        with _open_bytes(path) as f:
            return _parse(f, name)
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError):
        check_file(path)  # names the file and line
        raise  # a file the check passes and pandas cannot read is a bug: let it show


def _parse(f: io.BufferedIOBase, name: str, header: bool = True) -> pd.DataFrame:
    """The typed frame of CSV text of file `name` (`header`: its first line is the header, else rows only)."""
    columns = SCHEMAS[name]
    frame = pd.read_csv(f, header=0 if header else None, names=None if header else list(columns),
                        dtype={c: str for c in columns if c in TEXT_COLUMNS or c == RUN_DATE}, keep_default_na=False,
                        na_values={c: ["", "nan", "NaN"] for c in columns if c not in TEXT_COLUMNS})
    frame[RUN_DATE] = pd.to_datetime(frame[RUN_DATE], format="%Y-%m-%d")
    if list(frame.columns) != list(columns):  # a file of an earlier contract: the added columns are empty
        frame = frame.reindex(columns=list(columns))
    for c in columns:
        if c == RUN_DATE:
            continue
        if c in INT_COLUMNS:
            frame[c] = pd.to_numeric(frame[c], errors="coerce").astype("Int64")
        elif c not in TEXT_COLUMNS:
            frame[c] = pd.to_numeric(frame[c], errors="coerce").astype("float64")
    return _redacted(frame)  # a history written before redaction is shown masked too (dashboard, report)


def _empty(name: str) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=_dtype(c)) for c in SCHEMAS[name]})


def as_days(column: pd.Series) -> pd.Series:
    """A run_date column as datetimes (as `read` gives it; converted only when it is not already)."""
    return column if pd.api.types.is_datetime64_any_dtype(column) else pd.to_datetime(column)


def iso_day(day: date | pd.Timestamp) -> str:
    """A day as the CSVs and the messages write it: YYYY-MM-DD."""
    return f"{day:%Y-%m-%d}"


def _dtype(column: str) -> str:
    if column == RUN_DATE:
        return "datetime64[ns]"
    return "object" if column in TEXT_COLUMNS else ("Int64" if column in INT_COLUMNS else "float64")


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
        return date.fromisoformat(jsonl.loads_bounded(path.read_text(encoding="utf-8"), path)["reference_date"])
    except (ValueError, KeyError, TypeError) as exc:
        raise StoreSchemaError(f"{path}: expected {{\"reference_date\": \"YYYY-MM-DD\"}}: {exc}") from None


def write_reference(data_dir: Path, day: date) -> None:
    body = (json.dumps({"reference_date": day.isoformat()}) + "\n").encode()
    atomic_write(Path(data_dir) / REFERENCE_FILE, lambda f: f.write(body))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale_temporaries(data_dir: Path) -> list[Path]:
    """Delete the temporary files of writers that were killed (their process is gone), in the data directory and
    its quarantine; returns them."""
    stale = [p for folder in (Path(data_dir), Path(data_dir) / QUARANTINE_DIR) for p in folder.glob(".*.tmp")
             if (m := _TEMPORARY.fullmatch(p.name)) and not _alive(int(m["pid"]))]
    for path in stale:
        path.unlink(missing_ok=True)
        log.warning("%s: removed the temporary file of a killed run", path)
    return stale


def _dates(path: Path) -> set[str]:
    """The run dates of a (checked) file's rows, each date's rows skipped row by row without parsing them."""
    if not path.exists() or _size(path) == 0:
        return set()
    with _open_bytes(path) as f:
        data = f.read()
    dates, start = set(), _row_end(data, 0)
    while start < len(data):
        key = data[start:data.index(b",", start) + 1]  # "YYYY-MM-DD,"
        dates.add(key[:-1].decode())
        while data.startswith(key, start):
            start = _row_end(data, start)
    return dates


def _count_rows(data: bytes) -> int:
    """The CSV rows in `data` (whole rows, no header)."""
    rows, start = 0, 0
    while start < len(data):
        start, rows = _row_end(data, start), rows + 1
    return rows


def quarantine_orphans(data_dir: Path) -> list[str]:
    """Move the rows of every date that has no runs.csv row out of the files of RUN_PARTS, into
    quarantine/<file>.<UTC time>.csv beside them (the header, then the rows byte for byte), and return a note per
    file, each logged as a warning. Called when no run journal accounts for them: a hand edit (a runs.csv row
    deleted, rows added for a date no run made), which recover cannot prove incomplete, so it never drops them.
    The copy is synced before the rows leave the file: a kill in between leaves them in both, never in neither."""
    data_dir = Path(data_dir)
    complete = _dates(data_dir / RUNS)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    notes = []
    for name in RUN_PARTS:
        path = data_dir / name
        orphans = sorted(_dates(path) - complete)
        if not orphans:
            continue
        with _open_bytes(path) as f:
            data = f.read()
        spans = [_date_span(data, day) for day in orphans]  # in file order: the rows are sorted by date
        moved = b"".join(data[a:b] for a, b in spans)
        kept = b"".join(data[a:b] for a, b in zip([0] + [b for _, b in spans], [a for a, _ in spans] + [len(data)]))
        folder = data_dir / QUARANTINE_DIR
        folder.mkdir(exist_ok=True)
        target = folder / f"{path.stem}.{stamp}.csv"
        for n in range(2, 1000):  # a name no earlier quarantine holds (two recovers within a second)
            if not target.exists():
                break
            target = folder / f"{path.stem}.{stamp}-{n}.csv"
        copy = data[:_row_end(data, 0)] + moved  # the header, then the rows
        atomic_write(target, lambda f, rows=copy: f.write(rows))
        atomic_write(path, lambda f, rows=kept: f.write(rows))
        note = (f"{name}: {_count_rows(moved)} rows of {', '.join(orphans)} (no {RUNS} row, no run journal) moved to "
                f"{QUARANTINE_DIR}/{target.name}")
        log.warning("%s: %s; put them back with their runs.csv rows, or re-run those dates", data_dir, note)
        notes.append(note)
    return notes


def recover(data_dir: Path, accept_edits: bool = False) -> list[str]:
    """What a run does first, holding the lock: clear what killed runs left (temporaries, unfinished appends, the
    writes of a run that did not finish, which its journal rolls back), refuse a store edited since the seal
    (`edits`; StoreEditedError before anything more is written, unless `accept_edits`) and move to quarantine the
    rows of dates without a runs.csv row (`quarantine_orphans`). A store whose files are all as the last finished
    run sealed them has no such date. Returns a note per thing done, for the run's events."""
    data_dir = Path(data_dir)
    remove_stale_temporaries(data_dir)
    roll_back_appends(data_dir)
    record, _ = _seal_record(data_dir)
    journal = data_dir / RUN_JOURNAL
    # Killed after its seal, before removing its journal: the seal is of the run's writes, so compare before the
    # roll back, and seal what the roll back restores (driftwatch's own bytes) after it.
    sealed_run = journal.exists() and record is not None and record.get("journal") == _digest(journal)
    found = edits(data_dir) if sealed_run else []
    if found and not accept_edits:
        refuse_edits(data_dir, found)
    notes = [note] if (note := _roll_back_run(data_dir)) else []
    (data_dir / _JOURNAL_ANSWERS).unlink(missing_ok=True)  # the copies of a journal that was never written
    for name in WHOLE_PARTS:
        _whole_copy(data_dir, name).unlink(missing_ok=True)
    if sealed_run and not found:
        seal(data_dir)
    elif not sealed_run:
        found = edits(data_dir)
        if found and not accept_edits:
            refuse_edits(data_dir, found)
    if record is None and _size_or_zero(data_dir / RUNS) > 0:
        log.warning("%s: the store has no seal (a first run of this version, or %s/ removed): edits made outside "
                    "driftwatch before this run cannot be found", data_dir, memo.MEMO_DIR)
    notes += [f"accepted an edit: {note}" for note in found] + list((record or {}).get("accepted", []))
    for note in found:
        log.warning("%s: accepted an edit made outside driftwatch: %s", data_dir, note)
    sealed = _sealed(data_dir)
    if sealed is None or not _as_sealed(data_dir, sealed):
        notes += quarantine_orphans(data_dir)
    return notes


def _size_or_zero(path: Path) -> int:
    return _size(path) if path.exists() else 0


def unfinished(data_dir: Path) -> bool:
    """A run journal or an append journal is there: a run did not finish, and its writes are not edits."""
    return (data_dir / RUN_JOURNAL).exists() or any(_journal(data_dir / name).exists() for name in SCHEMAS)


def accept_edits(data_dir: Path) -> list[str]:
    """`driftwatch accept-edits`: trust the store as it is now. Holding the run lock: every changed file checked
    (`validate`, StoreSchemaError naming file:line), what `recover` does (a killed run rolled back, rows without a
    runs.csv row quarantined), then a new seal, which keeps the notes for the next run's events. Returns the
    notes (empty: nothing was edited)."""
    data_dir = Path(data_dir)
    with run_lock(data_dir):
        validate(data_dir, accept_edits=True)
        notes = recover(data_dir, accept_edits=True)
        seal(data_dir, accepted=notes)
    return notes


# --- the run journal: a run's writes, all or nothing ----------------------------------------------------------

RUN_JOURNAL = ".run-journal.json"  # the date a run is writing and that date's rows before it (see `run_journal`)
_JOURNAL_ANSWERS = ".run-journal.answers.jsonl"  # the date's answers file before the run (a hard link)
_JOURNAL_FORMAT = 1


@contextmanager
def run_journal(data_dir: Path, run_date: date | str, accept_edits: bool = False) -> Iterator[list[str]]:
    """One run's writes of `run_date`, all or nothing. On entry (holding the run lock): `recover` (which refuses a
    store edited since the seal unless `accept_edits`), whose notes
    are yielded for the run's events; then the journal, written and synced before the run's first write: the
    date, and each CSV's rows of that date as they are (none for a new date: after recover only a date with a
    runs.csv row has rows), with the date's answers file kept as a hard link. On a normal exit the store is sealed
    (`seal`, which checks what the run wrote and names the journal), then the journal is removed. An exception
    rolls the date back at
    once; a killed run leaves the journal, and the next run's `recover` rolls back: every file then holds the
    date's rows as before the run."""
    data_dir = Path(data_dir)
    notes = recover(data_dir, accept_edits)
    upgraded = upgrade(data_dir)
    if upgraded:  # sealed at once: the journal below holds rows of the upgraded files
        seal(data_dir)
        notes += upgraded
    _begin_run(data_dir, str(run_date))
    try:
        yield notes
        seal(data_dir, journal=_digest(data_dir / RUN_JOURNAL))
    except BaseException:
        try:
            _roll_back_run(data_dir)
        except Exception:  # the journal stays: the next run's recover rolls back
            log.exception("%s: could not roll back the run of %s; the next run will", data_dir, run_date)
        raise
    (data_dir / RUN_JOURNAL).unlink()
    _fsync_dir(data_dir)
    (data_dir / _JOURNAL_ANSWERS).unlink(missing_ok=True)
    for name in WHOLE_PARTS:
        _whole_copy(data_dir, name).unlink(missing_ok=True)


def _records(data_dir: Path, day: str) -> Path:
    """The date's answers file (pipeline/answers/stored.py writes it, atomically)."""
    return data_dir / ANSWERS_DIR / f"{day}.jsonl"


def _whole_copy(data_dir: Path, name: str) -> Path:
    """Where the run journal keeps a file of WHOLE_PARTS as it was before the run."""
    return data_dir / f".run-journal.{name}"


def _keep(source: Path, backup: Path) -> None:
    """`backup` becomes the bytes of `source` as they are: a hard link (every write of `source` replaces it by a
    rename, so the link keeps the old file), or a copy on a file system without hard links."""
    backup.unlink(missing_ok=True)
    try:
        os.link(source, backup)
    except OSError:
        shutil.copyfile(source, backup)


def _begin_run(data_dir: Path, day: str) -> None:
    """Write the journal of a run of `day` (see `run_journal`), after keeping the date's answers file and the files
    of WHOLE_PARTS beside it."""
    records, backup = _records(data_dir, day), data_dir / _JOURNAL_ANSWERS
    answers = records.exists()
    if answers:  # before the journal, so that a journal always has its copy
        _keep(records, backup)  # the answers file is replaced by a rename: the link keeps the old one
    whole = {}
    for name in WHOLE_PARTS:
        whole[name] = (data_dir / name).exists()
        if whole[name]:
            _keep(data_dir / name, _whole_copy(data_dir, name))
    stored = day in _dates(data_dir / RUNS)
    files = {}
    for name in (*RUN_PARTS, RUNS):
        path = data_dir / name
        if not path.exists():
            files[name] = None
        elif not stored:
            files[name] = ""
        else:
            with _open_bytes(path) as f:
                data = f.read()
            start, end = _date_span(data, day)
            files[name] = data[start:end].decode("utf-8", "surrogateescape")  # any bytes, back as they were
    body = json.dumps({"format": _JOURNAL_FORMAT, "run_date": day, "files": files, "answers": answers,
                       "whole": whole}).encode()
    atomic_write(data_dir / RUN_JOURNAL, lambda f: f.write(body))


def _read_journal(path: Path) -> tuple[str, dict[str, str | None], bool, dict[str, bool]]:
    """The run date, each file's old rows (None: the file did not exist), whether an answers file existed and
    whether each file of WHOLE_PARTS existed (a journal written before WHOLE_PARTS: none kept)."""
    why = ""
    try:
        value = jsonl.loads_bounded(path.read_text(encoding="utf-8"), path)
    except (OSError, ValueError) as exc:
        value, why = None, str(exc)
    ok = (isinstance(value, dict) and value.get("format") == _JOURNAL_FORMAT
          and isinstance(value.get("run_date"), str) and _is_date(value["run_date"])
          and isinstance(value.get("files"), dict) and isinstance(value.get("answers"), bool)
          and all(name in SCHEMAS and (rows is None or isinstance(rows, str)) for name, rows in value["files"].items())
          and isinstance(value.get("whole", {}), dict)
          and all(name in WHOLE_PARTS and isinstance(was, bool) for name, was in value.get("whole", {}).items()))
    if not ok:
        raise StoreSchemaError(
            f"{path}: not a driftwatch run journal{f' ({why})' if why else ''}. It holds the rows a run that did not "
            "finish replaced, to put them back: restore it from a backup, or delete it to keep what that run wrote")
    return value["run_date"], value["files"], value["answers"], value.get("whole", {})


def _roll_back_run(data_dir: Path) -> str | None:
    """Put back what the journal of a run that did not finish holds, then remove the journal; a note of it, or None
    when there is no journal. Each step puts the old bytes back whatever the file holds, so a roll back that is
    itself killed is done again by the next recover."""
    path = data_dir / RUN_JOURNAL
    if not path.exists():
        return None
    day, files, answers, whole = _read_journal(path)
    for name, rows in files.items():
        target = data_dir / name
        if rows is None:  # the run made the file
            target.unlink(missing_ok=True)
        elif target.exists():
            _put(target, day, rows.encode("utf-8", "surrogateescape"))
    records, backup = _records(data_dir, day), data_dir / _JOURNAL_ANSWERS
    if not answers:
        records.unlink(missing_ok=True)
    elif backup.exists():  # (else an earlier roll back already put it back)
        os.replace(backup, records)
    for name, existed in whole.items():
        target, kept = data_dir / name, _whole_copy(data_dir, name)
        if not existed:  # the run made the file
            target.unlink(missing_ok=True)
        elif kept.exists():  # (else an earlier roll back already put it back)
            os.replace(kept, target)
            kept.unlink(missing_ok=True)  # (a rename onto a link of the same file leaves both names)
    path.unlink()
    _fsync_dir(data_dir)
    note = f"{day}: rolled back a run that did not finish (every file holds its rows of {day} as before it)"
    log.warning("%s: %s", data_dir, note)
    return note


# --- the seal: the store as the last finished run left it ----------------------------------------------------

SEAL = "store"  # the memo (pipeline/memo.py) of each CSV's digest, size, last date and date digests, authenticated
SEAL_KEY = "seal.key"  # beside it: the random secret the seal's MAC is keyed with (made at the first seal, 0600)
_SHOWN_DATES = 6  # date ranges named per file in an edit note; the rest are counted


def _fingerprint(path: Path, prefix: int | None = None) -> tuple[str, str | None]:
    """The SHA-256 of the file's committed bytes (an append in progress is not yet the file's) and, in the same
    read, of its first `prefix` bytes (None when it is shorter or `prefix` is None)."""
    whole, head, done = hashlib.sha256(), None, 0
    with _open_bytes(path) as f:
        while block := f.read(_BLOCK):
            cut = prefix - done if prefix is not None and head is None and done + len(block) >= prefix else None
            if cut is None:
                whole.update(block)
            else:
                whole.update(block[:cut])
                head = whole.hexdigest()
                whole.update(block[cut:])
            done += len(block)
    return whole.hexdigest(), head


def _digest(path: Path) -> str:
    return _fingerprint(path)[0]


def _date_digests(path: Path, start: int | None = None) -> dict[str, str]:
    """A short digest of each run date's rows (their bytes) in a checked file, from byte `start` (where a row
    starts; None: after the header): what lets an edit be named by date, 16 hex digits a date."""
    if _size(path) == 0:
        return {}
    with _open_bytes(path) as f:
        data = f.read()
    digests, at = {}, _row_end(data, 0) if start is None else start
    while at < len(data):
        key, first = data[at:data.index(b",", at) + 1], at
        while data.startswith(key, at):
            at = _row_end(data, at)
        digests[key[:-1].decode()] = hashlib.blake2b(data[first:at], digest_size=8).hexdigest()
    return digests


def _as_sealed(data_dir: Path, sealed: dict[str, dict]) -> bool:
    """Every CSV byte for byte as sealed (and no other)."""
    present = {name for name in SCHEMAS if (Path(data_dir) / name).exists()}
    return present == set(sealed) and all(_digest(Path(data_dir) / name) == sealed[name]["sha256"] for name in present)


def _is_seal_entry(entry: object) -> bool:
    return (isinstance(entry, dict) and isinstance(entry.get("sha256"), str) and isinstance(entry.get("last"), str)
            and isinstance(entry.get("size"), int) and entry["size"] >= 0 and isinstance(entry.get("dates"), dict))


def _secret(data_dir: Path, create: bool = False) -> bytes | None:
    """The seal's key: random bytes in memo/seal.key, readable by the store's owner only (None when absent)."""
    path = Path(data_dir) / memo.MEMO_DIR / SEAL_KEY
    try:
        return path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):  # (a data directory under a file is refused by `validate`)
        if not create:
            return None
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(secrets.token_hex(32).encode())
        f.flush()
        os.fsync(f.fileno())
    return path.read_bytes()


def _mac(secret: bytes, body: dict) -> str:
    return hmac.new(secret, json.dumps(body, sort_keys=True).encode(), hashlib.sha256).hexdigest()


def _seal_record(data_dir: Path) -> tuple[dict | None, str | None]:
    """The last seal, authenticated: (its body, None); (None, why) when a seal or its key is there and they do not
    match (a seal edited by hand, or one of them removed); (None, None) when the store was never sealed with a key
    (a new store, or one sealed by a driftwatch before the key)."""
    secret, kept = _secret(data_dir), memo.load(data_dir, SEAL)
    if kept is None:
        return (None, None) if secret is None else (None, f"{memo.MEMO_DIR}/{SEAL}.json is missing or unreadable")
    value = kept[1]
    if secret is None:
        return (None, None) if "mac" not in value else (None, f"{memo.MEMO_DIR}/{SEAL_KEY} is missing")
    body = {k: v for k, v in value.items() if k != "mac"}
    files = body.get("files")
    if (not isinstance(value.get("mac"), str) or not hmac.compare_digest(value["mac"], _mac(secret, body))
            or not isinstance(files, dict) or not all(n in SCHEMAS and _is_seal_entry(e) for n, e in files.items())):
        return None, f"{memo.MEMO_DIR}/{SEAL}.json does not authenticate (edited by hand?)"
    return body, None


def _sealed(data_dir: Path) -> dict[str, dict] | None:
    """Each CSV's seal (sha256, size, last run date, date digests) when the last run that finished sealed the store
    with this code (its checks are this code's), or None."""
    record, _ = _seal_record(data_dir)
    return record["files"] if record is not None and record.get("code") == memo.code_digest() else None


def _days(days: Sequence[str]) -> str:
    """Sorted dates as ranges of consecutive days ("2026-11-02..2026-11-04, 2026-11-07"), the first few named."""
    ranges: list[list[date]] = []
    for day in map(date.fromisoformat, days):
        if ranges and (day - ranges[-1][1]).days == 1:
            ranges[-1][1] = day
        else:
            ranges.append([day, day])
    shown = [f"{a}..{b}" if a != b else str(a) for a, b in ranges[:_SHOWN_DATES]]
    more = f" and {len(ranges) - _SHOWN_DATES} more ranges" if len(ranges) > _SHOWN_DATES else ""
    return ", ".join(shown) + more


def edits(data_dir: Path) -> list[str]:
    """What changed in the store since the last finished run sealed it, one note per file naming its dates:
    rows changed, removed or added, a file removed or added; or one note that the seal does not authenticate.
    Empty when nothing changed, or when the store has no seal to compare with. The files are those `validate`
    checked (a row without a field separator would raise ValueError)."""
    data_dir = Path(data_dir)
    record, problem = _seal_record(data_dir)
    if problem is not None:
        return [f"the seal cannot be trusted: {problem}; the files cannot be compared with what the last run left"]
    if record is None:
        return []
    notes = []
    for name in SCHEMAS:
        path, entry = data_dir / name, record["files"].get(name)
        if entry is None:
            if path.exists():
                notes.append(f"{name}: added (no run wrote it){_dated(_date_digests(path), 'holding rows of')}")
        elif not path.exists():
            notes.append(f"{name}: removed{_dated(entry['dates'], 'it held rows of')}")
        elif _digest(path) != entry["sha256"]:
            legacy = _as_legacy(path)
            if legacy is not None and hashlib.sha256(legacy).hexdigest() == entry["sha256"]:
                continue  # an upgrade (`upgrade_file`) of the sealed bytes, killed before its seal
            now, then = _date_digests(path), entry["dates"]
            kinds = (("changed", [d for d in now if d in then and now[d] != then[d]]),
                     ("removed", [d for d in then if d not in now]), ("added", [d for d in now if d not in then]))
            said = [f"rows {kind} on {_days(sorted(days))}" for kind, days in kinds if days]
            notes.append(f"{name}: " + ("; ".join(said) if said else "changed outside its rows"))
    return notes


def _dated(dates: dict, how: str) -> str:
    return f", {how} {_days(sorted(dates))}" if dates else ""


def refuse_edits(data_dir: Path, notes: Sequence[str]) -> None:
    """StoreEditedError naming every edit and the way to accept them, logged too; nothing when `notes` is empty."""
    if not notes:
        return
    for note in notes:
        log.error("%s: edited outside driftwatch: %s", data_dir, note)
    raise StoreEditedError(
        f"{data_dir}: the store changed since the last finished run sealed it (edited outside driftwatch): "
        f"{' | '.join(notes)}. Nothing was written. Put the files back, or trust them as they are with "
        "`driftwatch accept-edits` (the run's --config or --data-dir) or `driftwatch run --accept-edits`")


def _checked(path: Path, before: dict | None) -> dict:
    """The seal of one file, checked: as sealed (`before`), nothing to check; grown from the sealed bytes (an
    append: its first `before["size"]` bytes hash to the seal), only the new rows, after the sealed last date;
    otherwise the whole file (`check_file`). Raises StoreSchemaError naming file:line."""
    size = _size(path)
    whole, head = _fingerprint(path, before["size"] if before else None)
    if before is not None and whole == before["sha256"]:
        return before
    if before is not None and head == before["sha256"] and size > before["size"]:
        last = _check_rows(path, before["size"], before["last"])
        added = _date_digests(path, before["size"])
        # Rows of the sealed last date appended after it: that date's digest covers both parts, so read it all.
        dates = {**before["dates"], **added} if before["last"] not in added else _date_digests(path)
    else:
        last = check_file(path)
        dates = _date_digests(path)
    return {"sha256": whole, "size": size, "last": last, "dates": dates}


def seal(data_dir: Path, journal: str | None = None, accepted: Sequence[str] = ()) -> None:
    """Check what changed since the last seal and note each CSV's digest, size, last date and date digests: the
    store as a finished run leaves it, checked and complete, with a MAC keyed by the store's secret (a seal edited
    by hand does not authenticate). `journal`: the digest of the run journal of the run sealing (see `recover`);
    `accepted`: edits the user accepted, for the next run's events. A file that fails its check raises
    StoreSchemaError (naming file:line) and nothing is sealed. Until a file changes, `validate` does not check it
    again and `recover` finds no date to move (what costs a no-op day most when the history is long)."""
    data_dir = Path(data_dir)
    before = _sealed(data_dir) or {}
    files = {name: _checked(data_dir / name, before.get(name)) for name in SCHEMAS if (data_dir / name).exists()}
    body = {"files": files, "code": memo.code_digest(), "journal": journal, "accepted": list(accepted)}
    memo.save(data_dir, SEAL, memo.key(kind=SEAL), {**body, "mac": _mac(_secret(data_dir, create=True), body)})


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
