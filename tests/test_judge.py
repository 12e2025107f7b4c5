"""The LLM judge against a scripted OpenAI-compatible server on localhost: claims, verdicts, malformed replies,
time-outs, 429s, the cache, the budget, and generation in a daily run."""

from __future__ import annotations

import json
import time
from datetime import date
from pathlib import Path

import numpy as np
import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from bench._fake_llm import completion, scripted_reply
from pipeline import answers, contract, store
from pipeline.answers import client as endpoint
from pipeline.answers import judge
from pipeline.answers import AnswerRecord, Context
from pipeline.config import ExportConfig, GenerationConfig, PrometheusExportConfig, TargetConfig
from pipeline.gold import GoldQuestion
from pipeline.job import run_day
from pipeline.retrieval import Ranking

TRAM = Context("e2e-tram", "The city council voted 31 to 12 to build a tram line to the airport. The 14 km line is "
                           "budgeted at 610 million crowns.")
INVENTED = AnswerRecord("q2", "How much will the airport tram cost?",
                        "The tram line is 14 km long. It will cost 720 million crowns [e2e-tram].", (TRAM,))


def encode(texts):
    """A bag-of-words encoder (the model is not the point here): normalised word counts over a fixed vocabulary."""
    vocab = sorted({w for t in texts for w in t.lower().split()})
    vectors = np.array([[t.lower().split().count(w) for w in vocab] for t in texts], dtype=float)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


class Scripted:
    """The fake endpoint: scripted replies, with per-prompt overrides (a function of the call's number)."""

    def __init__(self, server: HTTPServer) -> None:
        self.server = server
        self.overrides: dict[str, object] = {}
        self.calls: list[dict] = []
        server.expect_request("/v1/chat/completions", method="POST").respond_with_handler(self.handle)

    def handle(self, request: Request) -> Response:
        body = json.loads(request.data)
        self.calls.append(body)
        override = self.overrides.get(body["messages"][0]["content"])
        if override is not None:
            result = override(sum(c["messages"][0]["content"] == body["messages"][0]["content"] for c in self.calls))
            if isinstance(result, Response):
                return result
            return Response(json.dumps(completion(result)), content_type="application/json")
        return Response(json.dumps(completion(scripted_reply(body))), content_type="application/json")

    def count(self, prompt: str) -> int:
        return sum(c["messages"][0]["content"] == prompt for c in self.calls)


@pytest.fixture()
def llm():
    server = HTTPServer(threaded=True)
    server.start()
    yield Scripted(server)
    server.clear()
    if server.is_running():
        server.stop()


def config(llm: Scripted, **changes) -> GenerationConfig:
    values = dict(mode="logged", base_url=llm.server.url_for("/v1"), model="fake-judge", timeout=5.0, retries=2)
    values.update(changes)
    return GenerationConfig(**values)


def client(llm: Scripted, tmp_path: Path, **changes) -> endpoint.Client:
    return endpoint.Client(config(llm, **changes), tmp_path, backoff=0.01)


def test_claims_and_verdicts_give_faithfulness_with_reasons(llm, tmp_path):
    c = client(llm, tmp_path)
    result = judge.judge_record(c, "fake-judge", INVENTED, encode)
    assert [x.claim for x in result.claims] == ["The tram line is 14 km long.", "It will cost 720 million crowns."]
    assert [x.verdict for x in result.claims] == ["supported", "contradicted"]
    assert result.claims[1].reason == "a figure is not the context's"
    assert result.state == answers.SCORED
    assert result.faithfulness == 1 / (1 + 1)  # supported / (supported + contradicted)
    assert result.answer_relevance == 0.9
    assert llm.count(judge.CLAIMS_PROMPT) == 1 and llm.count(judge.VERDICTS_PROMPT) == 1


def test_claims_are_judged_in_batches(llm, tmp_path, monkeypatch):
    monkeypatch.setattr(judge, "CLAIM_BATCH", 1)
    result = judge.judge_record(client(llm, tmp_path), "fake-judge", INVENTED, encode)
    assert llm.count(judge.VERDICTS_PROMPT) == 2  # one call per batch of claims
    assert result.faithfulness == 1 / 2


def test_reverse_relevance_is_the_mean_cosine_and_noncommittal_scores_zero(llm, tmp_path):
    questions = ["How much is the tram?", "What does the tram cost?", "Is the tram long?"]
    llm.overrides[judge.REVERSE_PROMPT] = lambda n: json.dumps({"questions": questions, "noncommittal": False})
    result = judge.judge_record(client(llm, tmp_path), "fake-judge", INVENTED, encode)
    vectors = encode([INVENTED.question, *questions])
    assert result.reverse_relevance == pytest.approx(np.mean([vectors[i] @ vectors[0] for i in (1, 2, 3)]))
    assert result.noncommittal is False
    llm.overrides.clear()
    refusal = AnswerRecord("q2", INVENTED.question, "The documents do not say.", (TRAM,))
    result = judge.judge_record(client(llm, tmp_path), "fake-judge", refusal, encode)
    assert result.state == answers.undetermined(answers.REFUSAL)
    assert result.faithfulness is None  # undetermined is a state, never 0, 1 or NaN
    assert result.noncommittal is True and result.reverse_relevance == 0.0


def test_malformed_json_is_retried_then_unparseable(llm, tmp_path):
    llm.overrides[judge.CLAIMS_PROMPT] = lambda n: "Sure! Here are the claims: 1. the tram"
    result = judge.judge_record(client(llm, tmp_path, retries=2), "fake-judge", INVENTED, encode)
    assert llm.count(judge.CLAIMS_PROMPT) == 3  # the first attempt and two retries
    assert result.state == answers.undetermined(answers.UNPARSEABLE)
    assert result.faithfulness is None and result.claims == ()
    assert result.answer_relevance == 0.9  # the other parts are judged all the same


def test_malformed_then_valid_is_scored(llm, tmp_path):
    llm.overrides[judge.CLAIMS_PROMPT] = lambda n: "{not json" if n == 1 else json.dumps(
        {"refusal": False, "claims": ["The tram line is 14 km long."]})
    result = judge.judge_record(client(llm, tmp_path), "fake-judge", INVENTED, encode)
    assert llm.count(judge.CLAIMS_PROMPT) == 2
    assert result.state == answers.SCORED and result.faithfulness == 1 / 1


def test_a_slow_server_is_cut_off_at_the_deadline(llm, tmp_path):
    def slow(n):
        time.sleep(5)
        return json.dumps({"refusal": False, "claims": []})

    llm.overrides[judge.CLAIMS_PROMPT] = slow
    c = client(llm, tmp_path, timeout=0.5, retries=1)
    started = time.monotonic()
    with pytest.raises(endpoint.Unreachable, match="deadline"):
        c.chat("fake-judge", judge.CLAIMS_PROMPT, "Answer: x", judge.parse_claims)
    elapsed = time.monotonic() - started
    assert elapsed < 4.5  # two attempts of 0.5 s and a short backoff (slack for a loaded machine), not 2 x 5 s
    assert c.budget.calls == 2


def test_429_then_success(llm, tmp_path):
    llm.overrides[judge.RELEVANCE_PROMPT] = lambda n: (
        Response(json.dumps({"error": {"message": "slow down"}}), status=429, content_type="application/json")
        if n == 1 else json.dumps({"score": 0.25, "reason": "partly"}))
    c = client(llm, tmp_path)
    assert c.chat("fake-judge", judge.RELEVANCE_PROMPT, "Question: a\n\nAnswer: b", judge.parse_relevance) == (0.25, "partly")
    assert llm.count(judge.RELEVANCE_PROMPT) == 2


def test_a_client_error_is_not_retried(llm, tmp_path):
    llm.overrides[judge.RELEVANCE_PROMPT] = lambda n: Response("{}", status=400, content_type="application/json")
    c = client(llm, tmp_path)
    with pytest.raises(endpoint.Unreachable):
        c.chat("fake-judge", judge.RELEVANCE_PROMPT, "Question: a\n\nAnswer: b", judge.parse_relevance)
    assert llm.count(judge.RELEVANCE_PROMPT) == 1


def test_the_cache_makes_a_rerun_cost_zero_calls(llm, tmp_path):
    records = [INVENTED, AnswerRecord("q1", "Why were the boats cancelled?", "A strike [e2e-tram].", (TRAM,))]
    first = judge.judge_records(client(llm, tmp_path), "fake-judge", records, encode)
    made = len(llm.calls)
    assert first.calls == made > 0
    assert (tmp_path / endpoint.CACHE_FILE).exists()
    again = judge.judge_records(client(llm, tmp_path), "fake-judge", records, encode)
    assert len(llm.calls) == made  # the server saw no request
    assert again.calls == 0 and again.cached == made
    assert again.judgements == first.judgements
    other = judge.judge_records(client(llm, tmp_path), "other-judge", records[:1], encode)
    assert other.calls > 0  # keyed by the judge model too


def test_the_budget_stop_leaves_the_rest_not_judged(llm, tmp_path):
    records = [AnswerRecord(f"q{i}", "How much will the tram cost?", f"It costs {i} crowns.", (TRAM,)) for i in range(4)]
    # Each record costs 4 calls (claims, one verdict batch, relevance, reverse): 6 calls judge one record.
    run = judge.judge_records(client(llm, tmp_path, max_calls=6, concurrency=1), "fake-judge", records, encode)
    assert len(llm.calls) == 6
    states = [j.state for j in run.judgements]
    assert states[0] == answers.SCORED
    assert states.count(answers.NOT_JUDGED) == run.not_judged >= 2
    assert "not judged (budget spent)" in run.summary("fake-judge")


def test_token_budget(llm, tmp_path):
    # completion() reports 30 tokens a call: a 60-token budget allows two calls, then stops.
    c = client(llm, tmp_path, max_tokens_per_run=60)
    run = judge.judge_records(c, "fake-judge", [INVENTED], encode)
    assert len(llm.calls) == 2 and run.not_judged == 1


def _run_config(e2e_config, **generation):
    return e2e_config.replace(generation=GenerationConfig(**generation))


def test_generate_and_judge_in_a_daily_run(llm, e2e_config, embedder, tmp_path):
    labels = tmp_path / "labels.csv"
    labels.write_text("question_id,run_date,metric,claim,label,note\nq1,,faithfulness,,faithful,\n"
                      "q2,,faithfulness,,faithful,\nq3,,faithfulness,,unfaithful,\n")
    cfg = _run_config(e2e_config, mode="generate", base_url=llm.server.url_for("/v1"), model="fake-judge",
                      pipeline="bm25", k=3, labels=labels)
    day = date(2026, 11, 4)
    result = run_day(cfg, day, embedder=embedder)
    records = answers.read_records(cfg.data_dir, day)
    assert [r["question_id"] for r in records] == ["q1", "q2", "q3", "q4"]
    first = records[0]
    assert first["pipeline"] == "bm25" and len(first["contexts"]) == 3
    assert first["answer"].endswith(f"[{first['contexts'][0]['id']}]")  # the generator cites the first document
    assert first["claims"] and {c["verdict"] for c in first["claims"]} <= set(answers.VERDICTS)
    generation = store.read(cfg.data_dir, contract.GENERATION)
    assert set(generation["source"]) == {"heuristic", "judge"}
    assert "faithfulness" in set(generation["metric"])
    agreement = store.read(cfg.data_dir, contract.AGREEMENT)
    assert ("faithfulness", "fake-judge", "answer") in set(zip(agreement["metric"], agreement["judge"], agreement["level"]))
    assert "judge fake-judge" in result.run["events"]
    calls = len(llm.calls)
    run_day(cfg, day, embedder=embedder)  # the re-run of a date costs zero calls
    assert len(llm.calls) == calls


def test_an_unreachable_endpoint_never_stops_the_run(e2e_config, embedder, tmp_path):
    logged = tmp_path / "answers.jsonl"
    logged.write_text(json.dumps({"question_id": "q2", "answer": "It costs 610 million crowns [e2e-tram].",
                                  "contexts": [{"id": TRAM.id, "text": TRAM.text}]}) + "\n")
    cfg = _run_config(e2e_config, mode="logged", logged=logged, base_url="http://127.0.0.1:9/v1", model="m",
                      timeout=1.0, retries=1)
    result = run_day(cfg, date(2026, 11, 4), embedder=embedder)
    rows = store.read(cfg.data_dir, contract.PER_ANSWER)
    assert list(rows["faithfulness_state"]) == [answers.undetermined(answers.UNREACHABLE)]
    assert rows["faithfulness"].isna().all() and rows["k_precision"].notna().all()  # the heuristics still ran
    faith = store.read(cfg.data_dir, contract.GENERATION).query("metric == 'faithfulness'")
    assert list(faith["undetermined"]) == [1] and list(faith["n"]) == [1]
    assert "unreachable" in result.run["events"]


def test_an_exporter_failure_keeps_the_answer_layers_events(e2e_config, embedder, tmp_path):
    """Both notes reach runs.csv: the exporters' note was once written over the answer layer's."""
    logged = tmp_path / "answers.jsonl"
    logged.write_text(json.dumps({"question_id": "q2", "answer": "It costs 610 million crowns [e2e-tram].",
                                  "contexts": [{"id": TRAM.id, "text": TRAM.text}]}) + "\n")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    cfg = _run_config(e2e_config, mode="logged", logged=logged, base_url="http://127.0.0.1:9/v1", model="m",
                      timeout=1.0, retries=1)
    cfg = cfg.replace(export=ExportConfig(prometheus=PrometheusExportConfig(path=blocker / "driftwatch.prom")))
    run_day(cfg, date(2026, 11, 4), embedder=embedder, events="a note")
    events = store.read_runs(cfg.data_dir)["events"].iloc[-1]
    assert events.startswith("a note; ") and "unreachable" in events and "export prometheus failed" in events


def test_generation_without_a_pipeline_answers_from_the_first_watched_target(llm, e2e_config, tmp_path):
    """generation.pipeline unset: the contexts come from the first target that is not a candidate (the lookup
    of the targets inside the generation step, with the real generation calls to the endpoint)."""
    targets = (TargetConfig("shadow", "builtin", pipeline="dense", candidate=True),
               TargetConfig("main", "builtin", pipeline="bm25"))
    cfg = _run_config(e2e_config, mode="generate", base_url=llm.server.url_for("/v1"), model="fake-judge", k=1,
                      judge=False).replace(targets=targets)
    gold = [GoldQuestion("q2", INVENTED.question, {TRAM.id: 1})]
    other = "Ferries to the islands run every hour in summer."
    rankings = {"shadow": [Ranking(("ferry",), (1.0,), ("ferry#0",))],
                "main": [Ranking((TRAM.id,), (1.0,), (f"{TRAM.id}#0",))]}
    run = answers.run_answers(cfg, date(2026, 11, 4), gold, rankings, {TRAM.id: TRAM.text, "ferry": other}, encode)
    assert [(r["pipeline"], r["question_id"]) for r in run.records] == [("main", "q2")]
    assert run.records[0]["contexts"] == [{"id": TRAM.id, "text": TRAM.text}]
    assert run.records[0]["answer"] == f"The city council voted 31 to 12 to build a tram line to the airport. [{TRAM.id}]"
    assert llm.count(judge.GENERATE_PROMPT) == 1 and len(llm.calls) == 1  # generated, not judged
