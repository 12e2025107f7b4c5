"""`driftwatch judge`: the queue served in the terminal (grades from stdin), --import (validated whole, all or none,
the text's hash from the corpus), --queue and --queue --json; and the review items both it and the Judge page show
(the overlap of the gold document and the candidate, the reasons, an LLM suggestion shown as one)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from pipeline import contract
from pipeline.cli import main
from pipeline.corpus import Corpus
from pipeline.judging import ledger, review
from pipeline.judging.ledger import Judgment, JudgmentError
from pipeline.views import gold_questions


def judge(store, *args: str) -> int:
    return main(["judge", "--config", str(store.config), *args])


def ledger_text(store) -> str:
    path = store.data_dir / contract.JUDGMENTS
    return path.read_text(encoding="utf-8") if path.exists() else ""


def current_hash(store, doc_id: str) -> str:
    with Corpus.in_dir(store.data_dir, readonly=True) as corpus:
        return corpus.versions(doc_id)[-1][1]


def test_queue_json_lists_the_queue_one_object_a_line(judge_store, capsys):
    assert judge(judge_store, "--queue", "--json") == 0
    out, err = capsys.readouterr()
    records = [json.loads(line) for line in out.splitlines()]
    assert [(r["question_id"], r["doc_id"]) for r in records] == list(judge_store.queued)
    assert all(set(r) == set(review.QUEUE_FIELDS) for r in records)
    shadow = records[0]
    assert shadow["reason"] == f"{contract.SHADOW} {contract.OUTRANKS_GOLD}"
    assert shadow["question"] == gold_questions(judge_store.data_dir.parent / "gold.jsonl")["n42"].question
    assert shadow["content_hash"] == current_hash(judge_store, shadow["doc_id"])
    assert "4 pair(s) to judge" in err and "0 of 4 judged, 4 to go" in err


def test_queue_alone_is_a_readable_table(judge_store, capsys):
    assert judge(judge_store, "--queue") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["question_id", "doc_id", "reason"]
    assert [line.split()[:2] for line in lines[1:]] == [list(pair) for pair in judge_store.queued]


def test_json_without_queue_is_refused(judge_store, capsys):
    assert judge(judge_store, "--json") == 2
    assert "--json goes with --queue" in capsys.readouterr().err


def test_import_appends_every_line_with_the_corpus_hash_and_the_queue_shrinks(judge_store, tmp_path, capsys):
    (q1, d1), (q2, d2), *_ = judge_store.queued
    path = tmp_path / "elsewhere.jsonl"
    path.write_text(json.dumps({"question_id": q1, "doc_id": d1, "grade": 0, "judge": "ana"}) + "\n\n"
                    + json.dumps({"question_id": q2, "doc_id": d2, "grade": 2, "judge": "bo",
                                  "time": "2025-09-12T08:00:00+00:00"}) + "\n", encoding="utf-8")
    assert judge(judge_store, "--import", str(path)) == 0
    assert "2 judgment(s)" in capsys.readouterr().out
    got = ledger.read_judgments(judge_store.data_dir)
    assert [(j.question_id, j.doc_id, j.grade, j.judge) for j in got] == [(q1, d1, 0, "ana"), (q2, d2, 2, "bo")]
    assert [j.content_hash for j in got] == [current_hash(judge_store, d1), current_hash(judge_store, d2)]
    assert got[1].time == "2025-09-12T08:00:00+00:00"
    assert judge(judge_store, "--queue", "--json") == 0
    left = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["question_id"], r["doc_id"]) for r in left] == list(judge_store.queued[2:])


@pytest.mark.parametrize("bad, message", [
    ('{"question_id": "n42", "doc_id": "DOC", "grade": 3, "judge": "ana"}', "'grade' must be one of 0, 1, 2"),
    ('{"question_id": "n42", "doc_id": "DOC", "grade": 1}', "missing key 'judge'"),
    ('{"question_id": "n42", "doc_id": "no-such-doc", "grade": 1, "judge": "ana"}',
     "document 'no-such-doc' is not in the corpus"),
    ('{"question_id": "n999", "doc_id": "DOC", "grade": 1, "judge": "ana"}',
     "question 'n999' is neither in the gold set nor in the pool"),
    ('{"question_id": "n42", "doc_id": "DOC", "grade": 1, "judge": "ana", "why": "x"}', "unknown key 'why'"),
    ('["n42", "DOC", 1]', "expected a JSON object"),
    ('{"question_id": "n42", ', "not valid JSON"),
])
def test_a_bad_import_line_exits_2_naming_file_and_line_and_nothing_is_appended(judge_store, tmp_path, capsys,
                                                                                bad, message):
    (_, doc), *_ = judge_store.queued
    ledger.append_judgments(judge_store.data_dir, [Judgment("n43", doc, 1, "earlier", ledger.now(), "h")])
    before = ledger_text(judge_store)
    good = json.dumps({"question_id": "n42", "doc_id": doc, "grade": 2, "judge": "ana"})
    path = tmp_path / "bad.jsonl"
    path.write_text(f"{good}\n{good}\n{bad.replace('DOC', doc)}\n{good}\n", encoding="utf-8")
    assert judge(judge_store, "--import", str(path)) == 2
    err = capsys.readouterr().err
    assert f"{path}:3: " in err and message in err, err
    assert ledger_text(judge_store) == before  # the good lines before the bad one were not appended either


def test_a_missing_import_file_exits_2(judge_store, tmp_path, capsys):
    assert judge(judge_store, "--import", str(tmp_path / "absent.jsonl")) == 2
    assert "absent.jsonl: no such file" in capsys.readouterr().err
    assert ledger_text(judge_store) == ""


def test_interactive_judging_reads_grades_from_stdin(judge_store, monkeypatch, capsys):
    # first pair: a typo, then 2; second: skipped; third: 0; then quit (the fourth stays queued)
    monkeypatch.setattr("sys.stdin", io.StringIO("7\n2\ns\n0\nq\n"))
    assert judge(judge_store, "--judge", "ana") == 0
    out = capsys.readouterr().out
    first, second, third, fourth = judge_store.queued
    got = ledger.read_judgments(judge_store.data_dir)
    assert [(j.question_id, j.doc_id, j.grade, j.judge) for j in got] == [(*first, 2, "ana"), (*third, 0, "ana")]
    assert [j.content_hash for j in got] == [current_hash(judge_store, first[1]), current_hash(judge_store, third[1])]
    assert "'7': answer 0, 1, 2, s or q" in out
    assert "[1/4] n42" in out and "[3/4] n43" in out and "[4/4] n44" in out  # q on the fourth: not graded
    assert "judged 2, skipped 1; 2 of 4 judged, 2 to go" in out
    assert "Differing sentences: " + judge_store.shadow_detail in out
    assert "«" in out  # the shadow shares word runs with its gold document: marked (stdout is not a terminal)
    # the remaining queue: the skipped pair and the one never reached
    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # end of input quits
    assert judge(judge_store, "--judge", "bo") == 0
    assert "[1/2] " + " · ".join(second) in capsys.readouterr().out
    assert [(r["question_id"], r["doc_id"]) for r in review.load(judge_store.data_dir, {}).queue_records()] == [
        second, fourth]


def test_interactive_judging_needs_a_name(judge_store, capsys):
    assert judge(judge_store) == 2
    assert "--judge NAME" in capsys.readouterr().err


def test_the_review_item_sets_the_gold_text_beside_the_candidate_with_their_overlap(judge_store):
    questions = gold_questions(judge_store.data_dir.parent / "gold.jsonl")
    state = review.load(judge_store.data_dir, questions)
    shadow = review.item(state, *judge_store.queued[0])
    assert shadow.reasons == (contract.SHADOW, contract.OUTRANKS_GOLD)
    assert shadow.gold_doc_id == questions["n42"].relevant_ids[0] and shadow.question == questions["n42"].question
    assert "".join(s.text for s in shadow.overlap.gold) == shadow.gold_text  # spans give the texts back
    assert "".join(s.text for s in shadow.overlap.candidate) == shadow.candidate_text
    # the changed gold document: its earlier text beside the new one, the new sentence the only unshared words
    changed = review.item(state, *judge_store.gold_changed)
    assert changed.gold_label.endswith("earlier text")
    assert changed.candidate_text == changed.gold_text + " Officials later revised the account."
    assert [s.text for s in changed.overlap.candidate if not s.shared] == [" Officials later revised the account."]
    assert changed.overlap.shared_words == changed.overlap.candidate_words - 5


def test_an_llm_suggestion_is_shown_as_one_and_leaves_the_pair_queued(judge_store):
    pair = judge_store.queued[2]
    digest = current_hash(judge_store, pair[1])
    ledger.append_judgments(judge_store.data_dir, [Judgment(*pair, 2, f"{contract.LLM_JUDGE_PREFIX}m", ledger.now(),
                                                            digest)])
    state = review.load(judge_store.data_dir, {})
    shown = review.item(state, *pair)
    assert (shown.suggestion.grade, shown.suggestion_current) == (2, True)
    assert pair in review.order(state.queue) and state.progress == review.Progress(0, 4)


def test_record_refuses_a_bad_grade_and_writes_nothing(judge_store):
    with pytest.raises(JudgmentError, match="'grade' must be one of"):
        review.record(judge_store.data_dir, *judge_store.queued[0], 5, "ana")
    with pytest.raises(JudgmentError, match="'judge' must be a non-empty string"):
        review.record(judge_store.data_dir, *judge_store.queued[0], 1, "  ")
    assert ledger_text(judge_store) == ""


@pytest.mark.parametrize("gold, candidate, shared", [
    ("one two three four", "zero one two three five", ["one two three"]),
    ("one two", "one two", []),  # shorter than a run
    ("A b, c d", "a B c D e", ["a B c D"]),  # case and punctuation ignored
    ("x y z", "p q r", []),
    ("", "", []),
])
def test_overlap_marks_the_shared_word_runs(gold, candidate, shared):
    found = review.overlap(gold, candidate)
    assert [s.text for s in found.candidate if s.shared] == shared
    assert "".join(s.text for s in found.candidate) == candidate and "".join(s.text for s in found.gold) == gold


def test_skipped_pairs_go_last_in_the_order_skipped():
    import pandas as pd

    queue = pd.DataFrame({"question_id": ["a", "b", "c"], "doc_id": ["1", "2", "3"]})
    skipped = review.skip(review.skip([], ("a", "1")), ("b", "2"))
    assert review.order(queue, skipped) == [("c", "3"), ("a", "1"), ("b", "2")]
    assert review.order(queue, review.skip(skipped, ("a", "1"))) == [("c", "3"), ("b", "2"), ("a", "1")]


def test_the_queue_piped_into_head_ends_quietly(judge_store):
    """`driftwatch judge --queue --json | head -1` printed a BrokenPipeError traceback once head had its line and
    left (seen on the demo's 924-pair queue): now the command stops quietly, with the shell's SIGPIPE status."""
    import os
    import subprocess
    import sys

    reader = subprocess.Popen([sys.executable, "-m", "pipeline", "judge", "--config", str(judge_store.config),
                               "--queue", "--json"], cwd=Path(__file__).resolve().parents[1],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    reader.stdout.close()  # the reader is gone before the queue is printed: every write meets a closed pipe
    stderr = reader.stderr.read().decode()
    code = reader.wait(timeout=120)
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
    assert code == 141
