"""The documents-folder source: a wiki export or a folder of manuals (Markdown, HTML, text, PDF), one document per
file, its id from its relative path, its title from its first heading and its date from front matter or mtime."""

from __future__ import annotations

import codecs
import dataclasses
import fnmatch
import hashlib
import io
import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timezone
from html.parser import HTMLParser
from pathlib import Path

from pipeline.sources import (Caps, Document, FeedError, FeedOutcome, FileValidator, bounded_id, cut_text,
                              html_to_text, normalise_text)

logger = logging.getLogger(__name__)

MARKDOWN_SUFFIXES = (".md", ".markdown")
HTML_SUFFIXES = (".html", ".htm")
TEXT_SUFFIXES = (".txt",)
PDF_SUFFIXES = (".pdf",)
DOCUMENT_SUFFIXES = MARKDOWN_SUFFIXES + HTML_SUFFIXES + TEXT_SUFFIXES + PDF_SUFFIXES
# Part of the known files' settings (corpus.known_files): a change to how files are read re-reads them all once.
READER_VERSION = "documents-1"

_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)^(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.S | re.M)
_KEY_VALUE = re.compile(r"([A-Za-z_][\w-]*)[ \t]*:[ \t]*(.*)")
_ATX = re.compile(r" {0,3}(#{1,6})[ \t]+(.+?)[ \t#]*")
_SETEXT_1 = re.compile(r" {0,3}=+[ \t]*")
_FENCE = re.compile(r" {0,3}(```|~~~)")
_HTML_TITLE = re.compile(r"<title\b.*?</title\s*>", re.S | re.I)  # the tab's name, not the page's text


@dataclass(frozen=True)
class Scan:
    """One documents folder on a run: an outcome per file read (ok ones `replayed`, so that the folder counts once
    in feeds_ok and each unreadable file once in feeds_failed), and the ids of every document file present (None:
    the folder could not be listed or holds no document file, and nothing may be deleted)."""

    outcomes: list[FeedOutcome]
    ids: frozenset[str] | None


def document_id(source: str, relative: str) -> str:
    """A file's document id: `<source>:<relative/posix/path>`, bounded like a feed's ids."""
    return bounded_id(f"{source}:{relative}")


def document_files(folder: Path, include: Sequence[str] | None = None) -> list[tuple[str, Path]]:
    """(relative posix path, path) of every document file under `folder`, recursively and sorted; hidden files and
    folders (a leading dot) are skipped, and with `include` so is a file whose relative path matches none of its
    fnmatch patterns. Raises FeedError if the folder cannot be listed."""
    if not folder.is_dir():
        raise FeedError(f"{folder}: not a folder")
    found: list[tuple[str, Path]] = []

    def failed(error: OSError) -> None:
        raise FeedError(f"{error.filename or folder}: cannot list folder: {error.strerror or error}")

    for root, dirs, files in os.walk(folder, onerror=failed):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            if name.startswith(".") or Path(name).suffix.lower() not in DOCUMENT_SUFFIXES:
                continue
            path = Path(root) / name
            relative = path.relative_to(folder).as_posix()
            if include is None or any(fnmatch.fnmatchcase(relative, pattern) for pattern in include):
                found.append((relative, path))
    return sorted(found)


def scan(name: str, folder: Path, run_date: date, known: Mapping[str, FileValidator], caps: Caps = Caps(),
         include: Sequence[str] | None = None) -> Scan:
    """Read the document files of `folder` for `run_date`. A file modified after the end of `run_date` (UTC) is not
    read (a re-run of an earlier date keeps the version the corpus had), nor one whose size and modification time
    are those `known` records (its document is in the corpus already). Never raises for a bad file: an unreadable
    or empty one is a failed outcome naming it, and its id still counts as present. `include`: see `document_files`."""
    try:
        files = document_files(folder, include)
    except FeedError as error:
        return Scan([_failed(name, str(folder), error)], None)
    if not files:
        suffixes = ", ".join(DOCUMENT_SUFFIXES)
        wanted = f" matching {', '.join(include)}" if include is not None else ""
        return Scan([_failed(name, str(folder), FeedError(
            f"{folder}: no document file ({suffixes}){wanted} in the folder"))], None)
    end = datetime.combine(run_date, datetime.max.time(), tzinfo=timezone.utc).timestamp()
    outcomes = [FeedOutcome(source=name, location=str(folder), documents=[], error=None)]
    for relative, path in files:
        location = str(path)
        try:
            stat = path.stat()
        except OSError as error:
            outcomes.append(_failed(name, location, FeedError(f"{location}: cannot read: {error.strerror or error}")))
            continue
        if stat.st_mtime > end:
            logger.debug("%s: modified after %s, not read", location, run_date)
            continue
        before = known.get(location)
        if before is not None and (before.size, before.mtime_ns) == (stat.st_size, stat.st_mtime_ns):
            outcomes.append(FeedOutcome(name, location, [], None, replayed=True, validator=before, unchanged=True))
            continue
        outcomes.append(_read(name, relative, path, stat, caps))
    return Scan(outcomes, frozenset(document_id(name, relative) for relative, _ in files))


def _read(name: str, relative: str, path: Path, stat: os.stat_result, caps: Caps) -> FeedOutcome:
    location = str(path)
    try:
        data = path.read_bytes()
        document = read_document(data, source=name, relative=relative, modified=stat.st_mtime, where=location)
    except OSError as error:
        return _failed(name, location, FeedError(f"{location}: cannot read: {error.strerror or error}"))
    except FeedError as error:
        return _failed(name, location, error)
    notes: tuple[str, ...] = ()
    limit = caps.max_document_chars
    if limit is not None and len(document.title) + len(document.text) > limit:
        notes = (f"source {name!r}: {relative}: {len(document.text):,} characters cut to {limit:,} "
                 "(fetch.max_document_chars)",)
        logger.warning("%s: %s", location, notes[0])
        title = cut_text(document.title, limit)
        document = dataclasses.replace(document, title=title, text=cut_text(document.text, limit - len(title)))
    validator = FileValidator(len(data), stat.st_mtime_ns, hashlib.sha256(data).hexdigest())
    return FeedOutcome(name, location, [document], None, replayed=True, validator=validator, notes=notes)


def read_document(data: bytes, *, source: str, relative: str, modified: float, where: str | None = None) -> Document:
    """The document of one file's bytes, by its suffix. `modified`: its modification time (a POSIX timestamp), the
    date when front matter gives none. Raises FeedError naming the file (`where`, default `relative`) when it cannot
    be decoded or parsed, or holds no text."""
    where = where or relative
    suffix = Path(relative).suffix.lower()
    meta: dict[str, str | list[str]] = {}
    if suffix in PDF_SUFFIXES:
        title, text = _pdf(data, where)
    else:
        raw = _decode(data, where)
        if suffix in HTML_SUFFIXES:
            title, text = _html_title(raw), html_to_text(_HTML_TITLE.sub("", raw))
        else:
            meta, raw = front_matter(raw)
            title = _markdown_title(raw) if suffix in MARKDOWN_SUFFIXES else ""
            text = normalise_text(raw)
    if not text:
        raise FeedError(f"{where}: no text in the file")
    heading = meta.get("title")
    title = " ".join((heading if isinstance(heading, str) and heading else title).split()) or Path(relative).stem
    published = _meta_date(meta.get("date"), where) or datetime.fromtimestamp(modified, tz=timezone.utc)
    tags = [t for key in ("tags", "categories") for t in _as_list(meta.get(key))]
    return Document(id=document_id(source, relative), title=title, text=text, url="", published=published,
                    source=source, categories=tuple(dict.fromkeys(" ".join(t.split()) for t in tags if t.strip())))


def front_matter(text: str) -> tuple[dict[str, str | list[str]], str]:
    """The `key: value` lines of a leading `---` ... `---` block and the text without it ({} and the text when there
    is none: a block without a `key: value` line is a thematic break, kept). A value `[a, b]` or following `- item`
    lines are a list; quotes around a value are dropped. Not YAML: nested mappings and multi-line strings are not
    read (their lines are skipped)."""
    match = _FRONT_MATTER.match(text)
    if match is None or not any(_KEY_VALUE.fullmatch(line.rstrip()) for line in match.group(1).splitlines()):
        return {}, text
    meta: dict[str, str | list[str]] = {}
    last: str | None = None
    for line in match.group(1).splitlines():
        item = line.strip()
        if item.startswith("- ") and last is not None:
            previous = meta.get(last)
            meta[last] = [*(previous if isinstance(previous, list) else []), _unquote(item[2:])]
            continue
        pair = _KEY_VALUE.fullmatch(line.rstrip())
        if pair is None:
            last = None
            continue
        last, value = pair.group(1).lower(), pair.group(2).strip()
        if value.startswith("[") and value.endswith("]"):
            meta[last] = [_unquote(v) for v in value[1:-1].split(",") if v.strip()]
        else:
            meta[last] = _unquote(value)
    return meta, text[match.end():]


def _unquote(value: str) -> str:
    value = value.strip()
    return value[1:-1] if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'" else value


def _as_list(value: str | list[str] | None) -> list[str]:
    if isinstance(value, list):
        return value
    return [v for v in value.split(",")] if value else []


def _meta_date(value: str | list[str] | None, relative: str) -> datetime | None:
    """A front matter date (2025-09-03, or an ISO date and time; UTC when it has no offset); None, with a warning
    naming the file, when it is not one."""
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace(" ", "T", 1) if len(value) > 10 else value)
    except ValueError:
        logger.warning("%s: front matter date %r is not an ISO date, the file's modification time is used",
                       relative, value)
        return None
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment.astimezone(timezone.utc)


def _decode(data: bytes, relative: str) -> str:
    try:
        return data.removeprefix(codecs.BOM_UTF8).decode("utf-8")
    except UnicodeDecodeError as error:
        raise FeedError(f"{relative}: not UTF-8 text ({error.reason} at byte {error.start})") from None


def _markdown_title(text: str) -> str:
    """The first level-1 heading (`# Title`, or a line underlined with `===`), else the first heading of any level,
    else ""; headings inside fenced code blocks do not count."""
    lines = text.splitlines()
    fenced = False
    first = ""
    for i, line in enumerate(lines):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        atx = _ATX.fullmatch(line)
        if atx is not None:
            if len(atx.group(1)) == 1:
                return atx.group(2)
            first = first or atx.group(2)
        elif line.strip() and i + 1 < len(lines) and _SETEXT_1.fullmatch(lines[i + 1]):
            return line.strip()
    return first


class _HtmlTitle(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.texts: dict[str, list[str]] = {"h1": [], "title": []}
        self._open: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.texts and not self.texts[tag]:
            self._open = tag

    def handle_endtag(self, tag: str) -> None:
        if tag == self._open:
            self._open = None

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self.texts[self._open].append(data)


def _html_title(markup: str) -> str:
    """The first <h1>'s text, else the <title>'s, else ""."""
    parser = _HtmlTitle()
    parser.feed(markup)
    parser.close()
    h1, title = (" ".join("".join(parser.texts[t]).split()) for t in ("h1", "title"))
    return h1 or title


def _pdf(data: bytes, relative: str) -> tuple[str, str]:
    """A PDF's metadata title (else its first line of text) and its pages' text, by pypdf."""
    import pypdf  # here: a day whose files are all known reads no PDF

    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise FeedError(f"{relative}: an encrypted PDF")
        text = normalise_text("\n".join(page.extract_text() or "" for page in reader.pages))
        meta = reader.metadata
        title = (meta.title if meta is not None else None) or ""
    except FeedError:
        raise
    except Exception as error:  # noqa: BLE001 - pypdf raises many kinds on a broken file; none may stop the run
        raise FeedError(f"{relative}: not a readable PDF: {type(error).__name__}: {error}") from None
    return (title.strip() or text.split("\n", 1)[0]), text


def _failed(name: str, location: str, error: FeedError) -> FeedOutcome:
    logger.warning("source %r: %s", name, error)
    return FeedOutcome(source=name, location=location, documents=[], error=str(error))
