"""Bounded parsing: every JSON that comes in (replies, logged lines, the outbox, mutes, sidecars, memos) refuses
100,000 nesting levels with a named error instead of a RecursionError; a hostile target fails alone and the run
writes its row; a configured path that is a folder, or under a file, is exit 2 naming the path."""

from __future__ import annotations

import json
import logging
import re
import shutil
import time
from datetime import date
from pathlib import Path

import pytest

from pipeline import cli, contract, job, jsonl, store
from pipeline.config import TargetConfig

DATA = Path(__file__).parent / "data"
DAY = date(2026, 11, 4)
LEVELS = 100_000
DEEP = "[" * LEVELS + "]" * LEVELS  # Python's json recurses once per level: RecursionError near here
DEEP_LINE = '{"query": ' + DEEP + "}"


def test_loads_bounded_refuses_depth_and_size_and_counts_no_bracket_inside_a_string():
    with pytest.raises(jsonl.BadJson, match=rf"^reply\.json: JSON nested deeper than {jsonl.MAX_DEPTH} levels"):
        jsonl.loads_bounded(DEEP, "reply.json")
    assert jsonl.loads_bounded("[" * jsonl.MAX_DEPTH + "]" * jsonl.MAX_DEPTH, "x") is not None
    with pytest.raises(jsonl.BadJson, match="nested deeper than"):
        jsonl.loads_bounded("[" * (jsonl.MAX_DEPTH + 1) + "]" * (jsonl.MAX_DEPTH + 1), "x")
    brackets = "[{" * 1000 + '\\"'  # inside a string (with an escaped quote): text, not nesting
    assert jsonl.loads_bounded(json.dumps({"q": brackets}), "x") == {"q": brackets}
    with pytest.raises(jsonl.BadJson, match="x: 12 characters of JSON, over the limit of 10"):
        jsonl.loads_bounded('{"a": "bcd"}', "x", max_chars=10)


@pytest.mark.parametrize("hostile", ['\\"' * 5_000_000, '"' + "[" * 10_000_000, "[]" * 5_000_000],
                         ids=["escaped quotes", "an unterminated string", "shallow brackets"])
def test_loads_bounded_scans_ten_megabytes_in_one_linear_pass(hostile):
    """A string pattern that backtracks took 9 s on 40 KB of \\" (quadratic); this one is linear."""
    t0 = time.perf_counter()
    try:
        jsonl.loads_bounded(hostile, "x")
    except jsonl.BadJson:
        pass
    assert time.perf_counter() - t0 < 5


def _gold(path: Path) -> object:
    from pipeline.gold import load_gold
    path.write_text('{"id": "q1", "question": "A?", "relevant": ["a"]}\n' + DEEP_LINE + "\n")
    return load_gold(path)


def _query_log(path: Path) -> object:
    from pipeline.drift import read_query_log
    path.write_text(json.dumps({"query": "a", "timestamp": "2026-11-04"}) + "\n" + DEEP_LINE + "\n")
    return read_query_log(path, DAY, 7)


def _logged_answers(path: Path) -> object:
    from pipeline.answers import read_logged
    from pipeline.gold import GoldQuestion
    path.write_text(DEEP_LINE + "\n")
    return read_logged(path, [GoldQuestion("q1", "A?", {"a": 1})], DAY)


def _logged_run(path: Path) -> object:
    from pipeline.gold import GoldQuestion
    from pipeline.targets import RunsTarget
    path.write_text(DEEP_LINE + "\n")
    target = RunsTarget(TargetConfig(name="logs", kind="runs", format="jsonl", path=path))
    return target.rankings([GoldQuestion("q1", "A?", {"a": 1})], 10, DAY)


def _mutes(path: Path) -> object:
    from pipeline.notify import MUTES_FILE, read_silences
    (path.parent / MUTES_FILE).write_text(DEEP)
    return read_silences(path.parent)


def _json_feed(path: Path) -> object:
    from pipeline.sources import _json_entries
    return _json_entries(('{"version": "https://jsonfeed.org/version/1.1", "items": ' + DEEP + "}").encode(),
                         str(path))


def _gate_report(path: Path) -> object:
    from pipeline.gate import load_report
    path.write_text(DEEP)
    return load_report(path)


def _judge_reply(path: Path) -> object:
    from pipeline.answers.judge import parse_relevance
    return parse_relevance(DEEP)


@pytest.mark.parametrize("read, error, message", [
    (_gold, "GoldError", r"in\.jsonl:2: JSON nested"),
    (_query_log, "DriftError", r"in\.jsonl:2: JSON nested"),
    (_logged_answers, "AnswersError", r"in\.jsonl:1: JSON nested"),
    (_logged_run, "TargetError", r"in\.jsonl:1: JSON nested"),
    (_mutes, "SilenceError", r"mutes\.json: JSON nested"),
    (_json_feed, "FeedError", r"in\.jsonl: not a valid JSON Feed: JSON nested"),
    (_gate_report, "GateError", r"in\.jsonl: JSON nested"),
    (_judge_reply, "ValueError", r"not JSON: the reply: JSON nested"),  # the client retries, then Unparseable
], ids=lambda v: getattr(v, "__name__", None))
def test_every_reader_names_a_deep_json_instead_of_recursing(tmp_path, read, error, message):
    with pytest.raises(Exception) as caught:
        read(tmp_path / "in.jsonl")
    assert error in {cls.__name__ for cls in type(caught.value).__mro__}, repr(caught.value)[:300]
    assert caught.match(message)


def test_damaged_stored_files_are_skipped_with_a_warning(tmp_path, caplog):
    """The outbox, a memo and an index sidecar are driftwatch's own files: a deep one is set aside, not fatal."""
    from pipeline import indexes, memo, notify

    alert = {"run_date": "2026-11-04", "rule": "floor", "pipeline": "bm25", "metric": "recall@5", "value": 0.1,
             "baseline": 0.5, "change_pct": -80.0, "threshold": 0.3, "severity": "alert", "message": "low"}
    (tmp_path / notify.OUTBOX_FILE).write_text(DEEP + "\n" + json.dumps(alert) + "\n")
    (tmp_path / memo.MEMO_DIR).mkdir()
    (tmp_path / memo.MEMO_DIR / "m.json").write_text(DEEP)
    (tmp_path / indexes.SIDECAR).write_text(DEEP)
    with caplog.at_level(logging.WARNING):
        assert [a.message for a in notify.pending(tmp_path)] == ["low"]
        assert memo.load(tmp_path, "m") is None
        assert indexes._read_sidecar(tmp_path) is None
    assert caplog.text.count(f"JSON nested deeper than {jsonl.MAX_DEPTH} levels") == 3
    assert f"{tmp_path / notify.OUTBOX_FILE}:1" in caplog.text


def test_a_target_replying_deep_json_fails_alone_and_the_run_writes_its_row(e2e_config, embedder, httpserver):
    httpserver.expect_request("/search", method="POST").respond_with_data(DEEP, content_type="application/json")
    config = e2e_config.replace(targets=(
        TargetConfig(name="bm25", kind="builtin"),
        TargetConfig(name="hostile", kind="http", url=httpserver.url_for("/search"), body='{"q": {query}}',
                     hits="hits", id="id", score="score", retries=0)))
    job.run_day(config, DAY, embedder=embedder)
    runs = store.read_runs(config.data_dir)
    assert runs["run_date"].dt.date.tolist() == [DAY]
    targets = store.read(config.data_dir, contract.TARGETS).set_index("target")
    assert targets.loc["hostile", "status"] == "failed" and targets.loc["bm25", "status"] == "ok"
    assert f"{httpserver.url_for('/search')}" in targets.loc["hostile", "message"]
    assert f"JSON nested deeper than {jsonl.MAX_DEPTH} levels" in targets.loc["hostile", "message"]
    assert set(store.read_metrics(config.data_dir)["pipeline"]) == {"bm25"}


def _config(tmp_path: Path, data_dir: Path, gold: Path, extra: str = "") -> Path:
    path = tmp_path / "monitor.toml"
    path.write_text(f'data_dir = "{data_dir}"\ngold = "{gold}"\n\n[[sources]]\nname = "ledger"\n'
                    f'path = "{tmp_path / "e2e" / "feeds"}"\n\n[retrieval]\npipelines = ["bm25"]\n{extra}')
    return path


@pytest.mark.parametrize("case", ["gold", "query_log", "csv", "data_dir_under_a_file"])
def test_a_path_of_the_wrong_kind_is_exit_2_naming_it_before_any_write(case, tmp_path, embedder, monkeypatch,
                                                                       capsys):
    """A gold set or query log that is a folder, a store CSV that is a folder, a data directory under a file: the
    library's own input check (what the dashboard and the benches call too) raises a domain error naming the path
    before the run writes anything, and the command line makes it exit 2 without a traceback."""
    from pipeline.config import load_config
    from pipeline.errors import DriftwatchError

    monkeypatch.setattr(job, "Embedder", lambda config: embedder)
    shutil.copytree(DATA / "e2e", tmp_path / "e2e")
    gold, data_dir, extra = tmp_path / "e2e" / "gold.jsonl", tmp_path / "store", ""
    if case == "gold":
        gold = named = tmp_path / "gold-folder"
        gold.mkdir()
    elif case == "query_log":
        named = tmp_path / "queries"
        named.mkdir()
        extra = f'\n[drift]\nquery_log = "{named}"\n'
    elif case == "csv":
        named = data_dir / contract.RUNS
        named.mkdir(parents=True)
    else:
        (tmp_path / "a-file").write_text("not a folder\n")
        data_dir = named = tmp_path / "a-file" / "store"
    path = _config(tmp_path, data_dir, gold, extra)
    with pytest.raises(DriftwatchError, match=re.escape(str(named))):
        job.run_day(load_config(path), DAY, embedder=embedder, notify=False)
    assert not (tmp_path / "store" / contract.METRICS).exists()
    code = cli.main(["run", "--config", str(path), "--date", str(DAY)])
    err = capsys.readouterr().err
    assert code == 2, err[-2000:]
    assert "Traceback" not in err and str(named) in err.split("error: ", 1)[-1], err[-2000:]
