"""Targets: a team's own retriever (a local HTTP search service, a Python function, logged runs) scored like the
builtin pipelines; failures recorded, never zero scores; the gate against a target; label-free early warnings."""

from __future__ import annotations

import json
import math
import threading
import time
from dataclasses import replace
from datetime import date
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline import contract, signals, store
from pipeline.cli import main
from pipeline.config import ConfigError, TargetConfig, load_config
from pipeline.corpus import Corpus
from pipeline.gate import evaluate_documents
from pipeline.gold import load_gold
from pipeline.chunking import chunk_documents
from pipeline.job import ingest, run_day
from pipeline.retrieval import Ranking, Retriever
from pipeline.targets import HttpTarget, RunsTarget, TargetError, probe

DAY = date(2026, 11, 4)
SECRET = "s3cret-team-key-1234"
QUALITY = ["hit", "recall", "precision", "rr", "ndcg", "first_relevant_rank", "retrieved"]


@pytest.fixture()
def index(e2e_config, tmp_path):
    """A real bm25s index over the e2e feeds as of DAY: search(query, k) -> [(doc_id, score, best chunk text)]."""
    cfg = e2e_config.replace(data_dir=tmp_path / "index",
                             retrieval=replace(e2e_config.retrieval, pipelines=("bm25",)))
    with Corpus.in_dir(cfg.data_dir) as corpus:
        ingest(cfg, corpus, DAY)
        chunks = chunk_documents(cfg, corpus.snapshot(DAY))
    retriever = Retriever(chunks, np.zeros((len(chunks), 0), np.float32), cfg)
    text = {c.id: c.text for c in chunks}

    def search(query: str, k: int) -> list[tuple[str, float, str]]:
        r = retriever.search("bm25", [query], None)[0]
        return [(d, s, text[c]) for d, s, c in list(zip(r.doc_ids, r.scores, r.chunk_ids))[:k]]
    return search


class SearchService:
    """The team's search service (outside the system under test), on localhost: /search wraps the index and
    wants the X-Api-Key header; /error answers 500, /malformed a non-JSON body, /slow takes 3 s, /flaky 503s
    each query's first request."""

    def __init__(self, search) -> None:
        self.requests: dict[str, int] = {}
        self.seen_flaky: set[str] = set()
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                route = self.path
                service.requests[route] = service.requests.get(route, 0) + 1
                if route == "/error":
                    return self._send(500, b'{"error": "index unavailable"}')
                if route == "/malformed":
                    return self._send(200, b"<html>Service Temporarily Overloaded</html>")
                if route == "/slow":
                    time.sleep(3)
                if route == "/flaky" and body["query"] not in service.seen_flaky:
                    service.seen_flaky.add(body["query"])
                    return self._send(503, b"{}")
                if route == "/search" and self.headers.get("X-Api-Key") != SECRET:
                    return self._send(401, b'{"error": "bad key"}')
                hits = [{"doc": {"id": d}, "score": s, "text": t} for d, s, t in search(body["query"], body["size"])]
                self._send(200, json.dumps({"data": {"hits": hits}}).encode())

            def _send(self, status: int, payload: bytes) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:  # the client gave up (the slow route): expected
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture()
def service(index):
    svc = SearchService(index)
    yield svc
    svc.server.shutdown()
    svc.server.server_close()


def http(name: str, url: str, **extra) -> TargetConfig:
    return TargetConfig(name=name, kind="http", url=url, body='{"query": {query}, "size": {k}}', hits="data.hits",
                        id="doc.id", score="score", text="text", **extra)


def write_logs(folder: Path, index, gold) -> None:
    """The index's answers for DAY as a TREC run, JSONL rankings, OpenInference spans and a Python module."""
    folder.mkdir(parents=True, exist_ok=True)
    answers = {q.id: index(q.question, 10) for q in gold}
    (folder / f"{DAY}.trec").write_text("".join(
        f"{qid} Q0 {d} {rank} {s!r} team\n" for qid, hits in answers.items()
        for rank, (d, s, _) in enumerate(hits, start=1)))
    (folder / f"{DAY}.jsonl").write_text("".join(
        json.dumps({"question_id": qid, "ranked": [{"id": d, "score": s} for d, s, _ in hits]}) + "\n"
        for qid, hits in answers.items()))
    spans = []
    for q in gold:
        attributes = {"openinference.span.kind": "RETRIEVER", "input.value": q.question}
        for i, (d, s, t) in enumerate(answers[q.id]):
            attributes |= {f"retrieval.documents.{i}.document.id": d, f"retrieval.documents.{i}.document.score": s,
                           f"retrieval.documents.{i}.document.content": t}
        spans.append({"name": "retrieve", "span_kind": "RETRIEVER", "attributes": attributes})
    spans.append({"name": "llm", "attributes": {"openinference.span.kind": "LLM", "input.value": gold[0].question}})
    (folder / f"spans-{DAY}.jsonl").write_text("".join(json.dumps(s) + "\n" for s in spans))
    (folder / "hits.json").write_text(json.dumps({q.question: answers[q.id] for q in gold}))
    (folder / "team_retriever.py").write_text(
        "import json, pathlib\n"
        "HITS = json.loads(pathlib.Path(__file__).with_name('hits.json').read_text())\n"
        "def search(query, k):\n"
        "    return [tuple(hit) for hit in HITS[query][:k]]\n")


def test_every_target_scores_like_the_builtin_pipeline_it_wraps_and_failures_are_recorded(
        e2e_config, embedder, index, service, tmp_path, monkeypatch, caplog):
    gold = load_gold(e2e_config.gold)
    logs = tmp_path / "logs"
    write_logs(logs, index, gold)
    monkeypatch.setenv("TEAM_KEY", SECRET)
    config = e2e_config.replace(
        retrieval=replace(e2e_config.retrieval, dense_index="hnsw"),
        targets=(
            TargetConfig(name="bm25", kind="builtin"),
            TargetConfig(name="dense", kind="builtin"),
            http("svc", f"{service.url}/search", headers={"X-Api-Key": "TEAM_KEY"}),
            http("flaky", f"{service.url}/flaky", retries=2),
            TargetConfig(name="py", kind="python", function="team_retriever:search", python_path=logs),
            TargetConfig(name="trec", kind="runs", format="trec", path=logs / "{date}.trec"),
            TargetConfig(name="ranked", kind="runs", format="jsonl", path=logs / "{date}.jsonl"),
            TargetConfig(name="spans", kind="runs", format="openinference", path=logs / "spans-{date}.jsonl"),
            http("down", f"{service.url}/error", retries=1, concurrency=1),
            http("garbled", f"{service.url}/malformed"),
            http("slow", f"{service.url}/slow", timeout=0.5, retries=0),
        ))
    t0 = time.perf_counter()
    result = run_day(config, DAY, embedder=embedder)
    assert time.perf_counter() - t0 < 60
    data = config.data_dir

    per_q = store.read_per_question(data)
    builtin = per_q[per_q["pipeline"] == "bm25"].set_index(["k", "question_id"]).sort_index()
    assert len(builtin) == 3 * 4 and builtin["hit"].sum() > 0
    for name in ("svc", "flaky", "py", "trec", "ranked", "spans"):
        mine = per_q[per_q["pipeline"] == name].set_index(["k", "question_id"]).sort_index()
        pd.testing.assert_frame_equal(mine[QUALITY], builtin[QUALITY])  # question by question, every k
        if name != "ranked":  # the JSONL log above carries the scores too, but written through json: compare all
            assert np.allclose(mine["top1_score"], builtin["top1_score"])
        assert (mine["gold_missing"] == 0).all()

    targets = store.read(data, contract.TARGETS).set_index("target")
    assert targets.loc["svc", "status"] == "ok" and targets.loc["bm25", "status"] == "ok"
    assert set(targets.index[targets["status"] == "failed"]) == {"down", "garbled", "slow"}
    assert "HTTP 500 after 2 attempts" in targets.loc["down", "message"]
    assert service.requests["/error"] == 2  # one question, tried twice; the others were never sent
    assert "not valid JSON" in targets.loc["garbled", "message"]
    assert "within 0.5 s" in targets.loc["slow", "message"] and targets.loc["slow", "seconds"] < 2.5
    assert service.requests["/flaky"] == 2 * len(gold)  # each question's 503 retried once, then answered

    metrics = store.read_metrics(data)
    assert set(metrics["pipeline"]) == {"bm25", "dense", "svc", "flaky", "py", "trec", "ranked", "spans"}  # no zeros
    alerts = store.read(data, contract.ALERTS)
    failed = alerts[alerts["rule"] == "targets_failed"]
    assert sorted(failed["pipeline"]) == ["down", "garbled", "slow"] and (failed["severity"] == "alert").all()
    assert {o.name for o in result.failed_targets} == {"down", "garbled", "slow"}

    sig = store.read(data, contract.SIGNALS)
    margin = sig[(sig["signal"] == signals.GOLD_MARGIN) & sig["question_id"].notna()]
    by = {p: g.set_index(["k", "question_id"])["value"].sort_index() for p, g in margin.groupby("pipeline")}
    assert np.allclose(by["svc"], by["bm25"], equal_nan=True) and by["bm25"].notna().any()
    hnsw = sig[sig["signal"] == signals.HNSW_RECALL]
    assert set(hnsw["pipeline"]) == {"dense"} and (hnsw["value"] == 1.0).all()  # 7 documents: HNSW finds all

    # The header's secret went to the service and nowhere else.
    for path in data.iterdir():
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
    assert SECRET not in caplog.text


def test_probe_reaches_each_target_once_and_names_the_gold_ids_found(e2e_config, index, service, monkeypatch):
    monkeypatch.setenv("TEAM_KEY", SECRET)
    config = e2e_config.replace(targets=(
        TargetConfig(name="hybrid", kind="builtin"),
        http("svc", f"{service.url}/search", headers={"X-Api-Key": "TEAM_KEY"}),
        http("down", f"{service.url}/error", retries=0)))
    gold = load_gold(config.gold)
    found = {p.name: p for p in probe(config, gold)}
    assert found["hybrid"].ok and found["svc"].ok and not found["down"].ok
    assert set(found["svc"].gold_found) <= {d for q in gold for d in q.relevant_ids} and found["svc"].gold_found
    assert found["svc"].gold_total == 4
    assert "HTTP 500" in found["down"].message
    assert not list(config.data_dir.glob("*.csv")) if config.data_dir.exists() else True


def write_config(tmp_path: Path, e2e_config, body: str) -> Path:
    path = tmp_path / "monitor.toml"
    path.write_text(f'data_dir = "{tmp_path / "team-store"}"\ngold = "{e2e_config.gold}"\n' + body)
    return path


def test_the_gate_runs_against_an_http_target_and_matches_the_builtin_pipeline(
        e2e_config, embedder, index, service, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TEAM_KEY", SECRET)
    path = write_config(tmp_path, e2e_config, f'''
[retrieval]
pipelines = ["bm25"]
k = [1, 3, 5]
candidate_depth = 10

[[targets]]
name = "team-search"
kind = "http"
url = "{service.url}/search"
body = '{{"query": {{query}}, "size": {{k}}}}'
hits = "data.hits"
id = "doc.id"
text = "text"
headers = {{X-Api-Key = "TEAM_KEY"}}
''')
    out = tmp_path / "pr.json"
    assert main(["eval", "--config", str(path), "--gold", str(e2e_config.gold), "--target", "team-search",
                 "--k", "5", "--min-recall-at-k", "0.5", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert list(report["pipelines"]) == ["team-search"]
    assert "gate passed" in capsys.readouterr().out
    config = load_config(path)
    builtin = evaluate_documents(config.replace(targets=()), e2e_config.gold, [e2e_config.sources[0].path], 5)
    assert report["pipelines"]["team-search"]["questions"] == builtin["pipelines"]["bm25"]["questions"]
    # Against itself as the baseline: comparable (same gold, same target), nothing dropped.
    assert main(["eval", "--config", str(path), "--gold", str(e2e_config.gold), "--target", "team-search",
                 "--max-drop", "0", "--baseline", str(out)]) == 0
    # A target that fails makes the gate unjudgeable (exit 2), not a pass or a zero.
    path.write_text(path.read_text().replace("/search", "/error"))
    assert main(["eval", "--config", str(path), "--gold", str(e2e_config.gold), "--target", "team-search"]) == 2
    assert "HTTP 500" in capsys.readouterr().err
    assert main(["eval", "--config", str(path), "--gold", str(e2e_config.gold), "--target", "nope"]) == 2


def test_an_unset_header_variable_stops_the_run_before_anything_is_written(e2e_config, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("TEAM_KEY", raising=False)
    path = write_config(tmp_path, e2e_config, f'''
[[sources]]
name = "ledger"
path = "{e2e_config.sources[0].path}"

[[targets]]
name = "team"
kind = "http"
url = "http://127.0.0.1:9/search"
headers = {{Authorization = "TEAM_KEY"}}
''')
    assert main(["run", "--config", str(path), "--date", str(DAY)]) == 2
    err = capsys.readouterr().err
    assert "targets[0].headers.Authorization" in err and "TEAM_KEY is not set" in err
    assert not (tmp_path / "team-store").exists() or not list((tmp_path / "team-store").glob("*.csv"))


@pytest.mark.parametrize("body, message", [
    ('[[targets]]\nname = "t"\nkind = "grpc"\n', "targets[0] (t).kind: unknown kind 'grpc'"),
    ('[[targets]]\nname = "t"\nkind = "http"\n', "missing required key targets[0] (t).url"),
    ('[[targets]]\nname = "t"\nkind = "http"\nurl = "http://x/"\npath = "a"\n',
     "unknown key targets[0] (t).path for kind 'http'"),
    ('[[targets]]\nname = "t"\nkind = "http"\nurl = "ftp://x/"\n', "targets[0].url: must be an http(s) URL"),
    ('[[targets]]\nname = "t"\nkind = "http"\nurl = "http://x/"\nbody = "{{query}"\n', "targets[0].body"),
    ('[[targets]]\nname = "t"\nkind = "http"\nurl = "http://x/"\nheaders = {A = "Bearer abc"}\n',
     "targets[0].headers.A: give the NAME of an environment variable"),
    ('[[targets]]\nname = "t"\nkind = "runs"\nformat = "csv"\npath = "r"\n', "targets[0].format"),
    ('[[targets]]\nname = "t"\nkind = "python"\nfunction = "nocolon"\n', "targets[0].function"),
    ('[[targets]]\nname = "t"\nkind = "builtin"\n', "unknown builtin pipeline 't'"),
    ('[[targets]]\nname = "a"\nkind = "builtin"\npipeline = "bm25"\n[[targets]]\nname = "a"\nkind = "builtin"\n'
     'pipeline = "dense"\n', "targets[1].name: duplicate target name 'a'"),
    ('[[targets]]\nkind = "builtin"\n', "missing required key targets[0].name"),
])
def test_bad_target_tables_are_refused_naming_the_key_and_the_file(tmp_path, body, message):
    path = tmp_path / "monitor.toml"
    path.write_text('data_dir = "d"\ngold = "g.jsonl"\n' + body)
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert message in str(error.value) and str(path) in str(error.value)


def test_a_python_target_that_cannot_be_imported_is_a_config_error(e2e_config, embedder, tmp_path):
    config = e2e_config.replace(targets=(TargetConfig(name="py", kind="python", function="no_such_module:f",
                                                      python_path=tmp_path),))
    with pytest.raises(ConfigError, match=r"targets\[0\].function: cannot import 'no_such_module'"):
        run_day(config, DAY, embedder=embedder)
    assert not list(config.data_dir.glob("*.csv")) if config.data_dir.exists() else True


def test_run_files_malformed_or_partial_fail_the_target_with_file_and_line(tmp_path):
    gold = load_gold(Path(__file__).parent / "data" / "e2e" / "gold.jsonl")
    trec = TargetConfig(name="t", kind="runs", format="trec", path=tmp_path / "{date}.trec")
    (tmp_path / f"{DAY}.trec").write_text("q1 Q0 d1 1 2.0 x\nq1 Q0 d2 two 1.0 x\n")
    with pytest.raises(TargetError, match=rf"{DAY}.trec:2: rank must be an integer"):
        RunsTarget(trec).rankings(gold, 10, DAY)
    (tmp_path / f"{DAY}.trec").write_text("q1 Q0 d2 2 1.0 x\nq1 Q0 d1 1 2.0 x\nq2 Q0 d3 1 0.5 x\n")
    with pytest.raises(TargetError, match=r"no results for 2 of 4 gold questions \(q3, q4\)"):
        RunsTarget(trec).rankings(gold, 10, DAY)
    with pytest.raises(TargetError, match="no logged results for 2026-11-05"):
        RunsTarget(trec).rankings(gold, 10, date(2026, 11, 5))


def test_run_files_rank_by_score_and_read_nested_openinference_attributes(tmp_path):
    gold = load_gold(Path(__file__).parent / "data" / "e2e" / "gold.jsonl")
    trec = TargetConfig(name="t", kind="runs", format="trec", path=tmp_path / "run.trec")
    # trec_eval's convention: by score, whatever the rank column says; equal scores by rank.
    (tmp_path / "run.trec").write_text("".join(f"{q.id} Q0 b 1 1.0 x\n{q.id} Q0 a 2 3.0 x\n{q.id} Q0 c 3 1.0 x\n"
                                               for q in gold))
    assert RunsTarget(trec).rankings(gold, 10, DAY)[0].doc_ids == ("a", "b", "c")
    spans = TargetConfig(name="s", kind="runs", format="openinference", path=tmp_path / "spans.jsonl")
    lines = [{"attributes": {"openinference": {"span": {"kind": "RETRIEVER"}}, "input": {"value": q.id},
                             "retrieval": {"documents": [{"document": {"id": 7, "score": 0.9, "content": "x"}},
                                                         {"document": {"id": "d2", "score": 0.4}}]}}}
             for q in gold]
    (tmp_path / "spans.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    first = RunsTarget(spans).rankings(gold, 10, DAY)[0]  # matched by the question id, OpenInference's nested form
    assert first.doc_ids == ("7", "d2") and first.scores == (0.9, 0.4) and first.texts == ("x", None)


def test_http_hits_must_be_well_formed(service):
    target = HttpTarget(http("svc", f"{service.url}/search"), {})
    with pytest.raises(TargetError, match=r"HTTP 401"):  # no key: not retried, and the message holds no header
        target.search(load_gold(Path(__file__).parent / "data" / "e2e" / "gold.jsonl")[0], 5)
    assert service.requests["/search"] == 1


# --- the early warnings, as formulas ---------------------------------------------------------------------

def test_gold_margin_is_the_first_gold_score_minus_the_kth_score():
    r = Ranking(("a", "g", "b", "c"), (0.9, 0.7, 0.5, 0.2), ())
    assert signals.gold_margin(r, ["g"], 3) == pytest.approx(0.7 - 0.5)
    assert signals.gold_margin(r, ["g"], 1) == pytest.approx(0.7 - 0.9)  # below the cut: negative
    assert math.isnan(signals.gold_margin(r, ["z"], 3))  # not retrieved
    assert math.isnan(signals.gold_margin(r, ["g"], 5))  # fewer than k results


def test_new_documents_in_the_top_k_are_counted_against_every_earlier_run():
    gold = load_gold(Path(__file__).parent / "data" / "e2e" / "gold.jsonl")[:2]
    history = pd.DataFrame({
        "run_date": pd.to_datetime(["2026-11-01", "2026-11-01", "2026-11-02", "2026-11-02"]),
        "pipeline": ["p"] * 4, "k": [2] * 4, "question_id": ["q1", "q2", "q1", "q2"],
        "retrieved": ["a b", "x y", "a c", "x y"], "top1_score": [0.8, 0.5, 0.6, 0.5]})
    today = [Ranking(("c", "d"), (0.9, 0.1), ()), Ranking(("y", "x"), (0.5, 0.4), ())]
    rows = pd.DataFrame(signals.signal_rows("2026-11-03", "p", today, gold, [2], history, window=7))
    get = rows.set_index(["signal", "question_id"])["value"]
    assert get[(signals.NEW_DOCS, "q1")] == 1  # d is new; c was seen on 11-02
    assert get[(signals.NEW_DOCS, "q2")] == 0
    assert get[(signals.QUESTIONS_WITH_NEW, "")] == 1
    assert get[(signals.TOP1_SHIFT, "q1")] == pytest.approx(0.9 - (0.8 + 0.6) / 2)
    assert get[(signals.TOP1_SHIFT, "")] == pytest.approx(((0.9 - 0.7) + 0.0) / 2)
    first_run = pd.DataFrame(signals.signal_rows("2026-11-03", "p", today, gold, [2], history.iloc[0:0], 7))
    assert first_run[first_run["signal"] == signals.NEW_DOCS]["value"].isna().all()  # nothing to be new against


def test_top1_ks_against_scipy():
    from scipy.stats import ks_2samp

    current, reference = [0.9, 0.8, 0.85, 0.7], [0.5, 0.55, 0.6, 0.52, 0.58, 0.61]
    statistic, p = signals.top1_ks(current, reference)
    assert (statistic, p) == pytest.approx((ks_2samp(current, reference).statistic, ks_2samp(current, reference).pvalue))
    assert statistic == 1.0  # every current score above every reference one
    assert all(math.isnan(v) for v in signals.top1_ks([0.5], reference))


def test_hnsw_recall_is_the_overlap_with_exact_search():
    gold = load_gold(Path(__file__).parent / "data" / "e2e" / "gold.jsonl")[:1]
    rows = signals.hnsw_recall_rows("2026-11-03", [Ranking(("a", "c", "d"), (1, 1, 1), ())],
                                    [Ranking(("a", "b", "c"), (1, 1, 1), ())], gold, [1, 3])
    values = {(r["k"], r["question_id"]): r["value"] for r in rows}
    assert values[(1, "q1")] == 1.0 and values[(3, "q1")] == pytest.approx(2 / 3) and values[(3, "")] == pytest.approx(2 / 3)


def test_the_runs_early_warning_line_names_only_pipelines_with_a_value():
    """A first run has no earlier run to compare with: every signal undefined, so no "early warnings: bm25 ; dense"
    line of names without values."""
    from types import SimpleNamespace

    from pipeline.cli import _signal_lines

    def result(value: float) -> SimpleNamespace:
        rows = [{"run_date": "2025-09-03", "pipeline": p, "k": 5, "question_id": signals.PER_RUN,
                 "signal": signals.QUESTIONS_WITH_NEW, "value": value} for p in ("bm25", "dense")]
        return SimpleNamespace(failed_targets=[], answers=None, signals=rows)

    assert _signal_lines(result(float("nan"))) == []
    assert _signal_lines(result(2.0)) == [f"  early warnings: bm25 {signals.QUESTIONS_WITH_NEW} 2.000; "
                                          f"dense {signals.QUESTIONS_WITH_NEW} 2.000"]
