"""`init` (a starter config equal to config.py's defaults, never overwriting) and `check` (every source reached
once within its deadline, gold ids found or missing, nothing written), through the command line."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shutil
import time
from datetime import date
from pathlib import Path

import pytest

from pipeline import starter
from pipeline.cli import main
from pipeline.config import Config, load_config
from pipeline.corpus import Corpus
from pipeline.gold import load_gold
from pipeline.sources import parse_feed

DATA = Path(__file__).parent / "data"
RSS = DATA / "feeds" / "rss20.xml"
ATOM = DATA / "feeds" / "atom.xml"
ATOM_ID = "urn:uuid:6f0c1d3e-2b7a-4c1e-9e51-0d8b3c2a7f10"  # the cubesat story in atom.xml


def sections() -> dict[str, object]:
    """Config's sections (the dataclass-valued fields) with their defaults."""
    return {f.name: f.default_factory() for f in dataclasses.fields(Config)
            if f.default_factory is not dataclasses.MISSING and dataclasses.is_dataclass(f.default_factory())}


def test_the_starter_config_parses_to_the_defaults(tmp_path):
    assert main(["init", str(tmp_path / "proj")]) == 0
    cfg = load_config(tmp_path / "proj" / "monitor.toml")
    assert cfg.data_dir == tmp_path / "proj" / "data"
    assert cfg.gold == tmp_path / "proj" / "gold.jsonl"
    assert cfg.sources == ()
    for name, default in sections().items():
        assert getattr(cfg, name) == default, name
    assert [q.id for q in load_gold(cfg.gold)] == ["q1", "q2", "q3"]


def test_the_starter_names_every_key_with_a_note():
    text = starter.starter_toml()
    blocks = {block.split("]", 1)[0]: block for block in text.split("\n[")[1:]}
    assert set(starter.NOTES) == {"", *sections()}
    assert set(starter.NOTES[""]) == {f.name for f in dataclasses.fields(Config)} - {"file", *sections()}
    for name, default in sections().items():
        keys = [f.name for f in dataclasses.fields(default)]
        assert list(starter.NOTES[name]) == keys, name
        for key in keys:  # set, or commented out where the default cannot be written; each with its note
            line = next(line for line in blocks[name].splitlines() if line.lstrip("# ").startswith(f"{key} = "))
            assert line.endswith("# " + starter.NOTES[name][key]), line


def test_the_commented_out_keys_are_valid_when_uncommented(tmp_path):
    active = "\n".join(line[2:] if line.startswith("# ") and " = " in line.split("#")[1] else line
                       for line in starter.starter_toml().splitlines()
                       if not line.startswith(("# name", "# url", "# path", "# documents")))
    (tmp_path / "monitor.toml").write_text(active, encoding="utf-8")
    cfg = load_config(tmp_path / "monitor.toml")
    assert cfg.embedder.truncate_dim == 128 and cfg.retrieval.fusion_depth == 50
    assert cfg.fetch.user_agent == sections()["fetch"].user_agent


def test_init_refuses_to_overwrite_and_names_the_file(tmp_path, capsys):
    assert main(["init", str(tmp_path)]) == 0
    gold = tmp_path / "gold.jsonl"
    gold.write_text('{"id": "mine", "question": "kept?", "relevant": ["x"]}\n', encoding="utf-8")
    (tmp_path / "monitor.toml").unlink()
    capsys.readouterr()
    assert main(["init", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert str(gold) in err and "--force" in err
    assert not (tmp_path / "monitor.toml").exists()  # refused before the first write
    assert "mine" in gold.read_text(encoding="utf-8")
    assert main(["init", str(tmp_path), "--force"]) == 0
    assert "mine" not in gold.read_text(encoding="utf-8") and (tmp_path / "monitor.toml").exists()


def test_init_prints_the_cron_line_and_the_workflow(tmp_path, capsys):
    assert main(["init", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    cron = next(line.strip() for line in out.splitlines() if line.strip().startswith("17 6 * * * "))
    assert f"-m pipeline run --config {tmp_path / 'monitor.toml'}" in cron
    assert "runs-on: ubuntu-latest" in out and "driftwatch eval --config monitor.toml --gold gold.jsonl" in out


def project(tmp_path: Path, sources: list[dict], relevant: list[str], **settings: dict) -> Path:
    """An init'ed project with these [[sources]], one gold question per relevant id and extra settings."""
    assert main(["init", str(tmp_path)]) == 0
    config = tmp_path / "monitor.toml"
    text = config.read_text(encoding="utf-8")
    for section, values in settings.items():  # replace the starter's section with these keys
        head = text.index(f"[{section}]\n")
        end = text.index("\n\n", head)
        text = text[:head] + f"[{section}]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items()) + \
            text[end + 1:]
    tables = "".join("\n[[sources]]\n" + "".join(f"{k} = {json.dumps(str(v))}\n" for k, v in s.items())
                     for s in sources)
    head, rest = text.split("\n[fetch]", 1)
    config.write_text(head + tables + "\n[fetch]" + rest, encoding="utf-8")
    (tmp_path / "gold.jsonl").write_text("".join(json.dumps({"id": f"q{i}", "question": f"question {i}?",
                                                             "relevant": [d]}) + "\n"
                                                 for i, d in enumerate(relevant)), encoding="utf-8")
    return config


def row(out: str, *cells: str) -> bool:
    """Whether the check table has a row starting with these cells (columns padded with spaces)."""
    return re.search(r"^  " + r"\s+".join(map(re.escape, cells)), out, re.M) is not None


def tree(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def test_check_reaches_a_file_and_a_url_and_finds_the_gold_ids_writing_nothing(tmp_path, httpserver, capsys):
    httpserver.expect_request("/atom").respond_with_data(ATOM.read_bytes(), content_type="application/atom+xml")
    shutil.copy(RSS, tmp_path / "courier.xml")
    config = project(tmp_path, [{"name": "courier", "path": "courier.xml"},
                                {"name": "dit", "url": httpserver.url_for("/atom")}], ["pol-041", ATOM_ID])
    data = tmp_path / "data"
    with Corpus.in_dir(data) as corpus:  # an existing history: a real corpus file beside a series
        corpus.ingest(parse_feed(RSS.read_bytes(), source="courier", location=str(RSS)), date(2026, 11, 4))
    (data / "runs.csv").write_text("", encoding="utf-8")
    before = tree(data)
    capsys.readouterr()
    assert main(["check", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    n_rss = len(parse_feed(RSS.read_bytes(), source="courier", location=str(RSS)))
    assert row(out, "ok", "file", "courier", f"{n_rss} documents")
    assert row(out, "ok", "url", "dit", "2 documents") and httpserver.url_for("/atom") in out
    assert "2 questions, 2 of 2 relevant document ids found" in out and "check passed" in out
    assert len(httpserver.log) == 1  # reached once
    assert tree(data) == before  # no series written, not a byte of the data directory changed


def test_check_reports_unreachable_sources_and_missing_gold_ids(tmp_path, httpserver, capsys):
    httpserver.expect_request("/feed").respond_with_data("boom", status=500)
    config = project(tmp_path, [{"name": "broken", "url": httpserver.url_for("/feed")},
                                {"name": "gone", "path": "nowhere.xml"},
                                {"name": "courier", "path": str(RSS)}], ["pol-041", "not-in-any-feed"])
    capsys.readouterr()
    assert main(["check", "--config", str(config)]) == 1
    out = capsys.readouterr().out
    assert row(out, "FAILED", "url", "broken", f"{httpserver.url_for('/feed')}: HTTP 500")
    assert row(out, "FAILED", "file", "gone", str(tmp_path / "nowhere.xml") + ": no such file or directory")
    assert "1 of 2 relevant document ids found" in out and "missing 'not-in-any-feed' (question q1)" in out
    assert "check failed: 3 problem(s)" in out
    assert not (tmp_path / "data").exists()  # not even created


def test_check_gives_up_on_a_slow_feed_at_the_deadline(tmp_path, drip_server, capsys):
    config = project(tmp_path, [{"name": "slow", "url": drip_server.url}], [], fetch={"timeout": 1.0})
    (tmp_path / "gold.jsonl").write_text('{"id": "q", "question": "?", "relevant": ["a"]}\n', encoding="utf-8")
    started = time.monotonic()
    assert main(["check", "--config", str(config)]) == 1
    assert time.monotonic() - started < 6  # the server would take about 12 s to send its headers
    assert "timed out after 1 s" in capsys.readouterr().out


@pytest.mark.parametrize("edit, named", [
    (lambda t: t.replace("[chunking]", "[chunking]\nsizes = 3"), "unknown key chunking.sizes"),
    (lambda t: t.replace('gold = "gold.jsonl"', 'gold = "missing.jsonl"'), "missing.jsonl: gold set not found"),
    (lambda t: t.replace("[[sources]]", "[unknown]"), "unknown key unknown"),
    (lambda t: t.split("\n[[sources]]")[0], "sources: none configured"),
])
def test_check_exits_2_on_a_bad_config(tmp_path, capsys, edit, named):
    config = project(tmp_path, [{"name": "courier", "path": str(RSS)}], ["pol-041"])
    config.write_text(edit(config.read_text(encoding="utf-8")), encoding="utf-8")
    capsys.readouterr()
    assert main(["check", "--config", str(config)]) == 2
    assert named in capsys.readouterr().err


def test_check_asks_each_target_once_and_counts_its_gold_ids(tmp_path, capsys):
    """A python target beside the config answers the gold questions once; the ids it returns count as found."""
    (tmp_path / "teammod.py").write_text(
        "CALLS = []\n\ndef search(query, k):\n    CALLS.append(query)\n    return [('team-doc', 1.0)]\n",
        encoding="utf-8")
    config = project(tmp_path, [{"name": "courier", "path": str(RSS)}], ["pol-041", "team-doc"])
    with config.open("a", encoding="utf-8") as f:
        f.write('\n[[targets]]\nname = "team"\nkind = "python"\nfunction = "teammod:search"\n')
    capsys.readouterr()
    assert main(["check", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert row(out, "ok", "python", "team", "answered 2 questions") and "2 of 2 relevant document ids found" in out
    import teammod

    assert teammod.CALLS == ["question 0?", "question 1?"]


def test_model_folders_in_a_config_are_relative_to_the_config_file(tmp_path, monkeypatch):
    (tmp_path / "models" / "mine").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config = tmp_path / "monitor.toml"
    for given, expected in (("./models/mine", tmp_path / "models" / "mine"), ("models/mine", tmp_path / "models" / "mine"),
                            ("../x/y", tmp_path / ".." / "x" / "y"), ("owner/name", "owner/name"),
                            ("/abs/model", "/abs/model")):
        config.write_text(f'data_dir = "d"\ngold = "g"\n[embedder]\nmodel = "{given}"\n[rerank]\nmodel = "{given}"\n')
        cfg = load_config(config)
        assert cfg.embedder.model == str(expected) and cfg.rerank.model == str(expected), given


def test_the_printed_workflow_is_yaml_whose_gate_the_cli_accepts():
    yaml = pytest.importorskip("yaml")
    from pipeline.cli import build_parser

    flow = yaml.safe_load(starter.workflow("monitor.toml", "gold.jsonl"))
    steps = flow["jobs"]["gate"]["steps"]
    gate = next(step["run"] for step in steps if step.get("name") == "Gate")
    assert gate.startswith("driftwatch eval ")
    args = build_parser().parse_args(gate.split()[1:])
    assert (args.config, args.gold, args.k, args.baseline_optional) == ("monitor.toml", "gold.jsonl", 5, True)
