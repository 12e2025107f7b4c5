"""The corpus's documents as a person writing a gold set needs them: title, source, date and id, searchable."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import date
from pathlib import Path

from pipeline import store
from pipeline.corpus import CORPUS_FILE, Corpus
from pipeline.errors import DriftwatchError

COLUMNS = ("title", "source", "date", "id")  # the order they are printed in; `id` goes into gold.jsonl


class DocumentsError(DriftwatchError):
    """A listing that cannot be made as asked (no corpus, a date without a corpus)."""


@dataclass(frozen=True)
class Listed:
    title: str
    source: str
    date: str  # published (the feed's date), else the run date it was first seen
    id: str

    def row(self) -> dict[str, str]:
        return asdict(self)


def list_documents(data_dir: Path, *, search: str | None = None, day: date | None = None) -> list[Listed]:
    """The documents in the corpus of `data_dir` as it stood on `day` (default: its last run), those whose title or
    text holds `search` (any case) when given; by date, newest first, then id. DocumentsError without a corpus or
    for a `day` before its first run."""
    data_dir = Path(data_dir)
    runs = store.read_runs(data_dir)
    if runs.empty or not (data_dir / CORPUS_FILE).exists():
        raise DocumentsError(f"{data_dir}: no corpus yet (no runs.csv / {CORPUS_FILE}): run the daily job first")
    first, last = runs["run_date"].min().date(), runs["run_date"].max().date()
    if day is not None and day < first:
        raise DocumentsError(f"--date {day} is before the first run of {data_dir} ({first})")
    needle = (search or "").casefold()
    with Corpus.in_dir(data_dir, readonly=True) as corpus:
        stored = corpus.snapshot(day or last)
    listed = [Listed(s.document.title, s.document.source,
                     f"{s.document.published:%Y-%m-%d}" if s.document.published else s.first_seen, s.document.id)
              for s in stored
              if not needle or needle in s.document.title.casefold() or needle in s.document.text.casefold()]
    return sorted(sorted(listed, key=lambda d: d.id), key=lambda d: d.date, reverse=True)
