"""The SQLite corpus: versioned documents with first/last seen and deletions, snapshots by date,
the embedding cache and the HTTP validators of the feeds."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path

import numpy as np

from pipeline.errors import DriftwatchError
from pipeline.sources import CACHE_KEY_PREFIX, Document, FileValidator, HttpCacheEntry, bounded_id

log = logging.getLogger(__name__)

CORPUS_FILE = "corpus.sqlite"
SCHEMA_VERSION = "1"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS documents (
    doc_id TEXT PRIMARY KEY,
    first_seen TEXT NOT NULL,          -- run date the document first appeared
    last_seen TEXT NOT NULL,           -- latest run date a feed carried it
    deleted_at TEXT,                   -- run date from which it is gone (NULL: present)
    delete_reason TEXT
);
-- One row per distinct content of a document; a version holds from valid_from until the next one.
CREATE TABLE IF NOT EXISTS versions (
    doc_id TEXT NOT NULL REFERENCES documents(doc_id),
    valid_from TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    title TEXT NOT NULL,
    text TEXT NOT NULL,
    url TEXT NOT NULL,
    published TEXT,
    source TEXT NOT NULL,
    categories TEXT NOT NULL,          -- JSON list
    PRIMARY KEY (doc_id, valid_from)
);
CREATE TABLE IF NOT EXISTS embeddings (
    model TEXT NOT NULL,
    text_hash TEXT NOT NULL,
    dim INTEGER NOT NULL,
    vector BLOB NOT NULL,              -- float32, L2-normalised
    PRIMARY KEY (model, text_hash)
);
CREATE TABLE IF NOT EXISTS http_cache (
    url TEXT PRIMARY KEY, etag TEXT, last_modified TEXT, updated_at TEXT NOT NULL
);
-- The dated files of folder sources already ingested: a file whose validator and ingest settings match,
-- ingested on or before the run date, is not parsed again (its entries are in the corpus).
CREATE TABLE IF NOT EXISTS feed_files (
    source TEXT NOT NULL,
    path TEXT NOT NULL,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    settings TEXT NOT NULL,            -- the ingest settings that filter entries (corpus.max_age_days)
    ingested_at TEXT NOT NULL,         -- the earliest run date this version was ingested on
    PRIMARY KEY (source, path)
);
-- Each document version's chunk texts under one chunking setting, so a run does not split it again.
CREATE TABLE IF NOT EXISTS chunk_cache (
    doc_id TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    settings TEXT NOT NULL,            -- the chunking settings (size, overlap)
    texts TEXT NOT NULL,               -- the chunk texts in order, joined by newlines (a chunk has none)
    PRIMARY KEY (doc_id, content_hash, settings)
);
CREATE INDEX IF NOT EXISTS documents_first_seen ON documents (first_seen);
CREATE INDEX IF NOT EXISTS versions_valid_from ON versions (valid_from);
CREATE INDEX IF NOT EXISTS documents_deleted_at ON documents (deleted_at);
-- The generation: a count of the writes that can change a snapshot (a document added, removed, first seen
-- earlier or deleted; a version added, changed or removed), by whatever writes them. A memo computed at one
-- generation still holds at the same generation when no snapshot date between lies in its range.
INSERT OR IGNORE INTO meta VALUES ('generation', '0');
""" + "".join(
    f"CREATE TRIGGER IF NOT EXISTS {table}_generation_{event.split()[0].lower()} AFTER {event} ON {table}{when}\n"
    "BEGIN UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation'; END;\n"
    for table, event, when in [
        ("documents", "INSERT", ""), ("documents", "DELETE", ""),
        ("documents", "UPDATE", "\nWHEN OLD.doc_id IS NOT NEW.doc_id OR OLD.first_seen IS NOT NEW.first_seen "
                                "OR OLD.deleted_at IS NOT NEW.deleted_at"),  # not last_seen: no snapshot shows it
        ("versions", "INSERT", ""), ("versions", "UPDATE", ""), ("versions", "DELETE", "")])

# The documents present on :day, each with its version in force that day, ordered by doc id.
_IN_FORCE = """
FROM documents d
JOIN versions v ON v.doc_id = d.doc_id{join}
WHERE d.first_seen <= :day AND (d.deleted_at IS NULL OR d.deleted_at > :day)
  AND v.valid_from = (SELECT MAX(valid_from) FROM versions
                      WHERE doc_id = d.doc_id AND valid_from <= :day)
ORDER BY d.doc_id
"""

# The version of each document in force on a date, for documents present on that date.
_SNAPSHOT = """
SELECT v.doc_id, v.title, v.text, v.url, v.published, v.source, v.categories, v.content_hash,
       d.first_seen""" + _IN_FORCE.format(join="")


# The (doc_id, content_hash, valid_from) of the version in force at :end of each document present at :end whose
# version is not the one in force at :start (new since, or changed since): only documents first seen or given a
# version in (start, end] can be such, found by the indexes on first_seen and valid_from.
_ENTERED = """
SELECT d.doc_id, v.content_hash, v.valid_from
FROM documents d
JOIN versions v ON v.doc_id = d.doc_id
WHERE d.doc_id IN (SELECT doc_id FROM documents WHERE first_seen > :start AND first_seen <= :end
                   UNION SELECT doc_id FROM versions WHERE valid_from > :start AND valid_from <= :end)
  AND d.first_seen <= :end AND (d.deleted_at IS NULL OR d.deleted_at > :end)
  AND v.valid_from = (SELECT MAX(valid_from) FROM versions WHERE doc_id = d.doc_id AND valid_from <= :end)
  AND (d.first_seen > :start OR v.content_hash IS NOT
       (SELECT content_hash FROM versions WHERE doc_id = d.doc_id AND valid_from <= :start
        ORDER BY valid_from DESC LIMIT 1))
ORDER BY d.doc_id
"""

# The (doc_id, content_hash, first_seen) of every document of the corpus on :day, ordered by doc id: what
# `_SNAPSHOT` returns, without the texts (a run whose corpus did not change needs no more).
_SNAPSHOT_KEYS = "SELECT v.doc_id, v.content_hash, d.first_seen" + _IN_FORCE.format(join="")

# `_SNAPSHOT_KEYS` with each version's date and its chunk texts from the chunk cache under :settings (NULL: not
# chunked under them yet): a run's corpus and chunks in one read, no document text read.
_SNAPSHOT_CHUNKS = "SELECT v.doc_id, v.content_hash, d.first_seen, v.valid_from, c.texts" + _IN_FORCE.format(
    join="\nLEFT JOIN chunk_cache c ON c.doc_id = v.doc_id AND c.content_hash = v.content_hash "
         "AND c.settings = :settings")

_VERSIONS = """
SELECT v.doc_id, v.title, v.text, v.url, v.published, v.source, v.categories, v.content_hash, d.first_seen,
       v.valid_from
FROM versions v JOIN documents d ON d.doc_id = v.doc_id
WHERE v.doc_id IN ({marks})
"""


class CorpusError(DriftwatchError):
    """A corpus file that cannot be used (wrong schema version, unreadable)."""


@dataclass(frozen=True)
class StoredDocument:
    document: Document
    content_hash: str
    first_seen: str


@dataclass(frozen=True)
class IngestCounts:
    """What one run date did to the corpus, computed from the stored state (so a re-run agrees)."""

    new: int
    updated: int
    deleted: int
    total: int


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _day(d: date | str) -> str:
    return d.isoformat() if isinstance(d, date) else str(date.fromisoformat(d))


def _check_schema(db: sqlite3.Connection, path: Path) -> None:
    row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if row is None or row[0] != SCHEMA_VERSION:
        raise CorpusError(f"{path}: corpus schema version {row and row[0]!r}, expected {SCHEMA_VERSION}")


def check_file(path: Path) -> None:
    """An existing corpus file must be a driftwatch corpus; raises CorpusError. Nothing is written (see
    `_readonly_uri`: `driftwatch check` leaves the data directory untouched)."""
    path = Path(path)
    if path.exists() and (path.is_dir() or path.stat().st_size > 0):
        Corpus(path, readonly=True).close()


def _readonly_uri(path: Path) -> str:
    """A URI that opens the corpus without writing beside it. SQLite opens a WAL database read-only by creating
    its -wal and -shm files; when no -wal file exists, no writer holds the database and every change has been
    checkpointed into the file, so it is opened `immutable` (no locking, no side files). While a job writes
    (its -wal exists) the usual read-only mode shares the writer's files and sees its commits consistently."""
    uri = Path(path).resolve().as_uri()
    if Path(f"{path}-wal").exists():
        return f"{uri}?mode=ro"
    return f"{uri}?mode=ro&immutable=1"


def _stored(rows: Sequence[tuple]) -> list[StoredDocument]:
    """StoredDocuments of rows (doc_id, title, text, url, published, source, categories, content_hash,
    first_seen, ...)."""
    categories: dict[str, tuple[str, ...]] = {}  # few distinct lists: each decoded once

    def decoded(raw: str) -> tuple[str, ...]:
        if raw not in categories:
            categories[raw] = tuple(json.loads(raw))
        return categories[raw]

    return [StoredDocument(
        Document(id=r[0], title=r[1], text=r[2], url=r[3],
                 published=datetime.fromisoformat(r[4]) if r[4] else None,
                 source=r[5], categories=decoded(r[6])),
        content_hash=r[7], first_seen=r[8]) for r in rows]


class Corpus:
    """One SQLite file (WAL mode) in the data directory; use as a context manager."""

    def __init__(self, path: Path, *, readonly: bool = False) -> None:
        self.path = Path(path)
        if readonly and not self.path.exists():
            raise CorpusError(f"{self.path}: no corpus yet")
        if not readonly:
            check_file(self.path)  # before SQLite writes its tables into someone else's database
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.db = sqlite3.connect(_readonly_uri(self.path), uri=True) if readonly else sqlite3.connect(self.path)
        except sqlite3.Error as exc:
            raise CorpusError(f"{self.path}: cannot open the corpus (SQLite: {exc})") from None
        try:
            if not readonly:
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.execute("PRAGMA synchronous=NORMAL")
                self.db.executescript(_SCHEMA)
                self.db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (SCHEMA_VERSION,))
                self.db.commit()
            _check_schema(self.db, self.path)
        except sqlite3.DatabaseError as exc:
            self.db.close()
            raise CorpusError(f"{self.path}: not a driftwatch corpus (SQLite: {exc})") from None
        except CorpusError:
            self.db.close()
            raise

    @classmethod
    def in_dir(cls, data_dir: Path, *, readonly: bool = False) -> Corpus:
        return cls(Path(data_dir) / CORPUS_FILE, readonly=readonly)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Corpus:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- documents -------------------------------------------------------------------------

    def ingest(self, documents: Iterable[Document], run_date: date | str) -> int:
        """Record what one feed carried on `run_date`, in one transaction; returns how many entries
        clashed with an id another entry holds (each is logged).

        An entry keeps the feed's id unless a different entry holds it: one of another source (the
        source of the id's stored versions), or an earlier one of the same feed. It then gets
        `<source>/<id>`, or `<source>/<id>#2`, `#3`... if that is held too: stable from run to run,
        since the first holder keeps the plain id. A new id is inserted; a known id whose content
        differs from its version in force on that date gets a new version dated `run_date` (updated,
        not duplicated). A document deleted on or before `run_date` stays deleted: deletion is a
        tombstone, so a feed that still carries an expired or removed item does not bring it back.
        """
        day = _day(run_date)
        claimed: set[str] = set()  # ids given to this feed's entries so far
        clashes = 0
        with self.db:
            for doc in documents:
                doc_id = self._claim(doc, claimed)
                claimed.add(doc_id)
                if doc_id != doc.id:
                    clashes += 1
                    doc = dataclasses.replace(doc, id=doc_id)
                self._record(doc, day)
        return clashes

    def _claim(self, doc: Document, claimed: set[str]) -> str:
        """The id `doc` is stored under (see `ingest`); a clash is logged naming both sources."""
        def free(candidate: str) -> bool:
            return candidate not in claimed and self._holder(candidate) in (None, doc.source)

        if free(doc.id):
            return doc.id
        holder = "an earlier entry of the same feed" if doc.id in claimed else f"source {self._holder(doc.id)!r}"
        base = f"{doc.source}/{doc.id}"
        doc_id, n = bounded_id(base), 1
        while not free(doc_id):
            n += 1
            doc_id = bounded_id(f"{base}#{n}")
        log.warning("source %r: entry id %r is already held by %s; stored as %r", doc.source, doc.id, holder, doc_id)
        return doc_id

    def _holder(self, doc_id: str) -> str | None:
        """The source of the latest stored version of `doc_id` (None: no document has it)."""
        row = self.db.execute("SELECT source FROM versions WHERE doc_id = ? ORDER BY valid_from DESC LIMIT 1",
                              (doc_id,)).fetchone()
        return row and row[0]

    def _record(self, doc: Document, day: str) -> None:
        row = self.db.execute("SELECT first_seen, last_seen, deleted_at FROM documents WHERE doc_id = ?",
                              (doc.id,)).fetchone()
        if row is None:
            self.db.execute("INSERT INTO documents (doc_id, first_seen, last_seen) VALUES (?, ?, ?)",
                            (doc.id, day, day))
            self._put_version(doc, day)
            return
        first_seen, last_seen, deleted_at = row
        if deleted_at is not None and deleted_at <= day:
            return
        self.db.execute("UPDATE documents SET first_seen = ?, last_seen = ? WHERE doc_id = ?",
                        (min(first_seen, day), max(last_seen, day), doc.id))
        current = self.db.execute(
            "SELECT content_hash FROM versions WHERE doc_id = ? AND valid_from <= ? "
            "ORDER BY valid_from DESC LIMIT 1", (doc.id, day)).fetchone()
        if current is None or current[0] != doc.content_hash:
            self._put_version(doc, day)

    def _put_version(self, doc: Document, day: str) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO versions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (doc.id, day, doc.content_hash, doc.title, doc.text, doc.url,
             doc.published.isoformat() if doc.published else None, doc.source,
             json.dumps(list(doc.categories))))

    def delete(self, doc_ids: Iterable[str], run_date: date | str, reason: str) -> int:
        """Mark documents gone from `run_date` on; returns how many were present and are now deleted."""
        day = _day(run_date)
        with self.db:
            cur = self.db.executemany(
                "UPDATE documents SET deleted_at = ?, delete_reason = ? "
                "WHERE doc_id = ? AND first_seen <= ? AND (deleted_at IS NULL OR deleted_at > ?)",
                [(day, reason, d, day, day) for d in doc_ids])
            return cur.rowcount

    def source_documents(self, source: str, run_date: date | str) -> set[str]:
        """The ids of the documents present on `run_date` whose version in force is of `source`."""
        rows = self.db.execute("SELECT v.doc_id, v.source" + _IN_FORCE.format(join=""), {"day": _day(run_date)})
        return {doc_id for doc_id, of in rows if of == source}

    def expire(self, run_date: date | str, max_age_days: int) -> int:
        """Delete documents published (or, without a date, first seen) more than `max_age_days` ago."""
        day = date.fromisoformat(_day(run_date))
        cutoff = (day - timedelta(days=max_age_days)).isoformat()
        old = [doc.document.id for doc in self.snapshot(day)
               if (doc.document.published.date().isoformat() if doc.document.published else doc.first_seen) < cutoff]
        return self.delete(old, day, f"older than {max_age_days} days")

    def snapshot(self, run_date: date | str) -> list[StoredDocument]:
        """The corpus as it stood on `run_date`, ordered by doc id (reconstructable for any past date)."""
        return _stored(self.db.execute(_SNAPSHOT, {"day": _day(run_date)}).fetchall())

    def document_text(self, doc_id: str, run_date: date | str) -> str | None:
        """The title and text (joined by a newline, stripped) of the version of `doc_id` in force on `run_date`;
        None when it is not in the corpus on that date."""
        row = self.db.execute(
            "SELECT v.title, v.text FROM documents d JOIN versions v ON v.doc_id = d.doc_id WHERE d.doc_id = :id "
            "AND d.first_seen <= :day AND (d.deleted_at IS NULL OR d.deleted_at > :day) AND v.valid_from = "
            "(SELECT MAX(valid_from) FROM versions WHERE doc_id = d.doc_id AND valid_from <= :day)",
            {"id": doc_id, "day": _day(run_date)}).fetchone()
        return None if row is None else f"{row[0]}\n{row[1]}".strip()

    def versions(self, doc_id: str) -> list[tuple[str, str, str]]:
        """Every stored version of `doc_id`, oldest first: (valid_from, content hash, title and text joined by a
        newline and stripped, as `document_text`)."""
        return [(day, digest, f"{title}\n{text}".strip()) for day, digest, title, text in self.db.execute(
            "SELECT valid_from, content_hash, title, text FROM versions WHERE doc_id = ? ORDER BY valid_from",
            (doc_id,))]

    def generation(self) -> int:
        """The corpus's generation (see `_SCHEMA`): it changes with every write that can change a snapshot."""
        row = self.db.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
        return int(row[0]) if row else -1

    def dated_between(self, a: date | str, b: date | str, *, first_seen_only: bool = False) -> bool:
        """Whether any document was first seen, given a version or deleted on a date in (min, max] of `a` and `b`
        (only first seen with `first_seen_only`): with the generation unchanged, the snapshots of `a` and `b`
        are equal when none was."""
        lo, hi = sorted((_day(a), _day(b)))
        if lo == hi:
            return False
        checks = ["SELECT 1 FROM documents WHERE first_seen > :lo AND first_seen <= :hi"]
        if not first_seen_only:
            checks += ["SELECT 1 FROM versions WHERE valid_from > :lo AND valid_from <= :hi",
                       "SELECT 1 FROM documents WHERE deleted_at > :lo AND deleted_at <= :hi"]
        return any(self.db.execute(f"{sql} LIMIT 1", {"lo": lo, "hi": hi}).fetchone() for sql in checks)

    def changed_after(self, day: date | str, run_date: date | str) -> bool:
        """Whether, after `day` and by `run_date`, a document was deleted or a document first seen by `day` got
        a version: what would make the corpus of `day` differ from that of `run_date` less the documents first
        seen after `day`."""
        params = {"day": _day(day), "run": _day(run_date)}
        return any(self.db.execute(sql, params).fetchone() for sql in (
            "SELECT 1 FROM documents WHERE deleted_at > :day AND deleted_at <= :run LIMIT 1",
            "SELECT 1 FROM versions v JOIN documents d ON d.doc_id = v.doc_id WHERE v.valid_from > :day "
            "AND v.valid_from <= :run AND d.first_seen <= :day LIMIT 1"))

    def content_hashes(self, doc_ids: Sequence[str], day: date | str) -> dict[str, str]:
        """The content hash of the version in force on `day` of each of these documents that has one."""
        found: dict[str, str] = {}
        for i in range(0, len(doc_ids), 900):
            batch = list(doc_ids[i : i + 900])
            found.update(self.db.execute(
                "SELECT v.doc_id, v.content_hash FROM versions v WHERE v.doc_id IN "
                f"({','.join('?' * len(batch))}) AND v.valid_from = (SELECT MAX(valid_from) FROM versions "
                "WHERE doc_id = v.doc_id AND valid_from <= ?)", [*batch, _day(day)]).fetchall())
        return found

    def present(self, doc_ids: Iterable[str], run_date: date | str) -> set[str]:
        """Which of these documents are in `snapshot(run_date)`."""
        ids, day, found = sorted(set(doc_ids)), _day(run_date), set()
        for i in range(0, len(ids), 900):
            batch = ids[i : i + 900]
            found.update(r[0] for r in self.db.execute(
                f"SELECT doc_id FROM documents WHERE doc_id IN ({','.join('?' * len(batch))}) AND first_seen <= ? "
                "AND (deleted_at IS NULL OR deleted_at > ?)", [*batch, day, day]))
        return found

    def snapshot_keys(self, run_date: date | str) -> list[tuple[str, str, str]]:
        """(doc id, content hash, first seen) of each document of `snapshot(run_date)`, in its order."""
        return self.db.execute(_SNAPSHOT_KEYS, {"day": _day(run_date)}).fetchall()

    def snapshot_chunks(self, run_date: date | str, settings: str) -> list[tuple[str, str, str, str, str | None]]:
        """(doc id, content hash, first seen, valid from, chunk texts joined by newlines or None when not in the
        chunk cache under `settings`) of each document of `snapshot(run_date)`, in its order."""
        return self.db.execute(_SNAPSHOT_CHUNKS, {"day": _day(run_date), "settings": settings}).fetchall()

    def entered_versions(self, start: date | str, end: date | str) -> list[tuple[str, str, str]]:
        """(doc id, content hash, valid from) of each document of `entered(start, end)`, in its order, none read."""
        return self.db.execute(_ENTERED, {"start": _day(start), "end": _day(end)}).fetchall()

    def entered_keys(self, start: date | str, end: date | str) -> list[tuple[str, str]]:
        """(doc id, content hash) of each document of `entered(start, end)`, in its order, none read."""
        return [(doc_id, h) for doc_id, h, _ in self.entered_versions(start, end)]

    def read_versions(self, versions: Sequence[tuple[str, str, str]],
                      known: Mapping[tuple[str, str], StoredDocument] | None = None) -> list[StoredDocument]:
        """The stored documents of these (doc id, content hash, valid from) versions, in their order; one whose
        (id, content hash) is in `known` is taken from it (the same stored version) instead of being read."""
        known = known or {}
        wanted = {(doc_id, valid_from) for doc_id, h, valid_from in versions if (doc_id, h) not in known}
        read: dict[tuple[str, str], StoredDocument] = {}
        ids = sorted({doc_id for doc_id, _ in wanted})
        for i in range(0, len(ids), 900):
            batch = ids[i : i + 900]
            rows = self.db.execute(_VERSIONS.format(marks=",".join("?" * len(batch))), batch).fetchall()
            rows = [r for r in rows if (r[0], r[9]) in wanted]
            read.update(((s.document.id, s.content_hash), s) for s in _stored(rows))
        return [known.get((doc_id, h)) or read[(doc_id, h)] for doc_id, h, _ in versions]

    def entered(self, start: date | str, end: date | str,
                known: Mapping[tuple[str, str], StoredDocument] | None = None) -> list[StoredDocument]:
        """The documents of the corpus at `end` whose version is not the one in force at `start` (new or changed
        in (start, end]), ordered by doc id: `snapshot(end)` less the (id, content hash) pairs of
        `snapshot(start)`, found by SQL. A document whose (id, content hash) is in `known` is taken from it
        (the same stored version) instead of being read again."""
        return self.read_versions(self.entered_versions(start, end), known)

    def counts(self, run_date: date | str) -> IngestCounts:
        day = _day(run_date)
        one = lambda sql: self.db.execute(sql, {"day": day}).fetchone()[0]  # noqa: E731
        return IngestCounts(
            new=one("SELECT COUNT(*) FROM documents WHERE first_seen = :day"),
            updated=one("SELECT COUNT(*) FROM versions v WHERE valid_from = :day AND EXISTS "
                        "(SELECT 1 FROM versions w WHERE w.doc_id = v.doc_id AND w.valid_from < :day)"),
            deleted=one("SELECT COUNT(*) FROM documents WHERE deleted_at = :day"),
            total=one("SELECT COUNT(*) FROM documents WHERE first_seen <= :day "
                      "AND (deleted_at IS NULL OR deleted_at > :day)"),
        )

    def new_by_source(self, run_date: date | str) -> list[tuple[str, str, int, int]]:
        """(source, first seen, documents first seen that day, of them still present on `run_date`) for every day
        up to `run_date` on which a source brought new documents; a document's source is its first version's."""
        return self.db.execute(
            "SELECT (SELECT source FROM versions v WHERE v.doc_id = d.doc_id ORDER BY valid_from LIMIT 1) AS src, "
            "first_seen, COUNT(*), SUM(deleted_at IS NULL OR deleted_at > :day) FROM documents d "
            "WHERE first_seen <= :day GROUP BY src, first_seen ORDER BY src, first_seen", {"day": _day(run_date)}
        ).fetchall()

    def clear_documents(self) -> None:
        """Forget every document, version and feed and file validator; keep the embedding cache."""
        with self.db:
            self.db.execute("DELETE FROM versions")
            self.db.execute("DELETE FROM documents")
            self.db.execute("DELETE FROM http_cache")
            self.db.execute("DELETE FROM feed_files")

    def documents_info(self, doc_ids: Sequence[str]) -> dict[str, dict]:
        """Title, url, source, first_seen and deleted_at of the latest version of each id (for display)."""
        out: dict[str, dict] = {}
        for i in range(0, len(doc_ids), 500):
            batch = list(doc_ids[i : i + 500])
            marks = ",".join("?" * len(batch))
            for r in self.db.execute(
                f"SELECT d.doc_id, v.title, v.url, v.source, d.first_seen, d.deleted_at FROM documents d "
                f"JOIN versions v ON v.doc_id = d.doc_id AND v.valid_from = "
                f"(SELECT MAX(valid_from) FROM versions WHERE doc_id = d.doc_id) WHERE d.doc_id IN ({marks})",
                    batch):
                out[r[0]] = {"title": r[1], "url": r[2], "source": r[3], "first_seen": r[4], "deleted_at": r[5]}
        return out

    def lifetimes(self) -> list[tuple[str, str, str | None, str, str]]:
        """Every document ever held: (doc_id, first_seen, deleted_at, source, first category or ""), the
        source and category from its latest version (the dashboard's corpus composition over time)."""
        return self.db.execute(
            "SELECT d.doc_id, d.first_seen, d.deleted_at, v.source, "
            "COALESCE(json_extract(v.categories, '$[0]'), '') FROM documents d JOIN versions v "
            "ON v.doc_id = d.doc_id AND v.valid_from = "
            "(SELECT MAX(valid_from) FROM versions WHERE doc_id = d.doc_id) ORDER BY d.doc_id").fetchall()

    def labels(self, doc_ids: Sequence[str]) -> dict[str, tuple[str, str]]:
        """Doc id -> (source, first category or "") of its latest version, for the ids the corpus ever held."""
        out: dict[str, tuple[str, str]] = {}
        unique = list(dict.fromkeys(doc_ids))
        for i in range(0, len(unique), 900):
            batch = unique[i : i + 900]
            marks = ",".join("?" * len(batch))
            for doc_id, source, category in self.db.execute(
                    f"SELECT v.doc_id, v.source, COALESCE(json_extract(v.categories, '$[0]'), '') FROM versions v "
                    f"WHERE v.doc_id IN ({marks}) AND v.valid_from = "
                    f"(SELECT MAX(valid_from) FROM versions WHERE doc_id = v.doc_id)", batch):
                out[doc_id] = (source or "", category or "")
        return out

    # -- embedding cache -------------------------------------------------------------------

    def cached_embeddings(self, model: str, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        unique = list(dict.fromkeys(hashes))
        for i in range(0, len(unique), 900):
            batch = unique[i : i + 900]
            marks = ",".join("?" * len(batch))
            for h, blob in self.db.execute(
                    f"SELECT text_hash, vector FROM embeddings WHERE model = ? AND text_hash IN ({marks})",
                    [model, *batch]):
                found[h] = np.frombuffer(blob, dtype=np.float32)
        return found

    def cache_embeddings(self, model: str, vectors: Mapping[str, np.ndarray]) -> None:
        with self.db:
            self.db.executemany(
                "INSERT OR REPLACE INTO embeddings VALUES (?, ?, ?, ?)",
                [(model, h, int(v.shape[0]), np.asarray(v, dtype=np.float32).tobytes()) for h, v in vectors.items()])

    # -- chunk cache -----------------------------------------------------------------------

    def chunk_counts(self, settings: str, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
        """How many chunks each of these document versions has in the chunk cache under `settings` (a version
        not cached is absent)."""
        found: dict[tuple[str, str], int] = {}
        wanted = set(keys)
        ids = sorted({doc_id for doc_id, _ in wanted})
        for i in range(0, len(ids), 900):
            batch = ids[i : i + 900]
            for doc_id, h, n in self.db.execute(
                    "SELECT doc_id, content_hash, CASE WHEN texts = '' THEN 0 ELSE "
                    "length(texts) - length(replace(texts, char(10), '')) + 1 END FROM chunk_cache "
                    f"WHERE settings = ? AND doc_id IN ({','.join('?' * len(batch))})", [settings, *batch]):
                if (doc_id, h) in wanted:
                    found[(doc_id, h)] = n
        return found

    def cache_chunks(self, settings: str, chunks: Mapping[tuple[str, str], Sequence[str]]) -> None:
        """Keep the chunk texts of these document versions; a text holding a newline (chunks are words joined
        by spaces: none does) is not kept, so the newline-joined form always splits back."""
        with self.db:
            self.db.executemany("INSERT OR REPLACE INTO chunk_cache VALUES (?, ?, ?, ?)",
                                [(doc_id, h, settings, "\n".join(texts)) for (doc_id, h), texts in chunks.items()
                                 if not any("\n" in t or not t for t in texts)])

    # -- HTTP validators -------------------------------------------------------------------

    def http_cache(self) -> dict[str, HttpCacheEntry]:
        return {url: HttpCacheEntry(etag, modified)
                for url, etag, modified in self.db.execute("SELECT url, etag, last_modified FROM http_cache")}

    def save_http_cache(self, cache: Mapping[str, HttpCacheEntry], now: str) -> None:
        with self.db:
            # Rows an older version keyed by the URL itself (a token in clear) go, at the cost of one full GET.
            self.db.execute("DELETE FROM http_cache WHERE substr(url, 1, ?) != ?",
                            (len(CACHE_KEY_PREFIX), CACHE_KEY_PREFIX))
            self.db.executemany("INSERT OR REPLACE INTO http_cache VALUES (?, ?, ?, ?)",
                                [(url, e.etag, e.last_modified, now) for url, e in cache.items()])

    # -- dated feed files already ingested -------------------------------------------------

    def known_files(self, source: str, run_date: date | str, settings: str) -> dict[str, FileValidator]:
        """The files of `source` ingested, as they are, on or before `run_date` under the same `settings`."""
        rows = self.db.execute("SELECT path, size, mtime_ns, sha256 FROM feed_files WHERE source = ? "
                               "AND settings = ? AND ingested_at <= ?", (source, settings, _day(run_date)))
        return {path: FileValidator(size, mtime, sha) for path, size, mtime, sha in rows}

    def record_files(self, source: str, files: Mapping[str, FileValidator], run_date: date | str,
                     settings: str) -> None:
        """Note files of `source` as ingested on `run_date` (after their entries are stored: a crash in between
        only re-parses them). The same version keeps its earliest date; a changed one takes `run_date`."""
        day = _day(run_date)
        with self.db:
            self.db.executemany(
                "INSERT INTO feed_files VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (source, path) DO UPDATE SET "
                "ingested_at = CASE WHEN size = excluded.size AND mtime_ns = excluded.mtime_ns AND "
                "sha256 = excluded.sha256 AND settings = excluded.settings "
                "THEN MIN(ingested_at, excluded.ingested_at) ELSE excluded.ingested_at END, "
                "size = excluded.size, mtime_ns = excluded.mtime_ns, sha256 = excluded.sha256, "
                "settings = excluded.settings",
                [(source, path, v.size, v.mtime_ns, v.sha256, settings, day) for path, v in files.items()])
