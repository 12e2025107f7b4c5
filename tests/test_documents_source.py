"""The documents-folder source: Markdown (with and without front matter), HTML, text and a real PDF run through the
daily job over four dates: titles and dates as read, an edited file versioned on its day, a deleted file deleted on
its day (its gold question's document missing), a broken PDF a warning that stops nothing, a re-run of an earlier
date unchanged, unchanged files not read again, sources.csv counting the new items."""

from __future__ import annotations

import logging
import os
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pandas as pd
import pytest

from pipeline import check, contract, folder_source, job, store
from pipeline.config import Config, ConfigError, RetrievalConfig, SourceConfig, load_config
from pipeline.corpus import Corpus
from pipeline.job import run_day
from pipeline.sources import FeedError

DAYS = [date(2025, 9, 10) + timedelta(days=i) for i in range(3)]
SOURCE = "manuals"


def pdf_bytes(lines: list[str], title: str | None = None) -> bytes:
    """A minimal valid PDF written by hand: one page, Helvetica, one line per entry, a metadata /Title if given."""
    stream = "\n".join(["BT /F1 12 Tf 72 720 Td 14 TL", *(f"({line}) Tj T*" for line in lines), "ET"]).encode()
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 5 0 R >> >> "
               b"/Contents 4 0 R >>",
               b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream),
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    if title:
        objects.append(b"<< /Title (%s) >>" % title.encode())
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for n, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (n, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    info = b" /Info %d 0 R" % len(objects) if title else b""
    out += b"trailer\n<< /Size %d /Root 1 0 R%s >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, info, xref)
    return bytes(out)


def _noon(day: date) -> float:
    return datetime(day.year, day.month, day.day, 12, tzinfo=timezone.utc).timestamp()


def _write(path: Path, content: str | bytes, day: date) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    os.utime(path, (_noon(day), _noon(day)))


KETTLE = "# Kettle descaling\n\nFill the kettle with white vinegar and water, boil, and leave it for an hour.\n"
KETTLE_EDITED = "# Kettle descaling\n\nUse citric acid, never vinegar: boil it twice and rinse three times.\n"
BOILER = ("---\ntitle: \"Boiler guide\"\ndate: 2025-09-03\ntags: [heating, winter]\n---\n# Servicing\n\n"
          "Bleed the radiators every autumn and check the boiler pressure gauge reads 1.5 bar.\n")
OVEN = ("<html><head><title>Oven | Home wiki</title><script>var x = 1;</script></head><body>"
        "<h1>Oven cleaning</h1><p>Run the pyrolytic cycle &amp; wipe the ash from the enamel.</p></body></html>")
FRIDGE = "Defrost the freezer drawer monthly and keep the fridge at four degrees.\n"


@pytest.fixture(scope="module")
def history(tmp_path_factory, embedder):
    """The folder and the job's results: DAYS[0] the first run; DAYS[1] the kettle edited and a broken PDF added;
    DAYS[2] the fridge notes deleted and the manual PDF corrupted; then DAYS[0] re-run."""
    root = tmp_path_factory.mktemp("documents")
    folder = root / "manuals"
    before = DAYS[0] - timedelta(days=1)
    _write(folder / "boiler.md", BOILER, before)
    _write(folder / "guides" / "kettle.md", KETTLE, before)
    _write(folder / "oven.html", OVEN, before)
    _write(folder / "notes" / "fridge.txt", FRIDGE, before)
    _write(folder / "washer.pdf", pdf_bytes(["Washing machine manual", "Clean the drum filter every month."],
                                            title="Washer Manual"), before)
    _write(folder / ".drafts" / "secret.md", "# Draft\nnot for the corpus\n", before)
    _write(folder / ".hidden.md", "# Hidden\nnot for the corpus\n", before)
    _write(folder / "photo.png", b"\x89PNG not a document", before)
    gold = root / "gold.jsonl"
    gold.write_text('{"id": "fridge", "question": "How cold should the fridge be?", '
                    '"relevant": ["manuals:notes/fridge.txt"]}\n'
                    '{"id": "kettle", "question": "How do I descale the kettle?", '
                    '"relevant": ["manuals:guides/kettle.md"]}\n')
    config = Config(data_dir=root / "store", gold=gold, sources=(SourceConfig(name=SOURCE, documents=folder),),
                    retrieval=RetrievalConfig(pipelines=("bm25",), k=(1,), candidate_depth=5))
    read: list[str] = []
    original = folder_source.read_document

    def spy(data: bytes, **kwargs) -> object:
        read.append(kwargs["relative"])
        return original(data, **kwargs)

    results, reads = [], []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(folder_source, "read_document", spy)
        for day in DAYS:
            if day == DAYS[1]:
                _write(folder / "guides" / "kettle.md", KETTLE_EDITED, day)
                _write(folder / "broken.pdf", b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog", day)
            if day == DAYS[2]:
                (folder / "notes" / "fridge.txt").unlink()
                _write(folder / "washer.pdf", b"%PDF-1.4 truncated by a bad copy", day)
            read.clear()
            results.append(run_day(config, day, embedder=embedder, notify=False))
            reads.append(sorted(read))
    rerun = run_day(config, DAYS[0], embedder=embedder, notify=False)
    return config, results, reads, rerun


def _snapshot(config: Config, day: date) -> dict[str, object]:
    with Corpus.in_dir(config.data_dir) as corpus:
        return {s.document.id: s.document for s in corpus.snapshot(day)}


def test_every_kind_of_file_is_one_document_with_its_title_and_date(history):
    config, results, reads, _ = history
    docs = _snapshot(config, DAYS[0])
    assert sorted(docs) == ["manuals:boiler.md", "manuals:guides/kettle.md", "manuals:notes/fridge.txt",
                            "manuals:oven.html", "manuals:washer.pdf"]  # hidden files and the .png skipped
    titles = {doc_id: d.title for doc_id, d in docs.items()}
    assert titles == {"manuals:boiler.md": "Boiler guide",  # front matter's title before the heading
                      "manuals:guides/kettle.md": "Kettle descaling",  # the first "# " heading
                      "manuals:notes/fridge.txt": "fridge",  # no heading: the file name
                      "manuals:oven.html": "Oven cleaning",  # <h1> before <title>
                      "manuals:washer.pdf": "Washer Manual"}  # the PDF's metadata title
    boiler = docs["manuals:boiler.md"]
    assert boiler.published == datetime(2025, 9, 3, tzinfo=timezone.utc) and boiler.categories == ("heating", "winter")
    assert not boiler.text.startswith("---") and "title:" not in boiler.text  # the front matter stripped
    assert docs["manuals:guides/kettle.md"].published == datetime.fromtimestamp(_noon(DAYS[0] - timedelta(days=1)),
                                                                                tz=timezone.utc)  # the mtime
    assert "var x" not in docs["manuals:oven.html"].text and "Home wiki" not in docs["manuals:oven.html"].text
    # pypdf read the hand-written PDF's text.
    assert docs["manuals:washer.pdf"].text == "Washing machine manual\nClean the drum filter every month."
    first = results[0].run
    assert (first["status"], first["feeds_ok"], first["feeds_failed"], first["docs_new"]) == (contract.STATUS_OK, 1,
                                                                                             0, 5)
    assert reads[0] == ["boiler.md", "guides/kettle.md", "notes/fridge.txt", "oven.html", "washer.pdf"]


def test_an_edited_file_is_a_new_version_on_its_day_and_unchanged_files_are_not_read(history):
    config, results, reads, _ = history
    assert reads[1] == ["broken.pdf", "guides/kettle.md"]  # the other four are known by size and mtime
    assert _snapshot(config, DAYS[0])["manuals:guides/kettle.md"].text.endswith("leave it for an hour.")
    assert _snapshot(config, DAYS[1])["manuals:guides/kettle.md"].text.endswith("rinse three times.")
    assert (results[1].run["docs_updated"], results[1].run["docs_new"]) == (1, 0)


def test_a_broken_pdf_warns_naming_it_and_the_run_goes_on(history, caplog):
    config, results, _, _ = history
    second, third = results[1].run, results[2].run
    # broken.pdf on DAYS[1]; on DAYS[2] broken.pdf again and washer.pdf corrupted: each a failed feed, never fatal.
    assert (second["status"], second["feeds_ok"], second["feeds_failed"]) == (contract.STATUS_DEGRADED, 1, 1)
    assert third["feeds_failed"] == 2
    # The washer manual's document stays as it was: an unreadable file is not a removed one.
    assert _snapshot(config, DAYS[2])["manuals:washer.pdf"].text.startswith("Washing machine manual")


def test_an_unreadable_file_is_a_warning_naming_it(tmp_path, caplog):
    _write(tmp_path / "good.txt", "some text\n", DAYS[0])
    _write(tmp_path / "bad.pdf", b"%PDF-1.4 truncated", DAYS[0])
    _write(tmp_path / "latin.txt", "caf\xe9".encode("latin-1"), DAYS[0])
    with caplog.at_level(logging.WARNING, logger="pipeline.folder_source"):
        scan = folder_source.scan(SOURCE, tmp_path, DAYS[0], {})
    failed = {o.location: o.error for o in scan.outcomes if not o.ok}
    assert set(failed) == {str(tmp_path / "bad.pdf"), str(tmp_path / "latin.txt")}
    assert failed[str(tmp_path / "bad.pdf")].startswith(f"{tmp_path / 'bad.pdf'}: not a readable PDF")
    assert "not UTF-8 text" in failed[str(tmp_path / "latin.txt")]
    assert all(error in caplog.text for error in failed.values())
    # Their ids still count as present: nothing is deleted for a file that could not be read.
    assert scan.ids == {f"{SOURCE}:bad.pdf", f"{SOURCE}:good.txt", f"{SOURCE}:latin.txt"}


def test_a_deleted_file_is_deleted_that_day_and_its_gold_question_misses_it(history):
    config, results, _, _ = history
    assert "manuals:notes/fridge.txt" in _snapshot(config, DAYS[1])
    assert "manuals:notes/fridge.txt" not in _snapshot(config, DAYS[2])
    assert results[2].run["docs_deleted"] == 1
    with Corpus.in_dir(config.data_dir) as corpus:
        [(deleted_at,)] = corpus.db.execute("SELECT deleted_at || ' ' || delete_reason FROM documents "
                                            "WHERE doc_id = 'manuals:notes/fridge.txt'").fetchall()
    assert deleted_at == f"{DAYS[2]} file removed from {config.sources[0].documents}"
    rows = store.read_per_question(config.data_dir)
    fridge = rows[rows[contract.QUESTION_ID] == "fridge"].set_index(contract.RUN_DATE)[contract.GOLD_MISSING]
    assert fridge[pd.Timestamp(DAYS[1])] == 0 and fridge[pd.Timestamp(DAYS[2])] == 1


def test_source_health_counts_the_folders_new_items(history):
    config, *_ = history
    rows = store.read(config.data_dir, contract.SOURCES).set_index(contract.RUN_DATE)
    assert list(rows[contract.NEW_ITEMS]) == [5, 0, 0]  # the re-run of DAYS[0] replaced its row
    assert list(rows[contract.TOTAL_ITEMS]) == [5, 5, 4]


def test_a_rerun_of_an_earlier_date_sees_neither_later_edits_nor_later_deletions(history):
    config, results, _, rerun = history
    day0 = _snapshot(config, DAYS[0])
    assert day0["manuals:guides/kettle.md"].text.endswith("leave it for an hour.")  # edited after DAYS[0]: not read
    assert "manuals:notes/fridge.txt" in day0 and "manuals:notes/fridge.txt" in _snapshot(config, DAYS[1])
    assert (rerun.run["docs_new"], rerun.run["docs_total"]) == (5, 5)


def test_a_documents_folder_is_validated_and_probed(tmp_path):
    toml = tmp_path / "monitor.toml"
    toml.write_text('data_dir = "data"\ngold = "gold.jsonl"\n[[sources]]\nname = "wiki"\ndocuments = "wiki"\n'
                    'url = "https://x.org/feed"\n')
    with pytest.raises(ConfigError, match=r"sources\[0\] \(wiki\): give exactly one of url, path or documents"):
        load_config(toml)
    toml.write_text('data_dir = "data"\ngold = "gold.jsonl"\n[[sources]]\nname = "wiki"\ndocuments = "wiki"\n')
    config = load_config(toml)
    assert config.sources[0].documents == tmp_path / "wiki"
    with pytest.raises(FeedError, match=r"source 'wiki': documents: .*wiki: no such folder"):
        job._check_sources(config)
    _write(tmp_path / "wiki" / "a.md", "# A page\nsome text\n", DAYS[0])
    [probe] = check.probe_sources(config)
    assert (probe.kind, probe.ok, probe.doc_ids) == ("documents", True, frozenset({"wiki:a.md"}))


def test_include_selects_files_by_relative_path(tmp_path):
    for relative in ("manuals/oven.md", "manuals/deep/fan.txt", "notes/todo.md", "top.html"):
        _write(tmp_path / relative, "# A page\nsome text\n", DAYS[0])
    ids = lambda include: folder_source.scan(SOURCE, tmp_path, DAYS[0], {}, include=include).ids  # noqa: E731
    assert ids(["manuals/*"]) == {f"{SOURCE}:manuals/oven.md", f"{SOURCE}:manuals/deep/fan.txt"}  # * crosses "/"
    assert ids(["*.md"]) == {f"{SOURCE}:manuals/oven.md", f"{SOURCE}:notes/todo.md"}
    nothing = folder_source.scan(SOURCE, tmp_path, DAYS[0], {}, include=["*.pdf"])
    assert nothing.ids is None and "no document file" in nothing.outcomes[0].error  # never "every file removed"
    toml = tmp_path / "monitor.toml"
    toml.write_text('data_dir = "data"\ngold = "gold.jsonl"\n[[sources]]\nname = "feed"\npath = "x.xml"\n'
                    'include = ["*.md"]\n')
    with pytest.raises(ConfigError, match=r"sources\[0\]\.include: selects files of a documents folder"):
        load_config(toml)


@pytest.mark.parametrize("markdown, title", [
    ("# One\n## Two\n", "One"),
    ("Intro\n=====\ntext\n", "Intro"),
    ("```\n# a comment in code\n```\n## Second level\n", "Second level"),
    ("no heading at all\n", ""),
])
def test_markdown_titles(markdown, title):
    assert folder_source._markdown_title(markdown) == title


def test_front_matter_is_key_value_lines_not_yaml():
    meta, body = folder_source.front_matter("---\ndate: 2025-09-03\ncategories:\n  - a\n  - 'b c'\n---\nbody\n")
    assert meta == {"date": "2025-09-03", "categories": ["a", "b c"]} and body == "body\n"
    assert folder_source.front_matter("--- not front matter\n") == ({}, "--- not front matter\n")
    ruled = "---\nAn opening paragraph between two rules.\n---\nbody\n"
    assert folder_source.front_matter(ruled) == ({}, ruled)  # no key: value line, so a thematic break, not metadata
