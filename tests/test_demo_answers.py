"""The demo's bundled answers and human labels (data/demo/answers): readable by the answer layer, every answer
labelled, labels that say what the answers were written to be; and the demo build that scores them."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from pipeline import answers, contract, store
from pipeline.config import Config, GenerationConfig, RetrievalConfig
from pipeline.demo import ANSWERS_FILE, FIRST_RUN_DAY, GOLD_FILE, LABELS_FILE, build_demo, demo_date
from pipeline.gold import load_gold

RECORDS = [json.loads(line) for line in ANSWERS_FILE.open(encoding="utf-8")]
LABELS = answers.read_labels(LABELS_FILE)


def test_the_bundled_answers_and_labels_are_valid_input():
    answers.check_logged(ANSWERS_FILE, load_gold(GOLD_FILE))  # raises AnswersError naming the line otherwise
    assert 60 <= len(RECORDS) <= 120 and len({r["run_date"] for r in RECORDS}) in range(3, 7)
    assert len({(r["run_date"], r["question_id"]) for r in RECORDS}) == len(RECORDS)


def test_every_answer_is_labelled_and_every_label_names_an_answer():
    keys = {(r["question_id"], r["run_date"]) for r in RECORDS}
    answer_level = Counter((lab.question_id, lab.run_date, lab.metric) for lab in LABELS if not lab.claim)
    assert {(q, d) for q, d, _ in answer_level} == keys
    assert all(n == 1 for n in answer_level.values())
    refusals = {(lab.question_id, lab.run_date) for lab in LABELS if lab.metric == "refusal" and lab.label == "refusal"}
    for key in keys:
        assert answer_level[(*key, "refusal")] == answer_level[(*key, "answer_relevance")] == 1
        # a refusal makes no claim: it has no faithfulness label (undetermined is a state, not a verdict)
        assert answer_level[(*key, "faithfulness")] == (0 if key in refusals else 1)


def test_the_labels_cover_each_kind_of_failure():
    gold = {q.id: set(q.relevant_ids) for q in load_gold(GOLD_FILE)}
    label = {(lab.question_id, lab.run_date, lab.metric): lab.label for lab in LABELS if not lab.claim}
    with_gold = {(r["question_id"], r["run_date"]) for r in RECORDS
                 if gold[r["question_id"]] & {c["id"] for c in r["contexts"]}}
    refusing = {k for k in label if k[2] == "refusal" and label[k] == "refusal"}
    assert len({k[:2] for k in refusing} & with_gold) >= 3  # refusing with the gold document in the context
    assert len({(r["question_id"], r["run_date"]) for r in RECORDS} - with_gold) >= 10  # retrieval missed
    unfaithful = [k for k in label if k[2] == "faithfulness" and label[k] == "unfaithful"]
    assert len(unfaithful) >= 15 and sum(label[k] == "faithful" for k in label if k[2] == "faithfulness") >= 20
    assert Counter(lab.label for lab in LABELS if lab.claim).keys() == {"supported", "contradicted", "undetermined"}
    for lab in LABELS:  # a faithful answer citing an id outside its context says why it is faithful all the same
        record = _record(lab)
        cited, given = set(answers.citations(record["answer"])), {c["id"] for c in record["contexts"]}
        if lab.metric == "faithfulness" and lab.label == "faithful" and not lab.claim and cited - given:
            assert lab.note, (lab.question_id, lab.run_date)


def _record(lab) -> dict:
    return next(r for r in RECORDS if (r["question_id"], r["run_date"]) == (lab.question_id, lab.run_date))


def test_the_demo_scores_the_bundled_answers_of_its_first_run(tmp_path):
    # a base with its own [generation] off: the demo turns the answer layer on with the bundle
    base = Config(data_dir=Path(), gold=Path(), retrieval=RetrievalConfig(k=(5,)), generation=GenerationConfig())
    build_demo(base, tmp_path / "store", days=1)
    first = demo_date(FIRST_RUN_DAY).isoformat()
    per_answer = store.read(tmp_path / "store", contract.PER_ANSWER)
    assert per_answer["run_date"].dt.strftime("%Y-%m-%d").unique().tolist() == [first]
    assert sorted(per_answer["question_id"]) == sorted(r["question_id"] for r in RECORDS if r["run_date"] == first)
    assert (per_answer["pipeline"] == answers.LOGGED).all()
    stored = answers.read_records(tmp_path / "store", first)
    assert [r["answer"] for r in stored] == [r["answer"] for r in RECORDS if r["run_date"] == first]
    agreement = store.read(tmp_path / "store", contract.AGREEMENT)
    assert set(agreement["metric"]) == {"faithfulness", "answer_relevance", "refusal"}
    assert set(agreement["labels_file"]) == {str(LABELS_FILE)}
