"""The answer layer offline: heuristics (expected values written as their formulas), the readers, agreement
and kappa, layer attribution, the config, and a daily run with logged answers."""

from __future__ import annotations

import json
import math
from datetime import date

import numpy as np
import pandas as pd
import pytest
from statsmodels.stats.inter_rater import cohens_kappa as statsmodels_kappa

from pipeline import answers, contract, store
from pipeline.answers.agreement import agreement, cohen_kappa
from pipeline.alerts import answer_alerts
from pipeline.answers import AnswerRecord, Context, Judgement, Claim
from pipeline.cli import main
from pipeline.config import AlertsConfig, ConfigError, GenerationConfig, load_config
from pipeline.gold import GoldQuestion
from pipeline.job import run_day

TRAM = Context("e2e-tram", "The city council voted 31 to 12 to build a tram line to the airport. Construction of "
                           "the 14 km line, budgeted at 610 million crowns, starts in 2027.")
STRIKE = Context("e2e-ferry-strike", "All ferry crossings to Saltreach were cancelled on Monday 2 November after "
                                     "deckhands walked out. About 9,000 commuters use the route.")


# --- heuristics -------------------------------------------------------------------------------------------


def test_k_precision_is_the_share_of_content_words_in_the_context():
    # content words: tram(in) costs(out) 610(in) million(in) crowns(in) euros(out); "the", "and" are stopwords
    assert answers.content_words("The tram costs 610 million crowns and euros [e2e-tram]") == [
        "tram", "costs", "610", "million", "crowns", "euros"]
    assert answers.k_precision("The tram costs 610 million crowns and euros [e2e-tram]", [TRAM]) == 4 / 6
    assert answers.k_precision("The, and.", [TRAM]) is None  # no content word: undefined, not 0
    # what it misses: a paraphrase is counted as unsupported, a negation of context words as supported
    assert answers.k_precision("Tram construction postponed", [TRAM]) == 2 / 3
    assert answers.k_precision("The council did not build the tram line", [TRAM]) == 4 / 4


def test_unsupported_facts_lists_numbers_dates_and_ids_absent_from_the_context():
    answer = "Crossings stopped on November 2nd for 9000 commuters, flight MH370 and 48 hours [e2e-ferry-strike]."
    assert answers.facts(answer) == ["november 2", "mh370", "2", "9000", "48"]
    # "november 2", "2" and "9000" (written 9,000 in the context) are in it; mh370 and 48 are not
    assert answers.unsupported_facts(answer, [STRIKE]) == ["mh370", "48"]
    # what it misses: the qualifier around a number
    assert answers.unsupported_facts("Building takes 14 working km.", [TRAM]) == []
    assert answers.unsupported_facts("No figures here.", [TRAM]) == []


def test_citations_valid_invalid_and_missing():
    answer = "It costs 610 million [e2e-tram]. It starts in 2027 [e2e-tram, doc-9]; see [doc-7]."
    assert answers.citations(answer) == ["e2e-tram", "doc-9", "doc-7"]
    assert answers.invalid_citations(answer, [TRAM]) == ["doc-9", "doc-7"]
    record = AnswerRecord("q2", "How much?", "It costs 610 million crowns.", (TRAM,))
    assert answers.heuristic_scores(record, None, require_citations=True)["citation_missing"] == 1
    assert answers.heuristic_scores(record, None, require_citations=False)["citation_missing"] is None


@pytest.mark.parametrize(("answer", "refusal"), [
    ("The documents do not say.", True),
    ("There is no information about the tram's cost.", True),
    ("I don't know.", True),
    ("The context says nothing about sharks.", True),
    ("I could not find the grant's staffing condition in the documents provided.", True),  # missed once (demo q10)
    ("We couldn't locate a date in these articles.", True),
    ("The tram costs 610 million crowns.", False),
    ("", True),
])
def test_refusal_detection(answer, refusal):
    assert answers.is_refusal(answer) is refusal


def test_qa_cosine_with_the_bundled_model(embedder):
    question, answer = "How much will the airport tram cost?", "The tram is budgeted at 610 million crowns."
    cosines = answers.qa_cosines([question, question], [answer, ""], embedder.encode)
    q, a = embedder.encode([question, answer])
    assert cosines[0] == pytest.approx(float(q @ a), abs=1e-6)
    assert cosines[1] is None
    unrelated = answers.qa_cosines([question], ["Sharks were tagged off the coast."], embedder.encode)[0]
    assert cosines[0] > unrelated


def test_layer_attribution():
    gold = GoldQuestion("q2", "How much?", {"e2e-tram": 1})
    found = AnswerRecord("q2", "How much?", "The documents do not say.", (TRAM,))
    missed = AnswerRecord("q2", "How much?", "610 million crowns.", (STRIKE,))
    assert answers.gold_in_context(found, gold) == 1 and answers.gold_in_context(missed, gold) == 0
    assert answers.gold_in_context(found, GoldQuestion("q9", "x", {})) is None
    refusing = answers.Scored(found, answers.heuristic_scores(found, gold, False))
    assert refusing.heuristic_layer == answers.GENERATION_MISS  # refusing with the gold document in context
    assert answers.Scored(missed, answers.heuristic_scores(missed, gold, False)).layer == answers.RETRIEVAL_MISS
    good = AnswerRecord("q2", "How much?", "The line is budgeted at 610 million crowns.", (TRAM,))
    assert answers.Scored(good, answers.heuristic_scores(good, gold, False)).layer == answers.BOTH_FINE
    judged = answers.Scored(good, answers.heuristic_scores(good, gold, False), judged=True,
                            judgement=Judgement(answers.SCORED, (Claim("x", answers.SUPPORTED), Claim("y", answers.CONTRADICTED))))
    assert judged.judgement.faithfulness == 1 / (1 + 1)
    assert judged.layer == answers.GENERATION_MISS  # the judge's attribution wins where it gave a verdict
    unjudged = answers.Scored(good, answers.heuristic_scores(good, gold, False), judged=True)
    assert unjudged.layer == answers.BOTH_FINE  # not_judged: the heuristics' attribution stands


def test_undetermined_is_a_state_not_a_number():
    assert Judgement(answers.undetermined(answers.NO_CLAIMS)).faithfulness is None
    assert Judgement().faithfulness is None and Judgement().state == answers.NOT_JUDGED


# --- agreement --------------------------------------------------------------------------------------------


def test_kappa_against_a_hand_computed_example():
    human = [True, True, True, False, False, False, False, False, True, False]
    judged = [True, True, False, False, False, False, True, False, True, False]
    # agreement on 8 of 10; each rater flags 4 of 10, so chance agreement is 0.4*0.4 + 0.6*0.6 = 0.52
    assert cohen_kappa(human, judged) == pytest.approx((0.8 - 0.52) / (1 - 0.52))
    a = agreement(human, judged)
    assert (a.tp, a.fp, a.fn, a.tn) == (3, 1, 1, 5)
    assert a.agreement == 8 / 10 and a.tpr == 3 / (3 + 1) and a.fpr == 1 / (1 + 5)
    assert math.isnan(cohen_kappa([True] * 4, [True] * 4))  # chance agreement 1: kappa undefined
    assert cohen_kappa([True, False], [False, True]) == pytest.approx((0 - 0.5) / (1 - 0.5))


def test_kappa_matches_statsmodels_on_random_labels():
    rng = np.random.default_rng(7)
    for _ in range(20):
        human = rng.integers(0, 3, 60)
        judged = np.where(rng.random(60) < 0.6, human, rng.integers(0, 3, 60))
        table = pd.crosstab(human, judged).reindex(index=range(3), columns=range(3), fill_value=0).to_numpy()
        assert cohen_kappa(list(human), list(judged)) == pytest.approx(statsmodels_kappa(table).kappa)


# --- readers ----------------------------------------------------------------------------------------------

GOLD = [GoldQuestion("q1", "Why were the boats cancelled?", {"e2e-ferry-strike": 1}),
        GoldQuestion("q2", "How much will the tram cost?", {"e2e-tram": 1})]


def _line(**fields) -> str:
    return json.dumps({"question_id": "q1", "answer": "A strike.", "contexts": [{"id": "a", "text": "t"}], **fields})


@pytest.mark.parametrize(("line", "message"), [
    ("{not json", "not valid JSON"),
    (_line(question_id="q9"), "'q9' is not in the gold set"),
    (_line(contexts=[{"id": "a"}]), "'text' must be a string"),
    (_line(context=[]), "unknown key 'context'"),
    (_line(run_date="11/04/2026"), "is not YYYY-MM-DD"),
    ('{"question_id": "q1", "contexts": []}', "missing key 'answer'"),
])
def test_a_bad_logged_line_is_named(tmp_path, line, message):
    path = tmp_path / "answers.jsonl"
    path.write_text(_line(question_id="q2") + "\n" + line + "\n")
    with pytest.raises(answers.AnswersError, match=rf"answers.jsonl:2: .*{message}"):
        answers.check_logged(path, GOLD)


def test_logged_answers_by_date(tmp_path):
    path = tmp_path / "answers.jsonl"
    path.write_text("\n".join([_line(answer="every day"), _line(answer="that day", run_date="2026-11-04"),
                               _line(question_id="q2", answer="q2 other day", run_date="2026-11-03")]) + "\n")
    assert [r.answer for r in answers.read_logged(path, GOLD, date(2026, 11, 4))] == ["that day"]
    assert [r.answer for r in answers.read_logged(path, GOLD, date(2026, 11, 3))] == ["every day", "q2 other day"]
    folder = tmp_path / "logged"
    folder.mkdir()
    (folder / "2026-11-04.jsonl").write_text(_line() + "\n")
    assert len(answers.read_logged(folder, GOLD, date(2026, 11, 4))) == 1
    assert answers.read_logged(folder, GOLD, date(2026, 11, 5)) == []
    (folder / "2026-11-05.jsonl").write_text(_line(run_date="2026-11-04") + "\n")
    with pytest.raises(answers.AnswersError, match="2026-11-05.jsonl:1: run_date 2026-11-04 in the file of 2026-11-05"):
        answers.check_logged(folder, GOLD)


@pytest.mark.parametrize(("row", "message"), [
    ("q1,,faithfulness,,maybe,", "label 'maybe' for faithfulness must be one of faithful, unfaithful"),
    ("q1,,fluency,,good,", "unknown metric 'fluency'"),
    ("q1,,refusal,some claim,refusal,", "only faithfulness labels name a claim"),
    ("q1,,faithfulness,A claim,faithful,", "must be one of supported, contradicted, undetermined"),
    ("q1,2026-13-01,refusal,,refusal,", "is not YYYY-MM-DD"),
])
def test_a_bad_label_is_named(tmp_path, row, message):
    path = tmp_path / "labels.csv"
    path.write_text("question_id,run_date,metric,claim,label,note\nq2,,refusal,,answer,ok\n" + row + "\n")
    with pytest.raises(answers.AnswersError, match=rf"labels.csv:3: .*{message}"):
        answers.read_labels(path)


# --- config -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("table", "key"), [
    ('mode = "sometimes"', "generation.mode"),
    ('mode = "logged"', "generation.logged"),
    ('mode = "generate"', "generation.base_url"),
    ('base_url = "ftp://x"\nmodel = "m"', "generation.base_url"),
    ('base_url = "http://x/v1"', "generation.model"),
    ('judge = true', "generation.judge"),
    ('api_key_env = "sk-123 secret"', "generation.api_key_env"),
    ('k = 0', "generation.k"),
    ('timeout = 0', "generation.timeout"),
    ('concurrency = 0', "generation.concurrency"),
    ('min_kappa = 2', "generation.min_kappa"),
    ('mode = "generate"\nbase_url = "http://x/v1"\nmodel = "m"\npipeline = "nope"', "generation.pipeline"),
    ('colour = "red"', "generation.colour"),
])
def test_generation_config_errors_name_the_key(tmp_path, table, key):
    path = tmp_path / "monitor.toml"
    path.write_text(f'data_dir = "store"\ngold = "gold.jsonl"\n[generation]\n{table}\n')
    with pytest.raises(ConfigError, match=rf"{key}"):
        load_config(path)


def test_generation_defaults(tmp_path):
    path = tmp_path / "monitor.toml"
    path.write_text('data_dir = "store"\ngold = "gold.jsonl"\n[generation]\nmode = "logged"\nlogged = "a.jsonl"\n'
                    'base_url = "http://localhost:8000/v1"\nmodel = "m"\n')
    g = load_config(path).generation
    assert g.logged == tmp_path / "a.jsonl"
    assert g.judging and g.judge_name == "m" and not g.citations_required and g.min_kappa == 0.6
    assert not GenerationConfig().judging and GenerationConfig(mode="generate").citations_required
    assert load_config(path).config_hash() == load_config(path).replace(generation=GenerationConfig()).config_hash()


# --- a run ------------------------------------------------------------------------------------------------


def _logged_run(e2e_config, tmp_path, lines, labels=None):
    path = tmp_path / "answers.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    label_file = None
    if labels is not None:
        label_file = tmp_path / "labels.csv"
        label_file.write_text("question_id,run_date,metric,claim,label,note\n" + labels)
    return e2e_config.replace(generation=GenerationConfig(mode="logged", logged=path, labels=label_file))


LOGGED = [
    {"question_id": "q1", "answer": "Crossings were cancelled after deckhands walked out [e2e-ferry-strike].",
     "contexts": [{"id": STRIKE.id, "text": STRIKE.text}]},
    {"question_id": "q2", "answer": "The tram will cost 720 million crowns [e2e-tram].",
     "contexts": [{"id": TRAM.id, "text": TRAM.text}]},
    {"question_id": "q3", "answer": "The documents do not say.", "contexts": [{"id": TRAM.id, "text": TRAM.text}]},
    {"question_id": "q4", "answer": "The documents do not say.",
     "contexts": [{"id": "e2e-ferry-deal", "text": "The ferry dispute ended with a 4% pay rise."}]},
]


def test_a_run_with_logged_answers_writes_the_contract_files(e2e_config, embedder, tmp_path):
    labels = "q1,,faithfulness,,faithful,\nq2,,faithfulness,,unfaithful,invented cost\nq3,,refusal,,refusal,\n" \
             "q4,,refusal,,refusal,\nq1,,refusal,,answer,\n"
    cfg = _logged_run(e2e_config, tmp_path, LOGGED, labels)
    day = date(2026, 11, 4)
    run_day(cfg, day, embedder=embedder)
    per_answer = store.read(cfg.data_dir, contract.PER_ANSWER).set_index("question_id")
    assert list(per_answer.index) == ["q1", "q2", "q3", "q4"]
    assert per_answer.loc["q2", "unsupported"] == "720"
    assert list(per_answer["layer"]) == [answers.BOTH_FINE, answers.GENERATION_MISS, answers.RETRIEVAL_MISS,
                                         answers.GENERATION_MISS]
    assert list(per_answer["refusal"]) == [0, 0, 1, 1]
    assert (per_answer["faithfulness_state"] == answers.NOT_JUDGED).all()  # no endpoint: nothing judged, nothing 0
    generation = store.read(cfg.data_dir, contract.GENERATION).set_index("metric")
    assert generation.loc["refusal_with_gold", "value"] == 1 / 4  # q4 refuses with its gold document present
    assert generation.loc["unsupported_facts", "value"] == 1 / 4
    assert generation.loc["generation_miss", "value"] == 2 / 4
    assert set(generation["source"]) == {answers.HEURISTIC}
    agreement_rows = store.read(cfg.data_dir, contract.AGREEMENT).set_index("metric")
    assert agreement_rows.loc["refusal", "n"] == 3 and agreement_rows.loc["refusal", "kappa"] == 1.0
    assert agreement_rows.loc["faithfulness", "judge"] == "heuristic"
    records = answers.read_records(cfg.data_dir, day)
    assert records[1]["unsupported"] == ["720"] and records[1]["contexts"][0]["id"] == "e2e-tram"
    assert answers.record_dates(cfg.data_dir) == ["2026-11-04"]
    run_day(cfg, day, embedder=embedder)  # a re-run replaces the date's rows
    assert len(store.read(cfg.data_dir, contract.PER_ANSWER)) == 4


def test_a_bad_logged_file_exits_2_naming_the_line_and_writes_nothing(e2e_config, tmp_path, capsys):
    e2e = e2e_config.gold.parent
    (tmp_path / "answers.jsonl").write_text(json.dumps(LOGGED[0]) + "\n" + '{"question_id": "q2", "answer": 3}\n')
    config = tmp_path / "monitor.toml"
    config.write_text(f'data_dir = "{e2e_config.data_dir}"\ngold = "{e2e / "gold.jsonl"}"\n'
                      f'[[sources]]\nname = "ledger"\npath = "{e2e / "feeds"}"\n'
                      '[generation]\nmode = "logged"\nlogged = "answers.jsonl"\n')
    assert main(["run", "--config", str(config), "--date", "2026-11-04"]) == 2
    assert f"{tmp_path / 'answers.jsonl'}:2:" in capsys.readouterr().err
    assert not e2e_config.data_dir.exists() or not any(e2e_config.data_dir.iterdir())


def test_answer_alerts_fire_on_a_drop_and_respect_trust():
    days = pd.date_range("2026-11-01", periods=8)
    rows = []
    for i, day in enumerate(days):
        for q in range(30):
            value = 1.0 if i < 7 or q >= 20 else 0.0  # on the last day 20 of 30 answers turn unfaithful
            rows.append({"run_date": day, "pipeline": "logged", "question_id": f"q{q}", "faithfulness": value,
                         "answer_relevance": 0.9, "k_precision": value})
    frame = pd.DataFrame(rows)
    config = AlertsConfig(confirm_days=1)
    fired = answer_alerts("2026-11-08", days[-1], frame, config, {"faithfulness": True})
    assert {(a.rule, a.metric) for a in fired} == {("drop", "faithfulness"), ("drop", "k_precision")}
    untrusted = answer_alerts("2026-11-08", days[-1], frame, config, {"faithfulness": False})
    assert {a.metric for a in untrusted} == {"k_precision"}  # an untrusted judge's metric cannot fire


def test_eval_generation_gates_answers(e2e_config, tmp_path, capsys):
    e2e = e2e_config.gold.parent
    (tmp_path / "answers.jsonl").write_text("".join(json.dumps(line) + "\n" for line in LOGGED))
    config = tmp_path / "monitor.toml"
    config.write_text(f'data_dir = "{tmp_path / "unused"}"\ngold = "{e2e / "gold.jsonl"}"\n[retrieval]\npipelines = ["bm25"]\n'
                      '[generation]\nmode = "logged"\nlogged = "answers.jsonl"\n')
    base = ["eval", "--config", str(config), "--gold", str(e2e / "gold.jsonl"), "--docs", str(e2e / "feeds"),
            "--pipeline", "bm25"]
    # K-precision over the four logged answers: mean of each answer's share (the refusals' words are not in context)
    out = tmp_path / "report.json"
    assert main([*base, "--generation", "--min-k-precision", "0.01", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    value = report["answers"]["pipelines"]["logged"]["means"]["heuristic:k_precision"]
    assert 0.01 < value < 0.99
    assert main([*base, "--generation", "--min-k-precision", "0.99"]) == 1
    assert "k_precision of logged answers is" in capsys.readouterr().out
    # the judged metric without a trusted judge is noted, not failed; without --generation nothing is answered
    assert main([*base, "--min-faithfulness", "0.5"]) == 1
    assert "run eval --generation" in capsys.readouterr().out
    assert main([*base, "--generation", "--min-faithfulness", "0.5"]) == 1
    assert "no judge ran" in capsys.readouterr().out


def test_a_judge_is_trusted_only_on_its_latest_kappa():
    def row(day, metric, kappa, trusted, judge="m", level="answer"):
        return {"run_date": pd.Timestamp(day), "metric": metric, "judge": judge, "level": level, "kappa": kappa,
                "trusted": trusted}

    frame = pd.DataFrame([row("2026-11-01", "faithfulness", 0.8, 1), row("2026-11-02", "faithfulness", 0.4, 0),
                          row("2026-11-02", "answer_relevance", 0.7, 1), row("2026-11-03", "faithfulness", 0.9, 1, "x"),
                          row("2026-11-03", "faithfulness", 0.9, 1, level="claim")])
    trust = answers.trusted_metrics(frame, "m")
    assert trust["faithfulness"][0] is False  # the latest answer-level kappa of judge m is 0.4
    assert "kappa 0.40 against the labels of 2026-11-02 is below generation.min_kappa" in trust["faithfulness"][1]
    assert trust["answer_relevance"][0] is True
    assert answers.trusted_metrics(frame.iloc[:0], "m")["faithfulness"][0] is False  # no labels: not trusted


def test_eval_generation_reads_the_logged_answers_of_its_date(e2e_config, tmp_path):
    e2e = e2e_config.gold.parent
    folder = tmp_path / "logged"
    folder.mkdir()
    (folder / "2026-11-04.jsonl").write_text("".join(json.dumps(line) + "\n" for line in LOGGED[:3]))
    config = tmp_path / "monitor.toml"
    config.write_text(f'data_dir = "{tmp_path / "unused"}"\ngold = "{e2e / "gold.jsonl"}"\n[retrieval]\n'
                      'pipelines = ["bm25"]\n[generation]\nmode = "logged"\nlogged = "logged"\n')
    out = tmp_path / "report.json"
    assert main(["eval", "--config", str(config), "--gold", str(e2e / "gold.jsonl"), "--docs", str(e2e / "feeds"),
                 "--generation", "--date", "2026-11-04", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["answers"]["pipelines"]["logged"]["n"]["heuristic:refusal_rate"] == 3
    assert report["answers"]["pipelines"]["logged"]["means"]["heuristic:refusal_rate"] == 1 / 3
