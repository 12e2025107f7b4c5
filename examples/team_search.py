"""A stand-in for a team's own retriever: BM25 over whole documents of the bundled demo news (driftwatch's
builtin pipelines search chunks), as a Python function and as a small HTTP search service.

    python examples/team_search.py --port 8765      # POST /search {"query": "...", "k": 10}
                                                     # -> {"hits": [{"id", "score", "text"}, ...]}
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from datetime import date
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from any directory

from pipeline.retrieval import Bm25Index  # noqa: E402
from pipeline.sources import collect  # noqa: E402

FEEDS = ROOT / "data" / "demo" / "feeds"
EVERYTHING = date(2200, 1, 1)  # every dated file of the demo month


@functools.cache
def _index() -> tuple[list, Bm25Index]:
    docs = {}
    for folder in sorted(FEEDS.iterdir()):
        for outcome in collect(folder.name, path=folder, run_date=EVERYTHING, http_cache={}, timeout=10,
                               max_bytes=10_000_000, user_agent="team-search"):
            docs.update({d.id: d for d in outcome.documents})
    documents = list(docs.values())
    return documents, Bm25Index([f"{d.title}\n{d.text}" for d in documents], 1.2, 0.75, "lucene", "en")


def search(query: str, k: int) -> list[tuple[str, float, str]]:
    """The top k documents for `query`: (doc id, BM25 score, text)."""
    documents, index = _index()
    positions, scores = index.matching(query)
    best = sorted(zip(scores.tolist(), positions.tolist()), key=lambda p: (-p[0], p[1]))[:k]
    return [(documents[i].id, score, documents[i].text) for score, i in best]


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        if self.path != "/search":
            return self._send(404, {"error": "POST /search"})
        try:
            request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            hits = search(str(request["query"]), int(request.get("k", 10)))
        except (ValueError, KeyError, TypeError) as exc:
            return self._send(400, {"error": f"expected {{\"query\": ..., \"k\": ...}}: {exc}"})
        self._send(200, {"hits": [{"id": d, "score": s, "text": t} for d, s, t in hits]})

    def _send(self, status: int, payload: dict) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    _index()  # build before the first request
    server = ThreadingHTTPServer(("127.0.0.1", args.port), _Handler)
    print(f"team search on http://127.0.0.1:{args.port}/search ({len(_index()[0])} documents)", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
