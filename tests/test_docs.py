"""Meta-tests that keep the documentation honest: CSV columns, CLI commands, config keys."""

from __future__ import annotations

import argparse
import dataclasses
import re
import typing
from pathlib import Path

import pytest

from pipeline import store
from pipeline.cli import build_parser
from pipeline.config import TARGET_KEYS, Config

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def readme_table_cells() -> set[str]:
    """Every `code` span inside a README table row."""
    return {span for line in README.splitlines() if line.startswith("|") for span in re.findall(r"`([^`]+)`", line)}


@pytest.mark.parametrize("name", sorted(store.SCHEMAS))
def test_every_csv_column_is_in_the_readme_schema_table(name):
    cells = readme_table_cells()
    assert name in cells
    assert [c for c in store.SCHEMAS[name] if c not in cells] == []


def test_every_cli_command_has_help_and_is_in_the_readme():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for choice in sub._choices_actions:
        assert choice.help, f"command {choice.dest} has no help text"
        assert f"python -m pipeline {choice.dest}" in README


def test_every_config_key_is_in_the_example_and_the_readme():
    example = (ROOT / "monitor.toml").read_text()
    for f in dataclasses.fields(Config):
        if f.name in ("file", "sources", "targets"):
            continue
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else None
        if f.name == "export":  # tables of optional sections, each commented out: [export.mlflow] ...
            for section in dataclasses.fields(default):
                assert f"# [export.{section.name}]" in example and f"`[export.{section.name}]`" in README
                hint = typing.get_type_hints(type(default))[section.name]
                for key in dataclasses.fields(typing.get_args(hint)[0]):
                    assert re.search(rf"^# {key.name} = ", example, re.M), f"export.{section.name}.{key.name}"
                    assert f"`{key.name}`" in README, f"export.{section.name}.{key.name} not in README"
        elif dataclasses.is_dataclass(default):
            assert f"[{f.name}]" in example and f"`[{f.name}]`" in README
            for key in dataclasses.fields(default):
                assert re.search(rf"^#? ?{key.name} = ", example, re.M), f"{f.name}.{key.name} not in monitor.toml"
                assert f"`{key.name}`" in README, f"{f.name}.{key.name} not in README"
        else:
            assert f"{f.name} = " in example and f"`{f.name}`" in README


def test_every_target_key_is_in_the_example_and_the_readme():
    example = (ROOT / "monitor.toml").read_text()
    assert "# [[targets]]" in example and "`[[targets]]`" in README
    for kind, keys in TARGET_KEYS.items():
        assert f'kind = "{kind}"' in example and f"`{kind}`" in README
        for key in keys:
            assert re.search(rf"^# {key} = ", example, re.M), f"targets.{key} not in monitor.toml"
            assert f"`{key}`" in README, f"targets.{key} not in README"
