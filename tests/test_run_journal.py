"""A run's writes are all or nothing (the run journal), the seal checks what a run wrote, and recover never
deletes rows it cannot prove incomplete (the quarantine): kills between every pair of a re-run's writes, a faulty
splice, and the hand edits of issue 29, each followed by a run."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest

from pipeline import contract, memo, store
from pipeline.config import Config, GenerationConfig, RetrievalConfig, SourceConfig, TargetConfig
from pipeline.job import run_day

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).resolve().parents[1]
DAYS = [date(2026, 11, 2), date(2026, 11, 3), date(2026, 11, 4)]
NEXT = date(2026, 11, 5)
# Not what a run computed: runs.csv's when and how long, and agreement.csv's path of the labels (each test's copy).
VOLATILE = {"run_id", "started_at", "finished_at", "seconds", "labels_file"}


def make_config(root: Path) -> Config:
    """The end-to-end feeds with every file a run writes: builtin targets (targets.csv), a candidate (canary.csv)
    and logged answers with human labels (answers/DATE.jsonl, per_answer.csv, generation.csv, agreement.csv)."""
    return Config(data_dir=root / "store", gold=root / "e2e" / "gold.jsonl",
                  sources=(SourceConfig(name="ledger", path=root / "e2e" / "feeds"),),
                  retrieval=RetrievalConfig(pipelines=("bm25", "hybrid"), k=(1, 3), candidate_depth=10),
                  targets=(TargetConfig(name="bm25", kind="builtin"), TargetConfig(name="hybrid", kind="builtin"),
                           TargetConfig(name="next", kind="builtin", pipeline="bm25", candidate=True)),
                  generation=GenerationConfig(mode="logged", logged=root / "answers.jsonl",
                                              labels=root / "labels.csv"))


LOGGED = [{"question_id": "q1", "answer": "Crossings were cancelled after deckhands walked out [e2e-ferry-strike].",
           "contexts": [{"id": "e2e-ferry-strike", "text": "All ferry crossings to Saltreach were cancelled."}]},
          {"question_id": "q2", "answer": "The documents do not say.",
           "contexts": [{"id": "e2e-tram", "text": "The city council voted to build a tram line."}]}]
LABELS = "question_id,run_date,metric,claim,label,note\nq1,,faithfulness,,faithful,\nq2,,refusal,,refusal,\n"
# An accepted drafted question (questions.jsonl), so that every run writes added_per_question.csv too.
ACCEPTED = {"id": "q-0123456789ab", "question": "Who walked out, stopping the Saltreach ferries?",
            "doc_id": "e2e-ferry-strike", "content_hash": "", "run_date": "", "provenance": "reviewed",
            "time": "2026-11-01T08:00:00+00:00", "judge": "ana", "retriever": "tfidf-documents", "found_rank": 1,
            "flagged": False}


@pytest.fixture(scope="module")
def history(tmp_path_factory, embedder) -> Path:
    """Three real runs: a store holding every file a run writes (an accepted drafted question: added_per_question.csv
    too) and a corpus with every embedding cached (so a re-run in a subprocess loads no model)."""
    root = tmp_path_factory.mktemp("history")
    shutil.copytree(DATA / "e2e", root / "e2e")
    (root / "answers.jsonl").write_text("".join(json.dumps(line) + "\n" for line in LOGGED))
    (root / "labels.csv").write_text(LABELS)
    (root / "store").mkdir()
    (root / "store" / contract.QUESTIONS).write_text(json.dumps(ACCEPTED) + "\n")
    for day in DAYS:
        run_day(make_config(root), day, embedder=embedder, notify=False)
    return root


def copy(history: Path, to: Path) -> Config:
    shutil.copytree(history, to)
    return make_config(to)


def stored(data_dir: Path) -> dict[str, bytes]:
    """What the run journal keeps all or nothing: every CSV, the answers files and the quarantine, by path."""
    files = [*data_dir.glob("*.csv"), *data_dir.glob(f"{contract.ANSWERS_DIR}/*"),
             *data_dir.glob(f"{store.QUARANTINE_DIR}/*")]
    return {p.relative_to(data_dir).as_posix(): p.read_bytes() for p in sorted(files)}


def rows(data_dir: Path) -> dict[str, list[dict]]:
    """Every CSV row of the store and of its quarantine, by file, without the volatile columns. Not the files a run
    rewrites whole (store.WHOLE_PARTS: the maintained series, re-scored from per_question.csv, whose rows follow its
    rows; their own kill test is below)."""
    out = {}
    for path in sorted([*data_dir.glob("*.csv"), *data_dir.glob(f"{store.QUARANTINE_DIR}/*.csv")]):
        if path.name in store.WHOLE_PARTS:
            continue
        with path.open(newline="", encoding="utf-8") as f:
            out[path.relative_to(data_dir).as_posix()] = [{k: v for k, v in r.items() if k not in VOLATILE}
                                                          for r in csv.DictReader(f)]
    return out


def count(data_dir: Path) -> int:
    """Rows in the store and its quarantine."""
    return sum(map(len, rows(data_dir).values()))


def written(data_dir: Path, day: date) -> int:
    """The store's rows of run date `day` (not the quarantine's)."""
    return sum(1 for name, found in rows(data_dir).items() if not name.startswith(store.QUARANTINE_DIR)
               for r in found if r["run_date"] == day.isoformat())


# --- a re-run killed between any two of its writes ------------------------------------------------------------

# A re-run's writes in order: `job.run_day`'s replace_date calls, answers.write_run's (its JSONL file, then three
# CSVs), alerts, runs, then the seal. Killed after N of them, N = 0 .. len(STEPS).
STEPS = ("per_question", "added_per_question", "metrics", "drift", "signals", "segments", "segment_questions",
         "targets", "canary", "answers/DATE.jsonl", "per_answer", "generation", "agreement", "sources", "pool",
         "alerts", "runs", "seal")

# One process imports the package once and forks a child per kill point; each child re-runs the date on its own
# copy of the store and dies (os._exit, as SIGKILL would: no finally, no atexit) after its N-th write.
DRIVER = """
import os, shutil, sys
from datetime import date
from pathlib import Path
sys.path.insert(0, {root!r})
from pipeline import store
from pipeline.answers import run as answers_run
from pipeline.job import run_day
from tests.test_run_journal import make_config
base, out, day = Path({base!r}), Path({out!r}), date.fromisoformat({day!r})
writes = {{"replace_date": store.replace_date, "seal": store.seal}}
for n in {kills!r}:
    shutil.copytree(base, out / str(n))
    pid = os.fork()
    if pid == 0:
        done = []
        def step(write):
            def killing(*args, **kwargs):
                if n == 0:
                    os._exit(9)
                write(*args, **kwargs)
                done.append(write)
                if len(done) == n:
                    os._exit(9)
            return killing
        store.replace_date, store.seal = step(store.replace_date), step(store.seal)
        answers_run.write_records = step(answers_run.write_records)
        run_day(make_config(out / str(n)), day, notify=False)
        os._exit(0)
    print(n, os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""


def doctor(data_dir: Path, day: str) -> None:
    """Make every file's rows of `day` differ from what a re-run writes (each date's last row twice, an alert row
    more, a blank line in the answers file), so that a mix of the old date and the new shows in every file."""
    for name in (*store.RUN_PARTS, contract.RUNS):
        path = data_dir / name
        data = path.read_bytes()
        start, end = store._date_span(data, day)
        if name == contract.ALERTS:
            extra = store._body(name, day, [{c: "" for c in contract.ALERTS_COLUMNS} | {
                "run_date": day, "rule": "drop", "pipeline": "bm25", "severity": "warning", "message": "old"}])
        else:
            assert end > start, f"{name} has no rows of {day}"
            last = start
            while (after := store._row_end(data, last)) < end:
                last = after
            extra = data[last:end]
        path.write_bytes(data[:end] + extra + data[end:])
        store.check_file(path)
    with (data_dir / contract.ANSWERS_DIR / f"{day}.jsonl").open("a") as f:
        f.write("\n")


def test_a_rerun_killed_between_any_two_writes_leaves_the_old_date_never_a_mix(history, tmp_path, embedder):
    """Issue 30: a re-run killed between its writes left per_question of one execution beside metrics of another,
    and recover kept it. Now the next run's recover rolls the date back, byte for byte, wherever the kill fell."""
    base = tmp_path / "base"
    shutil.copytree(history, base)
    day = DAYS[-1].isoformat()
    doctor(base / "store", day)
    store.seal(base / "store")  # the doctored store as the test's own: not an edit for the runs below
    old = stored(base / "store")
    kills = list(range(len(STEPS) + 2))  # after 0 .. all steps, and one never killed
    driver = DRIVER.format(root=str(ROOT), base=str(base), out=str(tmp_path), day=day, kills=kills)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", driver], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    codes = dict(map(int, line.split()) for line in done.stdout.split("\n") if line)
    assert codes == {n: 9 for n in kills[:-1]} | {kills[-1]: 0}, done.stderr
    new = stored(tmp_path / str(kills[-1]) / "store")
    # The files a run rewrites whole (the maintained qrels' series) have their own kill test below.
    changed = [name for name in old if name not in store.WHOLE_PARTS
               and (name.endswith(".csv") or name == f"{contract.ANSWERS_DIR}/{day}.jsonl")]
    assert len(changed) == len(STEPS) - 1
    assert [name for name in old if old[name] != new[name] and name not in store.WHOLE_PARTS] == changed
    mixed, notes = [], {}
    for n in kills[:-1]:
        data_dir = tmp_path / str(n) / "store"
        if 0 < n < len(STEPS):  # a mix, until recover
            assert stored(data_dir) not in (old, new), f"killed after {STEPS[n - 1]}"
        with store.run_lock(data_dir):
            notes[n] = store.recover(data_dir)
        if stored(data_dir) != old:
            mixed.append(f"killed after {STEPS[n - 1] if n else 'nothing'}: " + ", ".join(
                name for name, data in stored(data_dir).items() if data != old.get(name)))
    assert mixed == []  # every kill point: the old date, byte for byte
    assert all(len(found) == 1 and found[0].startswith(f"{day}: rolled back a run that did not finish")
               for found in notes.values())
    assert not any((tmp_path / str(n) / "store" / store.RUN_JOURNAL).exists() for n in notes)
    # The next run after a kill completes the date as an uninterrupted run does, and names the roll back.
    config = make_config(tmp_path / "5")
    store._begin_run(config.data_dir, day)  # killed again, after its journal...
    store.replace_date(config.data_dir, contract.METRICS, day, [])  # ...and one write: rolled back first
    result = run_day(config, DAYS[-1], embedder=embedder, notify=False)
    assert "rolled back a run that did not finish" in result.run["events"]
    after, expected = rows(config.data_dir), rows(tmp_path / str(kills[-1]) / "store")
    assert {k: v for k, v in after.items() if k != contract.RUNS} == {k: v for k, v in expected.items() if k != contract.RUNS}


# --- the seal checks what a run wrote -------------------------------------------------------------------------

def test_a_faulty_splice_in_a_run_is_not_sealed_and_validate_refuses_it(history, tmp_path, embedder, monkeypatch):
    """Issue 30: `validate` passed bytes `check_file` refuses because the seal stored their digest unchecked."""
    config = copy(history, tmp_path / "root")
    sealed = memo.load(config.data_dir, store.SEAL)
    with monkeypatch.context() as m:  # a re-run's rewrite puts the new rows right after the header
        m.setattr(store, "_date_span", lambda data, day: (data.index(b"\n") + 1,) * 2)
        with pytest.raises(store.StoreSchemaError, match=r"\.csv:3: run_date '2026-11-02' after '2026-11-04'"):
            run_day(config, DAYS[-1], embedder=embedder, notify=False)
    assert memo.load(config.data_dir, store.SEAL) == sealed  # nothing sealed
    with pytest.raises(store.StoreSchemaError, match=r"\.csv:3: run_date '2026-11-02' after '2026-11-04'"):
        store.validate(config.data_dir)


# --- hand edits: nothing recover cannot account for is dropped -------------------------------------------------

def _drop_runs_row(day: date):
    def edit(data_dir: Path) -> None:
        path = data_dir / contract.RUNS
        data = path.read_bytes()
        start, end = store._date_span(data, day.isoformat())
        path.write_bytes(data[:start] + data[end:])
    return edit


def _future_rows(data_dir: Path) -> None:
    for name in (contract.METRICS, contract.PER_QUESTION):  # a valid row of a date no run made, appended to two files
        path = data_dir / name
        last = path.read_bytes().rstrip(b"\n").rsplit(b"\n", 1)[1]
        with path.open("ab") as f:
            f.write(b"2026-11-20" + last[len("2026-11-04"):] + b"\n")


HAND_EDITS = {  # the edit, the date then run, the date whose rows recover cannot account for
    "a runs row deleted in the middle": (_drop_runs_row(DAYS[1]), NEXT, DAYS[1]),
    "the last runs row deleted": (_drop_runs_row(DAYS[2]), NEXT, DAYS[2]),
    "a runs row deleted, then that date re-run": (_drop_runs_row(DAYS[1]), DAYS[1], DAYS[1]),
    "a valid row appended for a future date": (_future_rows, NEXT, date(2026, 11, 20)),
}


@pytest.mark.parametrize("edit, day, orphan", HAND_EDITS.values(), ids=HAND_EDITS.keys())
def test_a_hand_edit_then_a_run_loses_no_row(history, tmp_path, embedder, caplog, edit, day, orphan):
    """Issue 29: one deleted runs.csv row made the next run delete that date's rows from every other file (72
    metrics, 600 per-question, 10 drift, 1,383 signal rows), silently; an appended future row was dropped too.
    Now the run refuses the edit (tests/test_edits.py) and, once it is accepted, those rows move to the quarantine:
    rows in the store and the quarantine = rows before + the run's rows."""
    config = copy(history, tmp_path / "root")
    edit(config.data_dir)
    before = rows(config.data_dir)
    orphaned = {name: [r for r in found if r["run_date"] == orphan.isoformat()] for name, found in before.items()}
    orphaned = {name: found for name, found in orphaned.items() if found}
    assert orphaned and contract.RUNS not in orphaned
    with pytest.raises(store.StoreEditedError):  # edited outside driftwatch: nothing written until accepted
        run_day(config, day, embedder=embedder, notify=False)
    assert rows(config.data_dir) == before
    with caplog.at_level("WARNING"):
        result = run_day(config, day, embedder=embedder, notify=False, accept_edits=True)
    after = rows(config.data_dir)
    assert count(config.data_dir) == sum(map(len, before.values())) + written(config.data_dir, day)
    quarantined = {name.split("/")[1].split(".")[0] + ".csv": found for name, found in after.items()
                   if name.startswith(store.QUARANTINE_DIR)}
    assert quarantined == orphaned  # exactly the rows no runs.csv row accounts for, as they were
    for name in orphaned:  # named in the log and in the run's events
        assert f"{name}: {len(orphaned[name])} rows of {orphan.isoformat()}" in caplog.text
        assert f"{name}: {len(orphaned[name])} rows of {orphan.isoformat()}" in result.run["events"]
    assert store.read_runs(config.data_dir)["events"].iloc[-1 if day == NEXT else 1] == result.run["events"]


# --- the files a run rewrites whole (store.WHOLE_PARTS): the maintained qrels' series and versions ----------------

WHOLE_DRIVER = """
import os, sys
from datetime import date
from pathlib import Path
sys.path.insert(0, {root!r})
from pipeline import store
from pipeline.job import run_day
from tests.test_run_journal import make_config
write = getattr(store, {target!r})
def killing(*args, **kwargs):
    write(*args, **kwargs)
    os._exit(9)
setattr(store, {target!r}, killing)
run_day(make_config(Path({out!r})), date.fromisoformat({day!r}), notify=False)
os._exit(0)
"""


@pytest.mark.parametrize("target", ["add_rows", "write_table"], ids=["after qrels_versions", "after maintained"])
def test_a_rerun_killed_after_a_whole_file_write_leaves_the_store_as_it_was(history, tmp_path, embedder, target):
    """A judgment since the last run: the re-run adds a qrels version (qrels_versions.csv) and rewrites
    maintained_metrics.csv whole, after alerts.csv. Killed after either, the next recover puts every file back, byte
    for byte, the whole files from the journal's hard links; the run after that writes what an uninterrupted one
    does."""
    from pipeline.judging import ledger

    config = copy(history, tmp_path / "root")
    ledger.append_judgments(config.data_dir, [ledger.Judgment("q1", "e2e-tram", 0, "ann", ledger.now(), "")])
    run_day(config, DAYS[-1], embedder=embedder, notify=False)  # the first version and series
    assert (config.data_dir / contract.MAINTAINED_METRICS).exists()
    first = len(store.read(config.data_dir, contract.QRELS_VERSIONS))  # the history's accepted question made one
    ledger.append_judgments(config.data_dir, [ledger.Judgment("q2", "e2e-ferry-strike", 1, "ann", ledger.now(), "")])
    old = stored(config.data_dir)
    driver = WHOLE_DRIVER.format(root=str(ROOT), target=target, out=str(tmp_path / "root"), day=DAYS[-1].isoformat())
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", driver], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=300, check=False)
    assert done.returncode == 9, done.stderr
    assert stored(config.data_dir) != old
    with store.run_lock(config.data_dir):
        (note,) = store.recover(config.data_dir)
    assert note.startswith(f"{DAYS[-1]}: rolled back a run that did not finish")
    assert stored(config.data_dir) == old
    assert not list(config.data_dir.glob(".run-journal*"))
    result = run_day(config, DAYS[-1], embedder=embedder, notify=False)
    assert f"qrels v{first + 1} (new; was qrels v{first})" in result.run["events"]
    versions = store.read(config.data_dir, contract.QRELS_VERSIONS)
    assert list(versions["version"]) == list(range(1, first + 2))
