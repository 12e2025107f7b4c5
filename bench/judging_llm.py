"""The kappa of a scripted LLM pre-label against scripted humans, through the real `prelabel` path (the queue, the
UMBRELA-style prompt, the chat client, the ledger) and a fake OpenAI-compatible server on localhost.

On the real news stream (/work/shared/data/news-2025-autumn, every item ingested on one date) with the stream's gold
set (data/news-2025-autumn/gold.jsonl): the pairs are each question's gold judgments plus the top POOL_DEPTH of a
BM25 run (bm25s) that the gold set does not judge, taken as grade 0, all pooled (pool.csv). The scripted humans give
the gold grades; the scripted LLM answers each prompt with the UMBRELA score of the true grade with probability p,
else the score of a random other grade. Printed per p: the kappa (graded 0-2, and binary relevant/not) as mean ± sd
over SEEDS seeds, and the pairs count. Usage: python -m bench.judging_llm [--seeds N] [--stream DIR]"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import random
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from bench._fake_llm import completion
from pipeline import contract, store
from pipeline.config import Config, JudgingConfig
from pipeline.corpus import Corpus
from pipeline.gold import load_gold
from pipeline.judging import ledger, prelabel
from pipeline.judging.ledger import Judgment
from pipeline.sources import Document

ROOT = Path(__file__).resolve().parents[1]
STREAM = Path("/work/shared/data/news-2025-autumn")
GOLD = ROOT / "data" / "news-2025-autumn" / "gold.jsonl"
DAY = "2025-10-30"
POOL_DEPTH = 5
PS = (0.9, 0.7, 0.5)
SEEDS = 20
# The score the scripted LLM gives for a grade (the inverse of prelabel.UMBRELA_TO_GRADE; grade 0 as score 0).
SCORE_OF = {0: 0, 1: 2, 2: 3}


def build(stream: Path, data_dir: Path) -> tuple[dict, list[tuple[str, str, str, int]], dict[str, tuple]]:
    """The corpus, pool.csv and the pairs: (question id, doc id, content hash, true grade), and each pair's prompt."""
    import bm25s

    articles = [json.loads(line) for line in (stream / "articles.jsonl").read_text(encoding="utf-8").splitlines()
                if line.strip()]
    articles = [a for a in articles if a["pack"] == "base"]
    docs = [Document(a["guid"], a["title"], a["text"], a["link"], None, "news", (a["category"],)) for a in articles]
    gold = {q.id: q for q in load_gold(GOLD)}
    with Corpus.in_dir(data_dir) as corpus:
        corpus.ingest(docs, DAY)
        hashes = corpus.content_hashes([d.id for d in docs], DAY)
        texts = {d.id: corpus.document_text(d.id, DAY) for d in docs}
    ids = [d.id for d in docs]
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize([texts[i] for i in ids], stopwords="en", show_progress=False), show_progress=False)
    found, _ = retriever.retrieve(bm25s.tokenize([q.question for q in gold.values()], stopwords="en",
                                                 show_progress=False), k=POOL_DEPTH + 5, show_progress=False)
    pairs, rows = [], []
    for q, ranked in zip(gold.values(), found):
        judged = {d: g for d, g in q.relevant.items() if d in hashes}
        pooled = [ids[i] for i in ranked if ids[i] not in judged][:POOL_DEPTH]
        for rank, doc_id in enumerate([*judged, *pooled], start=1):
            grade = min(judged.get(doc_id, 0), 2)
            pairs.append((q.id, doc_id, hashes[doc_id], grade))
            rows.append({"run_date": DAY, "question_id": q.id, "doc_id": doc_id, "reason": contract.NEW_IN_TOP_K,
                         "pipeline": "bm25", "rank": rank, "gold_doc_id": "", "content_hash": hashes[doc_id],
                         "detail": ""})
    store.replace_date(data_dir, contract.POOL, DAY, rows)
    prompts = {prelabel.prompt(gold[q].question, texts[d]): (q, d, g) for q, d, _, g in pairs}
    return gold, pairs, prompts


class ScriptedLLM:
    """Answers each pre-label prompt: the true grade's score with probability `p`, else another grade's."""

    def __init__(self, server: HTTPServer, prompts: dict[str, tuple]) -> None:
        self.prompts, self.p, self.seed, self.calls = prompts, 1.0, 0, 0
        server.expect_request("/v1/chat/completions", method="POST").respond_with_handler(self.handle)

    def handle(self, request: Request) -> Response:
        body = json.loads(request.data)
        self.calls += 1
        q, d, grade = self.prompts[body["messages"][1]["content"]]
        key = int(hashlib.sha256(f"{self.seed}/{self.p}/{q}/{d}".encode()).hexdigest()[:12], 16)
        rng = random.Random(key)
        if rng.random() >= self.p:
            grade = rng.choice([g for g in contract.JUDGMENT_GRADES if g != grade])
        return Response(json.dumps(completion(f"##final score: {SCORE_OF[grade]}")), content_type="application/json")


def one(config: Config, gold: dict, pairs: list, llm: ScriptedLLM, p: float, seed: int) -> prelabel.HumanAgreement:
    for name in (contract.JUDGMENTS, "judge_cache.sqlite"):
        (config.data_dir / name).unlink(missing_ok=True)
    llm.p, llm.seed = p, seed
    result = prelabel.prelabel(config, gold)
    if result.failed or len(result.labelled) != len(pairs):
        raise SystemExit(f"the pre-label failed: {result.failed[:3]} {result.note}")
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    ledger.append_judgments(config.data_dir, [Judgment(q, d, g, "scripted-human", stamp, h) for q, d, h, g in pairs])
    return prelabel.human_agreement(ledger.read_judgments(config.data_dir))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=SEEDS)
    parser.add_argument("--stream", type=Path, default=STREAM)
    args = parser.parse_args(argv)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # a line per request otherwise
    server = HTTPServer(threaded=True)
    server.start()
    try:
        with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as tmp:
            data_dir = Path(tmp) / "store"
            gold, pairs, prompts = build(args.stream, data_dir)
            llm = ScriptedLLM(server, prompts)
            config = Config(data_dir=data_dir, gold=GOLD, judging=JudgingConfig(
                base_url=server.url_for("/v1"), model="scripted-llm", timeout=10, max_calls=len(pairs) + 10))
            grades = [g for *_, g in pairs]
            print(f"{len(pairs)} pairs ({len(gold)} questions: gold judgments + BM25 top-{POOL_DEPTH} unjudged as "
                  f"grade 0; grades 0/1/2: {grades.count(0)}/{grades.count(1)}/{grades.count(2)}), "
                  f"{args.seeds} seeds")
            for p in PS:
                t0 = time.perf_counter()
                found = [one(config, gold, pairs, llm, p, seed) for seed in range(args.seeds)]
                assert all(f.n == len(pairs) for f in found)
                graded = [f.kappa for f in found]
                binary = [f.kappa_binary for f in found]
                print(f"p = {p}: kappa graded {statistics.mean(graded):.3f} ± {statistics.stdev(graded):.3f}, "
                      f"binary {statistics.mean(binary):.3f} ± {statistics.stdev(binary):.3f} over {len(pairs)} pairs "
                      f"({time.perf_counter() - t0:.0f} s, {llm.calls} calls so far)")
                sys.stdout.flush()
    finally:
        server.clear()
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
