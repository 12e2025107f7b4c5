"""Meta-tests that keep the documentation honest: the README's size, commands and links; the site's pages; CSV
columns, CLI commands, config and target keys in the pages that document them; the generated config reference."""

from __future__ import annotations

import argparse
import dataclasses
import re
import typing
from pathlib import Path

import pytest
import yaml

from pipeline import contract, docgen
from pipeline.cli import CHECKOUT_DASHBOARD, build_parser
from pipeline.config import CANDIDATE_KEYS, TARGET_KEYS, Config, ExportConfig, SourceConfig

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
README_LIMIT = 12 * 1024  # bytes: the README says what driftwatch is and how to start; the rest is in docs/
QUICK_START = [
    "python3 -m venv .venv && . .venv/bin/activate && pip install -r requirements.txt && python -m pipeline demo "
    "&& streamlit run app.py",
    "./.ci/run",
]
LINK = re.compile(r"\]\(([^)\s]+)\)")
SCHEMA_HEADING = "## The CSV series (the contract between the job and the dashboard)"


def page(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def nav_pages() -> list[str]:
    """The pages mkdocs.yml's nav lists, in order."""
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]
    return [next(iter(entry.values())) for entry in nav]


def table_cells(text: str) -> set[str]:
    """Every `code` span inside a table row."""
    return {span for line in text.splitlines() if line.startswith("|") for span in re.findall(r"`([^`]+)`", line)}


def section(text: str, heading: str) -> str:
    """A page's text from `heading` (a line) to the next heading of the same or a higher level."""
    level = heading.split(" ", 1)[0]
    start = text.index(f"\n{heading}\n") + 1
    following = re.search(rf"^#{{1,{len(level)}}} ", text[start + len(heading):], re.M)
    return text[start:start + len(heading) + following.start()] if following else text[start:]


def fenced_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", text, re.M | re.S)


# --- the README ------------------------------------------------------------------------------------------------


def test_the_readme_is_short():
    assert len(README.read_bytes()) <= README_LIMIT, f"README.md is over {README_LIMIT} bytes: move detail to docs/"


def test_the_readme_gives_the_two_quick_start_commands_as_ci_runs_them():
    blocks = fenced_blocks(README.read_text(encoding="utf-8"), "bash")
    assert [b.strip() for b in blocks[:2]] == QUICK_START
    assert (ROOT / ".ci" / "run").stat().st_mode & 0o111


def test_the_quick_start_ends_with_the_dashboard_command_the_demo_names():
    assert QUICK_START[0].endswith(f"&& {CHECKOUT_DASHBOARD}")  # the demo's last line names it (cli.dashboard_hint)


def test_the_readme_shows_the_overview_and_links_every_page():
    text = README.read_text(encoding="utf-8")
    links = LINK.findall(text)
    for link in links:
        assert (ROOT / link.split("#")[0]).exists(), f"README.md links {link}, which does not exist"
    assert "docs/images/overview.png" in links
    assert {f"docs/{name}" for name in nav_pages()} - {"docs/index.md"} <= set(links)
    assert "mkdocs serve" in text and "mkdocs build --strict" in text


# --- the site ----------------------------------------------------------------------------------------------------


def test_every_page_is_in_the_nav_and_linked_from_the_index():
    pages = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    assert sorted(nav_pages()) == pages, "docs/*.md and mkdocs.yml's nav disagree"
    assert set(nav_pages()) - {"index.md"} <= set(LINK.findall(page("index.md")))
    assert "images/overview.png" in LINK.findall(page("index.md"))


def test_ci_builds_the_site_strictly():
    run = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "mkdocs build --strict" in run
    assert run.index("pip install") < run.index("mkdocs build --strict") < run.index("python -m pytest")
    assert yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["strict"] is True


def test_the_configuration_reference_is_generated_and_fresh():
    assert page("configuration.md") == docgen.config_reference_markdown(), \
        f"docs/configuration.md is stale: regenerate it with `{docgen.COMMAND}`"


# --- what the pages must name ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(contract.SCHEMAS))
def test_every_csv_column_is_in_the_schema_table(name):
    cells = table_cells(section(page("concepts.md"), SCHEMA_HEADING))
    assert name in cells
    assert [c for c in contract.SCHEMAS[name] if c not in cells] == []


def test_every_cli_command_has_help_and_is_in_the_command_line_page():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    cells = table_cells(page("cli.md"))
    for choice in sub._choices_actions:
        assert choice.help, f"command {choice.dest} has no help text"
        assert f"python -m pipeline {choice.dest}" in cells, f"{choice.dest} is not in docs/cli.md's table"


def reference_keys(heading: str) -> set[str]:
    """The keys (first column) of a section's table in the configuration reference."""
    return {line.split("`")[1] for line in section(page("configuration.md"), heading).splitlines()
            if line.startswith("| `")}


def test_every_config_key_is_in_the_example_and_the_reference():
    example = (ROOT / "monitor.toml").read_text()
    concepts = section(page("concepts.md"), "## Configuration")
    assert reference_keys("## Top level") == {"data_dir", "gold"}
    assert reference_keys("## `[[sources]]`") == {f.name for f in dataclasses.fields(SourceConfig)}
    for f in dataclasses.fields(Config):
        if f.name in ("file", "sources", "targets"):
            continue
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else None
        if f.name == "export":  # tables of optional sections, each commented out: [export.mlflow] ...
            for exporter in dataclasses.fields(default):
                assert f"# [export.{exporter.name}]" in example and f"`[export.{exporter.name}]`" in concepts
                hint = typing.get_type_hints(ExportConfig)[exporter.name]
                keys = [key.name for key in dataclasses.fields(typing.get_args(hint)[0])]
                for key in keys:
                    assert re.search(rf"^# {key} = ", example, re.M), f"export.{exporter.name}.{key}"
                assert reference_keys(f"## `[export.{exporter.name}]`") == set(keys), f"export.{exporter.name}"
        elif dataclasses.is_dataclass(default):
            assert f"[{f.name}]" in example and f"`[{f.name}]`" in concepts, f.name
            keys = [key.name for key in dataclasses.fields(default)]
            for key in keys:
                assert re.search(rf"^#? ?{key} = ", example, re.M), f"{f.name}.{key} not in monitor.toml"
            assert reference_keys(f"## `[{f.name}]`") == set(keys), f"[{f.name}] in docs/configuration.md"
        else:
            assert f"{f.name} = " in example and f"`{f.name}`" in concepts


def test_every_target_key_is_in_the_example_and_the_docs():
    example = (ROOT / "monitor.toml").read_text()
    targets = page("targets.md")
    rows = [line.split(" | ") for line in section(page("configuration.md"), "## `[[targets]]`").splitlines()
            if line.startswith("| `")]
    documented = {(row[0].strip("| `"), row[1].strip("`")) for row in rows}
    assert "# [[targets]]" in example and "`[[targets]]`" in targets
    assert {("name", "every"), ("kind", "every")} <= documented
    for kind, keys in TARGET_KEYS.items():
        assert f'kind = "{kind}"' in example and f"`{kind}`" in targets
        for key in keys:
            assert re.search(rf"^# {key} = ", example, re.M), f"targets.{key} not in monitor.toml"
            assert (key, kind) in documented, f"targets.{key} ({kind}) not in docs/configuration.md"
            assert f"`{key}`" in targets, f"targets.{key} not in docs/targets.md"
    for key in CANDIDATE_KEYS:  # every kind takes them
        assert re.search(rf"^# {key} = ", example, re.M) and (key, "every") in documented and f"`{key}`" in targets
