"""The judgments ledger (append-only, all or none, validated with file:line) and the queue."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from pipeline import contract
from pipeline.judging import ledger
from pipeline.judging.ledger import Judgment, JudgmentError


def j(q: str, d: str, grade: int, judge: str = "ana", h: str = "h1", t: str = "2025-09-01T10:00:00+00:00") -> Judgment:
    return Judgment(q, d, grade, judge, t, h)


def pool_row(day: str, q: str, d: str, reason: str, rank: int = 1, h: str = "h1") -> dict:
    return {"run_date": pd.Timestamp(day), "question_id": q, "doc_id": d, "reason": reason, "pipeline": "dense",
            "rank": rank, "gold_doc_id": "", "content_hash": h, "detail": ""}


def test_append_then_read_round_trips_in_order(tmp_path):
    first = [j("q1", "d1", 2), j("q1", "d2", 0, judge="llm:m")]
    ledger.append_judgments(tmp_path, first)
    ledger.append_judgments(tmp_path, [j("q1", "d1", 1, judge="bo")])
    assert ledger.read_judgments(tmp_path) == [*first, j("q1", "d1", 1, judge="bo")]
    lines = (tmp_path / contract.JUDGMENTS).read_text().splitlines()
    assert [set(json.loads(line)) for line in lines] == [set(contract.JUDGMENT_KEYS)] * 3


def test_a_torn_last_line_is_ignored_and_the_next_append_starts_a_new_line(tmp_path):
    ledger.append_judgments(tmp_path, [j("q1", "d1", 2)])
    with open(tmp_path / contract.JUDGMENTS, "a") as f:
        f.write('{"question_id": "q1", "doc_')  # a writer killed mid-line
    assert ledger.read_judgments(tmp_path) == [j("q1", "d1", 2)]
    ledger.append_judgments(tmp_path, [j("q2", "d9", 1)])
    with pytest.raises(JudgmentError, match=r"judgments.jsonl:2"):
        ledger.read_judgments(tmp_path)  # the torn line is now a whole bad line: named, not skipped
    text = (tmp_path / contract.JUDGMENTS).read_text()
    assert text.endswith('"content_hash": "h1"}\n') and text.count("\n") == 3


@pytest.mark.parametrize("line, message", [
    ('{"question_id": "q1", "doc_id": "d1", "grade": 3, "judge": "a", "time": "2025-01-01", "content_hash": ""}',
     "'grade' must be one of 0, 1, 2"),
    ('{"question_id": "q1", "doc_id": "d1", "grade": true, "judge": "a", "time": "2025-01-01", "content_hash": ""}',
     "'grade' must be one of"),
    ('{"question_id": "", "doc_id": "d1", "grade": 1, "judge": "a", "time": "2025-01-01", "content_hash": ""}',
     "'question_id' must be a non-empty string"),
    ('{"question_id": "q1", "doc_id": "d1", "grade": 1, "judge": "a", "time": "yesterday", "content_hash": ""}',
     "'time' must be an ISO 8601 time"),
    ('{"question_id": "q1", "doc_id": "d1", "grade": 1, "judge": "a", "time": "2025-01-01"}', "missing key"),
    ('{"question_id": "q1", "doc_id": "d1", "grade": 1, "judge": "a", "time": "2025-01-01", "content_hash": "",'
     ' "why": "x"}', "unknown key 'why'"),
])
def test_a_bad_line_is_named_with_its_file_and_line(tmp_path, line, message):
    good = ledger.jsonl_line(j("q1", "d1", 2))
    (tmp_path / contract.JUDGMENTS).write_text(good + line + "\n")
    with pytest.raises(JudgmentError, match=rf"judgments.jsonl:2: {message}"):
        ledger.read_judgments(tmp_path)


def test_an_import_line_gets_time_and_hash_filled():
    got = ledger.judgment_from({"question_id": "q", "doc_id": "d", "grade": 2, "judge": "x"}, "f:1",
                               required=ledger.IMPORT_KEYS, content_hash="abc")
    assert (got.content_hash, got.human) == ("abc", True) and got.time.startswith("20")


def test_latest_separates_humans_from_llm_suggestions():
    judged = [j("q", "d", 2), j("q", "d", 0, judge="llm:m"), j("q", "d", 1, judge="bo")]
    assert ledger.latest(judged)[("q", "d")].grade == 1
    assert ledger.latest(judged, human=False)[("q", "d")].grade == 0


def test_the_queue_is_the_pool_minus_human_judgments_on_the_same_text():
    pool = pd.DataFrame([
        pool_row("2025-09-01", "q1", "a", contract.NEW_IN_TOP_K, 3),
        pool_row("2025-09-02", "q1", "a", contract.OUTRANKS_GOLD, 2, h="h2"),  # its text changed since day 1
        pool_row("2025-09-02", "q1", "a", contract.NEW_IN_TOP_K, 2, h="h2"),
        pool_row("2025-09-01", "q1", "b", contract.NEW_IN_TOP_K, 4),
        pool_row("2025-09-01", "q2", "c", contract.SHADOW, 5),
        pool_row("2025-09-02", "q2", "g", contract.GOLD_DELETED, 0, h=""),  # nothing left to judge
    ])
    queued = ledger.queue(pool, [])
    assert list(zip(queued["question_id"], queued["doc_id"])) == [("q2", "c"), ("q1", "a"), ("q1", "b")]
    assert queued.loc[1, "reason"] == f"{contract.OUTRANKS_GOLD} {contract.NEW_IN_TOP_K}"
    assert queued.loc[1, "content_hash"] == "h2"
    # Judged on day 1's text: a's text changed since, so it stays; b and c are done; an LLM's grade counts for nothing.
    judged = [j("q1", "a", 2, h="h1"), j("q1", "b", 0, h="h1"), j("q2", "c", 1, h="h1"),
              j("q1", "a", 2, judge="llm:m", h="h2")]
    assert list(ledger.queue(pool, judged)["doc_id"]) == ["a"]
    assert ledger.queue(pool, [*judged, j("q1", "a", 1, h="h2")]).empty
    assert list(ledger.queue(pool.iloc[:0], [])) == list(contract.POOL_COLUMNS)
