"""Feed sources: fetch RSS/RDF/Atom feeds and JSON Feeds over HTTP or from files and dated folders,
and parse them into plain-text Documents."""

from __future__ import annotations

from pipeline.errors import DriftwatchError

import calendar
import codecs
import dataclasses
import hashlib
import http.client
import io
import logging
import re
import time
import urllib.error
import urllib.parse
import urllib.request
import xml.sax
from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from datetime import time as dtime
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from pipeline import jsonl, netio
from pipeline.config import DEFAULT_USER_AGENT, FetchConfig
from pipeline.contract import MAX_ID_LENGTH
from pipeline.redact import redact

logger = logging.getLogger(__name__)

FEED_ACCEPT = (
    "application/rss+xml, application/atom+xml, application/feed+json, application/rdf+xml;q=0.9, "
    "application/xml;q=0.8, text/xml;q=0.8, application/json;q=0.8, */*;q=0.1"
)
JSON_FEED_VERSION = "https://jsonfeed.org/version/1"  # the prefix of version 1 and 1.1
FEED_SUFFIXES = ("xml", "rss", "atom", "json")
HTTP_SCHEMES = ("http", "https")

# YYYY-MM-DD.xml or YYYY-MM-DD-anything.xml (or .rss, .atom, .json); the date is validated separately so
# that an impossible one can be reported instead of silently ignored.
_DATED_NAME = re.compile(r"(\d{4})-(\d{2})-(\d{2})(?:-.+)?\.(?i:" + "|".join(FEED_SUFFIXES) + ")")


class FeedError(DriftwatchError):
    """A feed could not be fetched or parsed; the message names its URL or file."""


@dataclass(frozen=True)
class Document:
    id: str
    title: str
    text: str
    url: str
    published: datetime | None
    source: str
    categories: tuple[str, ...]

    @property
    def content_hash(self) -> str:
        """sha256 of title, text and url: the corpus re-indexes an entry when it changes."""
        payload = f"{self.title}\n{self.text}\n{self.url}"
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class HttpResult:
    status: int
    body: bytes | None
    etag: str | None
    last_modified: str | None


@dataclass
class HttpCacheEntry:
    etag: str | None
    last_modified: str | None


CACHE_KEY_PREFIX = "sha256:"


def http_cache_key(url: str) -> str:
    """A feed's key in the HTTP cache: the URL's digest, never the URL (it may carry a token, and the cache is
    stored in corpus.sqlite)."""
    return CACHE_KEY_PREFIX + hashlib.sha256(url.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class FeedOutcome:
    source: str
    location: str
    documents: list[Document]
    error: str | None
    not_modified: bool = False
    # A dated file from before the run date, re-read to rebuild the corpus: it was fetched on its
    # own day, so the run does not count it among its feeds.
    replayed: bool = False
    # A dated file's validator (size, mtime, sha256), set when it was read; `unchanged`: the corpus holds it
    # already (see `collect`'s `known`), so it was not parsed and `documents` is empty.
    validator: FileValidator | None = None
    unchanged: bool = False
    # What was over a cap (fetch.max_entries, fetch.max_document_chars), one line each, for the run's events.
    notes: tuple[str, ...] = ()
    # Not fetched: the run's deadline had passed (job.ingest); neither ok nor failed in the run's counts.
    deferred: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class FileValidator:
    """What identifies one version of a feed file: its size, modification time and SHA-256."""

    size: int
    mtime_ns: int
    sha256: str


# --- HTML to text -------------------------------------------------------------

_SKIPPED_ELEMENTS = frozenset({"script", "style"})
_BLOCK_ELEMENTS = frozenset({
    "address", "article", "aside", "blockquote", "br", "dd", "div", "dl", "dt",
    "figcaption", "figure", "footer", "h1", "h2", "h3", "h4", "h5", "h6", "header",
    "hr", "li", "main", "nav", "ol", "p", "pre", "section", "table", "tr", "ul",
})
# Table cells are not lines, but adjacent cells must not glue their words together.
_CELL_ELEMENTS = frozenset({"td", "th"})
_WHITESPACE = re.compile(r"\s+")


class _TextExtractor(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self._parts: list[str] = []
        self._skip_depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._mark(tag, opening=True)

    def handle_endtag(self, tag: str) -> None:
        self._mark(tag, opening=False)

    def _mark(self, tag: str, *, opening: bool) -> None:
        if tag in _SKIPPED_ELEMENTS:
            self._skip_depth = self._skip_depth + 1 if opening else max(0, self._skip_depth - 1)
        elif tag in _BLOCK_ELEMENTS:
            self._parts.append("\n")
        elif tag in _CELL_ELEMENTS:
            self._parts.append(" ")

    def handle_data(self, data: str) -> None:
        if not self._skip_depth:
            # Newlines inside HTML source are plain spaces; only block elements break lines.
            self._parts.append(_WHITESPACE.sub(" ", data))

    def text(self) -> str:
        return normalise_text("".join(self._parts))


def normalise_text(text: str) -> str:
    """Collapse runs of whitespace within lines and drop blank lines."""
    lines = (" ".join(line.split()) for line in text.splitlines())
    return "\n".join(line for line in lines if line)


def html_to_text(markup: str) -> str:
    """Plain text of an HTML fragment: scripts and styles dropped, entities unescaped,
    one line per block element."""
    extractor = _TextExtractor()
    extractor.feed(markup)
    extractor.close()
    return extractor.text()


# --- parsing ------------------------------------------------------------------


@dataclass(frozen=True)
class Caps:
    """fetch.max_entries and fetch.max_document_chars (see `read_feed`); None: no cap."""

    max_entries: int | None = None
    max_document_chars: int | None = None

    @classmethod
    def of(cls, fetch: FetchConfig) -> Caps:
        return cls(fetch.max_entries, fetch.max_document_chars)


@dataclass(frozen=True)
class ParsedFeed:
    documents: list[Document]
    notes: tuple[str, ...]  # what was over a cap, one line each


def parse_feed(data: bytes, *, source: str, location: str) -> list[Document]:
    """Documents of an RSS 0.9x/2.0, RSS 1.0 (RDF) or Atom feed, or a JSON Feed 1/1.1, in feed order, uncapped
    (see `read_feed`)."""
    return read_feed(data, source=source, location=location).documents


def read_feed(data: bytes, *, source: str, location: str, caps: Caps = Caps()) -> ParsedFeed:
    """Documents of an RSS 0.9x/2.0, RSS 1.0 (RDF) or Atom feed, or a JSON Feed 1/1.1, in feed order.

    An entry repeated with the same id and content is kept once; two different entries sharing an id
    are both kept (the corpus gives the later one a namespaced id). An id over MAX_ID_LENGTH characters
    is replaced by a hash of it. Only the first `caps.max_entries` entries are read, and a document's title and
    text are cut to `caps.max_document_chars` characters in all (`cut_text`); each cap met is logged and named in
    the notes. Raises FeedError naming `location` when the bytes are not a feed or hold no usable entry.
    """
    entries = _json_entries(data, location) if _looks_like_json(data) else _xml_entries(data, location)
    notes: list[str] = []
    max_entries, max_document_chars = caps.max_entries, caps.max_document_chars
    if max_entries is not None and len(entries) > max_entries:
        notes.append(f"source {source!r}: {len(entries):,} entries, {max_entries:,} kept (fetch.max_entries)")
        logger.warning("%s: %s", location, notes[-1])
        entries = entries[:max_entries]
    documents: list[Document] = []
    seen: set[tuple[str, str]] = set()
    cut: list[int] = []  # the original lengths of the documents cut
    for number, entry in enumerate(entries, start=1):
        document = _document(entry, source)
        if document is None:
            logger.warning("%s: entry %d has neither title nor text, skipped", location, number)
            continue
        if max_document_chars is not None and len(document.title) + len(document.text) > max_document_chars:
            cut.append(len(document.title) + len(document.text))
            title = cut_text(document.title, max_document_chars)
            document = dataclasses.replace(document, title=title,
                                           text=cut_text(document.text, max_document_chars - len(title)))
        bounded = bounded_id(document.id)
        if bounded != document.id:
            logger.warning("%s: entry %d has an id of %d characters (over %d), stored as %s", location, number,
                           len(document.id), MAX_ID_LENGTH, bounded)
            document = dataclasses.replace(document, id=bounded)
        if (document.id, document.content_hash) in seen:
            logger.warning("%s: entry %d repeats entry id %r with the same content, kept once", location, number,
                           document.id)
            continue
        seen.add((document.id, document.content_hash))
        documents.append(document)
    if cut:
        notes.append(f"source {source!r}: {len(cut):,} document{'s' if len(cut) > 1 else ''} of up to "
                     f"{max(cut):,} characters cut to {max_document_chars:,} (fetch.max_document_chars)")
        logger.warning("%s: %s", location, notes[-1])
    if not documents:
        raise FeedError(f"{location}: feed has no entries with a title or text")
    return ParsedFeed(documents, tuple(notes))


def cut_text(text: str, limit: int) -> str:
    """`text`, or its first `limit` characters at most, ending at a word boundary (mid-word only when the first
    word alone is longer than `limit`)."""
    if len(text) <= limit:
        return text
    if limit <= 0:
        return ""
    head = text[:limit]
    if not text[limit].isspace():
        space = max(head.rfind(" "), head.rfind("\n"))
        head = head[:space] if space > 0 else head
    return head.rstrip()


def bounded_id(doc_id: str) -> str:
    """`doc_id`, or a stable hash of it when it is longer than MAX_ID_LENGTH (ids land in every CSV row)."""
    if len(doc_id) <= MAX_ID_LENGTH:
        return doc_id
    return "sha256:" + hashlib.sha256(doc_id.encode("utf-8", "surrogatepass")).hexdigest()


def _xml_entries(data: bytes, location: str) -> list[Mapping[str, Any]]:
    import feedparser  # here, not at the top: a day whose files are all known parses none (0.1 s to import)

    # A BytesIO, because feedparser treats a bytes string that looks like a path or URL as one.
    parsed = feedparser.parse(io.BytesIO(data))
    entries = parsed.get("entries") or []
    problem = _bozo_reason(parsed, data)
    # An HTML error page parses without bozo but with no version, so both are checked.
    if not parsed.get("version"):
        raise FeedError(f"{location}: not a valid feed: {problem or 'no RSS, RDF or Atom root element'}")
    if problem and not entries:
        raise FeedError(f"{location}: not a valid feed: {problem}")
    if not entries:
        raise FeedError(f"{location}: feed has no entries")
    if problem:
        logger.warning("%s: malformed feed, keeping %d recovered entries (%s)", location, len(entries), problem)
    return entries


def _looks_like_json(data: bytes) -> bool:
    return data.removeprefix(codecs.BOM_UTF8).lstrip()[:1] == b"{"


def _json_entries(data: bytes, location: str) -> list[Mapping[str, Any]]:
    """The items of a JSON Feed (https://jsonfeed.org/version/1.1) as feedparser-style entries."""
    try:
        text = data.removeprefix(codecs.BOM_UTF8).decode("utf-8")
    except UnicodeDecodeError as error:
        raise FeedError(f"{location}: not a valid JSON Feed: not UTF-8 ({error.reason} at byte {error.start})") \
            from None
    feed = jsonl.loads_bounded(text, f"{location}: not a valid JSON Feed", FeedError)
    version = feed.get("version") if isinstance(feed, dict) else None
    if not isinstance(version, str) or not version.startswith(JSON_FEED_VERSION):
        raise FeedError(f"{location}: not a valid JSON Feed: version is {version!r}, "
                        f"expected {JSON_FEED_VERSION} or {JSON_FEED_VERSION}.1")
    items = feed.get("items")
    if not isinstance(items, list):
        raise FeedError(f"{location}: not a valid JSON Feed: \"items\" is not a list")
    if not items:
        raise FeedError(f"{location}: feed has no entries")
    entries = [_json_entry(item) for item in items if isinstance(item, dict)]
    if len(entries) < len(items):
        logger.warning("%s: %d JSON Feed items are not objects, skipped", location, len(items) - len(entries))
    return entries


def _json_entry(item: Mapping[str, Any]) -> dict[str, Any]:
    def text(key: str) -> str:
        value = item.get(key)
        return value if isinstance(value, str) else ""

    content = ([{"value": text("content_html"), "type": "text/html"}] if text("content_html") else
               [{"value": text("content_text"), "type": "text/plain"}])
    tags = item.get("tags") if isinstance(item.get("tags"), list) else []
    raw_id = item.get("id")  # a string in 1.1; version 1 feeds also used numbers
    return {
        "id": str(raw_id) if isinstance(raw_id, (str, int)) and not isinstance(raw_id, bool) else "",
        "title_detail": {"value": text("title"), "type": "text/plain"},
        "content": content,
        "summary_detail": {"value": text("summary"), "type": "text/plain"},
        "link": text("url") or text("external_url"),
        "published_parsed": _json_date(text("date_published")),
        "updated_parsed": _json_date(text("date_modified")),
        "tags": [{"term": tag} for tag in tags if isinstance(tag, str)],
    }


def _json_date(value: str) -> time.struct_time | None:
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    if moment.tzinfo is None:  # RFC 3339 requires an offset; read a missing one as UTC
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.utctimetuple()


def _bozo_reason(parsed: Mapping[str, Any], data: bytes) -> str | None:
    import feedparser

    error = parsed.get("bozo_exception")
    # Notes, not faults: chiefly a legacy encoding the charset detector (chardet) recognised.
    if not parsed.get("bozo") or isinstance(error, feedparser.ThingsNobodyCaresAboutButMe):
        return None
    if isinstance(error, xml.sax.SAXParseException):
        line = error.getLineNumber()
        if not _starts_with_xml_declaration(data):
            # feedparser prepends a declaration line before handing the bytes to expat.
            line = max(1, line - 1)
        # expat counts columns from 0; editors count from 1.
        return f"line {line}, column {error.getColumnNumber() + 1}: {error.getMessage()}"
    return str(error) or type(error).__name__


def _starts_with_xml_declaration(data: bytes) -> bool:
    for bom, encoding in ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"),
                          (codecs.BOM_UTF16_BE, "utf-16-be")):
        if data.startswith(bom) and data[len(bom):].startswith("<?xml".encode(encoding)):
            return True
    return any(data.startswith("<?xml".encode(encoding)) for encoding in ("utf-8", "utf-16-le", "utf-16-be"))


def _document(entry: Mapping[str, Any], source: str) -> Document | None:
    title_detail = entry.get("title_detail") or {"value": entry.get("title") or ""}
    # A title is one line even when the markup has breaks in it.
    title = " ".join(_detail_text(title_detail).split())
    text = _entry_text(entry)
    if not title and not text:
        return None
    url = (entry.get("link") or "").strip()
    published = _published(entry)
    entry_id = (entry.get("id") or "").strip() or url or _hash_id(source, title, published)
    return Document(
        id=entry_id,
        title=title,
        text=text,
        url=url,
        published=published,
        source=source,
        categories=_categories(entry.get("tags") or []),
    )


def _detail_text(detail: Mapping[str, Any]) -> str:
    value = detail.get("value") or ""
    # Plain-text values are already unescaped by feedparser; parsing them as HTML would eat "a<b".
    if "html" in (detail.get("type") or "text/html"):
        return html_to_text(value)
    return normalise_text(value)


def _entry_text(entry: Mapping[str, Any]) -> str:
    contents = [_detail_text(content) for content in entry.get("content") or []]
    longest = max(contents, key=len, default="")
    if longest:
        return longest
    summary = entry.get("summary_detail") or {"value": entry.get("summary") or ""}
    return _detail_text(summary)


def _published(entry: Mapping[str, Any]) -> datetime | None:
    # RSS 1.0 dc:date and Atom <updated> only ever reach updated_parsed.
    for key in ("published_parsed", "updated_parsed"):
        parsed = entry.get(key)
        if not parsed:
            continue
        try:
            # timegm, not datetime(*parsed[:6]): it copes with a leap second (tm_sec 60).
            return datetime.fromtimestamp(calendar.timegm(parsed), tz=timezone.utc)
        except (OverflowError, ValueError, OSError):
            logger.debug("unusable %s %r", key, parsed)
    return None


def _hash_id(source: str, title: str, published: datetime | None) -> str:
    # The source is part of it: two feeds' undated "Weather" briefs are different entries.
    stamp = published.isoformat() if published else ""
    return "sha1:" + hashlib.sha1(f"{source}|{title}|{stamp}".encode("utf-8")).hexdigest()


def _categories(tags: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    terms = (" ".join((tag.get("term") or "").split()) for tag in tags)
    return tuple(dict.fromkeys(term for term in terms if term))


# --- HTTP ---------------------------------------------------------------------


def fetch_url(
    url: str,
    *,
    timeout: float,
    max_bytes: int,
    user_agent: str,
    etag: str | None = None,
    last_modified: str | None = None,
) -> HttpResult:
    """GET a feed over HTTP(S), conditionally when an ETag or Last-Modified is given.

    The whole exchange (connect, status line, headers and body) must end within `timeout` seconds of
    wall-clock time. A 304 to a conditional GET gives status 304 and no body. Raises FeedError naming
    the URL on timeouts, HTTP errors (a 304 to a GET that sent no validator among them), connection
    errors, bodies over `max_bytes` and bodies shorter than their Content-Length.
    """
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    if scheme not in HTTP_SCHEMES:
        raise FeedError(f"{url}: unsupported URL scheme {scheme!r} (only http and https)")
    headers = {"User-Agent": user_agent, "Accept": FEED_ACCEPT}
    if etag:
        headers["If-None-Match"] = etag
    if last_modified:
        headers["If-Modified-Since"] = last_modified
    request = urllib.request.Request(url, headers=headers)
    try:
        response = netio.exchange(request, timeout=timeout, max_bytes=max_bytes, follow_redirects=True)
    except urllib.error.HTTPError as error:
        error.close()
        if error.code == 304 and (etag or last_modified):
            # A server may omit the validators on a 304; the ones sent are still current.
            return HttpResult(
                status=304,
                body=None,
                etag=error.headers.get("ETag") or etag,
                last_modified=error.headers.get("Last-Modified") or last_modified,
            )
        if error.code == 304:
            raise FeedError(f"{url}: HTTP 304 Not Modified to a request that sent no validator") from None
        raise FeedError(f"{url}: HTTP {error.code} {error.reason}") from None
    except TimeoutError:
        raise FeedError(f"{url}: timed out after {timeout:g} s") from None
    except netio.BodyError as error:
        raise FeedError(f"{url}: {error}") from None
    except urllib.error.URLError as error:
        raise FeedError(f"{url}: cannot connect: {error.reason}") from None
    except (OSError, http.client.HTTPException, ValueError) as error:
        raise FeedError(f"{url}: {type(error).__name__}: {error}") from None
    return HttpResult(
        status=response.status,
        body=response.body,
        etag=response.headers.get("ETag"),
        last_modified=response.headers.get("Last-Modified"),
    )


# --- files and dated folders --------------------------------------------------


def dated_files(folder: Path, up_to: date) -> list[tuple[date, Path]]:
    """Feed files named YYYY-MM-DD[-anything].xml|.rss|.atom|.json dated on or before `up_to`,
    sorted by (date, name). Raises FeedError if the folder cannot be listed."""
    try:
        candidates = list(folder.iterdir())
    except OSError as error:
        raise FeedError(f"{folder}: cannot list folder: {error.strerror or error}") from None
    selected: list[tuple[date, Path]] = []
    for path in candidates:
        match = _DATED_NAME.fullmatch(path.name)
        if match is None or not path.is_file():
            logger.debug("%s: not a dated feed file, ignored", path)
            continue
        try:
            day = date(*(int(part) for part in match.groups()))
        except ValueError:
            logger.warning("%s: impossible date in file name, ignored", path)
            continue
        if day <= up_to:
            selected.append((day, path))
    return sorted(selected, key=lambda item: (item[0], item[1].name))


def collect(
    name: str,
    *,
    url: str | None = None,
    path: Path | None = None,
    run_date: date,
    http_cache: MutableMapping[str, HttpCacheEntry],
    timeout: float = 20.0,
    max_bytes: int = 10_000_000,
    user_agent: str = DEFAULT_USER_AGENT,
    known: Mapping[str, FileValidator] | None = None,
    caps: Caps = Caps(),
) -> list[FeedOutcome]:
    """Fetch and parse one configured source: one outcome for a URL or a file, one per
    dated file of a folder.

    `known` maps a dated file's path to the validator of the version the corpus already holds: such a
    file is read and hashed but not parsed (an `unchanged` outcome without documents), which is what keeps
    a day's run from re-parsing every older file of the folder.

    Never raises for a bad feed: failures become outcomes with `error` set. A URL is live
    and sends and updates `http_cache[url]`; a single file drops entries published after
    the end of `run_date` (UTC); a folder selects files by the date in their name only.
    Each feed is read within `caps` (see `read_feed`); what was over one is in its outcome's notes.
    Raises ValueError unless exactly one of `url` and `path` is given.
    """
    if (url is None) == (path is None):
        raise ValueError(f"source {name!r}: give exactly one of url or path")
    if url is not None:
        return [_collect_url(name, url, http_cache, timeout=timeout, max_bytes=max_bytes, user_agent=user_agent,
                             caps=caps)]
    path = Path(path)
    if path.is_dir():
        return _collect_folder(name, path, run_date, known or {}, caps)
    return [_collect_file(name, path, published_before=_start_of_next_day(run_date), caps=caps)]


def _collect_url(
    name: str,
    url: str,
    http_cache: MutableMapping[str, HttpCacheEntry],
    *,
    timeout: float,
    max_bytes: int,
    user_agent: str,
    caps: Caps,
) -> FeedOutcome:
    key = http_cache_key(url)
    cached = http_cache.get(key)
    try:
        result = fetch_url(
            url,
            timeout=timeout,
            max_bytes=max_bytes,
            user_agent=user_agent,
            etag=cached.etag if cached else None,
            last_modified=cached.last_modified if cached else None,
        )
    except FeedError as error:
        return _failed(name, url, error)
    if result.status == 304:
        http_cache[key] = HttpCacheEntry(etag=result.etag, last_modified=result.last_modified)
        return FeedOutcome(source=name, location=url, documents=[], error=None, not_modified=True)
    try:
        parsed = read_feed(result.body or b"", source=name, location=redact(url), caps=caps)  # named in warnings
    except FeedError as error:
        # Forget the validators, or the next run would get a 304 for this same broken
        # body and report the feed as healthy.
        http_cache.pop(key, None)
        return _failed(name, url, error)
    http_cache[key] = HttpCacheEntry(etag=result.etag, last_modified=result.last_modified)
    return FeedOutcome(source=name, location=url, documents=parsed.documents, error=None, notes=parsed.notes)


def _collect_folder(name: str, folder: Path, run_date: date, known: Mapping[str, FileValidator],
                    caps: Caps) -> list[FeedOutcome]:
    try:
        every = dated_files(folder, date.max)
    except FeedError as error:
        return [_failed(name, str(folder), error)]
    if not every:
        # Misnamed files would otherwise make a healthy-looking run with no feeds and no documents.
        suffixes = ", ".join("." + suffix for suffix in FEED_SUFFIXES)
        return [_failed(name, str(folder), FeedError(
            f"{folder}: no feed file named YYYY-MM-DD[-anything] with a suffix of {suffixes} in the folder"))]
    files = [(day, path) for day, path in every if day <= run_date]
    if not files:
        logger.debug("%s: no dated feed files up to %s", folder, run_date.isoformat())
    return [dataclasses.replace(_collect_file(name, path, published_before=None, known=known, caps=caps),
                                replayed=day < run_date) for day, path in files]


def _collect_file(name: str, path: Path, *, published_before: datetime | None,
                  known: Mapping[str, FileValidator] | None = None, caps: Caps = Caps()) -> FeedOutcome:
    location = str(path)
    try:
        data = path.read_bytes()
        stat = path.stat()
        validator = FileValidator(len(data), stat.st_mtime_ns, hashlib.sha256(data).hexdigest())
        if known is not None and known.get(location) == validator:
            return FeedOutcome(source=name, location=location, documents=[], error=None, validator=validator,
                               unchanged=True)
        parsed = read_feed(data, source=name, location=location, caps=caps)
    except FileNotFoundError:
        return _failed(name, location, FeedError(f"{location}: no such file or directory"))
    except OSError as error:
        return _failed(name, location, FeedError(f"{location}: cannot read: {error.strerror or error}"))
    except FeedError as error:
        return _failed(name, location, error)
    documents = parsed.documents
    if published_before is not None:
        # Undated entries are kept: there is no telling when they appeared.
        kept = [doc for doc in documents if doc.published is None or doc.published < published_before]
        if len(kept) < len(documents):
            logger.debug("%s: %d entries published after %s skipped", location, len(documents) - len(kept),
                         published_before.isoformat())
        documents = kept
    return FeedOutcome(source=name, location=location, documents=documents, error=None, validator=validator,
                       notes=parsed.notes)


def _start_of_next_day(day: date) -> datetime:
    return datetime.combine(day + timedelta(days=1), dtime.min, tzinfo=timezone.utc)


def _failed(name: str, location: str, error: FeedError) -> FeedOutcome:
    logger.warning("source %r: feed failed: %s", name, redact(error))
    return FeedOutcome(source=name, location=location, documents=[], error=str(error))
