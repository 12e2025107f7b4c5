"""The LLM steps of the judging loop against a scripted OpenAI-compatible server on localhost: `driftwatch prelabel`
(suggestions appended as llm:<model>, never leaving the queue; the kappa with the humans, checked against
scikit-learn; a monitored model refused; a failing endpoint reported, never a traceback) and `driftwatch
suggest-questions` (every new document drafted, short items too; gold duplicates dropped; the round trip with
tfidf-documents; review; accepted questions in added_per_question.csv with per_question.csv unchanged)."""

from __future__ import annotations

import json
import random
import re
import shutil
import time
from datetime import date

import pandas as pd
import pytest
from pytest_httpserver import HTTPServer
from sklearn.metrics import cohen_kappa_score
from werkzeug import Request, Response

from bench._fake_llm import completion
from pipeline import contract, store
from pipeline.cli import main
from pipeline.config import load_config
from pipeline.corpus import Corpus
from pipeline.job import run_day
from pipeline.judging import ledger, prelabel, qrels, questions, review
from pipeline.judging.ledger import Judgment
from pipeline.views import gold_questions
from pipeline.views import judge as judge_views
from pipeline.views.judge import prelabel_line
from tests.conftest import JUDGE_DAYS
from tests.test_app import fresh_caches, open_app, rerun, visit  # noqa: F401 (fixtures)

PAGE = "pages/judge.py"

MODEL = "fake-rater"
_QUERY = re.compile(r"^Query: (.*)$", re.M)


class Scripted:
    """The fake endpoint: `reply(system, user)` gives the content, or a werkzeug Response to send as it is."""

    def __init__(self, server: HTTPServer, reply) -> None:
        self.reply, self.calls = reply, []
        server.expect_request("/v1/chat/completions", method="POST").respond_with_handler(self.handle)
        self.url = server.url_for("/v1")

    def handle(self, request: Request) -> Response:
        body = json.loads(request.data)
        self.calls.append(body)
        result = self.reply(body["messages"][0]["content"], body["messages"][1]["content"])
        if isinstance(result, Response):
            return result
        return Response(json.dumps(completion(result)), content_type="application/json")


@pytest.fixture()
def server():
    srv = HTTPServer(threaded=True)
    srv.start()
    yield srv
    srv.clear()
    if srv.is_running():
        srv.stop()


def configure(store, url: str, extra: str = "", model: str = MODEL) -> None:
    """The judge store's config with a [judging] endpoint (and `extra` TOML appended)."""
    text = store.config.read_text(encoding="utf-8")
    store.config.write_text(f'{text}\n[judging]\nbase_url = "{url}"\nmodel = "{model}"\ntimeout = 5\n{extra}',
                            encoding="utf-8")


# the scripted grades (UMBRELA's 0-3) of the queued pairs, by question
SCORES = {"n42": 3, "n45": 2, "n43": 0, "n44": 1}


def rater(gold):
    by_text = {q.question: q.id for q in gold.values()}

    def reply(system: str, user: str) -> str:
        assert system == prelabel.SYSTEM_PROMPT
        question = by_text[_QUERY.search(user).group(1)]
        return f"M: 2, T: 2\n##final score: {SCORES[question]}"
    return reply


def test_prelabel_appends_llm_suggestions_that_never_leave_the_queue(judge_store, server, capsys):
    gold = gold_questions(judge_store.data_dir.parent / "gold.jsonl")
    llm = Scripted(server, rater(gold))
    configure(judge_store, llm.url)
    assert main(["prelabel", "--config", str(judge_store.config)]) == 0
    out = capsys.readouterr().out
    assert "4 pair(s) labelled by llm:fake-rater, 0 failed" in out
    assert "no pair both the LLM and a human judged yet" in out
    got = ledger.read_judgments(judge_store.data_dir)
    assert [(j.question_id, j.doc_id) for j in got] == list(judge_store.queued)
    assert all(j.judge == "llm:fake-rater" and not j.human for j in got)
    expected = [prelabel.UMBRELA_TO_GRADE[SCORES[q]] for q, _ in judge_store.queued]
    assert [j.grade for j in got] == expected == [2, 1, 0, 0]
    state = review.load(judge_store.data_dir, gold)
    queued = list(zip(state.queue[contract.QUESTION_ID], state.queue[contract.DOC_ID]))
    assert queued == list(judge_store.queued)  # a suggestion is no judgment: every pair is still to judge
    assert state.progress.judged == 0
    hashes = dict(zip(queued, state.queue[contract.CONTENT_HASH]))
    assert [j.content_hash for j in got] == [hashes[p] for p in judge_store.queued]  # the text shown
    shown = review.item(state, *judge_store.queued[0])  # what the Judge page and `driftwatch judge` show
    assert shown.suggestion is not None and shown.suggestion.grade == 2 and shown.suggestion_current
    calls = len(llm.calls)
    assert calls == 4 and "Query: " in llm.calls[0]["messages"][1]["content"]
    # again: every pair has this model's suggestion on its text, so nothing is asked (nor appended)
    assert main(["prelabel", "--config", str(judge_store.config)]) == 0
    assert "0 pair(s) labelled" in capsys.readouterr().out and len(llm.calls) == calls
    assert len(ledger.read_judgments(judge_store.data_dir)) == 4
    # a human judges two pairs: the agreement is over them, shown by the command and under the page's progress
    (q1, d1), (q2, d2) = judge_store.queued[:2]
    review.record(judge_store.data_dir, q1, d1, 2, "ana")
    review.record(judge_store.data_dir, q2, d2, 0, "ana")
    judgments = ledger.read_judgments(judge_store.data_dir)
    agreement = prelabel.human_agreement(judgments)
    assert agreement.n == 2
    assert agreement.kappa == pytest.approx(cohen_kappa_score([2, 0], [2, 1]))
    assert prelabel_line(judgments).startswith("LLM pre-label: kappa ")
    assert prelabel_line([j for j in judgments if j.human]) is None


def test_limit_labels_that_many(judge_store, server, capsys):
    llm = Scripted(server, rater(gold_questions(judge_store.data_dir.parent / "gold.jsonl")))
    configure(judge_store, llm.url)
    assert main(["prelabel", "--config", str(judge_store.config), "--limit", "1"]) == 0
    assert "1 pair(s) labelled by llm:fake-rater, 0 failed, 3 left" in capsys.readouterr().out
    assert len(ledger.read_judgments(judge_store.data_dir)) == 1


def test_human_agreement_is_sklearns_kappa_on_the_same_texts():
    rng = random.Random(7)
    judgments, humans, llms = [], [], []
    for i in range(60):
        h = rng.choice([0, 0, 1, 2])
        g = h if rng.random() < 0.6 else rng.choice([0, 1, 2])
        judgments += [Judgment(f"q{i % 9}", f"d{i}", h, "ana", "2025-09-11T00:00:00+00:00", f"h{i}"),
                      Judgment(f"q{i % 9}", f"d{i}", g, "llm:m", "2025-09-11T00:00:00+00:00", f"h{i}")]
        humans.append(h)
        llms.append(g)
    # not pairs: a suggestion on another text, a human judgment without a suggestion
    judgments += [Judgment("q0", "d0", 2, "llm:m", "2025-09-12T00:00:00+00:00", "other"),
                  Judgment("q1", "x", 1, "bo", "2025-09-12T00:00:00+00:00", "hx")]
    got = prelabel.human_agreement(judgments)
    assert got.n == 60
    assert got.kappa == pytest.approx(cohen_kappa_score(humans, llms))
    assert got.kappa_binary == pytest.approx(cohen_kappa_score([h > 0 for h in humans], [g > 0 for g in llms]))
    assert f"kappa {got.kappa:.2f} with the human judgments over 60 pairs" in got.describe()


@pytest.mark.parametrize("extra, model, key", [
    ('\n[generation]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "gen-model"\n', "gen-model", "generation.model"),
    ('\n[generation]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "gen-model"\njudge_model = "answer-judge"\n',
     "answer-judge", "generation.judge_model"),
    ("", "sentence-transformers/all-MiniLM-L6-v2", "embedder.model"),
])
def test_a_model_a_monitored_pipeline_uses_is_refused(judge_store, server, capsys, extra, model, key):
    llm = Scripted(server, lambda s, u: "##final score: 3")
    text = judge_store.config.read_text(encoding="utf-8")
    judge_store.config.write_text(f'{text}{extra}\n[judging]\nbase_url = "{llm.url}"\nmodel = "{model}"\n',
                                  encoding="utf-8")
    assert main(["prelabel", "--config", str(judge_store.config)]) == 2
    err = capsys.readouterr().err
    assert "judging.model" in err and key in err and "Traceback" not in err
    assert not llm.calls and not (judge_store.data_dir / contract.JUDGMENTS).exists()


@pytest.mark.parametrize("section, message", [
    ("", "judging.base_url: no OpenAI-compatible endpoint"),
    ('\n[judging]\nbase_url = "http://127.0.0.1:9/v1"\n', "judging.model: name the judging LLM's model"),
    ('\n[judging]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\napi_key_env = "DRIFTWATCH_TEST_UNSET_KEY"\n',
     "judging.api_key_env: the environment variable DRIFTWATCH_TEST_UNSET_KEY is not set"),
])
def test_without_an_endpoint_or_model_both_commands_exit_2(judge_store, capsys, section, message):
    text = judge_store.config.read_text(encoding="utf-8")
    judge_store.config.write_text(text + section, encoding="utf-8")
    assert main(["prelabel", "--config", str(judge_store.config)]) == 2
    assert message in capsys.readouterr().err
    assert main(["suggest-questions", "--config", str(judge_store.config), "--date", JUDGE_DAYS[0]]) == 2
    assert message in capsys.readouterr().err
    assert not (judge_store.data_dir / contract.JUDGMENTS).exists()
    assert not (judge_store.data_dir / contract.QUESTIONS).exists()


def test_monitored_use_names_every_model(tmp_path):
    from pipeline.config import Config, GenerationConfig, TargetConfig, monitored_uses

    config = Config(data_dir=tmp_path, gold=tmp_path / "g.jsonl",
                    generation=GenerationConfig(base_url="http://127.0.0.1:9/v1", model="gen", judge_model="jm"),
                    targets=(TargetConfig(name="t", kind="chroma", path=tmp_path, collection="c",
                                          model="target-embedder"),))
    assert set(monitored_uses(config)) == {"gen", "jm", "target-embedder", config.embedder.model, config.rerank.model}


def test_a_failing_endpoint_is_reported_and_exits_1(judge_store, server, capsys):
    llm = Scripted(server, lambda s, u: Response("overloaded", status=500))
    configure(judge_store, llm.url, extra="\n[generation]\nretries = 0\n")
    assert main(["prelabel", "--config", str(judge_store.config)]) == 1
    captured = capsys.readouterr()
    assert "0 pair(s) labelled by llm:fake-rater, 3 failed, 1 left" in captured.out
    assert "given up" in captured.out and captured.err.count("failed: ") == 3
    assert "Traceback" not in captured.err and not (judge_store.data_dir / contract.JUDGMENTS).exists()


def test_a_timing_out_endpoint_is_reported(judge_store, server, capsys):
    def slow(system, user):
        time.sleep(1.5)
        return "##final score: 3"
    llm = Scripted(server, slow)
    configure(judge_store, llm.url, extra="\n[generation]\nretries = 0\n")
    text = judge_store.config.read_text(encoding="utf-8").replace("timeout = 5", "timeout = 0.3")
    judge_store.config.write_text(text, encoding="utf-8")
    started = time.monotonic()
    assert main(["prelabel", "--config", str(judge_store.config), "--limit", "2"]) == 1
    assert time.monotonic() - started < 5  # each call gives up at its deadline
    captured = capsys.readouterr()
    assert "0 pair(s) labelled by llm:fake-rater, 2 failed" in captured.out and "Traceback" not in captured.err


# --- questions for new documents --------------------------------------------------------------------------------


def _new_documents(store, day: str) -> dict[str, str]:
    with Corpus.in_dir(store.data_dir, readonly=True) as corpus:
        return {s.document.id: f"{s.document.title}\n{s.document.text}".strip() for s in corpus.snapshot(day)
                if s.first_seen == day}


def drafter(store, day: str):
    """Each new document's scripted question: its first eight words asked about; the gold documents of n42 and n43
    get their gold questions (n42's word for word, n43's reworded: a near duplicate); the last document by id
    gets a question that finds nothing."""
    docs = _new_documents(store, day)
    gold = gold_questions(store.data_dir.parent / "gold.jsonl")
    scripted = {doc_id: "What happened: " + " ".join(text.split()[:8]) + "?" for doc_id, text in docs.items()}
    scripted[gold["n42"].relevant_ids[0]] = gold["n42"].question
    scripted[gold["n43"].relevant_ids[0]] = ("Which disease does the first koala vaccine approved in Australia "
                                             "protect from?")
    scripted[max(docs)] = "What is it?"
    by_prompt = {questions.USER_PROMPT.format(document=" ".join(text.split())[:questions.MAX_PASSAGE_CHARS]):
                 scripted[doc_id] for doc_id, text in docs.items()}

    def reply(system: str, user: str) -> str:
        assert system == questions.SYSTEM_PROMPT
        return json.dumps({"question": by_prompt[user]})
    return reply, docs, gold


def test_suggest_questions_drafts_every_new_document_and_drops_gold_duplicates(judge_store, server, capsys):
    day = JUDGE_DAYS[0]
    reply, docs, gold = drafter(judge_store, day)
    llm = Scripted(server, reply)
    configure(judge_store, llm.url)
    assert main(["suggest-questions", "--config", str(judge_store.config), "--date", day]) == 0
    out = capsys.readouterr().out
    assert len(llm.calls) == len(docs)  # every document first seen on the day, the shortest too
    assert min(len(t) for t in docs.values()) < 200
    drafts = questions.latest(judge_store.data_dir)
    assert len(drafts) == len(docs) - 2 and f"{len(docs) - 2} question(s) drafted (1 flagged), 2 duplicate(s)" in out
    by_doc = {d.doc_id: d for d in drafts.values()}
    assert gold["n42"].relevant_ids[0] not in by_doc and gold["n43"].relevant_ids[0] not in by_doc
    assert out.count("duplicate dropped: ") == 2
    assert set(by_doc) == set(docs) - {gold["n42"].relevant_ids[0], gold["n43"].relevant_ids[0]}
    shortest = min(by_doc, key=lambda d: len(docs[d]))
    assert by_doc[shortest].question.startswith("What happened: ")
    for d in drafts.values():
        assert d.provenance == contract.PROVENANCE_GENERATED and d.judge == "llm:fake-rater"
        assert d.retriever == questions.RETRIEVER == "tfidf-documents" and d.run_date == day
        assert d.id.startswith(questions.ID_PREFIX) and d.id not in gold
    assert by_doc[max(docs)].found_rank is None and by_doc[max(docs)].flagged  # kept, but flagged
    found = [d for d in drafts.values() if d.doc_id != max(docs)]
    assert all(d.found_rank is not None and not d.flagged for d in found)
    assert sum(d.found_rank == 1 for d in found) >= len(found) * 0.8
    # again: each document has its draft on this text, nothing is asked
    assert main(["suggest-questions", "--config", str(judge_store.config), "--date", day]) == 0
    assert len(llm.calls) == len(docs) and len(questions.read_all(judge_store.data_dir)) == len(drafts)


def test_tfidf_ranks():
    docs = [("a", "the koala vaccine protects against chlamydia"), ("b", "ferry strike in the harbour"),
            ("c", "a tram line to the airport")]
    assert questions.tfidf_ranks(docs, ["koala chlamydia vaccine", "airport tram", "nothing here"],
                                 ["a", "c", "c"], depth=2) == [1, 1, None]


def test_review_accept_and_reject_and_list(judge_store, server, capsys):
    day = JUDGE_DAYS[0]
    reply, docs, _ = drafter(judge_store, day)
    configure(judge_store, Scripted(server, reply).url)
    assert main(["suggest-questions", "--config", str(judge_store.config), "--date", day]) == 0
    first, second = list(questions.latest(judge_store.data_dir))[:2]
    cfg = ["suggest-questions", "--config", str(judge_store.config)]
    assert main([*cfg, "--accept", first]) == 2
    assert "--judge NAME" in capsys.readouterr().err
    assert main([*cfg, "--accept", first, "--judge", "ana"]) == 0
    assert main([*cfg, "--reject", second, "--judge", "bo"]) == 0
    assert main([*cfg, "--accept", "q-nosuch", "--judge", "bo"]) == 2
    assert "no drafted question 'q-nosuch'" in capsys.readouterr().err
    latest = questions.latest(judge_store.data_dir)
    assert latest[first].provenance == contract.PROVENANCE_REVIEWED and latest[first].judge == "ana"
    assert latest[second].provenance == contract.PROVENANCE_REJECTED and latest[second].judge == "bo"
    assert [d.id for d in questions.accepted(judge_store.data_dir)] == [first]
    (added,) = questions.accepted_gold(judge_store.data_dir)
    assert added.id == first and added.relevant == {latest[first].doc_id: 2}
    assert main([*cfg, "--list", "--json"]) == 0
    listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(listed) == len(latest) and listed[0]["provenance"] == "reviewed"
    assert set(listed[0]) == set(contract.QUESTION_KEYS)


def test_a_question_a_person_writes_is_human_accepted_and_checked_as_a_draft_is(judge_store, capsys):
    """`suggest-questions --write Q --doc D --judge NAME`: provenance human (accepted: it joins the maintained
    qrels), no LLM needed, its round trip recorded; a duplicate of a gold question, a document not in the corpus or
    a missing --doc or name exits 2 and appends nothing."""
    cfg = ["suggest-questions", "--config", str(judge_store.config)]
    gold = gold_questions(load_config(judge_store.config).gold)
    doc = next(iter(gold["n42"].relevant))
    path = judge_store.data_dir / contract.QUESTIONS
    for bad, message in ((["--write", gold["n43"].question, "--doc", doc, "--judge", "ana"], "duplicates"),
                         (["--write", "Who was charged?", "--doc", "no-such-doc", "--judge", "ana"], "not a document"),
                         (["--write", "Who was charged?", "--judge", "ana"], "--write needs --doc"),
                         (["--write", "Who was charged?", "--doc", doc], "--judge NAME")):
        assert main([*cfg, *bad]) == 2
        assert message in capsys.readouterr().err
        assert not path.exists()
    assert main([*cfg, "--write", "Where did the shooting at the university event take place?", "--doc", doc,
                 "--judge", "ana"]) == 0
    (written,) = questions.latest(judge_store.data_dir).values()
    assert (written.provenance, written.judge, written.doc_id) == (contract.PROVENANCE_HUMAN, "ana", doc)
    assert written.retriever == questions.RETRIEVER and written.found_rank == 1
    (added,) = questions.accepted_gold(judge_store.data_dir)
    assert added.id == written.id and added.relevant == {doc: 2}


def test_an_accepted_question_joins_added_per_question_and_per_question_is_unchanged(judge_store, server, embedder,
                                                                                      tmp_path, capsys):
    day = JUDGE_DAYS[0]
    reply, docs, _ = drafter(judge_store, day)
    configure(judge_store, Scripted(server, reply).url)
    assert main(["suggest-questions", "--config", str(judge_store.config), "--date", day]) == 0
    accepted = next(d for d in questions.latest(judge_store.data_dir).values() if not d.flagged)
    assert main(["suggest-questions", "--config", str(judge_store.config), "--accept", accepted.id, "--judge",
                 "ana"]) == 0
    without = tmp_path / "without"
    shutil.copytree(judge_store.data_dir.parent, without)
    (without / "store" / contract.QUESTIONS).unlink()
    rerun = date.fromisoformat(JUDGE_DAYS[1])
    config = load_config(judge_store.config)
    run_day(config, rerun, embedder=embedder, notify=False, accept_edits=True)  # the fixture wrote pool.csv
    run_day(config.replace(data_dir=without / "store"), rerun, embedder=embedder, notify=False, accept_edits=True)
    assert ((judge_store.data_dir / contract.PER_QUESTION).read_bytes()
            == (without / "store" / contract.PER_QUESTION).read_bytes())
    assert not (without / "store" / contract.ADDED_PER_QUESTION).exists()
    added = (judge_store.data_dir / contract.ADDED_PER_QUESTION).read_text(encoding="utf-8").splitlines()
    assert added[0].split(",") == list(contract.PER_QUESTION_COLUMNS)
    rows = [dict(zip(contract.PER_QUESTION_COLUMNS, line.split(","))) for line in added[1:]]
    assert rows and {r["question_id"] for r in rows} == {accepted.id}
    assert {r["run_date"] for r in rows} == {JUDGE_DAYS[1]}
    assert {r["pipeline"] for r in rows} == set(config.retrieval.pipelines)
    assert any(r["first_relevant_rank"] not in ("", "0") for r in rows)  # the question finds its document
    # ...and joins the maintained qrels and their series (qrels.update in the run): one question more on the date
    assert accepted.id in {q.id for q in qrels.maintained(config).questions}
    frozen = store.read_metrics(judge_store.data_dir)
    kept = qrels.read_maintained(judge_store.data_dir)
    on_day = lambda frame: frame[frame[contract.RUN_DATE] == pd.Timestamp(rerun)]  # noqa: E731
    assert set(on_day(kept)[contract.N_QUESTIONS]) == {n + 1 for n in set(on_day(frozen)[contract.N_QUESTIONS])}
    assert not (without / "store" / contract.MAINTAINED_METRICS).exists()


# --- the Judge page -------------------------------------------------------------------------------------------


def test_the_judge_page_shows_the_suggestion_the_agreement_and_the_drafts(judge_store, server, open_app):  # noqa: F811
    gold = gold_questions(judge_store.data_dir.parent / "gold.jsonl")
    llm = Scripted(server, rater(gold))
    configure(judge_store, llm.url)
    assert main(["prelabel", "--config", str(judge_store.config)]) == 0
    (q1, d1), *_ = judge_store.queued
    review.record(judge_store.data_dir, q1, d1, 2, "ana")  # the first pair judged: the page shows the second
    day = JUDGE_DAYS[0]
    reply, _, _ = drafter(judge_store, day)
    llm.reply = reply
    assert main(["suggest-questions", "--config", str(judge_store.config), "--date", day]) == 0
    drafts = list(questions.latest(judge_store.data_dir).values())
    at = visit(open_app(judge_store.data_dir, config=judge_store.config), PAGE)
    progress = at.get_by_key("judge_progress")
    assert progress.caption[0].value == ("LLM pre-label: kappa n/a with the human judgments over 1 pairs "
                                         "(relevant or not: n/a)")
    item = at.get_by_key("judge_item")
    captions = [c.value.replace("\\", "") for c in item.caption]
    assert "LLM suggestion (not a judgment): 1 by llm:fake-rater" in captions
    listed = at.get_by_key("judge_questions")
    assert f"{len(drafts)} drafted" in listed.caption[0].value
    flagged = next(d for d in drafts if d.flagged)
    assert flagged.id not in " ".join(c.value for c in listed.caption[:judge_views.DRAFTS_SHOWN + 1])
    first = next(d for d in drafts if not d.flagged)
    assert at.button(key=f"judge_accept_{first.id}").disabled  # no name yet
    at.text_input(key=judge_views.NAME_INPUT).input("ana")
    rerun(at)
    at.button(key=f"judge_accept_{first.id}").click()
    rerun(at)
    latest = questions.latest(judge_store.data_dir)[first.id]
    assert latest.provenance == contract.PROVENANCE_REVIEWED and latest.judge == "ana"
    assert f"{len(drafts) - 1} drafted" in at.get_by_key("judge_questions").caption[0].value


def test_the_endpoint_s_requests_are_not_logged_line_by_line(judge_store, server, capsys):
    """`driftwatch prelabel` printed "INFO httpx2: HTTP Request: POST ..." for every pair (the openai package's HTTP
    client logs each request at INFO): tried on the demo's queue, 60 such lines for 60 pairs. Now one summary."""
    import subprocess
    import sys
    from pathlib import Path

    configure(judge_store, Scripted(server, lambda system, user: "##final score: 2").url)
    done = subprocess.run([sys.executable, "-m", "pipeline", "prelabel", "--config", str(judge_store.config),
                           "--limit", "2"], cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "2 pair(s) labelled" in done.stdout + done.stderr
    assert "HTTP Request" not in done.stderr, done.stderr
