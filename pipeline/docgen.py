"""The generated pages of the documentation site: the configuration reference (docs/configuration.md), from
config.py's defaults and the starter's notes, as `driftwatch init` writes monitor.toml, and the runbook
(docs/runbook.md), from the alert rules' `alerts.RUNBOOK`: `python -m pipeline.docgen`."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import typing
from pathlib import Path
from typing import Any

from pipeline import __version__
from pipeline.alerts import RUNBOOK, RUNBOOK_PAGE
from pipeline.config import (CANDIDATE_KEYS, TARGET_KEYS, TARGET_REQUIRED, Config, ExportConfig, SourceConfig,
                             TargetConfig, _toml_value)
from pipeline.starter import NOTES, STARTER_DATA_DIR, STARTER_GOLD, StarterKey, section_keys

DOCS_DIR = Path(__file__).resolve().parents[1] / "docs"
REFERENCE_FILE = DOCS_DIR / "configuration.md"
RUNBOOK_FILE = DOCS_DIR / RUNBOOK_PAGE
COMMAND = "python -m pipeline.docgen"

# One line of meaning per key of the tables the starter shows only by example or as one line ([[sources]],
# [[targets]], [export.NAME]); the notes of every [section] are the starter's own (starter.NOTES).
TABLE_NOTES: dict[str, dict[str, str]] = {
    "sources": {
        "name": "the source's name in logs, `check` and the corpus (`<source>/<id>` when two sources share an id)",
        "url": "an http(s) feed (RSS, RDF, Atom or JSON Feed), fetched with conditional GET; one of `url` or `path`",
        "path": ("a feed file, or a folder of dated files `YYYY-MM-DD[-name].xml` (also .rss, .atom, .json) "
                 "replayed up to the run date; relative to this file"),
        "documents": ("a folder of Markdown, HTML, text and PDF files, one document each (`<name>:<relative/path>`), "
                      "read recursively; a removed file is deleted that day ([Documents folders](concepts.md"
                      "#documents-folders)); one of `url`, `path` or `documents`"),
        "include": ("documents only: patterns of the relative paths read, e.g. `[\"manuals/*\", \"*.md\"]` "
                    "(fnmatch: `*` crosses folders; default: every Markdown, HTML, text and PDF file)"),
    },
    "targets": {
        "name": "the target's name: the `pipeline` of every series row it gets",
        "kind": "builtin, http, python, runs, chroma, pgvector or qdrant",
        "pipeline": "one of bm25, dense, hybrid, hybrid_rerank over the ingested corpus (default: the target's name)",
        "url": "the search endpoint, POSTed to for every gold question",
        "body": "a JSON body template: `{query}` becomes the question as a JSON string, `{k}` the depth",
        "hits": "dotted JSON path to the hit list in the response (\"\" for a top-level list)",
        "id": "path to a hit's document id",
        "score": "path to a hit's score",
        "text": "path to a hit's text (optional; the drift statistics use it when there are no [[sources]])",
        "headers": ("header to the NAME of the environment variable holding its value (read when the run starts, "
                    "never written to a file or a log)"),
        "timeout": "wall-clock seconds per request, connect to last byte",
        "retries": "further attempts after a timeout, a connection error, 429 or 5xx",
        "concurrency": "requests in flight at once",
        "max_bytes": "larger responses are refused",
        "function": "`module:function`, called `f(query, k)`, returning `[(doc_id, score[, text]), ...]`",
        "python_path": "a folder put first on sys.path (default: this file's folder)",
        "format": "trec, jsonl or openinference",
        "path": "the logged results; `{date}` in it becomes the run date (YYYY-MM-DD)",
        # The vector stores (pipeline/vectorstores.py); "kind.key" overrides a key's line for that kind.
        "collection": "the collection the team's indexing job writes",
        "table": "the table (or schema.table) holding one row per record",
        "dsn_env": "the NAME of the environment variable holding the connection string (never the dsn itself)",
        "doc_id": "the key (column, metadata or payload) of the record's document id; none: the record id is it",
        "vector": "the vector column (default `embedding`)",
        "model_field": "the key of the record's model stamp, when the indexing job writes one",
        "model": "the embedding model the collection was built with: the gold questions are embedded with it",
        "distance": "cosine (`<=>`, score 1 - distance) or ip (`<#>`, inner product)",
        "chroma.url": "the Chroma server (`chroma run`), e.g. http://127.0.0.1:8000; one of `url` or `path`",
        "chroma.path": "an embedded Chroma folder (PersistentClient); relative to this file",
        "qdrant.url": "the Qdrant server, e.g. http://127.0.0.1:6333; one of `url` or `path`",
        "qdrant.path": "a Qdrant local-mode folder; relative to this file",
        "qdrant.vector": "the named vector, when the collection has several (default: the unnamed one)",
        "qdrant.text": "the payload key of the record's text (optional)",
        "pgvector.id": "the id column",
        "qdrant.id": "the payload key of a record's own id (a chunk id: index health names it), else the point id",
        "pgvector.text": "the text column (optional)",
        "chroma.timeout": "seconds for each call to the store",
        "pgvector.timeout": "seconds for the connection and each statement (statement_timeout)",
        "qdrant.timeout": "seconds for each call to the store",
        "truncate_dim": ("a candidate's own `embedder.truncate_dim`: its own vectors (cached) and index over the same "
                         "corpus"),
        "backend": "a candidate's own `embedder.backend` (torch, onnx or onnx-int8): its own vectors and index",
        "chunk_size": ("a candidate's own `chunking.size` (words): the corpus split its way (cached), its own vectors "
                       "and index"),
        "chunk_overlap": "a candidate's own `chunking.overlap` (words; smaller than its chunk size)",
        "candidate": ("true: a shadow pipeline, evaluated every run and compared with `against` in canary.csv; "
                      "it never pages, gates or notifies"),
        "against": "a candidate's: the target it is compared with (default: the first target that is not a candidate)",
    },
    "export.mlflow": {
        "tracking_uri": "a folder relative to this file (MLflow's file store) or a tracking server's URL",
        "experiment": "the MLflow experiment the runs go to",
        "timeout": "wall-clock seconds for one export (every request to the server within it)",
    },
    "export.prometheus": {
        "path": "the textfile node_exporter's textfile collector reads (a name ending in `.prom`)",
    },
    "export.whylogs": {
        "projection_dims": ("columns of the fixed seeded random projection of the new chunks' embeddings; "
                            "0 keeps every dimension"),
    },
    "export.evidently": {
        "workspace": "an Evidently local workspace folder, relative to this file (`evidently ui --workspace` serves it)",
        "project": "the workspace's project each run's snapshot goes to (created when missing)",
    },
}

# Where each part is explained (page, title); strict builds of the site check these links.
_DAILY_JOB = ("concepts.md#the-daily-job", "The daily job")
SEE = {
    "sources": _DAILY_JOB,
    "fetch": _DAILY_JOB,
    "embedder": ("backends.md", "Embedding backends and Ray"),
    "chunking": _DAILY_JOB,
    "retrieval": _DAILY_JOB,
    "bm25": _DAILY_JOB,
    "rerank": _DAILY_JOB,
    "corpus": _DAILY_JOB,
    "drift": ("drift.md", "Drift statistics"),
    "alerts": ("alerts.md", "Alerts"),
    "targets": ("targets.md", "Your own retriever"),
    "export": ("exports.md", "Exports"),
    "generation": ("answers.md", "Answers"),
    "run": _DAILY_JOB,
    "index_health": ("targets.md#a-store-as-a-corpus-index-health", "A store as a corpus: index health"),
    "judging": ("judging.md", "Keeping the gold set current"),
}

HEADER = f"""# Configuration reference

<!-- Generated by `{COMMAND}` from pipeline/config.py and pipeline/starter.py: do not edit by hand. -->

Every key of `monitor.toml` with its default and one line of meaning, generated from `pipeline/config.py`'s
defaults and the notes `driftwatch init` writes into its starter file, so this page, the starter file and the
code cannot differ (a test regenerates the page; after changing a setting, run `{COMMAND}`).
Relative paths are relative to the config file; an unknown key or a bad value is refused with a message
naming the key. How the file is found, overridden and checked: [Concepts](concepts.md#configuration)."""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _code(value: Any) -> str:
    # A default naming the running version (the User-Agent) is shown with a placeholder, so a release changes
    # nothing here.
    return "`" + _cell(_toml_value(value).replace(__version__, "<version>")) + "`"


def _default(key: StarterKey) -> str:
    if key.default is None:
        return f"none (e.g. {_code(key.shown)})"
    return _code(key.default)


def _field_default(f: dataclasses.Field) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def _table(header: str, rows: list[list[str]]) -> list[str]:
    columns = header.split(",")
    return ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)] + \
        ["| " + " | ".join(_cell(c) if i == 0 else c for i, c in enumerate(row)) + " |" for row in rows]


def _see(section: str) -> str:
    page, title = SEE[section]
    return f"Explained in [{title}]({page})."


def _sentence(note: str) -> str:
    return note[0].upper() + note[1:]


def _top_level() -> list[str]:
    top = NOTES[""]
    rows = [[f"`{name}`", f"required (`init` writes {_code(shown)})", top[name]]
            for name, shown in (("data_dir", STARTER_DATA_DIR), ("gold", STARTER_GOLD))]
    return ["## Top level", "", *_table("key,default,meaning", rows)]


def _sources() -> list[str]:
    notes = TABLE_NOTES["sources"]
    rows = [[f"`{f.name}`", "required" if f.default is dataclasses.MISSING else "none", notes[f.name]]
            for f in dataclasses.fields(SourceConfig)]
    return ["## `[[sources]]`", "", f"{_sentence(NOTES['']['sources'])}; a run needs at least one. "
            + _see("sources"), "", *_table("key,default,meaning", rows)]


def _section(name: str, keys: list[StarterKey]) -> list[str]:
    rows = [[f"`{key.name}`", _default(key), _cell(key.note)] for key in keys]
    return [f"## `[{name}]`", "", _see(name), "", *_table("key,default,meaning", rows)]


def _targets() -> list[str]:
    notes = TABLE_NOTES["targets"]
    fields = {f.name: f for f in dataclasses.fields(TargetConfig)}
    rows = [[f"`{name}`", "every", "required", notes[name]] for name in ("name", "kind")]
    for kind, keys in TARGET_KEYS.items():
        for key in keys:
            default = "required" if key in TARGET_REQUIRED[kind] else \
                "none" if _field_default(fields[key]) is None else _code(_field_default(fields[key]))
            rows.append([f"`{key}`", f"`{kind}`", default, _cell(notes.get(f"{kind}.{key}", notes[key]))])
    for key in CANDIDATE_KEYS:
        default = _field_default(fields[key])
        rows.append([f"`{key}`", "every", "none" if default is None else _code(default), _cell(notes[key])])
    return ["## `[[targets]]`", "", f"{_sentence(NOTES['']['targets'])}. " + _see("targets"), "",
            *_table("key,kind,default,meaning", rows)]


def _exports() -> list[str]:
    lines: list[str] = []
    hints = typing.get_type_hints(ExportConfig)
    for exporter in dataclasses.fields(ExportConfig):
        section = f"export.{exporter.name}"
        notes = TABLE_NOTES[section]
        cls = typing.get_args(hints[exporter.name])[0]
        rows = [[f"`{f.name}`", "required" if _field_default(f) is dataclasses.MISSING else _code(_field_default(f)),
                 notes[f.name]] for f in dataclasses.fields(cls)]
        lines += ["", f"## `[{section}]`", "",
                  f"Off unless the table is present: {NOTES['export'][exporter.name]}. " + _see("export"), "",
                  *_table("key,default,meaning", rows)]
    return lines[1:]


def config_reference_markdown() -> str:
    """docs/configuration.md: every section and key of Config, in Config's order, with its default and meaning."""
    sections = section_keys()
    parts = [[HEADER], _top_level(), _sources()]
    for f in dataclasses.fields(Config):
        if f.name == "export":  # its keys are tables: each shown with its own keys
            parts.append(_exports())
        elif f.name == "targets":
            parts.append(_targets())
        elif f.name in sections:
            parts.append(_section(f.name, sections[f.name]))
    return "\n\n".join("\n".join(part) for part in parts) + "\n"


def runbook_markdown() -> str:
    """docs/runbook.md: one entry per alert rule (its heading's anchor is the rule's name, which the dashboard's
    condition lines link to), in the order of `alerts.RUNBOOK`."""
    lines = ["# Runbook: what to do when a rule fires", "",
             f"<!-- Generated by `{COMMAND}` from `pipeline/alerts.py` (RUNBOOK): edit that, not this page. -->", "",
             "Every open condition on the dashboard (the banner, the Overview, the Alerts page) carries its rule's "
             "next step and links here. Acknowledge a condition you are handling on the Alerts page, with your "
             "name: the banner shows it as acknowledged until the condition ends, the weekly review lists it, and a "
             "new condition still pages. See [Alerts and notifications](alerts.md) for how each rule decides."]
    for entry in RUNBOOK.values():
        lines += ["", f"## {entry.rule}", "", f"**Fires when** {entry.meaning}.", "",
                  f"**Next step:** {entry.next_step}.", "", *(f"{n}. {step}" for n, step in
                                                              enumerate(entry.steps, start=1))]
    return "\n".join(lines) + "\n"


PAGES = {"configuration": (REFERENCE_FILE, config_reference_markdown),
         "runbook": (RUNBOOK_FILE, runbook_markdown)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description="Write the generated pages of the documentation.")
    parser.add_argument("--out", type=Path, help="write this one page there (with --page; default: docs/)")
    parser.add_argument("--page", choices=sorted(PAGES), help="only this page (default: every one)")
    parser.add_argument("--check", action="store_true", help="exit 1 when a page is stale, writing nothing")
    args = parser.parse_args(argv)
    chosen = [args.page] if args.page else list(PAGES)
    if args.out is not None and len(chosen) != 1:
        print("--out names one page: give --page too", file=sys.stderr)
        return 2
    stale = 0
    for name in chosen:
        default, render = PAGES[name]
        out, text = args.out or default, render()
        if args.check:
            current = out.read_text(encoding="utf-8") if out.exists() else None
            if current != text:
                print(f"{out} is stale: run `{COMMAND}`", file=sys.stderr)
                stale = 1
            continue
        if not out.parent.is_dir():
            print(f"{out.parent}: no such folder (run from a checkout, or pass --out)", file=sys.stderr)
            return 2
        out.write_text(text, encoding="utf-8")
        print(f"wrote {out}")
    return stale


if __name__ == "__main__":
    sys.exit(main())
