"""The CSV store: contract columns, idempotent per-date writes, crash safety and the run lock."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from pipeline import contract, memo, store

ROOT = Path(__file__).resolve().parents[1]


def metric_rows(day: str, value: float, pipelines=("bm25", "dense")) -> list[dict]:
    return [{"run_date": day, "pipeline": p, "k": 5, "metric": "recall", "value": value, "n_questions": 3}
            for p in pipelines]


def test_schemas_are_the_contract():
    # The columns DESIGN.md fixes, plus per_question.unjudged (share of the top k the gold set does not judge).
    assert contract.SCHEMAS[contract.METRICS] == ("run_date", "pipeline", "k", "metric", "value", "n_questions")
    assert contract.SCHEMAS[contract.RUNS][:3] == ("run_date", "run_id", "started_at")
    assert contract.SCHEMAS[contract.RUNS][-3:] == ("model", "config_hash", "events")
    assert "unjudged" in contract.SCHEMAS[contract.PER_QUESTION]
    # Issue 9: alerts carry their streak's start and p-value as data; drift rows their null and verdict.
    assert contract.SCHEMAS[contract.ALERTS][-3:] == ("message", "since", "p_value")
    assert contract.SCHEMAS[contract.DRIFT][:6] == ("run_date", "statistic", "value", "reference_date", "n_reference",
                                              "n_current")
    assert {"p_value", "null_value", "threshold", "verdict", "detail"} <= set(contract.SCHEMAS[contract.DRIFT])


def test_header_equals_contract(tmp_path):
    store.replace_date(tmp_path, contract.METRICS, "2026-11-02", metric_rows("2026-11-02", 0.5))
    header = (tmp_path / contract.METRICS).read_text().splitlines()[0]
    assert header.split(",") == list(contract.METRICS_COLUMNS)
    assert list(store.read_metrics(tmp_path).columns) == list(contract.METRICS_COLUMNS)


def test_rerun_of_a_date_replaces_its_rows(tmp_path):
    for day, value in [("2026-11-02", 0.1), ("2026-11-03", 0.2), ("2026-11-04", 0.3)]:
        store.replace_date(tmp_path, contract.METRICS, day, metric_rows(day, value))
    before = (tmp_path / contract.METRICS).read_bytes()
    store.replace_date(tmp_path, contract.METRICS, "2026-11-03", metric_rows("2026-11-03", 0.2))
    assert (tmp_path / contract.METRICS).read_bytes() == before  # same rows again: same file
    store.replace_date(tmp_path, contract.METRICS, "2026-11-03", metric_rows("2026-11-03", 0.9, ("hybrid",)))
    frame = store.read_metrics(tmp_path)
    assert frame["run_date"].dt.strftime("%Y-%m-%d").tolist() == ["2026-11-02"] * 2 + ["2026-11-03"] + ["2026-11-04"] * 2
    assert frame[frame["pipeline"] == "hybrid"]["value"].tolist() == [0.9]
    assert len(frame) == 5


def test_append_and_rewrite_paths_write_identical_files(tmp_path):
    rows = {d: metric_rows(d, v) for d, v in [("2026-11-02", 1 / 3), ("2026-11-03", float("nan"))]}
    a, b = tmp_path / "a", tmp_path / "b"
    for day in ("2026-11-02", "2026-11-03"):  # in date order: the append path
        store.replace_date(a, contract.METRICS, day, rows[day])
    for day in ("2026-11-03", "2026-11-02"):  # out of order: the rewrite path
        store.replace_date(b, contract.METRICS, day, rows[day])
    assert (a / contract.METRICS).read_bytes() == (b / contract.METRICS).read_bytes()
    values = store.read_metrics(a)["value"].tolist()
    assert values[0] == 1 / 3  # full float precision survives the round trip
    assert math.isnan(values[-1])


def test_failed_write_leaves_old_file_intact(tmp_path, monkeypatch):
    store.replace_date(tmp_path, contract.METRICS, "2026-11-02", metric_rows("2026-11-02", 0.5))
    before = (tmp_path / contract.METRICS).read_bytes()

    def crash(fd):
        raise OSError("disk full")

    monkeypatch.setattr(store.os, "fsync", crash)
    for day in ("2026-11-03", "2026-11-02"):  # both the append and the rewrite path
        with pytest.raises(OSError, match="disk full"):
            store.replace_date(tmp_path, contract.METRICS, day, metric_rows(day, 0.7))
    assert (tmp_path / contract.METRICS).read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [contract.METRICS]  # no temporary file left behind


def test_killed_writer_leaves_old_file_readable(tmp_path):
    """A process killed (SIGKILL) in the middle of a write: the previous file is still whole."""
    store.replace_date(tmp_path, contract.METRICS, "2026-11-02", metric_rows("2026-11-02", 0.5))
    before = (tmp_path / contract.METRICS).read_bytes()
    child = subprocess.Popen([sys.executable, "-c", f"""
import os, sys, time
sys.path.insert(0, {str(ROOT)!r})
from pipeline import contract, store
def hang(fd):
    print("writing", flush=True)
    time.sleep(60)
store.os.fsync = hang
rows = [{{"run_date": "2026-11-03", "pipeline": "p%d" % i, "k": 5, "metric": "recall", "value": 0.1,
          "n_questions": 1}} for i in range(200000)]
store.replace_date({str(tmp_path)!r}, contract.METRICS, "2026-11-03", rows)
"""], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "writing"  # the temporary file is written, not yet renamed
    assert any(p.name.endswith(".tmp") for p in tmp_path.iterdir())
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert (tmp_path / contract.METRICS).read_bytes() == before
    assert len(store.read_metrics(tmp_path)) == 2
    # the next write succeeds despite the stale temporary file
    store.replace_date(tmp_path, contract.METRICS, "2026-11-03", metric_rows("2026-11-03", 0.6))
    assert len(store.read_metrics(tmp_path)) == 4


def test_a_later_date_is_appended_in_place(tmp_path):
    """O(rows of the date): the file is not copied (same inode), its old bytes are untouched."""
    store.replace_date(tmp_path, contract.METRICS, "2026-11-02", metric_rows("2026-11-02", 0.5))
    path = tmp_path / contract.METRICS
    before, inode = path.read_bytes(), path.stat().st_ino
    store.replace_date(tmp_path, contract.METRICS, "2026-11-03", metric_rows("2026-11-03", 0.6))
    assert path.stat().st_ino == inode and path.read_bytes().startswith(before)
    assert [p.name for p in tmp_path.iterdir()] == [contract.METRICS]  # the journal is gone
    store.replace_date(tmp_path, contract.METRICS, "2026-11-02", metric_rows("2026-11-02", 0.7))  # an earlier date
    assert path.stat().st_ino != inode  # rewritten and renamed over


def test_a_killed_append_is_invisible_to_readers_and_rolled_back(tmp_path):
    """A writer killed after its rows are written, before they are synced: readers and the checks see the old
    rows only, and the next run's recover cuts the file back to them."""
    store.replace_date(tmp_path, contract.METRICS, "2026-11-02", metric_rows("2026-11-02", 0.5))
    before = (tmp_path / contract.METRICS).read_bytes()
    child = subprocess.Popen([sys.executable, "-c", f"""
import os, sys, time
sys.path.insert(0, {str(ROOT)!r})
from pipeline import contract, store
real, calls = os.fsync, []
def fsync(fd):
    calls.append(fd)
    if len(calls) == 3:  # the journal file, its folder, then the appended rows
        print("appended", flush=True)
        time.sleep(60)
    real(fd)
store.os.fsync = fsync
store.replace_date({str(tmp_path)!r}, contract.METRICS, "2026-11-03", [{{"run_date": "2026-11-03",
    "pipeline": "p%d" % i, "k": 5, "metric": "recall", "value": 0.1, "n_questions": 1}} for i in range(1000)])
"""], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "appended"
    child.send_signal(signal.SIGKILL)
    child.wait()
    path = tmp_path / contract.METRICS
    assert path.stat().st_size > len(before)  # the rows are in the file...
    store.validate(tmp_path)  # ...but not committed: the checks and readers see the old rows
    assert len(store.read_metrics(tmp_path)) == 2
    assert store.roll_back_appends(tmp_path) == [path]  # what recover does first, before dropping incomplete dates
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == [contract.METRICS]


def test_a_half_row_left_by_an_append_is_cut_by_the_next_write(tmp_path):
    store.replace_date(tmp_path, contract.METRICS, "2026-11-02", metric_rows("2026-11-02", 0.5))
    path = tmp_path / contract.METRICS
    committed = path.stat().st_size
    (tmp_path / f".{contract.METRICS}.append").write_text(str(committed))
    with path.open("ab") as f:
        f.write(b'2026-11-03,bm25,5,"recall,0.')  # cut inside a quoted field
    assert store.read_metrics(tmp_path)["run_date"].dt.strftime("%Y-%m-%d").tolist() == ["2026-11-02"] * 2
    store.replace_date(tmp_path, contract.METRICS, "2026-11-03", metric_rows("2026-11-03", 0.6))
    assert store.read_metrics(tmp_path)["value"].tolist() == [0.5, 0.5, 0.6, 0.6]
    store.check_file(path)


def test_wrong_header_is_refused_with_the_file_name(tmp_path):
    (tmp_path / contract.METRICS).write_text("run_date,pipeline,metric,value\n2026-11-02,bm25,recall,0.5\n")
    with pytest.raises(store.StoreSchemaError, match=r"metrics\.csv.*missing: \['k', 'n_questions'\]"):
        store.read_metrics(tmp_path)
    with pytest.raises(store.StoreSchemaError, match=r"metrics\.csv"):
        store.replace_date(tmp_path, contract.METRICS, "2026-11-03", metric_rows("2026-11-03", 0.5))


def test_rows_must_match_the_contract_and_date(tmp_path):
    with pytest.raises(store.StoreSchemaError):
        store.replace_date(tmp_path, contract.METRICS, "2026-11-02", [{"run_date": "2026-11-02", "value": 1}])
    with pytest.raises(ValueError, match="run_date 2026-11-02"):
        store.replace_date(tmp_path, contract.METRICS, "2026-11-02", metric_rows("2026-11-03", 0.5))


def test_missing_file_reads_as_empty_typed_frame(tmp_path):
    frame = store.read_per_question(tmp_path)
    assert frame.empty and list(frame.columns) == list(contract.PER_QUESTION_COLUMNS)


def test_ids_with_spaces_round_trip():
    ids = ["plain", "has space", "100%", "tab\there", "https://x.org/a?b=c"]
    assert store.split_ids(store.join_ids(ids)) == ids
    assert store.split_ids("") == []


def test_second_lock_holder_gets_a_clear_error(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", f"""
import sys, time
sys.path.insert(0, {str(ROOT)!r})
from pipeline import store
with store.run_lock({str(tmp_path)!r}):
    print("locked", flush=True)
    time.sleep(30)
"""], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "locked"
        with pytest.raises(store.LockError, match=rf"another driftwatch run holds the lock \(pid {child.pid}"):
            with store.run_lock(tmp_path):
                pass
    finally:
        child.kill()
        child.wait()
    with store.run_lock(tmp_path):  # released when the holder dies
        pass


def test_write_table_matches_per_date_writes(tmp_path):
    rows = metric_rows("2026-11-03", 0.25) + metric_rows("2026-11-02", 1 / 3)
    store.write_table(tmp_path / "bulk", contract.METRICS, rows)
    for day in ("2026-11-02", "2026-11-03"):
        store.replace_date(tmp_path / "daily", contract.METRICS, day, [r for r in rows if r["run_date"] == day])
    assert (tmp_path / "bulk" / contract.METRICS).read_bytes() == (tmp_path / "daily" / contract.METRICS).read_bytes()


def question_rows(day: str, question_id: str = "q1") -> list[dict]:
    return [{"run_date": day, "pipeline": p, "k": 5, "question_id": question_id, "hit": 1.0, "recall": 1.0,
             "precision": 0.2, "rr": 1.0, "ndcg": 1.0, "unjudged": 0.0, "first_relevant_rank": 1,
             "top1_score": 0.5, "retrieved": store.join_ids(["doc-1", question_id]), "gold_missing": 0}
            for p in ("bm25", "dense", "hybrid")]


@pytest.mark.parametrize("hostile", [
    "é" * 40_000,  # 80 KB of two-byte characters: a 64 KB tail read starts mid-character
    "x" * 70_000,  # one field longer than any tail read
    "line one\nline two",  # a quoted field holding a newline
    'say "2026-11-09,oops"\n2026-11-09,' * 3,  # quotes, commas and something that looks like a row
])
def test_any_field_content_on_the_last_line_keeps_reruns_replacing(tmp_path, hostile):
    for day in ("2026-11-02", "2026-11-03"):
        store.replace_date(tmp_path, contract.PER_QUESTION, day, question_rows(day, hostile))
    for _ in range(2):  # re-running the latest date replaces its rows, it does not append them
        store.replace_date(tmp_path, contract.PER_QUESTION, "2026-11-03", question_rows("2026-11-03", hostile))
    store.replace_date(tmp_path, contract.PER_QUESTION, "2026-11-04", question_rows("2026-11-04", hostile))
    frame = store.read_per_question(tmp_path)
    assert frame["run_date"].dt.strftime("%Y-%m-%d").tolist() == [d for d in ("2026-11-02", "2026-11-03",
                                                                             "2026-11-04") for _ in range(3)]
    assert set(frame["question_id"]) == {hostile}  # the field round-trips unchanged
    assert {tuple(store.split_ids(r)) for r in frame["retrieved"]} == {("doc-1", hostile)}
    store.check_file(tmp_path / contract.PER_QUESTION)


def test_an_event_note_with_newlines_and_carriage_returns_round_trips_and_reruns_replace(tmp_path):
    run = {c: "" for c in contract.RUNS_COLUMNS} | {"run_date": "2026-11-02", "events": "new chunker\nsecond line"}
    for _ in range(3):
        store.replace_date(tmp_path, contract.RUNS, "2026-11-02", [run])
    assert store.read_runs(tmp_path)["events"].tolist() == ["new chunker\nsecond line"]
    # pandas writes a lone carriage return unquoted and then reads it as a row end: it is stored as a newline
    store.replace_date(tmp_path, contract.RUNS, "2026-11-02", [run | {"events": "a\rb\r\nc"}])
    assert store.read_runs(tmp_path)["events"].tolist() == ["a\nb\nc"]
    assert store.split_ids(store.join_ids(["cr\rid"])) == ["cr\rid"]


def test_a_truncated_file_is_refused_naming_its_last_line(tmp_path):
    for day in ("2026-11-02", "2026-11-03"):
        store.replace_date(tmp_path, contract.PER_QUESTION, day, question_rows(day))
    path = tmp_path / contract.PER_QUESTION
    path.write_bytes(path.read_bytes()[:-20])  # the last line cut, no final newline
    before = path.read_bytes()
    for call in (lambda: store.replace_date(tmp_path, contract.PER_QUESTION, "2026-11-04", question_rows("2026-11-04")),
                 lambda: store.read_per_question(tmp_path), lambda: store.check_file(path)):
        with pytest.raises(store.StoreSchemaError, match=r"per_question\.csv:7: the last row is cut short"):
            call()
    assert path.read_bytes() == before


def test_a_file_cut_inside_a_quoted_field_is_refused(tmp_path):
    store.replace_date(tmp_path, contract.PER_QUESTION, "2026-11-02", question_rows("2026-11-02", "q\n1"))
    path = tmp_path / contract.PER_QUESTION
    cut = path.read_bytes().rsplit(b"\n", 2)[0] + b"\n"  # ends just after the newline inside the quoted id
    path.write_bytes(cut)
    with pytest.raises(store.StoreSchemaError, match=r"per_question\.csv:\d+: the last row is cut short"):
        store.replace_date(tmp_path, contract.PER_QUESTION, "2026-11-03", question_rows("2026-11-03"))
    assert path.read_bytes() == cut


@pytest.mark.parametrize("damage, message", [
    (lambda b: b"\xef\xbb\xbf" + b, r":1: starts with a UTF-8 byte order mark"),
    (lambda b: b.replace(b"n_questions", b"n_questions,extra", 1), r":1: columns do not match.*unexpected: \['extra'\]"),
    (lambda b: b.replace(b",3\n", b",3,surplus\n", 1), r":2: 7 fields, the contract has 6"),
    (lambda b: b.replace(b"2026-11-03", b"2026-13-03"), r":4: run_date '2026-13-03' is not a date"),
    (lambda b: b.replace(b"dense", b"d\xffense", 1), r":3: not UTF-8 text"),
    (lambda b: b[:-3], r":5: the last row is cut short"),
    (lambda b: b.replace(b"recall,0.1,3\n2026-11-02,dense", b"recall,0.1,3\n2026-11-01,dense"),
     r":3: run_date '2026-11-01' after '2026-11-02': rows must be sorted"),
])
def test_check_file_names_the_file_and_line_of_each_defect(tmp_path, damage, message):
    for day, value in (("2026-11-02", 0.1), ("2026-11-03", 0.2)):
        store.replace_date(tmp_path, contract.METRICS, day, metric_rows(day, value))
    path = tmp_path / contract.METRICS
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(store.StoreSchemaError, match=r"metrics\.csv" + message):
        store.validate(tmp_path)


def test_validate_refuses_a_data_dir_that_is_a_file(tmp_path):
    (tmp_path / "data").write_text("not a directory")
    with pytest.raises(store.StoreSchemaError, match=r"data: the data directory is a file"):
        store.validate(tmp_path / "data")


def _quarantined(data_dir: Path) -> dict[str, bytes]:
    folder = data_dir / store.QUARANTINE_DIR
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())} if folder.is_dir() else {}


def test_recover_removes_stale_temporaries_and_quarantines_rows_without_a_runs_row(tmp_path, caplog):
    """Issue 29: rows of a date without a runs.csv row that no run journal names were added by hand (or their
    runs.csv row was deleted): recover cannot prove them incomplete, so it moves them, never drops them."""
    run = {c: "" for c in contract.RUNS_COLUMNS} | {"run_date": "2026-11-02"}
    store.replace_date(tmp_path, contract.RUNS, "2026-11-02", [run])
    for day in ("2026-11-02", "2026-11-03"):  # 2026-11-03 has no runs.csv row and no journal
        store.replace_date(tmp_path, contract.METRICS, day, metric_rows(day, 0.5))
    before = (tmp_path / contract.METRICS).read_bytes()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    stale, live = tmp_path / f".metrics.csv.{dead}.tmp", tmp_path / f".drift.csv.{os.getpid()}.tmp"
    stale.write_text("partial")
    live.write_text("being written")
    with caplog.at_level("WARNING"):
        notes = store.recover(tmp_path)
    assert not stale.exists() and live.exists()
    assert store.read_metrics(tmp_path)["run_date"].dt.strftime("%Y-%m-%d").tolist() == ["2026-11-02"] * 2
    ((name, moved),) = _quarantined(tmp_path).items()
    assert name.startswith("metrics.") and name.endswith(".csv")
    cut = before.index(b"2026-11-03,")
    assert moved == before.split(b"\n")[0] + b"\n" + before[cut:]  # the header, then the rows byte for byte
    assert (tmp_path / contract.METRICS).read_bytes() == before[:cut]
    assert notes == [f"metrics.csv: 2 rows of 2026-11-03 (no runs.csv row, no run journal) moved to quarantine/{name}"]
    assert notes[0] in caplog.text


def test_a_runs_csv_that_lost_rows_loses_no_row(tmp_path):
    """Regression: with runs.csv emptied by hand, recover once dropped every other file's history, then refused to
    run; now the rows go to the quarantine, every one of them, and the store goes on."""
    for day in ("2026-11-02", "2026-11-03"):
        store.replace_date(tmp_path, contract.METRICS, day, metric_rows(day, 0.5))
    before = (tmp_path / contract.METRICS).read_bytes()
    notes = store.recover(tmp_path)
    assert list(_quarantined(tmp_path).values()) == [before]  # every row moved, as stored
    assert (tmp_path / contract.METRICS).read_bytes() == before.split(b"\n")[0] + b"\n"
    assert "4 rows of 2026-11-02, 2026-11-03" in notes[0]
    assert store.recover(tmp_path) == [] and len(_quarantined(tmp_path)) == 1  # nothing left to move


HOSTILE = 'say "2026-11-09,oops"\n2026-11-09,\r\nend'  # quotes, commas, line ends and a row look-alike


@pytest.mark.parametrize("day, kind", [("2026-11-05", "append"), ("2026-11-04", "the latest again"),
                                       ("2026-11-03", "a middle date"), ("2026-11-01", "before every date"),
                                       ("2026-11-03", "no rows")])
def test_with_rows_is_what_reading_after_the_write_gives(tmp_path, day, kind):
    """Differential: the frame a run hands the alert rules instead of reading per_question.csv again."""
    for d in ("2026-11-02", "2026-11-03", "2026-11-04"):
        store.replace_date(tmp_path, contract.PER_QUESTION, d, question_rows(d, HOSTILE) + question_rows(d, "q2"))
    before = store.read_per_question(tmp_path)
    rows = [] if kind == "no rows" else question_rows(day, HOSTILE + "!") + question_rows(day, "q3")
    rows = [r | {"top1_score": math.nan} for r in rows[:2]] + rows[2:]
    store.replace_date(tmp_path, contract.PER_QUESTION, day, rows)
    pd.testing.assert_frame_equal(store.with_rows(before, contract.PER_QUESTION, day, rows),
                                  store.read_per_question(tmp_path))


def test_a_rewrite_keeps_the_other_dates_rows_byte_for_byte(tmp_path):
    """Re-running a date replaces its rows and copies the others as stored, even written by another tool."""
    for day in ("2026-11-02", "2026-11-03", "2026-11-04"):
        store.replace_date(tmp_path, contract.METRICS, day, metric_rows(day, 0.5))
    path = tmp_path / contract.METRICS
    by_hand = path.read_bytes().replace(b"2026-11-02,bm25,5,recall,0.5,3", b'2026-11-02,"bm25",5,recall,0.50,3')
    path.write_bytes(by_hand)
    store.replace_date(tmp_path, contract.METRICS, "2026-11-03", metric_rows("2026-11-03", 0.25, ("hybrid",)))
    lines = path.read_bytes().split(b"\n")
    assert lines[1] == b'2026-11-02,"bm25",5,recall,0.50,3' and lines[3] == b"2026-11-03,hybrid,5,recall,0.25,3"
    assert path.read_bytes().replace(b"2026-11-03,hybrid,5,recall,0.25,3\n", b"") == by_hand.replace(
        b"2026-11-03,bm25,5,recall,0.5,3\n2026-11-03,dense,5,recall,0.5,3\n", b"")


def _complete_run(data_dir: Path, day: str) -> None:
    store.replace_date(data_dir, contract.PER_QUESTION, day, question_rows(day, HOSTILE))
    store.replace_date(data_dir, contract.METRICS, day, metric_rows(day, 0.5))
    store.replace_date(data_dir, contract.RUNS, day, [{c: "" for c in contract.RUNS_COLUMNS} | {"run_date": day}])


def test_a_sealed_file_is_not_checked_again_until_it_changes(tmp_path, monkeypatch):
    for day in ("2026-11-02", "2026-11-03"):
        _complete_run(tmp_path, day)
    store.seal(tmp_path)
    checked = []
    check_file = store.check_file
    monkeypatch.setattr(store, "check_file", lambda path: checked.append(path.name) or check_file(path))
    store.validate(tmp_path)
    assert checked == []  # each file is byte for byte as the finished run left it
    store.replace_date(tmp_path, contract.METRICS, "2026-11-04", metric_rows("2026-11-04", 0.5))
    with pytest.raises(store.StoreEditedError, match=r"metrics\.csv: rows added on 2026-11-04"):
        store.validate(tmp_path)  # written outside a run: an edit, checked, then refused
    assert checked == [contract.METRICS]
    store.validate(tmp_path, accept_edits=True)
    path = tmp_path / contract.RUNS  # damaged by hand: checked, and refused
    path.write_bytes(path.read_bytes().replace(b"2026-11-03", b"2026-13-03"))
    with pytest.raises(store.StoreSchemaError, match=r"runs\.csv:3: run_date '2026-13-03' is not a date"):
        store.validate(tmp_path, accept_edits=True)
    monkeypatch.setenv("DRIFTWATCH_NO_MEMO", "1")  # without the memo every file is checked
    checked.clear()
    path.write_bytes(path.read_bytes().replace(b"2026-13-03", b"2026-11-03"))
    store.validate(tmp_path, accept_edits=True)
    assert sorted(checked) == sorted([contract.PER_QUESTION, contract.METRICS, contract.RUNS])


def test_recover_after_a_seal_still_finds_rows_without_a_runs_row(tmp_path):
    for day in ("2026-11-02", "2026-11-03"):
        _complete_run(tmp_path, day)
    store.seal(tmp_path)
    before = (tmp_path / contract.PER_QUESTION).read_bytes()
    assert store.recover(tmp_path) == []  # as sealed: nothing to move, nothing rewritten
    assert (tmp_path / contract.PER_QUESTION).read_bytes() == before
    store.replace_date(tmp_path, contract.PER_QUESTION, "2026-11-04", question_rows("2026-11-04", HOSTILE))
    added = (tmp_path / contract.PER_QUESTION).read_bytes()[len(before):]
    with pytest.raises(store.StoreEditedError, match=r"per_question\.csv: rows added on 2026-11-04"):
        store.recover(tmp_path)  # rows appended by hand after the seal: an edit, refused until accepted
    assert (tmp_path / contract.PER_QUESTION).read_bytes() == before + added and not _quarantined(tmp_path)
    accepted, note = store.recover(tmp_path, accept_edits=True)  # no runs.csv row, no journal: quarantined
    assert accepted == "accepted an edit: per_question.csv: rows added on 2026-11-04"
    assert (tmp_path / contract.PER_QUESTION).read_bytes() == before
    assert list(_quarantined(tmp_path).values()) == [before.split(b"\n")[0] + b"\n" + added]
    assert note.startswith("per_question.csv: 3 rows of 2026-11-04")


def test_the_dates_of_a_file_are_found_past_fields_that_look_like_rows(tmp_path):
    for day in ("2026-11-02", "2026-11-03"):
        store.replace_date(tmp_path, contract.PER_QUESTION, day, question_rows(day, HOSTILE))
    assert "\n2026-11-09," in (tmp_path / contract.PER_QUESTION).read_text()
    assert store._dates(tmp_path / contract.PER_QUESTION) == {"2026-11-02", "2026-11-03"}


# --- the seal checks before it seals (issue 30) -----------------------------------------------------------------

SPAN = store._date_span  # the real one, for the faulty splices below


@pytest.mark.parametrize("faulty, message", [
    (lambda data, day: (data.index(b"\n") + 1,) * 2, r":4: run_date '2026-11-02' after '2026-11-03'"),  # lands first
    (lambda data, day: (SPAN(data, day)[0], SPAN(data, day)[1] - 4), r":6: 2 fields, the contract has 6"),  # cut short
])
def test_the_seal_refuses_what_a_faulty_splice_wrote_and_validate_then_checks_it(tmp_path, monkeypatch, faulty,
                                                                                 message):
    """The seal once stored each file's digest unchecked: bytes that `check_file` refuses passed `validate` ever
    after. Now they fail the seal (naming file:line), nothing is sealed, and `validate` checks and refuses them."""
    for day in ("2026-11-02", "2026-11-03", "2026-11-04"):
        _complete_run(tmp_path, day)
    store.seal(tmp_path)
    sealed = memo.load(tmp_path, store.SEAL)
    with monkeypatch.context() as m:
        m.setattr(store, "_date_span", faulty)
        store.replace_date(tmp_path, contract.METRICS, "2026-11-03", metric_rows("2026-11-03", 0.25))
    with pytest.raises(store.StoreSchemaError, match=r"metrics\.csv" + message):
        store.seal(tmp_path)
    assert memo.load(tmp_path, store.SEAL) == sealed  # nothing sealed
    with pytest.raises(store.StoreSchemaError, match=r"metrics\.csv" + message):
        store.validate(tmp_path)


def test_the_seal_checks_only_the_rows_an_append_added_after_the_sealed_bytes(tmp_path, monkeypatch):
    """A file that only grew from the bytes the seal hashed is checked from the sealed size on (a year of
    per_question.csv is 1.3 s to check whole, 0.07 s to hash); anything else is checked whole."""
    for day in ("2026-11-02", "2026-11-03"):
        _complete_run(tmp_path, day)
    store.seal(tmp_path)
    sizes = {name: (tmp_path / name).stat().st_size for name in (contract.PER_QUESTION, contract.METRICS, contract.RUNS)}
    rows, whole = [], []
    check_rows, check_file = store._check_rows, store.check_file
    monkeypatch.setattr(store, "_check_rows", lambda path, *a: rows.append((path.name, *a)) or check_rows(path, *a))
    monkeypatch.setattr(store, "check_file", lambda path: whole.append(path.name) or check_file(path))
    _complete_run(tmp_path, "2026-11-04")
    store.seal(tmp_path)
    assert sorted(rows) == sorted((name, size, "2026-11-03") for name, size in sizes.items()) and whole == []
    path = tmp_path / contract.METRICS
    good = path.read_bytes()
    for added, message in ((b"2026-11-05,bm25,5,recall\n", r":8: 4 fields, the contract has 6"),
                           (b"2026-11-01,bm25,5,recall,0.5,3\n", r":8: run_date '2026-11-01' after '2026-11-04'")):
        path.write_bytes(good + added)
        with pytest.raises(store.StoreSchemaError, match=r"metrics\.csv" + message):
            store.seal(tmp_path)
    # An edit inside the sealed bytes, then a good row appended: the sealed bytes no longer hash to the seal.
    path.write_bytes(good.replace(b"2026-11-02,dense", b"2026-13-02,dense") + b"2026-11-05,bm25,5,recall,0.5,3\n")
    with pytest.raises(store.StoreSchemaError, match=r"metrics\.csv:3: run_date '2026-13-02' is not a date"):
        store.seal(tmp_path)
    assert whole[-1] == contract.METRICS


# --- the run journal: a run's writes, all or nothing -----------------------------------------------------------

def _stored(data_dir: Path) -> dict[str, bytes]:
    """Every file of the store but the memo and the lock, by path."""
    return {p.relative_to(data_dir).as_posix(): p.read_bytes() for p in sorted(data_dir.rglob("*"))
            if p.is_file() and p.name != store.LOCK_FILE and memo.MEMO_DIR not in p.relative_to(data_dir).parts}


def _answers(data_dir: Path, day: str, text: str) -> None:
    path = data_dir / contract.ANSWERS_DIR / f"{day}.jsonl"
    path.parent.mkdir(exist_ok=True)
    store.atomic_write(path, lambda f: f.write(text.encode()))  # as pipeline/answers/stored.py writes it


@pytest.mark.parametrize("day", ["2026-11-03", "2026-11-04"], ids=["a re-run", "a new date"])
def test_a_run_that_raises_is_rolled_back_at_once(tmp_path, day):
    for d in ("2026-11-02", "2026-11-03"):
        _complete_run(tmp_path, d)
        _answers(tmp_path, d, f'{{"day": "{d}"}}\n')
    store.seal(tmp_path)
    before = _stored(tmp_path)
    with pytest.raises(RuntimeError, match="disk full"), store.run_journal(tmp_path, day):
        assert (tmp_path / store.RUN_JOURNAL).is_file()  # before the first write
        store.replace_date(tmp_path, contract.PER_QUESTION, day, question_rows(day, "other"))
        store.replace_date(tmp_path, contract.DRIFT, day, [])  # a file the run makes
        _answers(tmp_path, day, '{"new": 1}\n')
        store.replace_date(tmp_path, contract.METRICS, day, metric_rows(day, 0.9))
        raise RuntimeError("disk full")
    assert _stored(tmp_path) == before
    assert not (tmp_path / store.RUN_JOURNAL).exists()
    with store.run_journal(tmp_path, day):  # done: the journal goes once the store is sealed
        store.replace_date(tmp_path, contract.METRICS, day, metric_rows(day, 0.9))
    assert store.read_metrics(tmp_path)["value"].tolist()[-2:] == [0.9, 0.9]
    assert not (tmp_path / store.RUN_JOURNAL).exists() and store._sealed(tmp_path) is not None
    assert store._as_sealed(tmp_path, store._sealed(tmp_path))


def test_a_journal_left_by_a_dead_run_is_rolled_back_by_recover_even_if_that_is_killed_too(tmp_path, monkeypatch):
    for d in ("2026-11-02", "2026-11-03"):
        _complete_run(tmp_path, d)
    _answers(tmp_path, "2026-11-03", '{"old": 1}\n')
    before = _stored(tmp_path)
    store._begin_run(tmp_path, "2026-11-03")  # what `run_journal` writes first; the run then dies mid-way
    store.replace_date(tmp_path, contract.PER_QUESTION, "2026-11-03", question_rows("2026-11-03", "other"))
    _answers(tmp_path, "2026-11-03", '{"new": 1}\n')
    store.replace_date(tmp_path, contract.METRICS, "2026-11-03", metric_rows("2026-11-03", 0.9))
    assert _stored(tmp_path) != before
    put, calls = store._put, []

    def dies_after_one(*args):
        if calls:
            raise KeyboardInterrupt  # the recovering run killed in turn
        calls.append(put(*args))

    with monkeypatch.context() as m:
        m.setattr(store, "_put", dies_after_one)
        with pytest.raises(KeyboardInterrupt):
            store.recover(tmp_path)
    assert (tmp_path / store.RUN_JOURNAL).exists()
    (note,) = store.recover(tmp_path)
    assert note.startswith("2026-11-03: rolled back a run that did not finish")
    assert _stored(tmp_path) == before


def _maintained(data_dir: Path, value: float) -> None:
    """maintained_metrics.csv rewritten whole and a qrels_versions.csv row added, as pipeline/judging/qrels.py does."""
    store.write_table(data_dir, contract.MAINTAINED_METRICS, [
        {**row, "version": 1} for d in ("2026-11-02", "2026-11-03") for row in metric_rows(d, value)])
    store.add_rows(data_dir, contract.QRELS_VERSIONS, [{
        "run_date": "2026-11-03", "version": 1, "created": "2026-11-03T06:00:00+00:00", "n_questions": 3,
        "n_judgments": int(value * 10), "n_relevant": 4, "qrels_hash": f"{value}"}])


@pytest.mark.parametrize("existed", [True, False], ids=["files kept whole", "files the run made"])
def test_the_files_rewritten_whole_are_put_back_by_a_roll_back_and_by_recover(tmp_path, existed):
    """store.WHOLE_PARTS: a run rewrites them whole (not by date); its journal keeps them (a hard link), and a run
    that raises, or one killed and then recovered, leaves them as they were: removed when the run made them."""
    assert set(store.WHOLE_PARTS) == {contract.MAINTAINED_METRICS, contract.QRELS_VERSIONS}
    for d in ("2026-11-02", "2026-11-03"):
        _complete_run(tmp_path, d)
    if existed:
        _maintained(tmp_path, 0.5)
    store.seal(tmp_path)
    before = _stored(tmp_path)
    with pytest.raises(RuntimeError, match="killed"), store.run_journal(tmp_path, "2026-11-03"):
        _maintained(tmp_path, 0.9)
        raise RuntimeError("killed")
    assert _stored(tmp_path) == before
    store._begin_run(tmp_path, "2026-11-03")  # a run killed after these writes: the next recover rolls back
    _maintained(tmp_path, 0.9)
    if existed:  # the copy is the old file, not the new one
        assert (tmp_path / f".run-journal.{contract.MAINTAINED_METRICS}").read_bytes() == \
            before[contract.MAINTAINED_METRICS]
    assert _stored(tmp_path) != before
    (note,) = store.recover(tmp_path)
    assert note.startswith("2026-11-03: rolled back a run that did not finish")
    assert _stored(tmp_path) == before
    with store.run_journal(tmp_path, "2026-11-03"):  # a run that finishes: kept, sealed, no copy left behind
        _maintained(tmp_path, 0.9)
    assert store.read(tmp_path, contract.MAINTAINED_METRICS)["value"].tolist() == [0.9] * 4
    assert store._as_sealed(tmp_path, store._sealed(tmp_path))
    assert not list(tmp_path.glob(".run-journal*"))


def test_add_rows_keeps_the_rows_before_and_refuses_an_earlier_date(tmp_path):
    _maintained(tmp_path, 0.5)
    path = tmp_path / contract.QRELS_VERSIONS
    first = path.read_bytes()
    store.add_rows(tmp_path, contract.QRELS_VERSIONS, [{
        "run_date": "2026-11-04", "version": 2, "created": "2026-11-04T06:00:00+00:00", "n_questions": 3,
        "n_judgments": 6, "n_relevant": 5, "qrels_hash": "b"}])
    assert path.read_bytes().startswith(first) and store.check_file(path) == "2026-11-04"
    with pytest.raises(ValueError, match="rows of 2026-11-01 cannot follow the file's last date, 2026-11-04"):
        store.add_rows(tmp_path, contract.QRELS_VERSIONS, [{
            "run_date": "2026-11-01", "version": 3, "created": "", "n_questions": 3, "n_judgments": 6,
            "n_relevant": 5, "qrels_hash": "c"}])
    assert list(store.read(tmp_path, contract.QRELS_VERSIONS)["version"]) == [1, 2]


@pytest.mark.parametrize("journal", [b'{"format": 1, "run_date": "2026-11-03", "fil', b"[]",
                                     (b'{"format": 1, "run_date": "2026-11-03", "answers": false, '
                                      b'"files": {"../metrics.csv": ""}}')])
def test_a_damaged_journal_stops_the_run_naming_it_and_changes_nothing(tmp_path, journal):
    for d in ("2026-11-02", "2026-11-03"):
        _complete_run(tmp_path, d)
    (tmp_path / store.RUN_JOURNAL).write_bytes(journal)
    before = _stored(tmp_path)
    with pytest.raises(store.StoreSchemaError, match=r"\.run-journal\.json: not a driftwatch run journal"):
        store.recover(tmp_path)
    assert _stored(tmp_path) == before


# --- a file of an earlier contract: drift.csv before effect_from ---------------------------------------------

def _legacy_drift(data_dir: Path) -> bytes:
    """drift.csv as the driftwatch before contract.ADDED_COLUMNS wrote it: two runs, a detail with a newline and
    a quote inside its field (a row that is two lines)."""
    legacy = [c for c in contract.DRIFT_COLUMNS if c not in contract.ADDED_COLUMNS[contract.DRIFT]]
    assert legacy == list(contract.DRIFT_COLUMNS[:-1])  # added at the end only
    body = (",".join(legacy) + "\n"
            + "2026-11-02,psi_mean,0.1,2026-11-01,40,30,2026-10-26,2026-11-02,0.5,0.2,0.25,stable,\n"
            + '2026-11-03,novel_share,0.7,2026-11-02,40,30,2026-10-27,2026-11-03,0.001,0.3,0.25,drifted,'
              '"12 novel chunks:\n""Storm"" hits, 3"\n').encode()
    (data_dir / contract.DRIFT).write_bytes(body)
    _complete_run(data_dir, "2026-11-02")
    _complete_run(data_dir, "2026-11-03")
    return body


def test_a_file_of_the_earlier_contract_reads_with_the_added_column_empty(tmp_path):
    _legacy_drift(tmp_path)
    store.validate(tmp_path)
    frame = store.read(tmp_path, contract.DRIFT)
    assert list(frame.columns) == list(contract.DRIFT_COLUMNS)
    assert frame[contract.EFFECT_FROM].isna().all() and frame[contract.EFFECT_FROM].dtype == "float64"
    assert frame["detail"].tolist() == ["", '12 novel chunks:\n"Storm" hits, 3']


def test_a_write_to_a_file_of_the_earlier_contract_upgrades_it_first(tmp_path):
    old = _legacy_drift(tmp_path)
    row = {c: "" for c in contract.DRIFT_COLUMNS} | {"run_date": "2026-11-04", "statistic": "psi_mean",
                                                     "value": 0.2, "threshold": 0.25, "effect_from": 0.05}
    store.replace_date(tmp_path, contract.DRIFT, "2026-11-04", [row])
    store.check_file(tmp_path / contract.DRIFT)
    frame = store.read(tmp_path, contract.DRIFT)
    assert frame[contract.EFFECT_FROM].tolist()[:2] == [pytest.approx(math.nan, nan_ok=True)] * 2
    assert frame[contract.EFFECT_FROM].tolist()[2] == 0.05
    assert frame["detail"].tolist()[1] == '12 novel chunks:\n"Storm" hits, 3'
    assert store._as_legacy(tmp_path / contract.DRIFT) is None  # a row with the added column filled
    store.replace_date(tmp_path, contract.DRIFT, "2026-11-04", [])
    assert store._as_legacy(tmp_path / contract.DRIFT) == old  # the upgrade itself kept every byte of every row


def test_a_run_upgrades_a_sealed_store_without_calling_it_an_edit(tmp_path):
    _legacy_drift(tmp_path)
    store.seal(tmp_path)
    with store.run_journal(tmp_path, "2026-11-04") as notes:
        assert notes == ["drift.csv: upgraded to the current contract (added effect_from)"]
        assert not store.is_legacy(tmp_path / contract.DRIFT)
        _complete_run(tmp_path, "2026-11-04")
    assert store.edits(tmp_path) == []
    # an upgrade killed after its rewrite, before its seal, is no edit either; an edit after it still is
    again = tmp_path / "again"
    again.mkdir()
    _legacy_drift(again)
    store.seal(again)
    assert store.upgrade_file(again / contract.DRIFT)
    assert store.edits(again) == []
    with store.run_journal(again, "2026-11-04") as notes:
        assert notes == []
    path = again / contract.DRIFT
    path.write_bytes(path.read_bytes().replace(b"0.7,", b"0.9,"))
    assert store.edits(again) == ["drift.csv: rows changed on 2026-11-03"]


def test_a_journal_of_the_earlier_contract_puts_its_rows_back_as_they_were(tmp_path):
    """A run of the earlier driftwatch killed mid-way left a journal of legacy rows: rolled back into the legacy
    file as they were (not upgraded first, which would mix the widths), then upgraded by the next run."""
    old = _legacy_drift(tmp_path)
    store.seal(tmp_path)
    store._begin_run(tmp_path, "2026-11-03")
    path = tmp_path / contract.DRIFT
    path.write_bytes(old.replace(b"0.7,", b"0.8,"))  # the dead run's half-done rewrite of its date
    assert store.recover(tmp_path)[0].startswith("2026-11-03: rolled back")
    assert path.read_bytes() == old
    with store.run_journal(tmp_path, "2026-11-03"):
        pass
    store.check_file(path)
    assert store.read(tmp_path, contract.DRIFT)["value"].tolist() == [0.1, 0.7]
