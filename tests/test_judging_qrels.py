"""Versioned qrels and the history re-scored (issue 24 item 4), on the real job over the news slice with a scripted
judge: a fixture that grades the pool's pairs from a qrels file of its own and writes them to judgments.jsonl."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from datetime import date
from pathlib import Path

import pandas as pd
import pytest

from pipeline import contract, store
from pipeline.config import Config, SourceConfig
from pipeline.job import run_day
from pipeline.gold import load_gold
from pipeline.judging import ledger, qrels
from pipeline.metrics import default_k

DATA = Path(__file__).parent / "data" / "news-slice"
ROOT = Path(__file__).resolve().parents[1]
DAYS = [date(2025, 9, 10), date(2025, 9, 11), date(2025, 9, 12), date(2025, 9, 13)]
NEW_FROM = DAYS[2]  # the scripted judge finds relevant only documents published from this date on
TOP = 5  # the scripted judge grades the unjudged documents of each question's top 5
MEANS = [contract.RUN_DATE, contract.PIPELINE, contract.K, contract.METRIC]


def make_config(root: Path, gold: str = "gold.jsonl", data_dir: str = "store") -> Config:
    return Config(data_dir=root / data_dir, gold=root / gold, sources=(SourceConfig("news", path=root / "daily"),))


def setup_root(root: Path) -> Config:
    (root / "daily").mkdir(parents=True)
    for day in DAYS:
        shutil.copy(DATA / "daily" / f"{day}.xml", root / "daily" / f"{day}.xml")
    shutil.copy(DATA / "gold.jsonl", root / "gold.jsonl")
    return make_config(root)


class ScriptedJudge:
    """Grades from a qrels file of its own (question id -> doc id -> grade; a pair it does not hold is not
    relevant): a fixed rule (a hash of the pair) wrote the file once, before any run."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.grades: dict[str, dict[str, int]] = json.loads(path.read_text()) if path.exists() else {}

    @staticmethod
    def rule(question_id: str, doc_id: str) -> int:
        """Relevant (grade 1 or 2) only among the documents published from NEW_FROM on (the news slice's ids carry
        their date: wcep-YYYY-MM-DD-...), about one pair in four of them; every other pair not relevant."""
        draw = int(hashlib.sha256(f"{question_id} {doc_id}".encode()).hexdigest(), 16) % 8
        published = doc_id[len("wcep-"):len("wcep-YYYY-MM-DD")]
        return 0 if published < NEW_FROM.isoformat() else 2 if draw == 0 else 1 if draw == 1 else 0

    def grade(self, question_id: str, doc_id: str) -> int:
        return self.grades.get(question_id, {}).get(doc_id, 0)

    def pairs(self, config: Config, days: list[date]) -> list[tuple[str, str]]:
        """The pool's pairs of `days` (pool.csv when the store has it, else the top-5 documents of per_question.csv
        that the frozen gold set does not grade), not yet judged."""
        data_dir = config.data_dir
        wanted = {d.isoformat() for d in days}
        gold = {q.id: q.relevant for q in load_gold(config.gold)}
        if (data_dir / contract.POOL).exists():  # (its gold_changed and gold_deleted rows name gold documents)
            pool = store.read(data_dir, contract.POOL)
            pool = pool[pool[contract.RUN_DATE].map(store.iso_day).isin(wanted) & (pool[contract.CONTENT_HASH] != "")]
            found = [(q, d) for q, d in zip(pool[contract.QUESTION_ID], pool[contract.DOC_ID]) if d not in gold[q]]
        else:
            frame = store.read_per_question(data_dir)
            frame = frame[frame[contract.RUN_DATE].map(store.iso_day).isin(wanted)
                          & (frame[contract.K] == default_k(frame[contract.K].unique()))]
            found = [(q, d) for q, r in zip(frame[contract.QUESTION_ID], frame[contract.RETRIEVED])
                     for d in store.split_ids(r)[:TOP] if d not in gold[q]]
        done = set(ledger.latest(ledger.read_judgments(data_dir)))
        return [p for p in dict.fromkeys(found) if p not in done]

    def judge(self, config: Config, days: list[date]) -> list[ledger.Judgment]:
        made = [ledger.Judgment(q, d, self.grade(q, d), "scripted", ledger.now(), "") for q, d in
                self.pairs(config, days)]
        ledger.append_judgments(config.data_dir, made)
        return made


def write_judge_file(path: Path) -> None:
    """The scripted judge's own qrels: every document of the slice, graded for every question by the fixed rule."""
    import re

    ids = sorted({m for day in DAYS for m in re.findall(r"<guid[^>]*>([^<]+)</guid>",
                                                        (DATA / "daily" / f"{day}.xml").read_text())})
    questions = [json.loads(line)["id"] for line in (DATA / "gold.jsonl").read_text().splitlines() if line]
    path.write_text(json.dumps({q: {d: ScriptedJudge.rule(q, d) for d in ids} for q in questions}))


@pytest.fixture(scope="module")
def judged(tmp_path_factory, embedder):
    """Two runs, the pool of both judged, a third run (the first maintained version: the whole history re-scored),
    a fourth (nothing judged since: no new version), then the new pool judged and the fourth date re-run (the
    second version). Snapshots of the store after each step."""
    root = tmp_path_factory.mktemp("qrels")
    config = setup_root(root)
    write_judge_file(root / "judge.json")
    judge = ScriptedJudge(root / "judge.json")
    snaps = {}
    for day in DAYS[:2]:
        run_day(config, day, embedder=embedder, notify=False)
    snaps["frozen"] = store.read_metrics(config.data_dir)
    first = judge.judge(config, DAYS[:2])
    run_day(config, DAYS[2], embedder=embedder, notify=False)
    snaps["v1"] = (qrels.read_versions(config.data_dir), qrels.read_maintained(config.data_dir),
                   qrels.maintained(config))
    fourth = run_day(config, DAYS[3], embedder=embedder, notify=False)
    snaps["unchanged"] = (qrels.read_versions(config.data_dir), qrels.read_maintained(config.data_dir))
    second = judge.judge(config, DAYS[2:])
    rerun = run_day(config, DAYS[3], embedder=embedder, notify=False)
    return {"root": root, "config": config, "judge": judge, "snaps": snaps, "first": first, "second": second,
            "fourth": fourth, "rerun": rerun}


def _cells(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.copy()
    frame[contract.RUN_DATE] = frame[contract.RUN_DATE].map(store.iso_day)
    return frame.sort_values(MEANS, kind="stable").reset_index(drop=True)


def test_the_scripted_judge_judged_relevant_new_documents(judged):
    grades = [j.grade for j in judged["first"] + judged["second"]]
    assert len(judged["first"]) > 20 and len(judged["second"]) > 5
    assert {0, 1, 2} <= set(grades)


def test_unjudged_falls_once_the_pool_is_judged_and_the_frozen_series_stays(judged):
    config = judged["config"]
    frozen = _cells(store.read_metrics(config.data_dir))
    before = _cells(judged["snaps"]["frozen"])
    # The frozen series of the first two dates, byte for byte what the runs wrote before any judgment.
    pd.testing.assert_frame_equal(frozen[frozen[contract.RUN_DATE] <= DAYS[1].isoformat()].reset_index(drop=True),
                                  before, check_exact=True)
    _, maintained, _ = judged["snaps"]["v1"]
    maintained = _cells(maintained)
    at5 = [(m[contract.METRIC] == "unjudged") & (m[contract.K] == TOP) for m in (frozen, maintained)]
    old = frozen[at5[0]].set_index([contract.RUN_DATE, contract.PIPELINE])[contract.VALUE]
    new = maintained[at5[1]].set_index([contract.RUN_DATE, contract.PIPELINE])[contract.VALUE]
    judged_days = [d.isoformat() for d in DAYS[:2]]
    for day in judged_days:
        for pipeline in config.retrieval.pipelines:
            assert old[(day, pipeline)] > 0
            assert new[(day, pipeline)] == 0.0  # every top-5 document of the judged days is now judged
    # The frozen unjudged@5 is unchanged by the judgments: the third date's frozen value is what the run computed
    # against the gold set alone (per_question.csv's unjudged column).
    per_question = store.read_per_question(config.data_dir)
    rows = per_question[(per_question[contract.K] == TOP)]
    means = rows.groupby([rows[contract.RUN_DATE].map(store.iso_day), contract.PIPELINE])["unjudged"].mean()
    assert (means.reindex(old.index) - old).abs().max() < 1e-12


def _expected_changes(config: Config, questions: dict[str, dict[str, int]]) -> set[tuple[str, str, int, str]]:
    """The (date, pipeline, k, metric) cells whose mean must differ, from the frozen rankings alone: unjudged@k where
    a question's top k holds a newly judged document; precision@k where it holds a judged-relevant one; hit@k where
    a question without a gold hit in its top k gets one; MRR@k where a judged-relevant one ranks above every gold
    one in the top k."""
    gold = {q.id: q.relevant for q in load_gold(config.gold)}
    per_question = store.read_per_question(config.data_dir)
    cells = set()
    for day, pipeline, k, question, retrieved in zip(
            per_question[contract.RUN_DATE].map(store.iso_day), per_question[contract.PIPELINE],
            per_question[contract.K], per_question[contract.QUESTION_ID], per_question[contract.RETRIEVED]):
        top = store.split_ids(retrieved)[:k]
        new = [d for d in top if d not in gold[question] and d in questions[question]]
        relevant = [d for d in new if questions[question][d] > 0]
        first_gold = next((i for i, d in enumerate(top) if gold[question].get(d, 0) > 0), None)
        first_new = next((i for i, d in enumerate(top) if d in relevant), None)
        key = (day, pipeline, int(k))
        if new:
            cells.add((*key, "unjudged"))
        if relevant:
            cells.add((*key, "precision"))
            if first_gold is None:
                cells.add((*key, "hit"))
            if first_gold is None or first_new < first_gold:
                cells.add((*key, "mrr"))
    return cells


def test_the_maintained_series_differs_from_the_frozen_exactly_where_judged_relevant_documents_entered(judged):
    config = judged["config"]
    frozen = _cells(store.read_metrics(config.data_dir)).set_index(MEANS)
    maintained = _cells(qrels.read_maintained(config.data_dir)).set_index(MEANS)
    assert frozen.index.equals(maintained.index)
    now = qrels.maintained(config).qrels
    expected = _expected_changes(config, now)
    shown = ("unjudged", "precision", "hit", "mrr")
    differ = {key for key, a, b in zip(frozen.index, frozen[contract.VALUE], maintained[contract.VALUE])
              if key[3] in shown and not (a == b or (pd.isna(a) and pd.isna(b)))}
    assert expected and differ == expected
    # The judged-relevant documents entered from NEW_FROM on: the relevance cells of the earlier dates stay, and
    # some of the later ones move.
    relevance = [key for key in frozen.index if key[3] in ("precision", "hit", "mrr")]
    moved = {key[0] for key in relevance if key in expected}
    assert moved and min(moved) >= NEW_FROM.isoformat()
    # Each cell moves the one way a new judgment can move it.
    for key in differ:
        a, b = frozen.loc[key, contract.VALUE], maintained.loc[key, contract.VALUE]
        assert (b < a) if key[3] == "unjudged" else (b > a), key


def test_the_history_rescore_equals_a_fresh_evaluation_with_the_same_qrels(judged, tmp_path, embedder):
    """The differential test: the maintained qrels written as a gold set, the job run from scratch over the same
    days with it, its metrics.csv equal to the re-scored maintained_metrics.csv, exactly."""
    config = judged["config"]
    fresh_root = tmp_path / "fresh"
    fresh_root.mkdir()
    shutil.copytree(judged["root"] / "daily", fresh_root / "daily")
    (fresh_root / "gold.jsonl").write_text(qrels.gold_lines(qrels.maintained(config).questions))
    fresh = make_config(fresh_root)
    for day in DAYS:
        run_day(fresh, day, embedder=embedder, notify=False)
    expected = _cells(store.read_metrics(fresh.data_dir))
    maintained = _cells(qrels.read_maintained(config.data_dir))
    assert (maintained[contract.VERSION] == 2).all()
    pd.testing.assert_frame_equal(maintained.drop(columns=[contract.VERSION]), expected, check_exact=True)
    # ... and the fresh run's per-question unjudged agree with what the re-score reads (no retrieval ran again).
    assert not (fresh.data_dir / contract.MAINTAINED_METRICS).exists()


def test_a_version_row_per_change_none_when_nothing_changed(judged):
    config = judged["config"]
    versions, maintained, first = judged["snaps"]["v1"]
    assert list(versions[contract.VERSION]) == [1]
    assert versions[contract.N_JUDGMENTS].iloc[0] == len(judged["first"])
    assert versions[contract.QRELS_HASH].iloc[0] == first.digest
    assert store.iso_day(versions[contract.RUN_DATE].iloc[0]) == DAYS[2].isoformat()
    assert sorted({store.iso_day(d) for d in maintained[contract.RUN_DATE]}) == [d.isoformat() for d in DAYS[:3]]
    unchanged_versions, unchanged = judged["snaps"]["unchanged"]
    pd.testing.assert_frame_equal(unchanged_versions, versions)  # the fourth run judged nothing: no row
    # ... and scored its own date only: the earlier dates' rows are kept as they were.
    old = unchanged[unchanged[contract.RUN_DATE] < pd.Timestamp(DAYS[3])].reset_index(drop=True)
    pd.testing.assert_frame_equal(old, maintained.reset_index(drop=True), check_exact=True)
    assert "qrels v" not in judged["fourth"].run["events"]
    now = qrels.read_versions(config.data_dir)
    assert list(now[contract.VERSION]) == [1, 2]
    assert now[contract.QRELS_HASH].iloc[1] == qrels.maintained(config).digest != first.digest
    assert now.iloc[:1].equals(versions)  # never rewritten
    assert "qrels v2 (new; was qrels v1)" in judged["rerun"].run["events"]
    # An LLM suggestion never counts: the qrels (and their version) stay.
    llm = ledger.Judgment("n42", "some-doc", 2, f"{contract.LLM_JUDGE_PREFIX}model", ledger.now(), "")
    assert qrels.maintained(config, [*ledger.read_judgments(config.data_dir), llm]).digest == \
        qrels.maintained(config).digest


def test_rescore_changes_nothing_when_nothing_changed_and_names_what_it_did(judged, tmp_path):
    root = tmp_path / "copy"
    shutil.copytree(judged["root"], root)
    config = make_config(root)
    before = {n: (config.data_dir / n).read_bytes() for n in (contract.METRICS, contract.PER_QUESTION,
                                                               contract.MAINTAINED_METRICS, contract.QRELS_VERSIONS)}
    done = qrels.rescore(config)
    assert not done.new_version and done.version == 2 and len(done.dates) == len(DAYS)
    assert "re-scored 4 run dates (2025-09-10..2025-09-13)" in done.describe()
    after = {n: (config.data_dir / n).read_bytes() for n in before}
    assert after == before
    store.validate(config.data_dir)  # sealed: not an edit
    # A new human judgment: a new version, the whole history re-scored; the frozen files never touched.
    ledger.append_judgments(config.data_dir, [ledger.Judgment("n42", "wcep-2025-09-10-0d876618bc", 2, "ann",
                                                              ledger.now(), "")])
    done = qrels.rescore(config)
    assert done.new_version and done.version == 3 and done.previous == 2
    assert (config.data_dir / contract.METRICS).read_bytes() == before[contract.METRICS]
    assert (config.data_dir / contract.PER_QUESTION).read_bytes() == before[contract.PER_QUESTION]
    assert (config.data_dir / contract.QRELS_VERSIONS).read_bytes().startswith(before[contract.QRELS_VERSIONS])
    store.validate(config.data_dir)


def test_the_cli_rescore_prints_what_changed(judged, tmp_path):
    root = tmp_path / "copy"
    shutil.copytree(judged["root"], root)
    (root / "monitor.toml").write_text(f'data_dir = "{root / "store"}"\ngold = "{root / "gold.jsonl"}"\n\n'
                                       f'[[sources]]\nname = "news"\npath = "{root / "daily"}"\n')
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "pipeline", "rescore", "--config", str(root / "monitor.toml")],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "maintained qrels: qrels v2 (unchanged); re-scored 4 run dates (2025-09-10..2025-09-13)" in done.stdout


# A run killed after writing maintained_metrics.csv (or qrels_versions.csv): the next recover puts both back.
DRIVER = """
import os, sys
from datetime import date
from pathlib import Path
sys.path.insert(0, {root!r})
from pipeline import store
from pipeline.job import run_day
from tests.test_judging_qrels import make_config
target = {target!r}
write = store.write_table if target == "write_table" else store.add_rows
def killing(*args, **kwargs):
    write(*args, **kwargs)
    os._exit(9)
setattr(store, target, killing)
run_day(make_config(Path({root_dir!r})), date.fromisoformat({day!r}), notify=False)
os._exit(0)
"""


@pytest.mark.parametrize("target", ["add_rows", "write_table"])
def test_a_killed_run_leaves_the_maintained_files_as_they_were(judged, tmp_path, target):
    root = tmp_path / "copy"
    shutil.copytree(judged["root"], root)
    config = make_config(root)
    # A judgment made since the last run: the re-run records a new version and re-scores the whole history.
    ledger.append_judgments(config.data_dir, [ledger.Judgment("n43", "wcep-2025-09-10-74fd82690c", 1, "ann",
                                                              ledger.now(), "")])
    names = (contract.MAINTAINED_METRICS, contract.QRELS_VERSIONS, contract.METRICS)
    before = {n: (config.data_dir / n).read_bytes() for n in names}
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    driver = DRIVER.format(root=str(ROOT), target=target, root_dir=str(root), day=DAYS[-1].isoformat())
    done = subprocess.run([sys.executable, "-c", driver], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=300, check=False)
    assert done.returncode == 9, done.stderr
    changed = [n for n in names if (config.data_dir / n).read_bytes() != before[n]]
    assert contract.QRELS_VERSIONS in changed  # written, then killed
    with store.run_lock(config.data_dir):
        notes = store.recover(config.data_dir)
    assert notes and "rolled back a run that did not finish" in notes[0]
    assert {n: (config.data_dir / n).read_bytes() for n in names} == before
    assert not list(config.data_dir.glob(".run-journal*"))


def test_accepted_questions_rows_join_the_maintained_means(judged, tmp_path, monkeypatch):
    """added_per_question.csv (the accepted drafted questions' rows, written by the run) joins the maintained means
    when the question is in the maintained qrels: each mean is the earlier one with the new question's value added,
    that value as the scalar metric functions compute it."""
    from pipeline import metrics
    from pipeline.gold import GoldQuestion

    root = tmp_path / "copy"
    shutil.copytree(judged["root"], root)
    config = make_config(root)
    before = _cells(qrels.read_maintained(config.data_dir)).set_index(MEANS)
    per_question = store.read_per_question(config.data_dir)
    added = per_question[per_question[contract.QUESTION_ID] == "n42"].assign(question_id="a1")
    added = added.assign(run_date=added[contract.RUN_DATE].map(store.iso_day))
    store.write_table(config.data_dir, contract.ADDED_PER_QUESTION, added)
    store.seal(config.data_dir)  # as a run writes it (the drafted questions' code is another branch's)
    grades = {"wcep-2025-09-10-74fd82690c": 2, "wcep-2025-09-11-0000000000": 0}
    monkeypatch.setattr(qrels, "_accepted_questions", lambda _: [GoldQuestion("a1", "Where?", grades)])
    done = qrels.rescore(config)
    assert done.new_version and qrels.read_versions(config.data_dir)[contract.N_QUESTIONS].iloc[-1] == 10
    after = _cells(qrels.read_maintained(config.data_dir)).set_index(MEANS)
    scalar = {"hit": metrics.hit_at_k, "recall": metrics.recall_at_k, "precision": metrics.precision_at_k,
              "mrr": metrics.reciprocal_rank, "ndcg": metrics.ndcg_at_k, "unjudged": metrics.unjudged_at_k}
    top = added[added[contract.K] == 10].set_index([contract.RUN_DATE, contract.PIPELINE])[contract.RETRIEVED]
    for key, row in after.iterrows():
        day, pipeline, k, metric = key
        value = scalar[metric](store.split_ids(top[(day, pipeline)]), grades, k)
        old = before.loc[key]
        assert row[contract.N_QUESTIONS] == old[contract.N_QUESTIONS] + 1
        expected = (old[contract.VALUE] * old[contract.N_QUESTIONS] + value) / row[contract.N_QUESTIONS]
        assert row[contract.VALUE] == pytest.approx(expected, abs=1e-12), key
