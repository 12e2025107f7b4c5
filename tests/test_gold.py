"""Gold set: binary and graded forms; bad lines refused with the file and line number."""

from __future__ import annotations

import pytest

from pipeline.gold import GoldError, load_gold, parse_gold


def test_binary_and_graded_forms(tmp_path):
    path = tmp_path / "gold.jsonl"
    path.write_text('{"id": "q1", "question": " Who won? ", "relevant": ["a", "b"]}\n\n'
                    '{"id": "q2", "question": "Why?", "relevant": {"c": 2, "d": 1, "e": 0}, "tags": ["x"]}\n')
    q1, q2 = load_gold(path)
    assert (q1.id, q1.question, dict(q1.relevant)) == ("q1", "Who won?", {"a": 1, "b": 1})
    assert dict(q2.relevant) == {"c": 2, "d": 1, "e": 0}
    assert q2.relevant_ids == ("c", "d") and q2.tags == ("x",)


@pytest.mark.parametrize("line, message", [
    ('{"id": "q1", "question": "A?", "relevant": ["a"]', r"g\.jsonl:2: not valid JSON"),
    ('{"id": "q0", "question": "B?", "relevant": ["a"]}', r"g\.jsonl:2: duplicate question id 'q0' \(first on line 1\)"),
    ('{"id": "q1", "question": "  ", "relevant": ["a"]}', r"g\.jsonl:2: question 'q1' has an empty 'question'"),
    ('{"id": "", "question": "A?", "relevant": ["a"]}', r"g\.jsonl:2: 'id' must be a non-empty string"),
    ('{"id": "q1", "question": "A?"}', r"g\.jsonl:2: question 'q1' has no 'relevant'"),
    ('{"id": "q1", "question": "A?", "relevant": {"a": 1.5}}', r"g\.jsonl:2: grade of 'a' must be an integer"),
    ('{"id": "q1", "question": "A?", "relevant": ["a", "a"]}', r"g\.jsonl:2: 'relevant' lists a doc id twice"),
    ('{"id": "q1", "question": "A?", "relevant": ["a"], "answer": "x"}', r"g\.jsonl:2: unknown key 'answer'"),
    ('["q1", "A?"]', r"g\.jsonl:2: expected a JSON object"),
    ('{"id": "q1", "question": "A?", "relevant": {"a": 5000}}',
     r"g\.jsonl:2: grade of 'a' must be an integer from 0 to 10, got 5000"),
    ('{"id": "q1", "question": "A?", "relevant": {"a": 11}}', r"g\.jsonl:2: grade of 'a' must be an integer from 0"),
    ('{"id": "%s", "question": "A?", "relevant": ["a"]}' % ("q" * 513), r"g\.jsonl:2: 'id' 'q+'\.\.\. is 513 characters, over 512"),
    ('{"id": "q\\r1", "question": "A?", "relevant": ["a"]}', r"g\.jsonl:2: 'id' 'q\\r1' contains a carriage return"),
    ('{"id": "q1", "question": "A?", "relevant": ["%s"]}' % ("d" * 513), r"g\.jsonl:2: doc id 'd+'\.\.\. is 513 characters"),
    ('{"id": "q1", "question": "A?", "relevant": {"%s": 1}}' % ("d" * 513), r"g\.jsonl:2: doc id 'd+'\.\.\. is 513"),
    ('{"id": "q1", "question": "%s", "relevant": ["a"]}' % ("w " * 5001), r"g\.jsonl:2: question 'q1' is 10002 characters"),
    ('{"id": "q1", "question": "A?", "relevant": ["a"], "tags": ["%s"]}' % ("t" * 1_000_000),
     r"g\.jsonl:2: the line is 1000063 characters, over 1000000"),
])
def test_bad_lines_are_refused_with_file_and_line(line, message):
    lines = ['{"id": "q0", "question": "Fine?", "relevant": ["a"]}', line]
    with pytest.raises(GoldError, match=message):
        parse_gold(lines, "g.jsonl")


def test_question_without_relevant_documents_is_kept_with_a_warning(caplog):
    (q,) = parse_gold(['{"id": "q1", "question": "Unanswerable?", "relevant": {"a": 0}}'], "g.jsonl")
    assert q.relevant_ids == ()
    assert "no relevant document" in caplog.text


def test_empty_and_missing_files(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(GoldError, match="no questions"):
        load_gold(tmp_path / "empty.jsonl")
    with pytest.raises(GoldError, match="not found"):
        load_gold(tmp_path / "missing.jsonl")


def test_grades_up_to_ten_and_ids_up_to_the_store_limit_are_accepted():
    (q,) = parse_gold(['{"id": "%s", "question": "A?", "relevant": {"%s": 10, "b": 0}}' % ("q" * 512, "d" * 512)],
                      "g.jsonl")
    assert q.relevant["d" * 512] == 10 and len(q.id) == 512


def test_a_newline_in_a_question_id_is_kept():
    (q,) = parse_gold(['{"id": "q\\n1", "question": "A?", "relevant": ["a"]}'], "g.jsonl")
    assert q.id == "q\n1"
