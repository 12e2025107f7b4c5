"""The run memo: a day whose corpus, settings and questions did not change reads the rankings and the corpus
drift computed from them, and writes the same rows a run computing everything writes."""

from __future__ import annotations

import csv
import math
import os
import shutil
import subprocess
import sys
from datetime import date, timedelta
from pathlib import Path

import pytest

from pipeline import contract, job, memo, signals, store
from pipeline.config import Config, DriftConfig, SourceConfig
from pipeline.corpus import Corpus

SLICE = Path(__file__).parent / "data" / "news-slice"
START = date(2025, 9, 10)
VOLATILE = {"run_id", "started_at", "finished_at", "seconds"}  # runs.csv: when and how long, not what


def _config(tmp_path: Path, name: str, daily: Path, permutations: int = 99) -> Config:
    return Config(data_dir=tmp_path / name, gold=SLICE / "gold.jsonl", sources=(SourceConfig("news", path=daily),),
                  drift=DriftConfig(min_current=10, min_reference=20, permutations=permutations,
                                    page_permutations=permutations))  # (no second draw for the page level)


def _rows(data_dir: Path) -> dict[str, list[dict]]:
    out = {}
    for path in sorted(data_dir.glob("*.csv")):
        with path.open(newline="", encoding="utf-8") as f:
            out[path.name] = [{k: v for k, v in r.items() if k not in VOLATILE} for r in csv.DictReader(f)]
    return out


@pytest.fixture
def daily(tmp_path: Path) -> Path:
    folder = tmp_path / "daily"
    folder.mkdir()
    for path in sorted((SLICE / "daily").iterdir())[:4]:  # 2025-09-10 to 13; the days after bring nothing new
        shutil.copy(path, folder / path.name)
    return folder


def test_unchanged_days_read_the_memo_and_write_what_computing_writes(tmp_path, daily, embedder, monkeypatch,
                                                                       caplog):
    # The sports pack lands on the 4th day: the days after it, read from the memo, carry drifted verdicts (at 99
    # draws none could: the smallest Holm-adjusted p of the 7 statistics is 7/100; at 199 it is 7/200).
    shutil.copy(SLICE / "offtopic_sports.xml", daily / "2025-09-13-offtopic.xml")
    memoized, computed = _config(tmp_path, "memo", daily, 199), _config(tmp_path, "full", daily, 199)

    def both(day: date, expect_memo: bool) -> None:
        monkeypatch.delenv(memo.ENV_OFF, raising=False)
        with monkeypatch.context() as m:
            if expect_memo:  # the memo path reads no document: a snapshot would be a miss
                m.setattr(Corpus, "snapshot", lambda *a, **k: pytest.fail(f"{day}: snapshot read, memo missed"))
            job.run_day(memoized, day, embedder=embedder, notify=False)
        monkeypatch.setenv(memo.ENV_OFF, "1")
        job.run_day(computed, day, embedder=embedder, notify=False)

    for i in range(4):  # a new file each day: nothing to read from the memo
        both(START + timedelta(days=i), expect_memo=False)
    assert (memoized.data_dir / memo.MEMO_DIR / "retrieval.json").is_file()
    # With the memo off only the store's seal is kept there: it is what names edits, not a memo of results.
    kept = sorted(p.name for p in (computed.data_dir / memo.MEMO_DIR).iterdir())
    assert kept == [store.SEAL_KEY, f"{store.SEAL}.json"]
    both(START + timedelta(days=4), expect_memo=True)  # nothing new: the windows hold the same documents
    both(START + timedelta(days=5), expect_memo=True)
    drift_rows = [r for r in _rows(memoized.data_dir)["drift.csv"] if r["run_date"] == "2025-09-15"]
    assert contract.DRIFTED in {r["verdict"] for r in drift_rows}  # a drifted verdict read from the memo, compared below
    assert _rows(memoized.data_dir) == _rows(computed.data_dir)

    # A new document: the corpus changed, so the run computes (and keeps a new memo).
    shutil.copy(sorted((SLICE / "daily").iterdir())[4], daily / "2025-09-16.xml")
    both(START + timedelta(days=6), expect_memo=False)
    # A damaged memo is a miss with a warning, never an error.
    (memoized.data_dir / memo.MEMO_DIR / "retrieval.json").write_text("{not json", encoding="utf-8")
    both(START + timedelta(days=7), expect_memo=False)
    assert "unreadable memo" in caplog.text
    both(START + timedelta(days=8), expect_memo=True)  # the day before computed and kept it again
    # Other settings are other inputs: computed, not read.
    k = memoized.retrieval.__class__(pipelines=memoized.retrieval.pipelines, k=(1, 3))
    memoized, computed = memoized.replace(retrieval=k), computed.replace(retrieval=k)
    both(START + timedelta(days=9), expect_memo=False)
    assert _rows(memoized.data_dir) == _rows(computed.data_dir)


def test_a_past_date_reads_only_a_memo_of_its_own_corpus(tmp_path, daily, embedder, monkeypatch):
    """The memo holds the latest computed day's results under the hash of that day's corpus: re-running an
    earlier date (another corpus) computes, and its rows equal the first run's."""
    config = _config(tmp_path, "memo", daily)
    first = [job.run_day(config, START + timedelta(days=i), embedder=embedder, notify=False) for i in range(4)]
    again = job.run_day(config, START + timedelta(days=1), embedder=embedder, notify=False)
    assert again.per_question == first[1].per_question and again.metrics == first[1].metrics
    same = lambda a, b: a == b or (a != a and b != b)  # noqa: E731 - NaN equals NaN here
    assert all(all(same(a[k], b[k]) for k in a) for a, b in zip(again.drift, first[1].drift))


def test_digest_tells_sets_of_versions_apart():
    assert memo.digest([("a", "1"), ("b", "2")]) == memo.digest(iter([("a", "1"), ("b", "2")]))
    assert memo.digest([("a", "1"), ("b", "2")]) != memo.digest([("a", "1"), ("b", "3")])
    assert memo.digest([("ab", "1")]) != memo.digest([("a", "b1")])
    assert memo.key(x=1) != memo.key(x=2)


def test_the_generation_counts_the_writes_that_change_a_snapshot(tmp_path, daily):
    config = _config(tmp_path, "data", daily)
    with Corpus.in_dir(config.data_dir) as corpus:
        start = corpus.generation()
        job.ingest(config, corpus, START)
        after_first = corpus.generation()
        assert after_first > start
        corpus.db.execute("DELETE FROM feed_files")  # the same file read again: last_seen only, no snapshot change
        job.ingest(config, corpus, START)
        assert corpus.generation() == after_first
        doc_id = corpus.snapshot(START)[0].document.id
        corpus.delete([doc_id], START + timedelta(days=1), "gone")
        assert corpus.generation() == after_first + 1
        with corpus.db:  # a write by hand, not through the corpus's methods, counts too
            corpus.db.execute("UPDATE versions SET text = 'edited' WHERE doc_id = ?", (doc_id,))
        assert corpus.generation() == after_first + 2
        assert not corpus.dated_between(START, START)
        assert corpus.dated_between(START, START + timedelta(days=1))  # the deletion's date
        assert not corpus.dated_between(START, START + timedelta(days=1), first_seen_only=True)


def test_a_write_by_hand_is_seen_by_the_memo(tmp_path, daily, embedder, monkeypatch):
    """A document's text changed in corpus.sqlite by hand (same dates, so no date tells): the generation moved,
    the corpus's keys are read again, and the run computes what a run without the memo computes."""
    corpus_chunks = job.corpus_chunks
    memoized, computed = _config(tmp_path, "memo", daily), _config(tmp_path, "full", daily)
    for config in (memoized, computed):
        for i in range(4):
            job.run_day(config, START + timedelta(days=i), embedder=embedder, notify=False)
        with Corpus.in_dir(config.data_dir) as corpus, corpus.db:
            corpus.db.execute("UPDATE versions SET content_hash = 'edited', text = text || ' Edited.' "
                              "WHERE doc_id = (SELECT MIN(doc_id) FROM versions)")
    calls = []
    with monkeypatch.context() as m:
        m.setattr(job, "corpus_chunks", lambda *a, **k: calls.append(1) or corpus_chunks(*a, **k))
        job.run_day(memoized, START + timedelta(days=4), embedder=embedder, notify=False)
    assert calls  # computed: the memo was not read
    monkeypatch.setenv(memo.ENV_OFF, "1")
    job.run_day(computed, START + timedelta(days=4), embedder=embedder, notify=False)
    assert _rows(memoized.data_dir) == _rows(computed.data_dir)


def test_a_rerun_reads_its_top1_ks_tests_and_checks_no_sealed_file(tmp_path, daily, embedder, monkeypatch):
    """Re-running the latest date (nothing changed): the top-1 KS tests come from the memo (scipy.stats, 1 s to
    import, is not needed), the CSVs as the last run sealed them are not checked or scanned again (the seal checks
    runs.csv only, whose row has a new run id), and the rows are those of the first run of that date."""
    config = _config(tmp_path, "memo", daily)
    for i in range(5):
        job.run_day(config, START + timedelta(days=i), embedder=embedder, notify=False)
    before = _rows(config.data_dir)
    assert (config.data_dir / memo.MEMO_DIR / "top1_ks.json").is_file()
    checked, check_file = [], store.check_file
    with monkeypatch.context() as m:
        m.setattr(signals, "top1_ks", lambda *a: pytest.fail("a top-1 KS test computed again"))
        m.setattr(store, "check_file", lambda path: checked.append(path.name) or check_file(path))
        m.setattr(store, "quarantine_orphans", lambda data_dir: pytest.fail("every file scanned for dates"))
        job.run_day(config, START + timedelta(days=4), embedder=embedder, notify=False)
    assert checked == [contract.RUNS]
    assert _rows(config.data_dir) == before
    # The next day's reference window moved: its tests are new ones.
    calls = []
    top1_ks = signals.top1_ks
    monkeypatch.setattr(signals, "top1_ks", lambda *a: calls.append(1) or top1_ks(*a))
    job.run_day(config, START + timedelta(days=5), embedder=embedder, notify=False)
    assert len(calls) == len(config.retrieval.pipelines)


def test_calls_are_read_back_as_made_and_kept_for_the_latest_run_only(tmp_path, monkeypatch):
    made = []

    def ks(a, b):
        made.append((a, b))
        return float(len(a)), math.nan

    first = memo.Calls(tmp_path, "f", lib="1.0")
    first(ks, [0.5, math.nan], [0.25])
    first.save()
    second = memo.Calls(tmp_path, "f", lib="1.0")
    statistic, p = second(ks, [0.5, math.nan], [0.25])  # read back, NaN included
    assert statistic == 2.0 and math.isnan(p) and len(made) == 1
    second(ks, [0.5], [0.25])
    second.save()
    assert len(made) == 2 and len(memo.Calls(tmp_path, "f", lib="1.0").known) == 2
    third = memo.Calls(tmp_path, "f", lib="1.0")
    third(ks, [0.5], [0.25])
    third.save()  # only what the latest run called is kept
    assert len(made) == 2 and len(memo.Calls(tmp_path, "f", lib="1.0").known) == 1
    assert memo.Calls(tmp_path, "f", lib="2.0").known == {}  # other inputs: nothing known
    monkeypatch.setenv(memo.ENV_OFF, "1")
    assert memo.Calls(tmp_path, "f", lib="1.0").known == {}


# --- code identity: a memo of other code is a miss (issue 30) ---------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]


def _package_copy(tmp_path: Path) -> Path:
    """A copy of the pipeline package, byte for byte, in a folder of its own (to put first on PYTHONPATH)."""
    shutil.copytree(ROOT / "pipeline", tmp_path / "pkg" / "pipeline", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path / "pkg"


def _in(package: Path, code: str, cwd: Path) -> str:
    """What `code` prints when run with `package` first on the path (and not the repository's own)."""
    env = {**os.environ, "PYTHONPATH": str(package), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=cwd, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_memo_key_is_the_code_s_and_changes_with_any_edit(tmp_path):
    """memo.key once knew the code by __version__ alone ("0.1.0" since the first commit): after an upgrade a re-run
    read what the old code computed. Now an edit of any module gives other keys."""
    package = _package_copy(tmp_path)
    ask = "from pipeline import memo; print(memo.__file__); print(memo.key(kind='drift', corpus='c'))"
    where, copied = _in(package, ask, tmp_path).split("\n")
    assert where == str(package / "pipeline" / "memo.py")
    assert copied == memo.key(kind="drift", corpus="c")  # the same bytes anywhere: the same key
    with (package / "pipeline" / "drift.py").open("a") as f:
        f.write("# an edit that changes nothing a run computes still changes the code's identity\n")
    edited = _in(package, ask, tmp_path).split("\n")[1]
    assert edited != copied
    (package / "pipeline" / "views" / "extra.py").write_text("")  # a new module too
    assert _in(package, ask, tmp_path).split("\n")[1] not in (copied, edited)


def test_a_rerun_reads_the_memo_until_the_code_changes(tmp_path, daily, embedder):
    """End to end: a day run again reads the memo; the same re-run after one module of the package was edited
    computes (and still writes the same rows)."""
    config = _config(tmp_path, "memo", daily)
    for i in range(2):
        job.run_day(config, START + timedelta(days=i), embedder=embedder, notify=False)
    before = _rows(config.data_dir)
    package = _package_copy(tmp_path)
    rerun = f"""
from datetime import date
from pathlib import Path
from pipeline import job
from pipeline.config import Config, DriftConfig, SourceConfig
calls, corpus_chunks = [], job.corpus_chunks
job.corpus_chunks = lambda *a, **k: calls.append(1) or corpus_chunks(*a, **k)
config = Config(data_dir=Path({str(config.data_dir)!r}), gold=Path({str(config.gold)!r}),
                sources=(SourceConfig("news", path=Path({str(daily)!r})),),
                drift=DriftConfig(min_current=10, min_reference=20, permutations=99, page_permutations=99))
job.run_day(config, date.fromisoformat({(START + timedelta(days=1)).isoformat()!r}), notify=False)
print("computed" if calls else "memo")
"""
    assert _in(package, rerun, tmp_path) == "memo"  # the same code: the memo is read
    with (package / "pipeline" / "metrics.py").open("a") as f:
        f.write("# edited\n")
    assert _in(package, rerun, tmp_path) == "computed"  # other code: computed anew
    after = _rows(config.data_dir)
    assert {n: r for n, r in after.items() if n != contract.RUNS} == {n: r for n, r in before.items() if n != contract.RUNS}
    assert after[contract.RUNS][:1] == before[contract.RUNS][:1]  # (the re-run's runs row: nothing embedded this time)
