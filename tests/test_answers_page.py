"""The Answers page through AppTest on a demo history whose answer layer ran on the bundled answers and labels (the
first run and 2026-11-14, after the drift event), what it shows checked against the CSV rows and answer records;
its empty state; answer and context text shown as text, never as HTML."""

from __future__ import annotations

import json
import re
import shutil
from datetime import date
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from pipeline import answers, contract, store, views
from pipeline.config import Config, GenerationConfig
from pipeline.demo import LABELS_FILE, build_demo
from pipeline.job import run_day
from pipeline.views import answers as answers_views
from tests.test_app import fresh_caches, literal, open_app, rerun, table, visit  # noqa: F401 (fixtures)

ROOT = Path(__file__).resolve().parents[1]
PAGE = "pages/answers.py"
FIRST, AFTER_DRIFT = "2026-10-24", "2026-11-14"


@pytest.fixture(scope="module")
def answered(tmp_path_factory) -> Path:
    """The demo's first run, then the run of 2026-11-14: two dates of the bundled answers, scored and labelled."""
    data_dir = tmp_path_factory.mktemp("answers") / "store"
    build_demo(Config(data_dir=Path(), gold=Path()), data_dir, days=1)
    run_day(views.settings(data_dir), date.fromisoformat(AFTER_DRIFT), notify=False)
    return data_dir


@pytest.fixture
def open_page(open_app):  # noqa: F811 (the fixture imported above)
    """The Answers page of the app on a data directory (test_app's open_app: the server's steady state)."""
    return lambda data_dir: visit(open_app(data_dir), PAGE)


def traces(at: AppTest, key: str) -> dict[str, tuple[list, list]]:
    spec = json.loads(at.get_by_key(key).proto.spec)
    return {t["name"]: ([x[:10] for x in t["x"]], t["y"]) for t in spec["data"] if t.get("mode") == "lines+markers"}


def pick(at: AppTest, day: str, question: str) -> AppTest:
    at.selectbox(key="answers_date").set_value(date.fromisoformat(day))
    rerun(at)
    at.selectbox(key="answers_question").set_value(question)
    return rerun(at)


def test_the_demo_run_scored_the_bundled_answers_of_both_dates(answered):
    per_answer = store.read(answered, contract.PER_ANSWER)
    assert per_answer.groupby("run_date").size().tolist() == [20, 20]
    assert answers.record_dates(answered) == [FIRST, AFTER_DRIFT]


def test_the_two_layers_are_drawn_from_the_csv_rows(answered, open_page):
    at = open_page(answered)
    assert [t.value for t in at.title] == ["Answers"]
    metrics, per_answer = store.read(answered, contract.METRICS), store.read(answered, contract.PER_ANSWER)
    retrieval = traces(at, "answers_retrieval_chart")
    hit = metrics[(metrics["pipeline"] == "hybrid") & (metrics["k"] == 5) & (metrics["metric"] == "hit")]
    assert retrieval["hit@5 (hybrid)"] == ([FIRST, AFTER_DRIFT], pytest.approx(hit["value"].tolist()))
    gold_share = per_answer.groupby("run_date")["gold_in_context"].mean()
    assert retrieval["gold in the answers' context (logged)"][1] == pytest.approx(gold_share.tolist())
    # the bundle's plan: q04, q16, q25, q34, q35 missed on the later date; q16 and q25 on both
    assert gold_share.tolist() == pytest.approx([18 / 20, 15 / 20])
    generation = store.read(answered, contract.GENERATION)
    drawn = traces(at, "answers_generation_chart")
    for (source, metric), label in answers_views.GENERATION_SERIES.items():
        rows = generation[(generation["source"] == source) & (generation["metric"] == metric)].dropna(subset=["value"])
        if rows.empty:
            assert label not in drawn  # the judge did not run: no judged line, not a line of zeros
        else:
            assert drawn[label][1] == pytest.approx(rows["value"].tolist())
    assert "faithfulness (judge)" not in drawn and "K-precision (heuristic)" in drawn


def test_attribution_and_counts_are_the_per_answer_rows_of_the_date(answered, open_page):
    at = open_page(answered)
    assert at.selectbox(key="answers_date").value == date.fromisoformat(AFTER_DRIFT)  # the latest by default
    shown = table(at, "answers_attribution")
    rows = store.read(answered, contract.PER_ANSWER)
    rows = rows[rows["run_date"] == AFTER_DRIFT].set_index("question_id")
    assert sorted(shown["question_id"]) == sorted(rows.index)
    for row in shown.itertuples(index=False):
        assert row.layer == answers_views.LAYER_LABELS[rows.loc[row.question_id, "layer"]]
        assert row.unsupported == ", ".join(store.split_ids(rows.loc[row.question_id, "unsupported"] or ""))
    assert list(shown["layer"][:5]) == ["retrieval miss"] * 5  # misses first
    counts = {m.label: int(m.value) for m in at.metric}
    assert counts["retrieval miss"] == 5 == (rows["layer"] == "retrieval_miss").sum()
    assert counts["generation miss"] == (rows["layer"] == "generation_miss").sum()
    assert sum(counts.values()) == 20


def test_one_answer_shows_its_claims_by_verdict_its_flags_and_its_context(answered, open_page):
    at = pick(open_page(answered), AFTER_DRIFT, "q10")  # the invented 1,800 staff (eco-010's jobs figure)
    record = next(r for r in answers.read_records(answered, AFTER_DRIFT) if r["question_id"] == "q10")
    assert record["answer"] in [c.value for c in at.code]
    assert any("Claims as a human labelled them" in c.value for c in at.caption)  # no judge ran: the human's
    assert [literal(e.value) for e in at.error] == [
        "contradicted: Nimbus Dynamics must employ at least 1,800 permanent staff at the Velmora site"]
    assert len(at.success) == 2
    texts = [c.value for c in at.code]
    assert all(c["text"] in texts for c in record["contexts"])  # every context, as text
    labels = [literal(e.label) for e in at.expander if e.label[:1].isdigit()]
    assert labels == [f"{i}. {c['id']}" + (" · gold · cited" if c["id"] == "pol-005" else "")
                      for i, c in enumerate(record["contexts"], start=1)]
    at = pick(at, AFTER_DRIFT, "q04")  # from memory: cites pol-003, which retrieval no longer found
    assert any(literal(w.value) == "Cited ids that are not in the context: pol-003" for w in at.warning)
    at = pick(at, FIRST, "q50")  # 34 ambulance calls for 43
    assert any(literal(w.value) == "Numbers, dates or ids absent from the context: 34" for w in at.warning)


def test_the_agreement_table_is_the_latest_agreement_rows_with_a_note_when_not_trusted(answered, open_page):
    at = open_page(answered)
    shown = table(at, "answers_agreement")
    rows = store.read(answered, contract.AGREEMENT)
    rows = rows[rows["run_date"] == AFTER_DRIFT].sort_values(["metric", "judge", "level"])
    assert shown[["metric", "judge", "n", "tp", "fp", "fn", "tn"]].values.tolist() == \
        rows[["metric", "judge", "n", "tp", "fp", "fn", "tn"]].values.tolist()
    assert shown["kappa"].tolist() == pytest.approx(rows["kappa"].tolist())
    assert set(rows["labels_file"]) == {str(LABELS_FILE)}
    weak = rows[rows["kappa"] < 0.6]
    notes = [literal(w.value) for w in at.warning]
    assert len(weak) and all(any(n.startswith(f"{m} by heuristic") and "hints, not verdicts" in n for n in notes)
                             for m in weak["metric"])
    at.selectbox(key="answers_confusion").set_value(list(shown["metric"]).index("faithfulness"))
    rerun(at)
    matrix = table(at, "answers_confusion_matrix")
    row = rows[rows["metric"] == "faithfulness"].iloc[0]
    assert matrix[["predicted: flagged", "predicted: passed"]].values.tolist() == [[row.tp, row.fn], [row.fp, row.tn]]


def test_an_untrusted_judge_is_recorded_and_said_not_to_alert(answered, tmp_path, open_page):
    data_dir = tmp_path / "store"
    shutil.copytree(answered, data_dir)
    judged = {"run_date": AFTER_DRIFT, "metric": "faithfulness", "judge": "small-judge", "level": "answer", "n": 17,
              "agreement": 0.6, "kappa": 0.31, "tpr": 0.5, "fpr": 0.2, "tp": 5, "fp": 2, "fn": 5, "tn": 5,
              "trusted": 0, "labels_file": str(LABELS_FILE)}
    rows = store.read(data_dir, contract.AGREEMENT)
    rows = rows[rows["run_date"] == AFTER_DRIFT].assign(run_date=AFTER_DRIFT).to_dict("records") + [judged]
    store.replace_date(data_dir, contract.AGREEMENT, AFTER_DRIFT, rows)
    at = open_page(data_dir)
    assert "small-judge" in set(table(at, "answers_agreement")["judge"])
    assert ("faithfulness by small-judge (answer level, 17 labels): kappa 0.31 is below generation.min_kappa (0.6): "
            "recorded, cannot alert or fail the gate.") in [literal(w.value) for w in at.warning]


def test_answer_and_context_text_is_shown_as_text_never_as_html(answered, tmp_path, open_page):
    data_dir = tmp_path / "store"
    shutil.copytree(answered, data_dir)
    path = answers.records_path(data_dir, AFTER_DRIFT)
    records = answers.read_records(data_dir, AFTER_DRIFT)
    hostile = "<script>alert('answer')</script> **bold** :red[red] $x$"
    for r in records:
        if r["question_id"] == "q10":
            r["answer"] = hostile
            r["contexts"][0]["text"] = "<img src=x onerror=alert(1)> context"
            r["contexts"][0]["id"] = "<b>doc</b>"
            r["claims"] = [{"claim": "<script>claim</script>", "verdict": "supported", "reason": "<i>why</i>"}]
    answers.write_records(data_dir, AFTER_DRIFT, records)
    assert "<script>" in path.read_text()
    at = pick(open_page(data_dir), AFTER_DRIFT, "q10")
    assert hostile in [c.value for c in at.code]
    assert "<img src=x onerror=alert(1)> context" in [c.value for c in at.code]
    assert [literal(s.value) for s in at.success] == ["supported: <script>claim</script> (<i>why</i>)"]
    assert any(literal(e.label).startswith("1. <b>doc</b>") for e in at.expander)
    shown = [*at.markdown, *at.caption, *at.success, *at.error, *at.warning, *at.info]
    assert not any(getattr(m.proto, "allow_html", False) for m in shown)
    # every markup character reaches the Markdown renderer escaped: none can open a tag
    assert not any(re.search(r"(?<!\\)<", m.value) for m in shown)


def test_without_answers_the_page_explains_how_to_turn_the_layer_on(answered, tmp_path, open_page):
    data_dir = tmp_path / "store"
    shutil.copytree(answered, data_dir)
    for name in (contract.GENERATION, contract.PER_ANSWER, contract.AGREEMENT):
        (data_dir / name).unlink()
    shutil.rmtree(data_dir / contract.ANSWERS_DIR)
    at = open_page(data_dir)
    assert [t.value for t in at.title] == ["Answers"]
    info = [literal(i.value) for i in at.info]
    assert len(info) == 1 and "[generation]" in info[0] and 'mode = "logged"' in info[0]
    assert traces(at, "answers_retrieval_chart").keys() == {"hit@5 (hybrid)"}  # retrieval still drawn
    assert traces(at, "answers_generation_chart") == {}
    with pytest.raises(KeyError):
        at.get_by_key("answers_attribution")


def test_an_empty_data_directory_gets_the_apps_empty_state(tmp_path, open_page):
    at = open_page(tmp_path / "empty")
    assert [t.value for t in at.title] == ["driftwatch"]
    assert "No history" in literal(at.info[0].value)


def test_the_bundled_contexts_are_the_demos_real_hybrid_top5(answered):
    """data/demo/answers/build.py retrieves the contexts again from the history and finds the committed ones."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("answers_build", ROOT / "data/demo/answers/build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    fresh = build.contexts(answered, dates=(FIRST, AFTER_DRIFT))
    committed = [json.loads(line) for line in (ROOT / "data/demo/answers/answers.jsonl").open(encoding="utf-8")]
    for record in committed:
        if record["run_date"] in (FIRST, AFTER_DRIFT):
            assert record["contexts"] == fresh[record["run_date"], record["question_id"]], record["question_id"]
    # and its plan of hand-written answers gives the committed records, in order
    assert build.records({(r["run_date"], r["question_id"]): r["contexts"] for r in committed}) == committed


def test_with_a_judge_at_a_fake_endpoint_the_page_shows_its_scores_claims_and_agreement(tmp_path, httpserver,
                                                                                         open_page):
    from werkzeug import Response

    from bench._fake_llm import completion, scripted_reply

    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(
        lambda request: Response(json.dumps(completion(scripted_reply(json.loads(request.data)))),
                                 content_type="application/json"))
    judged = GenerationConfig(base_url=httpserver.url_for("/v1"), model="fake-judge", timeout=5.0)
    data_dir = tmp_path / "store"
    build_demo(Config(data_dir=Path(), gold=Path(), generation=judged), data_dir, days=1)
    generation = store.read(data_dir, contract.GENERATION)
    faithfulness = generation[(generation["source"] == "judge") & (generation["metric"] == "faithfulness")]
    assert len(faithfulness) == 1
    at = open_page(data_dir)
    assert traces(at, "answers_generation_chart")["faithfulness (judge)"][1] == pytest.approx(
        faithfulness["value"].tolist())
    at = pick(at, FIRST, "q50")  # 34 calls for 43: the fake judge contradicts a claim whose figure is not the context's
    record = next(r for r in answers.read_records(data_dir, FIRST) if r["question_id"] == "q50")
    assert any(c.value == "Claims by the judge, worst verdict first" for c in at.caption)
    assert [literal(e.value) for e in at.error] == [f"contradicted: {c['claim']} ({c['reason']})"
                                                     for c in record["claims"] if c["verdict"] == "contradicted"]
    assert at.error and any(literal(c.value).startswith("Judge on relevance: ") for c in at.caption)
    agreement = table(at, "answers_agreement")
    assert {"heuristic", "fake-judge"} <= set(agreement["judge"])
    untrusted = agreement[(agreement["judge"] == "fake-judge") & (agreement["trusted"] == 0)]
    notes = [literal(w.value) for w in at.warning]
    assert all(any(n.startswith(f"{r.metric} by fake-judge ({r.level} level") and n.endswith(
        "recorded, cannot alert or fail the gate.") for n in notes) for r in untrusted.itertuples())


def test_a_heuristic_below_its_gate_is_a_hint_on_the_page_and_its_column_says_so(answered, open_page):
    trusted, why = answers.heuristic_trust(store.read(answered, contract.AGREEMENT))
    assert not trusted  # the bundled labels: the heuristics' faithfulness agrees below generation.min_kappa
    at = open_page(answered)
    hint, = [literal(i.value) for i in at.info if literal(i.value).startswith("K-precision and the heuristics")]
    assert why in hint and "not alert conditions" in hint
    columns = json.loads(at.get_by_key("answers_attribution").dataframe[0].proto.columns)
    assert columns["k_precision"]["label"] == "K-precision (hint)"
