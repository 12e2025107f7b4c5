"""Benchmark the answer layer: records/s of the offline heuristics on 10,000 seeded synthetic records built
from the demo articles, and judge calls per record against a fake OpenAI-compatible server on localhost.
Run: python bench/generation.py (it puts the repo root on sys.path itself)."""

from __future__ import annotations

import json
import random
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench._fake_llm import completion, scripted_reply  # noqa: E402
from pipeline import answers  # noqa: E402
from pipeline.answers import client as llm  # noqa: E402
from pipeline.answers import judge  # noqa: E402
from pipeline.answers import AnswerRecord, Context  # noqa: E402
from pipeline.config import GenerationConfig  # noqa: E402
from pipeline.demo import base_articles  # noqa: E402
from pipeline.embeddings import Embedder  # noqa: E402
from pipeline.config import EmbedderConfig  # noqa: E402

N_RECORDS = 10_000
N_COSINE = 1_000  # records of the qa_cosine measure (the embedding dominates; it scales linearly)
N_JUDGED = 50  # records judged against the fake server
CONTEXTS = 3
SEED = 0
KINDS = ("faithful", "invented number", "refusal", "memory")


def synthetic_records(n: int, seed: int = SEED) -> list[AnswerRecord]:
    """Records whose contexts are demo articles and whose answer is one of KINDS: sentences of the first
    context, the same with a number changed, a refusal, or sentences of an unrelated article."""
    rng = random.Random(seed)
    articles = base_articles()
    records = []
    for i in range(n):
        chosen = rng.sample(articles, CONTEXTS + 1)
        contexts = tuple(Context(a.id, f"{a.title}\n{a.text}") for a in chosen[:CONTEXTS])
        sentences = [s for s in chosen[0].text.split(". ") if s]
        answer = ". ".join(sentences[:2]).rstrip(".") + f". [{chosen[0].id}]"
        kind = KINDS[i % len(KINDS)]
        if kind == "invented number":
            answer = f"It was {rng.randint(1000, 9999)} in all. " + answer
        elif kind == "refusal":
            answer = "The documents do not say."
        elif kind == "memory":
            answer = ". ".join(chosen[-1].text.split(". ")[:2])
        records.append(AnswerRecord(f"s{i}", chosen[0].title + "?", answer, contexts, "bench"))
    return records


def bench_heuristics(records: list[AnswerRecord]) -> tuple[float, float]:
    """(records/s of the heuristics on every record without qa_cosine, records/s with qa_cosine by the bundled
    MiniLM on the first N_COSINE)."""
    started = time.perf_counter()
    answers.score_records(records, [], False, None)
    plain = len(records) / (time.perf_counter() - started)
    embedder = Embedder(EmbedderConfig())
    embedder.encode(["warm up"])
    started = time.perf_counter()
    answers.score_records(records[:N_COSINE], [], False, embedder.encode)
    with_cosine = N_COSINE / (time.perf_counter() - started)
    return plain, with_cosine


class _Handler(BaseHTTPRequestHandler):
    calls = 0

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).calls += 1
        reply = json.dumps(completion(scripted_reply(body))).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args: object) -> None:
        pass


def bench_judge(records: list[AnswerRecord]) -> dict:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    config = GenerationConfig(mode="logged", base_url=f"http://127.0.0.1:{server.server_port}/v1", model="fake",
                              concurrency=4)

    def encode(texts):
        vectors = np.ones((len(texts), 4))
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    try:
        with tempfile.TemporaryDirectory() as tmp:
            client = llm.Client(config, Path(tmp))
            started = time.perf_counter()
            first = judge.judge_records(client, "fake", records, encode)
            seconds = time.perf_counter() - started
            client.close()
            client = llm.Client(config, Path(tmp))
            again = judge.judge_records(client, "fake", records, encode)
            client.close()
    finally:
        server.shutdown()
    states = [j.state for j in first.judgements]
    return {"calls": first.calls, "per_record": first.calls / len(records), "seconds": seconds,
            "rerun_calls": again.calls, "scored": states.count(answers.SCORED),
            "refusals": states.count(answers.undetermined(answers.REFUSAL))}


def main() -> None:
    records = synthetic_records(N_RECORDS)
    plain, with_cosine = bench_heuristics(records)
    judged = bench_judge(records[:N_JUDGED])
    print(f"{'measure':<48}{'value':>12}")
    print("-" * 60)
    print(f"{f'heuristics, records/s ({N_RECORDS:,} records, no embedding)':<48}{plain:>12,.0f}")
    print(f"{f'+ qa_cosine (MiniLM, CPU), records/s ({N_COSINE:,})':<48}{with_cosine:>12,.0f}")
    print(f"{f'judge calls per record ({N_JUDGED} records)':<48}{judged['per_record']:>12.2f}")
    print(f"{'judge calls, first run':<48}{judged['calls']:>12}")
    print(f"{'judge calls, re-run (cache)':<48}{judged['rerun_calls']:>12}")
    print(f"{'judge seconds, first run (fake server)':<48}{judged['seconds']:>12.2f}")
    print(f"{'scored / refusals among judged':<48}{str(judged['scored']) + ' / ' + str(judged['refusals']):>12}")


if __name__ == "__main__":
    main()
