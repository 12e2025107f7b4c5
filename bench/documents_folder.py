"""Benchmark a documents-folder source: the first scan of a folder (every file read and parsed) against a day's scan
with nothing changed (each file's size and time compared with the corpus's record, none read), and one edit.
Run from the repo root: python -m bench.documents_folder [--peps ../shared/data/peps-stream] [--copies N]"""

from __future__ import annotations

import argparse
import html
import json
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

from pipeline import folder_source

SOURCE = "peps"
RUN_DATE = date.today()


def build(folder: Path, articles: Path, copies: int) -> int:
    """The PEPs as Markdown with front matter, HTML and plain text in turn, `copies` times over; returns the files."""
    rows = [json.loads(line) for line in articles.read_text(encoding="utf-8").splitlines() if line.strip()]
    n = 0
    for copy in range(copies):
        for i, r in enumerate(rows):
            stem = folder / f"copy{copy}" / r["guid"]
            stem.parent.mkdir(parents=True, exist_ok=True)
            if i % 3 == 0:
                stem.with_suffix(".md").write_text(f"---\ndate: {r['date']}\ntags: [{r['type']}]\n---\n"
                                                   f"# {r['title']}\n\n{r['text']}\n", encoding="utf-8")
            elif i % 3 == 1:
                paragraphs = "".join(f"<p>{html.escape(p)}</p>" for p in r["text"].split("\n\n"))
                stem.with_suffix(".html").write_text(f"<html><head><title>{html.escape(r['title'])}</title></head>"
                                                     f"<body><h1>{html.escape(r['title'])}</h1>{paragraphs}</body>"
                                                     "</html>", encoding="utf-8")
            else:
                stem.with_suffix(".txt").write_text(r["text"], encoding="utf-8")
            n += 1
    return n


def timed_scan(folder: Path, known: dict) -> tuple[float, folder_source.Scan]:
    t0 = time.perf_counter()
    scan = folder_source.scan(SOURCE, folder, RUN_DATE, known)
    return time.perf_counter() - t0, scan


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--peps", type=Path, default=Path("../shared/data/peps-stream"))
    parser.add_argument("--copies", type=int, default=4)
    args = parser.parse_args(argv)
    articles = args.peps / "articles.jsonl"
    if not articles.is_file():
        print(f"{articles}: not found (pass --peps with the peps-stream folder)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        files = build(folder, articles, args.copies)
        megabytes = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6
        first, scan = timed_scan(folder, {})
        known = {o.location: o.validator for o in scan.outcomes if o.validator is not None}
        documents = sum(len(o.documents) for o in scan.outcomes)
        again, rescan = timed_scan(folder, known)
        read_again = sum(1 for o in rescan.outcomes if o.documents)
        edited = next(p for p in sorted(folder.rglob("*.md")))
        edited.write_text(edited.read_text(encoding="utf-8") + "\nAn edit.\n", encoding="utf-8")
        one, edit_scan = timed_scan(folder, known)
        print(f"documents folder: {files:,} files ({megabytes:.1f} MB of real PEP text as .md/.html/.txt)")
        print(f"  first scan (every file read and parsed): {first:.2f} s, {documents:,} documents, "
              f"{first / files * 1e3:.2f} ms a file")
        print(f"  unchanged day (size and mtime matched, no file read): {again:.3f} s, {read_again} files read, "
              f"{again / first:.1%} of the first")
        print(f"  one file edited: {one:.3f} s, {sum(1 for o in edit_scan.outcomes if o.documents)} file read")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
