"""Issue 29, item 5: edits made outside driftwatch are named (file and dates) by `check` and by the next run, which
writes nothing until the user accepts them (`accept-edits`, `run --accept-edits`); a forged seal writes nothing."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import pytest

from pipeline import cli, contract, memo, store
from pipeline.check import validate_inputs
from pipeline.job import run_day
from tests.test_run_journal import DAYS, NEXT, copy, history, stored

__all__ = ["history"]


def _rewrite(name: str, change):
    def edit(data_dir: Path) -> None:
        path = data_dir / name
        path.write_bytes(change(path.read_bytes()))
    return edit


def _date_rows(data: bytes, day: date) -> tuple[int, int]:
    return store._date_span(data, day.isoformat())


def _change_a_value(data: bytes) -> bytes:
    """The first metrics row of DAYS[1] gets another value (its last field, n_questions, kept)."""
    start, _ = _date_rows(data, DAYS[1])
    end = data.index(b"\n", start)
    fields = data[start:end].split(b",")
    fields[4] = b"0.123456"
    return data[:start] + b",".join(fields) + data[end:]


def _delete_a_row(data: bytes) -> bytes:
    start, _ = _date_rows(data, DAYS[0])
    return data[:start] + data[store._row_end(data, start):]


def _duplicate_a_row(data: bytes) -> bytes:
    start, _ = _date_rows(data, DAYS[2])
    end = store._row_end(data, start)
    return data[:end] + data[start:end] + data[end:]


SPAN = f"{DAYS[0]}..{DAYS[-1]}"
HAND_EDITS = {  # the edit, then what the refusal says
    "a value changed": (_rewrite(contract.METRICS, _change_a_value), f"metrics.csv: rows changed on {DAYS[1]}"),
    "a row deleted": (_rewrite(contract.PER_QUESTION, _delete_a_row), f"per_question.csv: rows changed on {DAYS[0]}"),
    "a row duplicated": (_rewrite(contract.SIGNALS, _duplicate_a_row), f"signals.csv: rows changed on {DAYS[2]}"),
    "a runs row deleted": (_rewrite(contract.RUNS, lambda d: d[:_date_rows(d, DAYS[1])[0]]
                                    + d[_date_rows(d, DAYS[1])[1]:]), f"runs.csv: rows removed on {DAYS[1]}"),
    "metrics.csv emptied": (_rewrite(contract.METRICS, lambda d: b""), f"metrics.csv: rows removed on {SPAN}"),
    "metrics.csv cut to its header": (_rewrite(contract.METRICS, lambda d: d[:d.index(b"\n") + 1]),
                                      f"metrics.csv: rows removed on {SPAN}"),
    "metrics.csv removed": (lambda data_dir: (data_dir / contract.METRICS).unlink(),
                            f"metrics.csv: removed, it held rows of {SPAN}"),
}


@pytest.mark.parametrize("edit, said", HAND_EDITS.values(), ids=HAND_EDITS.keys())
def test_a_hand_edit_is_named_by_check_and_the_next_run_which_writes_nothing_until_it_is_accepted(
        history, tmp_path, embedder, caplog, edit, said):
    """Issue 29: ten content edits were accepted and re-sealed without a word. Now `check` and the next run name the
    file and the dates and write nothing; the run that accepts them names them in its events and in the log."""
    config = copy(history, tmp_path / "root")
    edit(config.data_dir)
    before = stored(config.data_dir)
    with pytest.raises(store.StoreEditedError, match=f"{said}[.|]") as refused:
        validate_inputs(config)  # what `check` runs first
    assert "driftwatch accept-edits" in str(refused.value)
    with caplog.at_level("ERROR"), pytest.raises(store.StoreEditedError, match=f"{said}[.|]"):
        run_day(config, NEXT, embedder=embedder, notify=False)
    assert said in caplog.text
    assert stored(config.data_dir) == before  # not a byte written
    with caplog.at_level("WARNING"):
        result = run_day(config, NEXT, embedder=embedder, notify=False, accept_edits=True)
    assert f"accepted an edit: {said}" in result.run["events"] and f"accepted an edit made outside driftwatch: {said}" \
        in caplog.text
    assert store.read_runs(config.data_dir)["events"].iloc[-1] == result.run["events"]
    store.validate(config.data_dir)  # sealed as it is now: the next run goes on
    assert store.edits(config.data_dir) == []


def _forge(data_dir: Path, secret: bytes | None = None) -> None:
    """Recompute metrics.csv's entry of the seal after an edit, as a hand (or a script) would; with `secret` the
    seal's MAC too."""
    path = data_dir / memo.MEMO_DIR / f"{store.SEAL}.json"
    kept = json.loads(path.read_text())
    metrics = data_dir / contract.METRICS
    kept["value"]["files"][contract.METRICS] = {"sha256": store._digest(metrics), "size": metrics.stat().st_size,
                                                "last": DAYS[-1].isoformat(), "dates": store._date_digests(metrics)}
    if secret is not None:
        body = {k: v for k, v in kept["value"].items() if k != "mac"}
        kept["value"]["mac"] = store._mac(secret, body)
    path.write_text(json.dumps(kept))


FORGERIES = {
    "digest recomputed": lambda data_dir: _forge(data_dir),
    "digest and MAC recomputed with a guessed key": lambda data_dir: _forge(data_dir, b"0" * 64),
    "the seal removed": lambda data_dir: (data_dir / memo.MEMO_DIR / f"{store.SEAL}.json").unlink(),
    "the key removed": lambda data_dir: (data_dir / memo.MEMO_DIR / store.SEAL_KEY).unlink(),
}


@pytest.mark.parametrize("forge", FORGERIES.values(), ids=FORGERIES.keys())
def test_a_forged_seal_lets_no_run_write_a_row(history, tmp_path, embedder, forge):
    """Issue 29: a seal edited to match an edited metrics.csv let a run write 2,065 rows before it exited 2. Now
    the seal carries a MAC keyed by a random secret: a seal that does not authenticate stops the run before any
    write, and `accept-edits` is the only way on."""
    config = copy(history, tmp_path / "root")
    _rewrite(contract.METRICS, _change_a_value)(config.data_dir)
    forge(config.data_dir)
    before = stored(config.data_dir)
    with pytest.raises(store.StoreEditedError, match="the seal cannot be trusted"):
        validate_inputs(config)
    with pytest.raises(store.StoreEditedError, match="the seal cannot be trusted"):
        run_day(config, NEXT, embedder=embedder, notify=False)
    # The run's own check, after its lock: recover refuses too.
    with pytest.raises(store.StoreEditedError, match="the seal cannot be trusted"), store.run_lock(config.data_dir):
        store.recover(config.data_dir)
    assert stored(config.data_dir) == before  # not a row written
    notes = store.accept_edits(config.data_dir)
    assert notes and notes[0].startswith("accepted an edit: the seal cannot be trusted")
    result = run_day(config, NEXT, embedder=embedder, notify=False)
    assert "the seal cannot be trusted" in result.run["events"]


def test_accept_edits_on_the_command_line(history, tmp_path, embedder, capsys):
    config = copy(history, tmp_path / "root")
    toml = tmp_path / "root" / "monitor.toml"
    toml.write_text('data_dir = "store"\ngold = "e2e/gold.jsonl"\n\n[[sources]]\nname = "ledger"\n'
                    'path = "e2e/feeds"\n')
    assert cli.main(["accept-edits", "--config", str(toml)]) == 0
    assert "no edit to accept" in capsys.readouterr().out
    _rewrite(contract.METRICS, _change_a_value)(config.data_dir)
    assert cli.main(["check", "--config", str(toml)]) == 2
    err = capsys.readouterr().err
    assert f"metrics.csv: rows changed on {DAYS[1]}" in err and "accept-edits" in err
    assert cli.main(["accept-edits", "--config", str(toml)]) == 0
    assert f"accepted: accepted an edit: metrics.csv: rows changed on {DAYS[1]}" in capsys.readouterr().out
    assert store.edits(config.data_dir) == []
    result = run_day(config, NEXT, embedder=embedder, notify=False)  # names what was accepted, once
    assert f"accepted an edit: metrics.csv: rows changed on {DAYS[1]}" in result.run["events"]
    again = run_day(config, NEXT, embedder=embedder, notify=False)
    assert "accepted an edit" not in again.run["events"]


def test_edits_name_date_ranges_and_count_the_rest():
    days = ["2026-11-01", "2026-11-02", "2026-11-03", "2026-11-05"] + [f"2026-12-{d:02d}" for d in range(1, 30, 2)]
    assert store._days(days).startswith("2026-11-01..2026-11-03, 2026-11-05, 2026-12-01, 2026-12-03")
    assert store._days(days).endswith(" and 11 more ranges")
