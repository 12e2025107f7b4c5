"""Tests for pipeline.sources: feed parsing on hand-written fixtures, HTTP against a local server, dated folders."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import socket
import threading
import time
from datetime import date, datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from pipeline import __version__
from pipeline.config import Config, ConfigError, SourceConfig, require_sources
from pipeline.contract import MAX_ID_LENGTH
from pipeline.corpus import Corpus
from pipeline.job import ingest
from pipeline.sources import (
    DEFAULT_USER_AGENT,
    Document,
    FeedError,
    FeedOutcome,
    HttpCacheEntry,
    collect,
    dated_files,
    fetch_url,
    html_to_text,
    http_cache_key,
    parse_feed,
)

FEEDS = Path(__file__).parent / "data" / "feeds"
RSS_BYTES = (FEEDS / "rss20.xml").read_bytes()
RUN_DATE = date(2026, 11, 3)


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=timezone.utc)


def parse_fixture(name: str) -> list[Document]:
    return parse_feed((FEEDS / name).read_bytes(), source="courier", location=name)


# --- RSS 2.0 ------------------------------------------------------------------

# The fallback id hashes the source with the title and date: two feeds' identical briefs stay two entries.
BRIEF_ID = "sha1:" + hashlib.sha1(b"courier|Brief: CarStat revises October inflation|2026-11-03T11:15:00+00:00"
                                  ).hexdigest()
RSS_IDS = [
    "pol-041",
    "https://courier.example.cv/politics/2026/11/02/renn-lumen-outage",
    "pol-042",
    "pol-043",
    "pol-041",  # a different entry repeating the id: kept, the corpus gives it a namespaced id
    BRIEF_ID,
]


def test_rss20_ids_in_feed_order_repeated_id_kept_and_empty_entry_skipped(caplog):
    with caplog.at_level(logging.WARNING, logger="pipeline.sources"):
        documents = parse_fixture("rss20.xml")
    # guid; guid that is a permalink; guid; guid; the same guid again; hash id; (empty entry dropped)
    assert [doc.id for doc in documents] == RSS_IDS
    assert documents[4].title == "Correction: committee vote date"
    messages = [record.getMessage() for record in caplog.records]
    assert messages == ["rss20.xml: entry 7 has neither title nor text, skipped"]


def test_an_entry_repeated_with_the_same_content_is_kept_once(caplog):
    item = b"<item><guid>a-1</guid><title>Same</title><description>Same text</description></item>"
    feed = b"<rss version='2.0'><channel><title>t</title>" + item * 2 + b"</channel></rss>"
    with caplog.at_level(logging.WARNING, logger="pipeline.sources"):
        documents = parse_feed(feed, source="s", location="twice.xml")
    assert [doc.id for doc in documents] == ["a-1"]
    assert caplog.messages == ["twice.xml: entry 2 repeats entry id 'a-1' with the same content, kept once"]


def test_fallback_hash_id_depends_on_the_source():
    feed = b"<rss version='2.0'><channel><title>t</title><item><title>Weather</title></item></channel></rss>"
    (a,) = parse_feed(feed, source="a", location="a.xml")
    (b,) = parse_feed(feed, source="b", location="b.xml")
    assert a.id == "sha1:" + hashlib.sha1(b"a|Weather|").hexdigest()
    assert b.id == "sha1:" + hashlib.sha1(b"b|Weather|").hexdigest()


def test_an_id_over_the_length_limit_is_replaced_by_a_stable_hash(caplog):
    long_id = "\u00e9" * 40_000
    feed = (f"<rss version='2.0'><channel><title>t</title><item><guid>{long_id}</guid><title>Hostile</title>"
            "</item></channel></rss>").encode()
    with caplog.at_level(logging.WARNING, logger="pipeline.sources"):
        (document,) = parse_feed(feed, source="s", location="long.xml")
    assert document.id == "sha256:" + hashlib.sha256(long_id.encode()).hexdigest()
    assert len(document.id) <= MAX_ID_LENGTH
    assert caplog.messages == [f"long.xml: entry 1 has an id of 40000 characters (over {MAX_ID_LENGTH}), "
                               f"stored as {document.id}"]


def test_rss20_cdata_description_is_stripped_to_text():
    first = parse_fixture("rss20.xml")[0]
    assert first == Document(
        id="pol-041",
        title="Assembly committee delays vote on Bill A-217",
        # <p> -> one line each, <a> unwrapped, <script> gone, &rsquo; &amp; &#8220; unescaped,
        # the line break inside the second paragraph collapsed to a space.
        text=(
            "The Assembly\u2019s finance committee postponed its vote on Bill A-217 until Thursday.\n"
            "Finance Minister Oskar Vellin said the energy subsidy & the digital-services tax "
            "\u201cmust be settled together\u201d."
        ),
        url="https://courier.example.cv/politics/2026/11/03/bill-a-217-vote-delayed",
        # Tue, 03 Nov 2026 09:30:00 +0100
        published=utc(2026, 11, 3, 8, 30),
        source="courier",
        categories=("Politics", "Budget 2027"),  # the repeated "Politics" appears once
    )
    assert "alert" not in first.text


def test_rss20_escaped_html_description_and_title_entities():
    renn = parse_fixture("rss20.xml")[1]
    # &amp;#8216; in the XML is the HTML entity &#8216; once the XML layer is peeled off.
    assert renn.title == "Renn: Lumen Mobile outage \u2018a warning\u2019"
    assert renn.text == (
        "Opposition leader Tobias Renn called the day-3 outage of Lumen Mobile \u2018a warning\u2019 "
        "for the digital economy.\n"
        "He asked Digital Affairs Minister Petra Quill for a report under REG-2026/114."
    )
    assert renn.published == utc(2026, 11, 2, 17, 5)
    assert renn.categories == ("Technology",)


@pytest.mark.parametrize(
    ("index", "expected"),
    [
        (2, utc(2026, 11, 3, 23, 30)),  # Wed, 04 Nov 2026 00:30:00 +0100: still 3 November in UTC
        (3, utc(2026, 11, 4, 1, 30)),  # Tue, 03 Nov 2026 23:30:00 -0200: already 4 November in UTC
    ],
)
def test_rss20_offsets_become_utc_aware_datetimes(index, expected):
    published = parse_fixture("rss20.xml")[index].published
    assert published == expected
    assert published.utcoffset().total_seconds() == 0


def test_entry_without_guid_or_link_gets_a_stable_hash_id():
    first = parse_fixture("rss20.xml")[-1]
    second = parse_fixture("rss20.xml")[-1]
    assert first.id == second.id == BRIEF_ID
    assert first.url == ""
    assert first == second


# --- Atom 1.0 and RSS 1.0 -------------------------------------------------------


def test_atom_prefers_html_content_over_summary_and_uses_updated():
    plume, cubesat = parse_fixture("atom.xml")
    assert plume.id == "tag:news.dit.example.cv,2026-11-03:/silt-plume"
    assert plume.title == "DIT & Saltreach Marine Lab map the Velmora silt plume"
    # h2, p and each li on their own line; the <style> block gone.
    assert plume.text == (
        "A plume forty kilometres long\n"
        "Researchers from DIT and the Saltreach Marine Lab mapped the silt plume that the "
        "Velmora River carried into the bay after the October rains.\n"
        "Turbidity peaked on 28 October.\n"
        "Buoy data: SML-B7."
    )
    assert plume.url == "https://news.dit.example.cv/2026/11/silt-plume"
    assert plume.published == utc(2026, 11, 3, 15, 20)  # <updated>2026-11-03T16:20:00+01:00 only
    assert plume.categories == ("science", "velmora-floods")
    # No content: the html summary is used.
    assert cubesat.text == "The CSA chose a DIT camera for its first cubesat."
    assert cubesat.published == utc(2026, 11, 2, 8, 0)


def test_rdf_uses_rdf_about_dc_date_and_dc_subject():
    trial, plan = parse_fixture("rdf.xml")
    assert trial.id == "https://wire.example.cv/health/2026/11/03/ctr-7781-enrolment"
    assert trial.title == "Orvel Pharma completes enrolment in trial CTR-7781"
    assert trial.text == "St. Brennan University Hospital enrolled the last of 412 patients."
    assert trial.published == utc(2026, 11, 3, 8, 30)  # dc:date 2026-11-03T09:30:00+01:00
    assert trial.categories == ("Health", "Clinical trials")
    assert plan.published == utc(2026, 11, 2, 0, 0)  # a bare dc:date is midnight UTC


# --- malformed and empty feeds --------------------------------------------------


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("truncated-head.xml", "truncated-head.xml: not a valid feed: line 11, column 5: unclosed token"),
        # An HTML error page is well-formed enough that feedparser raises no bozo flag.
        ("not-xml.html", "not-xml.html: not a valid feed: no RSS, RDF or Atom root element"),
        ("empty-channel.xml", "empty-channel.xml: feed has no entries"),
    ],
)
def test_unusable_feeds_raise_feed_error_naming_the_file(name, message):
    with pytest.raises(FeedError) as caught:
        parse_fixture(name)
    assert str(caught.value) == message


def test_empty_body_is_not_a_valid_feed():
    with pytest.raises(FeedError, match=r"^https://x\.example/feed: not a valid feed"):
        parse_feed(b"", source="s", location="https://x.example/feed")


def test_truncated_feed_keeps_recovered_entries_and_warns(caplog):
    with caplog.at_level(logging.WARNING, logger="pipeline.sources"):
        documents = parse_fixture("truncated-items.xml")
    # The file stops inside pol-043's description: feedparser still returns that entry,
    # with the fields that closed (title, guid, date) and no text.
    assert [doc.id for doc in documents] == [
        "pol-041",
        "https://courier.example.cv/politics/2026/11/02/renn-lumen-outage",
        "pol-042",
        "pol-043",
    ]
    assert documents[0].text.startswith("The Assembly\u2019s finance committee")
    assert documents[3].text == ""
    assert [record.getMessage() for record in caplog.records] == [
        "truncated-items.xml: malformed feed, keeping 4 recovered entries (line 51, column 52: no element found)"
    ]


# --- HTML stripping and the content hash ----------------------------------------


@pytest.mark.parametrize(
    ("markup", "expected"),
    [
        ("<p>One</p><p>Two</p>", "One\nTwo"),
        ("a<br>b<br/>c", "a\nb\nc"),
        ("<div><p>deep</p></div>\n\n\n<p>next</p>", "deep\nnext"),
        ("x<script>var s = '<p>no</p>'; alert(1)</script>y", "xy"),
        ("<style>p { color: red }</style>text", "text"),
        ("<script>never closed <p>lost", ""),
        ("Tom &amp; Jerry &#8217;s &lt;b&gt; &nbsp;nbsp", "Tom & Jerry \u2019s <b> nbsp"),
        ("  many \t  spaces\nand a\nsoft wrap  ", "many spaces and a soft wrap"),
        ("<table><tr><td>CVK</td><td>1.08</td></tr><tr><td>EUR</td><td>1</td></tr></table>", "CVK 1.08\nEUR 1"),
        ("<ul><li>one</li><li><a href='/x'>two</a></li></ul>", "one\ntwo"),
        ("<h3>Head</h3>tail", "Head\ntail"),
        ("plain words", "plain words"),
    ],
)
def test_html_to_text(markup, expected):
    assert html_to_text(markup) == expected


def test_content_hash_is_sha256_of_title_text_and_url():
    document = Document(
        id="pol-041", title="T", text="line one\nline two", url="https://u",
        published=None, source="courier", categories=(),
    )
    assert document.content_hash == hashlib.sha256(b"T\nline one\nline two\nhttps://u").hexdigest()


# --- single files and dated folders ---------------------------------------------


@pytest.mark.parametrize(
    ("run_date", "expected_ids"),
    [
        # Renn was published 2 Nov 17:05 UTC, the hash-id brief 3 Nov 11:15 UTC, pol-042 3 Nov 23:30 UTC,
        # pol-043 4 Nov 01:30 UTC.
        (date(2026, 11, 1), []),
        (date(2026, 11, 2), ["https://courier.example.cv/politics/2026/11/02/renn-lumen-outage"]),
        (date(2026, 11, 3), ["pol-041", "https://courier.example.cv/politics/2026/11/02/renn-lumen-outage",
                             "pol-042", "pol-041", BRIEF_ID]),
        (date(2026, 11, 4), RSS_IDS),
    ],
)
def test_single_file_skips_entries_published_after_the_run_date(run_date, expected_ids):
    [outcome] = collect("courier", path=FEEDS / "rss20.xml", run_date=run_date, http_cache={})
    assert outcome.ok and not outcome.not_modified
    assert outcome.location == str(FEEDS / "rss20.xml")
    assert [doc.id for doc in outcome.documents] == expected_ids
    assert {doc.source for doc in outcome.documents} <= {"courier"}


def test_missing_file_is_a_failing_outcome(tmp_path, caplog):
    missing = tmp_path / "gone.xml"
    with caplog.at_level(logging.WARNING, logger="pipeline.sources"):
        [outcome] = collect("gone", path=missing, run_date=RUN_DATE, http_cache={})
    assert outcome == FeedOutcome(
        source="gone", location=str(missing), documents=[],
        error=f"{missing}: no such file or directory", not_modified=False,
    )
    assert not outcome.ok
    assert str(missing) in caplog.text


@pytest.mark.parametrize("where", [{}, {"url": "https://x.example/feed", "path": FEEDS / "rss20.xml"}])
def test_collect_needs_exactly_one_of_url_and_path(where):
    with pytest.raises(ValueError, match="exactly one of url or path"):
        collect("bad", run_date=RUN_DATE, http_cache={}, **where)


@pytest.fixture
def dated_folder(tmp_path: Path) -> Path:
    copies = {
        "2026-11-01.xml": "rss20.xml",
        "2026-11-02.rss": "rdf.xml",
        "2026-11-02-evening.atom": "atom.xml",
        "2026-11-03-wire.XML": "truncated-head.xml",
        "2026-11-04.xml": "rss20.xml",
        "2026-13-40.xml": "rss20.xml",
        "2026-11-01.xml.bak": "rss20.xml",
        "latest.xml": "rss20.xml",
        "2026-11-1.xml": "rss20.xml",
    }
    for name, fixture in copies.items():
        shutil.copy(FEEDS / fixture, tmp_path / name)
    (tmp_path / "README.md").write_text("archive of the courier feed\n")
    (tmp_path / "2026-11-02-old.xml").mkdir()
    return tmp_path


def test_dated_files_selects_by_name_date_and_warns_on_impossible_dates(dated_folder, caplog):
    with caplog.at_level(logging.DEBUG, logger="pipeline.sources"):
        files = dated_files(dated_folder, RUN_DATE)
    # Sorted by (date, name): "-" sorts before ".", so the evening file comes first on 2 November.
    assert files == [
        (date(2026, 11, 1), dated_folder / "2026-11-01.xml"),
        (date(2026, 11, 2), dated_folder / "2026-11-02-evening.atom"),
        (date(2026, 11, 2), dated_folder / "2026-11-02.rss"),
        (date(2026, 11, 3), dated_folder / "2026-11-03-wire.XML"),
    ]
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert warnings == [f"{dated_folder / '2026-13-40.xml'}: impossible date in file name, ignored"]
    assert f"{dated_folder / 'README.md'}: not a dated feed file, ignored" in caplog.text


def test_dated_folder_gives_one_outcome_per_file_and_a_bad_file_fails_alone(dated_folder):
    outcomes = collect("archive", path=dated_folder, run_date=RUN_DATE, http_cache={})
    assert [Path(outcome.location).name for outcome in outcomes] == [
        "2026-11-01.xml", "2026-11-02-evening.atom", "2026-11-02.rss", "2026-11-03-wire.XML",
    ]
    assert [outcome.ok for outcome in outcomes] == [True, True, True, False]
    # A folder selects by file date only: pol-043 (4 Nov UTC) stays in the 1 November file.
    assert [doc.id for doc in outcomes[0].documents][3] == "pol-043"
    assert [len(outcome.documents) for outcome in outcomes] == [6, 2, 2, 0]
    bad_file = dated_folder / "2026-11-03-wire.XML"
    assert outcomes[3].error == f"{bad_file}: not a valid feed: line 11, column 5: unclosed token"
    assert {doc.source for outcome in outcomes for doc in outcome.documents} == {"archive"}


def test_dated_folder_before_the_first_file_has_no_outcomes(dated_folder):
    assert collect("archive", path=dated_folder, run_date=date(2026, 10, 31), http_cache={}) == []


# --- HTTP -----------------------------------------------------------------------

ETAG = '"courier-v1"'
LAST_MODIFIED = "Wed, 04 Nov 2026 09:05:00 GMT"


class FeedServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), FeedHandler)
        self.requests: list[tuple[str, dict[str, str]]] = []
        # Slow handlers wait on this instead of sleeping, so teardown frees them at once.
        self.release = threading.Event()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}{path}"

    def headers_seen(self, path: str) -> list[dict[str, str]]:
        return [headers for seen_path, headers in self.requests if seen_path == path]


class FeedHandler(BaseHTTPRequestHandler):
    server: FeedServer

    def log_message(self, format: str, *args: object) -> None:
        pass  # keep pytest output clean

    def do_GET(self) -> None:
        self.server.requests.append((self.path, {key.lower(): value for key, value in self.headers.items()}))
        route = getattr(self, "route_" + self.path.strip("/").replace(".", "_").replace("-", "_"), None)
        try:
            (route or self.route_missing)()
        except OSError:
            pass  # the client gave up (timeout, size limit): expected in these tests

    def reply(
        self, status: int, body: bytes = b"", headers: dict[str, str] | None = None, *, sized: bool = True
    ) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if sized:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def route_politics_xml(self) -> None:
        validators = {"ETag": ETAG, "Last-Modified": LAST_MODIFIED}
        if self.headers.get("If-None-Match") == ETAG:
            self.reply(304, headers=validators, sized=False)
        else:
            self.reply(200, RSS_BYTES, {"Content-Type": "application/rss+xml; charset=utf-8", **validators})

    def route_dated_only_xml(self) -> None:
        if self.headers.get("If-Modified-Since") == LAST_MODIFIED:
            self.reply(304, sized=False)
        else:
            self.reply(200, RSS_BYTES, {"Last-Modified": LAST_MODIFIED})

    def route_slow_xml(self) -> None:
        self.server.release.wait(10)
        self.reply(200, RSS_BYTES)

    def route_trickle_xml(self) -> None:
        # Each piece arrives well within the read timeout; only the total deadline stops this.
        self.send_response(200)
        self.send_header("Content-Length", str(len(RSS_BYTES)))
        self.end_headers()
        for start in range(0, len(RSS_BYTES), 16):
            if self.server.release.wait(0.05):
                return
            self.wfile.write(RSS_BYTES[start:start + 16])

    def route_huge_xml(self) -> None:
        self.reply(200, RSS_BYTES)

    def route_huge_unsized_xml(self) -> None:
        # HTTP/1.0 without Content-Length: the body ends when the connection closes.
        self.reply(200, RSS_BYTES, sized=False)

    def route_error_page_xml(self) -> None:
        self.reply(200, (FEEDS / "not-xml.html").read_bytes(), {"ETag": '"error-page"'})

    def route_to_file_xml(self) -> None:
        self.reply(302, headers={"Location": "file:///etc/passwd"})

    def route_short_xml(self) -> None:
        # Content-Length promises the whole feed; the connection closes after half of it.
        self.send_response(200)
        self.send_header("Content-Length", str(len(RSS_BYTES)))
        self.send_header("ETag", '"short"')
        self.end_headers()
        self.wfile.write(RSS_BYTES[: len(RSS_BYTES) // 2])

    def route_always_304_xml(self) -> None:
        self.reply(304, headers={"ETag": '"never-sent"'}, sized=False)

    def route_missing(self) -> None:
        self.reply(404, b"not here")


@pytest.fixture
def server():
    feed_server = FeedServer()
    thread = threading.Thread(target=feed_server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield feed_server
    feed_server.release.set()
    feed_server.shutdown()
    feed_server.server_close()
    thread.join(timeout=5)


def test_second_fetch_sends_the_etag_and_gets_not_modified(server):
    url = server.url("/politics.xml")
    cache: dict[str, HttpCacheEntry] = {}

    [first] = collect("courier", url=url, run_date=RUN_DATE, http_cache=cache)
    assert first.ok and not first.not_modified
    assert first.location == url
    # A live URL is not filtered by run_date: pol-043 (4 Nov UTC) is there.
    assert [doc.id for doc in first.documents] == [doc.id for doc in parse_fixture("rss20.xml")]
    assert cache == {http_cache_key(url): HttpCacheEntry(etag=ETAG, last_modified=LAST_MODIFIED)}
    assert "if-none-match" not in server.headers_seen("/politics.xml")[0]

    [second] = collect("courier", url=url, run_date=RUN_DATE, http_cache=cache)
    assert second == FeedOutcome(source="courier", location=url, documents=[], error=None, not_modified=True)
    assert second.ok
    sent = server.headers_seen("/politics.xml")[1]
    assert sent["if-none-match"] == ETAG
    assert sent["if-modified-since"] == LAST_MODIFIED
    assert cache == {http_cache_key(url): HttpCacheEntry(etag=ETAG, last_modified=LAST_MODIFIED)}


def test_last_modified_alone_is_sent_back_and_kept_on_304(server):
    url = server.url("/dated-only.xml")
    cache: dict[str, HttpCacheEntry] = {}
    collect("courier", url=url, run_date=RUN_DATE, http_cache=cache)
    [second] = collect("courier", url=url, run_date=RUN_DATE, http_cache=cache)
    assert second.not_modified and second.ok
    assert "if-none-match" not in server.headers_seen("/dated-only.xml")[1]
    # This 304 carries no validators: the remembered one stays.
    assert cache == {http_cache_key(url): HttpCacheEntry(etag=None, last_modified=LAST_MODIFIED)}


def test_user_agent_and_accept_headers(server):
    collect("courier", url=server.url("/politics.xml"), run_date=RUN_DATE, http_cache={})
    fetch_url(server.url("/politics.xml"), timeout=5, max_bytes=100_000, user_agent="probe/1.0")
    default, custom = server.headers_seen("/politics.xml")
    assert default["user-agent"] == DEFAULT_USER_AGENT
    assert DEFAULT_USER_AGENT == f"driftwatch/{__version__} (+https://github.com/driftwatch/driftwatch)"
    assert custom["user-agent"] == "probe/1.0"
    assert default["accept"].startswith("application/rss+xml, application/atom+xml")


@pytest.mark.parametrize("path", ["/slow.xml", "/trickle.xml"])
def test_slow_server_times_out_without_hanging(server, path):
    url = server.url(path)
    started = time.monotonic()
    [outcome] = collect("slow", url=url, run_date=RUN_DATE, http_cache={}, timeout=0.5)
    elapsed = time.monotonic() - started
    assert outcome.error == f"{url}: timed out after 0.5 s"
    assert elapsed < 1.5


@pytest.mark.parametrize(
    ("path", "error"),
    [
        ("/missing.xml", "HTTP 404 Not Found"),
        ("/huge.xml", f"body of {len(RSS_BYTES)} bytes exceeds the limit of 1000 bytes"),
        ("/huge-unsized.xml", "body exceeds the limit of 1000 bytes"),
        ("/to-file.xml", "HTTP 302 Found - Redirection to url 'file:///etc/passwd' is not allowed"),
    ],
)
def test_http_failures_become_failing_outcomes_naming_the_url(server, path, error, caplog):
    url = server.url(path)
    with caplog.at_level(logging.WARNING, logger="pipeline.sources"):
        [outcome] = collect("courier", url=url, run_date=RUN_DATE, http_cache={}, max_bytes=1000)
    assert outcome == FeedOutcome(source="courier", location=url, documents=[], error=f"{url}: {error}")
    assert url in caplog.text


def test_oversized_body_is_read_only_up_to_the_limit(server):
    with pytest.raises(FeedError, match="exceeds the limit of 1000 bytes"):
        fetch_url(server.url("/huge-unsized.xml"), timeout=5, max_bytes=1000, user_agent="t")


def test_refused_connection_and_other_schemes_fail(tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    refused = f"http://127.0.0.1:{closed_port}/feed.xml"
    [outcome] = collect("down", url=refused, run_date=RUN_DATE, http_cache={}, timeout=2)
    assert outcome.error.startswith(f"{refused}: cannot connect: ")
    [local] = collect("local", url=f"file://{FEEDS / 'rss20.xml'}", run_date=RUN_DATE, http_cache={})
    assert local.error == f"file://{FEEDS / 'rss20.xml'}: unsupported URL scheme 'file' (only http and https)"


def test_invalid_body_fails_and_forgets_the_cached_validators(server):
    url = server.url("/error-page.xml")
    cache = {http_cache_key(url): HttpCacheEntry(etag='"old"', last_modified=None)}
    [outcome] = collect("courier", url=url, run_date=RUN_DATE, http_cache=cache)
    assert outcome.error == f"{url}: not a valid feed: no RSS, RDF or Atom root element"
    assert cache == {}


def test_a_failing_feed_does_not_stop_the_others(server):
    cache: dict[str, HttpCacheEntry] = {}
    sources = [
        {"url": server.url("/politics.xml")},
        {"url": server.url("/missing.xml")},
        {"path": FEEDS / "atom.xml"},
        {"path": FEEDS / "truncated-head.xml"},
        {"path": FEEDS / "rdf.xml"},
    ]
    outcomes = [outcome for where in sources
                for outcome in collect("mixed", run_date=RUN_DATE, http_cache=cache, **where)]
    assert [outcome.ok for outcome in outcomes] == [True, False, True, False, True]
    assert [len(outcome.documents) for outcome in outcomes] == [6, 0, 2, 0, 2]


def test_status_line_and_headers_dripped_byte_by_byte_meet_the_deadline(drip_server):
    started = time.monotonic()
    with pytest.raises(FeedError) as caught:
        fetch_url(drip_server.url, timeout=1.0, max_bytes=1000, user_agent="t")
    elapsed = time.monotonic() - started
    assert str(caught.value) == f"{drip_server.url}: timed out after 1 s"
    assert elapsed < 2 * 1.0 + 0.5  # the old per-read timeout took the whole 12 s drip


def test_a_body_shorter_than_its_content_length_fails_and_keeps_no_validators(server):
    url = server.url("/short.xml")
    cache: dict[str, HttpCacheEntry] = {}
    [outcome] = collect("courier", url=url, run_date=RUN_DATE, http_cache=cache)
    half = len(RSS_BYTES) // 2
    assert outcome.error == f"{url}: body truncated: {half} of {len(RSS_BYTES)} bytes (Content-Length) arrived"
    assert cache == {}  # an ETag saved here would make later 304s hide the missing items for good


def test_a_304_to_a_request_without_validators_is_not_healthy(server):
    url = server.url("/always-304.xml")
    cache: dict[str, HttpCacheEntry] = {}
    [outcome] = collect("courier", url=url, run_date=RUN_DATE, http_cache=cache)
    assert outcome.error == f"{url}: HTTP 304 Not Modified to a request that sent no validator"
    assert not outcome.not_modified and cache == {}


# --- JSON Feed and legacy encodings -----------------------------------------------


def test_json_feed_1_1_is_read():
    [document] = parse_fixture("jsonfeed.json")
    assert document == Document(
        id="INC-48213", title="Nationwide data outage resolved",
        text="Mobile data service was restored at 21:40 after a core router failure.",
        url="", published=utc(2026, 10, 21, 20, 45), source="courier", categories=(),
    )


def test_json_feed_version_1_with_html_content_numeric_ids_and_tags():
    feed = {
        "version": "https://jsonfeed.org/version/1", "title": "Wire",
        "items": [
            {"id": 7, "url": "https://wire.example/7", "title": "Port strike <ends>",
             "content_html": "<p>Dockers voted &amp; returned.</p><p>Cranes restart.</p>",
             "date_published": "2026-11-03T09:00:00Z", "tags": ["labour", "ports", "labour"]},
            {"id": "8", "content_text": "Untitled flash.", "summary": "ignored when there is content",
             "date_modified": "2026-11-03T10:00:00+02:00"},
        ],
    }
    first, second = parse_feed(json.dumps(feed).encode(), source="wire", location="wire.json")
    assert (first.id, first.url, first.title) == ("7", "https://wire.example/7", "Port strike <ends>")
    assert first.text == "Dockers voted & returned.\nCranes restart."
    assert first.published == utc(2026, 11, 3, 9, 0) and first.categories == ("labour", "ports")
    assert (second.id, second.title, second.text) == ("8", "", "Untitled flash.")
    assert second.published == utc(2026, 11, 3, 8, 0)


@pytest.mark.parametrize(("body", "message"), [
    (b'{"version": "https://example.org/feed", "items": []}',
     "not a valid JSON Feed: version is 'https://example.org/feed', expected https://jsonfeed.org/version/1 "
     "or https://jsonfeed.org/version/1.1"),
    (b'{"version": "https://jsonfeed.org/version/1.1",\n "items": [}',
     "not a valid JSON Feed: not valid JSON: Expecting value (line 2, column 12)"),
    (b'{"version": "https://jsonfeed.org/version/1.1", "items": []}', "feed has no entries"),
])
def test_unusable_json_feeds_name_the_file(body, message):
    with pytest.raises(FeedError) as caught:
        parse_feed(body, source="s", location="bad.json")
    assert str(caught.value) == f"bad.json: {message}"


@pytest.mark.parametrize("encoding", ["shift_jis", "windows-1251"])
def test_undeclared_legacy_encodings_are_detected(encoding, caplog):
    text = {"shift_jis": "東京都の新しい政策について、知事が記者会見で詳しく説明しました。",
            "windows-1251": "Правительство объявило о новых мерах поддержки малого бизнеса в регионах."}[encoding]
    feed = (f"<?xml version='1.0'?><rss version='2.0'><channel><title>t</title><item><guid>n-1</guid>"
            f"<title>{text[:12]}</title><description>{text}</description></item></channel></rss>").encode(encoding)
    with caplog.at_level(logging.WARNING, logger="pipeline.sources"):
        [document] = parse_feed(feed, source="s", location="legacy.xml")
    assert (document.title, document.text) == (text[:12], text)
    assert caplog.messages == []  # a recognised encoding is not a malformed feed


# --- folders that hold no dated feed ----------------------------------------------


def test_a_folder_of_misnamed_files_is_a_failed_feed_with_a_warning(tmp_path, caplog):
    for name in ("2026_11_03.xml", "nov-3.xml", "2026-11-03.txt"):
        shutil.copy(FEEDS / "rss20.xml", tmp_path / name)
    with caplog.at_level(logging.WARNING, logger="pipeline.sources"):
        [outcome] = collect("archive", path=tmp_path, run_date=RUN_DATE, http_cache={})
    assert outcome.error == (f"{tmp_path}: no feed file named YYYY-MM-DD[-anything] with a suffix of "
                             ".xml, .rss, .atom, .json in the folder")
    assert outcome.error in caplog.text


# --- ingest into a real corpus: id clashes, past dates, missing sources ----------------


def rss(*items: tuple[str, str]) -> bytes:
    """An RSS 2.0 feed of (guid, title) items."""
    body = "".join(f"<item><guid isPermaLink='false'>{guid}</guid><title>{title}</title>"
                   f"<description>{title}, in full.</description></item>" for guid, title in items)
    return f"<rss version='2.0'><channel><title>t</title>{body}</channel></rss>".encode()


def ingest_config(tmp_path: Path, *sources: SourceConfig) -> Config:
    return Config(data_dir=tmp_path / "store", gold=tmp_path / "gold.jsonl", sources=sources)


def stored(config: Config, day: date) -> dict[str, tuple[str, str]]:
    with Corpus.in_dir(config.data_dir) as corpus:
        return {s.document.id: (s.document.source, s.document.title) for s in corpus.snapshot(day)}


def test_two_feeds_sharing_a_guid_keep_both_entries_under_stable_ids(tmp_path, caplog):
    (tmp_path / "a.xml").write_bytes(rss(("1", "Harbour reopens"), ("2", "Budget vote")))
    (tmp_path / "b.xml").write_bytes(rss(("1", "Cup final tonight")))
    config = ingest_config(tmp_path, SourceConfig("alpha", path=tmp_path / "a.xml"),
                           SourceConfig("beta", path=tmp_path / "b.xml"))
    with caplog.at_level(logging.WARNING), Corpus.in_dir(config.data_dir) as corpus:
        ingest(config, corpus, RUN_DATE)
        ingest(config, corpus, date(2026, 11, 4))  # the next day: the same ids, nothing new
        counts = corpus.counts(date(2026, 11, 4))
    # The first holder keeps the feed's id (gold sets keep referring to it); the other is namespaced.
    assert stored(config, RUN_DATE) == {"1": ("alpha", "Harbour reopens"), "2": ("alpha", "Budget vote"),
                                        "beta/1": ("beta", "Cup final tonight")}
    assert (counts.new, counts.total) == (0, 3)
    clash = "source 'beta': entry id '1' is already held by source 'alpha'; stored as 'beta/1'"
    assert caplog.messages.count(clash) == 2
    assert "2026-11-03: 1 entries carried an id another entry holds and were stored under namespaced ids" \
        in caplog.messages


def test_a_feed_repeating_an_id_for_a_different_entry_keeps_both(tmp_path, caplog):
    config = ingest_config(tmp_path, SourceConfig("courier", path=FEEDS / "rss20.xml"))
    with caplog.at_level(logging.WARNING), Corpus.in_dir(config.data_dir) as corpus:
        ingest(config, corpus, RUN_DATE)
    documents = stored(config, RUN_DATE)
    assert documents["pol-041"][1] == "Assembly committee delays vote on Bill A-217"
    assert documents["courier/pol-041"][1] == "Correction: committee vote date"
    assert ("source 'courier': entry id 'pol-041' is already held by an earlier entry of the same feed; "
            "stored as 'courier/pol-041'") in caplog.messages


def test_a_namespaced_id_that_is_taken_gets_a_number_and_long_ids_stay_bounded(tmp_path):
    long_id = "x" * MAX_ID_LENGTH
    (tmp_path / "a.xml").write_bytes(rss(("1", "One"), (long_id, "Long")))
    (tmp_path / "b.xml").write_bytes(rss(("1", "Two"), ("1", "Three"), (long_id, "Longer")))
    config = ingest_config(tmp_path, SourceConfig("a", path=tmp_path / "a.xml"),
                           SourceConfig("b", path=tmp_path / "b.xml"))
    with Corpus.in_dir(config.data_dir) as corpus:
        ingest(config, corpus, RUN_DATE)
    documents = stored(config, RUN_DATE)
    hashed = "sha256:" + hashlib.sha256(f"b/{long_id}".encode()).hexdigest()
    assert {doc_id: title for doc_id, (_, title) in documents.items()} == {
        "1": "One", long_id: "Long", "b/1": "Two", "b/1#2": "Three", hashed: "Longer"}
    assert all(len(doc_id) <= MAX_ID_LENGTH for doc_id in documents)


def test_a_past_run_date_replays_the_corpus_instead_of_fetching(tmp_path, httpserver, caplog):
    httpserver.expect_request("/feed.xml").respond_with_data(rss(("1", "First story")),
                                                             content_type="application/rss+xml")
    config = ingest_config(tmp_path, SourceConfig("live", url=httpserver.url_for("/feed.xml")))
    today = date.today()
    with Corpus.in_dir(config.data_dir) as corpus:
        [fetched] = ingest(config, corpus, today)
        # The feed now carries a later story; re-running yesterday must not date it into the past.
        httpserver.clear()
        httpserver.expect_request("/feed.xml").respond_with_data(rss(("1", "First story"), ("2", "Later story")))
        with caplog.at_level(logging.INFO, logger="pipeline.job"):
            [replayed] = ingest(config, corpus, today - timedelta(days=1))
    assert fetched.ok and not fetched.replayed and len(fetched.documents) == 1
    assert replayed.replayed and replayed.documents == [] and replayed.ok
    assert httpserver.log == []  # nothing was requested for the past date
    assert stored(config, today - timedelta(days=1)) == {}
    assert set(stored(config, today)) == {"1"}
    assert "replaying the stored corpus" in caplog.text


def test_a_source_path_that_does_not_exist_stops_the_run_before_anything_is_stored(tmp_path):
    config = ingest_config(tmp_path, SourceConfig("good", path=FEEDS / "atom.xml"),
                           SourceConfig("gone", path=tmp_path / "nowhere"))
    with Corpus.in_dir(config.data_dir) as corpus, pytest.raises(FeedError) as caught:
        ingest(config, corpus, RUN_DATE)
    assert str(caught.value) == f"source 'gone': {tmp_path / 'nowhere'}: no such file or directory"
    assert stored(config, RUN_DATE) == {}


def test_no_sources_is_refused_with_a_config_error(tmp_path):
    config = ingest_config(tmp_path).replace(file=tmp_path / "monitor.toml")
    with pytest.raises(ConfigError, match=r"monitor\.toml: sources: none configured"):
        require_sources(config)
    with Corpus.in_dir(config.data_dir) as corpus, pytest.raises(ConfigError, match="none configured"):
        ingest(config, corpus, RUN_DATE)
