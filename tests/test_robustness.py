"""Run-level robustness: every bad input a run reads is refused (exit 2, the file named) before the first write,
and what killed runs leave behind is cleaned up by the next run."""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable
from datetime import date
from pathlib import Path

import pytest

from pipeline import cli, contract, store
from pipeline.config import Config, EmbedderConfig, RerankConfig, RetrievalConfig, SourceConfig, to_toml
from pipeline.corpus import CORPUS_FILE
from pipeline.embeddings import Embedder, EmbedderError
from pipeline.job import run_day
from tests.conftest import DATA

DAYS = [date(2026, 11, 2), date(2026, 11, 3)]
NEXT_DAY = "2026-11-04"


def make_config(root: Path) -> Config:
    return Config(data_dir=root / "store", gold=root / "e2e" / "gold.jsonl",
                  sources=(SourceConfig(name="ledger", path=root / "e2e" / "feeds"),),
                  retrieval=RetrievalConfig(pipelines=("bm25", "dense", "hybrid"), k=(1, 3, 5), candidate_depth=10))


@pytest.fixture(scope="module")
def history(tmp_path_factory, embedder) -> Path:
    """Two real runs over the end-to-end feeds: a store with every CSV, a corpus and cached embeddings."""
    root = tmp_path_factory.mktemp("history")
    shutil.copytree(DATA / "e2e", root / "e2e")
    for day in DAYS:
        run_day(make_config(root), day, embedder=embedder, events="first line\nsecond line")
    return root


@pytest.fixture()
def config(history, tmp_path) -> Config:
    """A fresh copy of the history, and its config."""
    shutil.copytree(history, tmp_path, dirs_exist_ok=True)
    return make_config(tmp_path)


def stored(data_dir: Path) -> dict[str, bytes]:
    """Every stored file's bytes (not the lock file, nor SQLite's transient -wal/-shm files)."""
    if not data_dir.is_dir():
        return {"": data_dir.read_bytes()}
    return {p.name: p.read_bytes() for p in data_dir.iterdir()
            if p.is_file() and p.name != store.LOCK_FILE and not p.name.endswith(("-wal", "-shm"))}


def run_cli(config: Config, capsys) -> tuple[int, str]:
    path = config.data_dir.parent / "monitor.toml"
    path.write_text(to_toml(config))
    code = cli.main(["run", "--config", str(path), "--date", NEXT_DAY])
    return code, capsys.readouterr().err


def damage(name: str, change: Callable[[bytes], bytes]) -> Callable[[Config], tuple[Config, str]]:
    def apply(config: Config) -> tuple[Config, str]:
        path = config.data_dir / name
        path.write_bytes(change(path.read_bytes()))
        return config, str(path)
    return apply


def _data_dir_is_a_file(config: Config) -> tuple[Config, str]:
    shutil.rmtree(config.data_dir)
    config.data_dir.write_text("a file\n")
    return config, f"{config.data_dir}: the data directory is a file"


def _missing_gold(config: Config) -> tuple[Config, str]:
    config.gold.unlink()
    return config, f"{config.gold}: gold set not found"


def _missing_query_log(config: Config) -> tuple[Config, str]:
    log = config.data_dir.parent / "queries.jsonl"
    return config.replace(drift=dataclasses.replace(config.drift, query_log=log)), f"{log}: query log not found"


def _missing_model(config: Config) -> tuple[Config, str]:
    folder = config.data_dir.parent / "models" / "mini"
    return config.replace(embedder=EmbedderConfig(model=str(folder))), f"embedding model '{folder}': no such folder"


def _missing_reranker(config: Config) -> tuple[Config, str]:
    pipelines = config.retrieval.pipelines + ("hybrid_rerank",)
    return (config.replace(retrieval=dataclasses.replace(config.retrieval, pipelines=pipelines),
                           rerank=RerankConfig(model="no-such-owner/no-such-reranker")),
            "reranker 'no-such-owner/no-such-reranker' is not in the local model cache")


BAD_INPUTS = {
    "metrics extra column": damage(contract.METRICS, lambda b: b.replace(b"n_questions", b"n_questions,extra", 1)),
    "metrics BOM": damage(contract.METRICS, lambda b: b"\xef\xbb\xbf" + b),
    "metrics extra field": damage(contract.METRICS, lambda b: b.replace(b"\n", b",surplus\n", 2)),
    "runs bad date": damage(contract.RUNS, lambda b: b.replace(b"\n2026-11-03,", b"\n2026-11-31,")),
    "drift invalid UTF-8": damage(contract.DRIFT, lambda b: b.replace(b"psi", b"p\xffsi", 1)),
    "per_question truncated": damage(contract.PER_QUESTION, lambda b: b[:-7]),
    "corpus garbage": damage(CORPUS_FILE, lambda b: b"this is not a database " * 100),
    "data_dir a file": _data_dir_is_a_file,
    "gold missing": _missing_gold,
    "query log missing": _missing_query_log,
    "model missing": _missing_model,
    "reranker missing": _missing_reranker,
}


@pytest.mark.parametrize("bad", BAD_INPUTS.values(), ids=BAD_INPUTS.keys())
def test_bad_input_exits_2_naming_it_before_any_write(config, bad, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the hub is never asked: no network in tests
    config, named = bad(config)
    before = stored(config.data_dir)
    code, err = run_cli(config, capsys)
    assert code == cli.EXIT_BAD_INPUT
    assert err.startswith("error: ") and named in err
    assert stored(config.data_dir) == before  # byte-identical: nothing was written


def test_a_run_quarantines_rows_no_run_accounts_for_and_removes_stale_temporaries(config, embedder, caplog):
    # rows of a date without a runs.csv row and without a run journal: not a killed run (the journal would name it)
    # but an edit, which recover cannot prove incomplete, so it moves them aside rather than drop them
    metrics = store.read(config.data_dir, contract.METRICS)
    orphan = metrics[metrics["run_date"] == "2026-11-03"].assign(run_date="2026-11-05")
    store.replace_date(config.data_dir, contract.METRICS, "2026-11-05", orphan)
    stale = config.data_dir / f".{contract.PER_QUESTION}.4194305.tmp"  # above any pid: its writer is gone
    stale.write_text("partial")
    with caplog.at_level("WARNING"):  # an edit made outside driftwatch: run only once it is accepted
        run_day(config, date.fromisoformat(NEXT_DAY), embedder=embedder, accept_edits=True)
    dates = store.read_metrics(config.data_dir)["run_date"].dt.strftime("%Y-%m-%d").unique().tolist()
    assert dates == ["2026-11-02", "2026-11-03", NEXT_DAY]
    assert not stale.exists()
    (moved,) = (config.data_dir / store.QUARANTINE_DIR).iterdir()
    lines = moved.read_text().splitlines()
    assert lines[0] == ",".join(contract.METRICS_COLUMNS) and len(lines) == 1 + len(orphan)
    assert {line.split(",")[0] for line in lines[1:]} == {"2026-11-05"}
    assert f"metrics.csv: {len(orphan)} rows of 2026-11-05" in caplog.text and moved.name in caplog.text


def test_a_newline_in_an_event_note_keeps_reruns_of_the_latest_date_replacing(config, embedder):
    for _ in range(2):
        run_day(config, DAYS[-1], embedder=embedder, events="first line\nsecond line")
    runs = store.read_runs(config.data_dir)
    assert runs["events"].tolist() == ["first line\nsecond line"] * 2
    per_q = store.read_per_question(config.data_dir)
    assert per_q.groupby("run_date").size().tolist() == [36, 36]  # 4 questions x 3 pipelines x 3 k, not appended


def test_truncate_dim_above_the_model_dimension_is_refused_at_load():
    with pytest.raises(EmbedderError, match=r"truncate_dim = 100000 is larger than the 384 dimensions"):
        Embedder(EmbedderConfig(truncate_dim=100000)).encode(["x"])
