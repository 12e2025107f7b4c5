"""The canary: candidate targets (config), the paired statistic against scipy and a seeded null, canary.csv written by
the daily job with the right differences, a candidate that never pages nor gates, and the Overview's sentence."""

from __future__ import annotations

import math
import shutil
from dataclasses import replace
from datetime import date
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from bench import _streams
from pipeline import canary, contract, store
from pipeline.config import (Config, ConfigError, DriftConfig, EmbedderConfig, SourceConfig, TargetConfig,
                             candidate_chunking, candidates, load_config)
from pipeline.chunking import chunk_documents, chunk_settings
from pipeline.corpus import Corpus, text_hash
from pipeline.embeddings import Embedder
from pipeline.gate import judge
from pipeline.gold import load_gold
from pipeline.job import evaluate_pipelines, evaluate_run_alerts, run_day
from pipeline.onnxmodel import ENV_CACHE

DAY = date(2026, 11, 4)


def mean_diff(x, y) -> float:
    return float(np.mean(np.asarray(x) - np.asarray(y)))


def scipy_p(candidate: np.ndarray, against: np.ndarray, resamples: int) -> float:
    return stats.permutation_test((candidate, against), lambda x, y, axis: np.mean(x - y, axis=axis),
                                  permutation_type="samples", n_resamples=resamples, random_state=1).pvalue


@pytest.mark.parametrize("n, seed", [(6, 0), (10, 1), (14, 2)])
def test_the_paired_statistic_is_scipys_t_interval_and_exact_permutation_p(n, seed):
    rng = np.random.default_rng(seed)
    against = rng.uniform(size=n)
    candidate = against + rng.normal(0.1, 0.2, size=n)
    got = canary.paired(candidate, against)
    ci = stats.ttest_rel(candidate, against).confidence_interval(0.95)
    assert got.n == n and got.mean_diff == pytest.approx(mean_diff(candidate, against))
    assert (got.ci_low, got.ci_high) == pytest.approx((ci.low, ci.high))
    assert got.p_value == pytest.approx(scipy_p(candidate, against, 2 ** n))  # scipy enumerates every flip too


def test_ties_and_recall_like_values_match_scipy_exactly():
    """Per-question recall takes few values: many differences are zero or equal in size (ties at the cut)."""
    against = np.array([1, 1, 0, 0.5, 1, 0, 1, 1, 0.5, 1, 0, 1])
    candidate = np.array([1, 0, 0, 0.5, 0, 0, 1, 0.5, 0.5, 0, 1, 1])
    got = canary.paired(candidate, against)
    assert got.p_value == pytest.approx(scipy_p(candidate, against, 2 ** 12))
    assert canary.paired(against, against).p_value == 1.0  # no difference at all: nothing to see


def test_beyond_the_exact_limit_the_monte_carlo_p_is_close_to_scipys():
    rng = np.random.default_rng(3)
    against = rng.uniform(size=40)
    candidate = against + rng.normal(0.04, 0.2, size=40)
    got = canary.paired(candidate, against).p_value
    assert got == pytest.approx(scipy_p(candidate, against, 100_000), abs=0.01)
    assert canary.paired(candidate, against).p_value == got  # seeded: a re-run gives the same p


def test_questions_one_side_did_not_score_are_left_out_of_the_pair():
    got = canary.paired([1.0, math.nan, 0.0, 0.5], [0.5, 1.0, math.nan, 0.5])
    assert got.n == 2 and got.mean_diff == pytest.approx((0.5 + 0.0) / 2)
    assert canary.paired([math.nan], [1.0]).n == 0
    one = canary.paired([1.0], [0.0])
    assert one.n == 1 and math.isnan(one.ci_low) and one.p_value == 1.0  # one flip of two reaches |1|


def test_under_the_null_the_false_positive_rate_is_near_five_percent():
    """A seeded null (candidate = against + zero-mean noise), asserted loosely; bench/canary.py measures it."""
    rng = np.random.default_rng(0)
    p = [canary.paired(a + rng.normal(0, 0.1, 15), a).p_value for a in rng.uniform(size=(400, 15))]
    assert 0.02 <= np.mean(np.array(p) < 0.05) <= 0.09


def test_the_sentence_gives_difference_interval_p_and_questions():
    row = {contract.CANDIDATE: "onnx", contract.AGAINST: "hybrid", contract.METRIC: "recall", contract.K: 5,
           contract.N_QUESTIONS: 40, contract.MEAN_DIFF: -0.04, contract.CI_LOW: -0.07, contract.CI_HIGH: -0.01,
           contract.P_VALUE: 0.0213}
    assert canary.sentence(row) == ("candidate onnx: recall@5 \u22120.040 \u00b1 0.030 against hybrid "
                                    "(p 0.021, 40 questions)")
    assert canary.sentence({**row, contract.METRIC: "ndcg", contract.MEAN_DIFF: 0.02}).startswith(
        "candidate onnx: nDCG@5 +0.020 \u00b1")
    assert canary.sentence({**row, contract.P_VALUE: 5e-05}).endswith("(p < 0.001, 40 questions)")
    assert canary.sentence({**row, contract.N_QUESTIONS: 1, contract.CI_LOW: math.nan}) == \
        "candidate onnx: recall@5 not compared against hybrid (1 question scored by both)"


TABLES = ('[[targets]]\nname = "hybrid"\nkind = "builtin"\n'
          '[[targets]]\nname = "bm25"\nkind = "builtin"\n')


@pytest.mark.parametrize("body, message", [
    ('[[targets]]\nname = "c"\nkind = "builtin"\npipeline = "dense"\ncandidate = true\nagainst = "nope"\n',
     "targets[2].against: no watched target 'nope'"),
    ('[[targets]]\nname = "c"\nkind = "builtin"\npipeline = "dense"\ncandidate = true\n'
     '[[targets]]\nname = "d"\nkind = "builtin"\npipeline = "dense"\ncandidate = true\nagainst = "c"\n',
     "targets[3].against: no watched target 'c'"),
    ('[[targets]]\nname = "c"\nkind = "builtin"\npipeline = "dense"\nagainst = "bm25"\n',
     "targets[2].against: only a candidate"),
    ('[[targets]]\nname = "c"\nkind = "builtin"\npipeline = "dense"\ntruncate_dim = 64\n',
     "targets[2].truncate_dim: only a candidate (candidate = true) has its own embedder or chunking settings"),
    ('[[targets]]\nname = "c"\nkind = "builtin"\npipeline = "dense"\nchunk_size = 64\n',
     "targets[2].chunk_size: only a candidate (candidate = true) has its own embedder or chunking settings"),
    ('[[targets]]\nname = "c"\nkind = "builtin"\npipeline = "dense"\ncandidate = true\nchunk_size = 0\n',
     "targets[2].chunk_size: must be > 0 words"),
    ('[[targets]]\nname = "c"\nkind = "builtin"\npipeline = "dense"\ncandidate = true\nchunk_size = 16\n',
     "targets[2].chunk_size: the candidate's chunk overlap (32) must be >= 0 and smaller than its chunk size (16)"),
    ('[[targets]]\nname = "c"\nkind = "builtin"\npipeline = "dense"\ncandidate = true\nchunk_overlap = 128\n',
     "targets[2].chunk_overlap: the candidate's chunk overlap (128) must be >= 0 and smaller than its chunk size"),
    ('[[targets]]\nname = "c"\nkind = "http"\nurl = "http://127.0.0.1:1/s"\ncandidate = true\nchunk_size = 64\n',
     "unknown key targets[2] (c).chunk_size for kind 'http'"),
    ('[[targets]]\nname = "c"\nkind = "builtin"\npipeline = "dense"\ncandidate = true\nbackend = "tpu"\n',
     "targets[2].backend: must be one of torch, onnx, onnx-int8"),
    ('[[targets]]\nname = "c"\nkind = "python"\nfunction = "m:f"\ncandidate = true\ntruncate_dim = 64\n',
     "unknown key targets[2] (c).truncate_dim for kind 'python'"),
])
def test_bad_candidates_are_refused_naming_the_key(tmp_path, body, message):
    path = tmp_path / "monitor.toml"
    path.write_text('data_dir = "d"\ngold = "g.jsonl"\n' + TABLES + body)
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert message in str(error.value) and str(path) in str(error.value)


def test_a_candidate_of_every_kind_is_compared_with_its_against_or_the_first_watched_target(tmp_path):
    path = tmp_path / "monitor.toml"
    path.write_text('data_dir = "d"\ngold = "g.jsonl"\n'
                    '[[targets]]\nname = "py"\nkind = "python"\nfunction = "m:f"\ncandidate = true\n' + TABLES +
                    '[[targets]]\nname = "logged"\nkind = "runs"\nformat = "trec"\npath = "r"\ncandidate = true\n'
                    'against = "bm25"\n')
    config = load_config(path)
    assert candidates(config) == {"py": "hybrid", "logged": "bm25"}
    alone = tmp_path / "alone.toml"
    alone.write_text('data_dir = "d"\ngold = "g.jsonl"\n[[targets]]\nname = "c"\nkind = "builtin"\npipeline = "dense"'
                     '\ncandidate = true\n')
    with pytest.raises(ConfigError, match="targets\\[0\\].candidate: a candidate needs a target"):
        load_config(alone)
    # A candidate changes no watched series: adding one is not a config change.
    assert config.config_hash() == config.replace(targets=config.targets[1:3]).config_hash()


def test_the_gate_leaves_candidates_out_unless_named():
    def means(recall: float) -> dict:
        return {"means": {"recall": recall}, "questions": {}}
    report = {"k": 5, "pipelines": {"hybrid": means(0.9), "shadow": means(0.1)}, "candidates": {"shadow": "hybrid"}}
    assert judge(report, min_recall=0.5, max_drop=None, baseline=None).passed
    assert not judge(report, min_recall=0.5, max_drop=None, baseline=None, pipelines=["shadow"]).passed


# --- the daily job with a python-function candidate --------------------------------------------------------------

WORSE = {"q2", "q4"}  # the candidate answers these with documents no gold set marks relevant


def module(collapse: bool) -> str:
    return "collapsed_retriever" if collapse else "worse_retriever"  # one name each: Python keeps what it imported


def write_candidate(folder: Path, gold, collapse: bool = False) -> None:
    """The team's candidate retriever (outside the system): the gold documents for each question but those in WORSE
    (or every one, collapsed), where it returns only an unrelated document."""
    folder.mkdir(exist_ok=True)
    answers = {q.question: ([] if collapse or q.id in WORSE else list(q.relevant_ids)) for q in gold}
    (folder / f"{module(collapse)}.py").write_text(
        f"ANSWERS = {answers!r}\n"
        "def search(query, k):\n"
        "    return [(d, 1.0) for d in ANSWERS[query]] + [('e2e-unrelated', 0.5)]\n")


def canary_config(e2e_config, folder: Path, collapse: bool = False, candidate: bool = True,
                  floors: dict | None = None):
    return e2e_config.replace(
        targets=(TargetConfig(name="bm25", kind="builtin"), TargetConfig(name="hybrid", kind="builtin"),
                 TargetConfig(name="next", kind="python", function=f"{module(collapse)}:search", python_path=folder,
                              candidate=candidate, against="hybrid" if candidate else None)),
        alerts=replace(e2e_config.alerts, floors=floors or {}))


def test_the_job_writes_the_paired_differences_and_a_rerun_replaces_them(e2e_config, embedder, tmp_path):
    gold = load_gold(e2e_config.gold)
    write_candidate(tmp_path / "team", gold)
    config = canary_config(e2e_config, tmp_path / "team")
    run_day(config, DAY, embedder=embedder)
    run_day(config, DAY, embedder=embedder)  # a re-run of the date replaces its rows
    rows = store.read(config.data_dir, contract.CANARY)
    assert list(rows.columns) == list(contract.CANARY_COLUMNS)
    assert set(rows[contract.METRIC]) == set(canary.METRICS) and (rows[contract.K] == 5).all()  # default_k of 1, 3, 5
    assert len(rows) == len(canary.METRICS) and set(rows[contract.AGAINST]) == {"hybrid"}

    per_q = store.read_per_question(config.data_dir).query("k == 5").set_index(["pipeline", "question_id"])
    for metric, column in (("recall", "recall"), ("ndcg", "ndcg")):
        row = rows[rows[contract.METRIC] == metric].iloc[0]
        diffs = (per_q.loc["next", column] - per_q.loc["hybrid", column]).to_numpy()
        assert row[contract.N_QUESTIONS] == len(gold) == 4
        assert row[contract.MEAN_DIFF] == pytest.approx(diffs.mean())
        ci = stats.ttest_rel(per_q.loc["next", column], per_q.loc["hybrid", column]).confidence_interval()
        assert (row[contract.CI_LOW], row[contract.CI_HIGH]) == pytest.approx((ci.low, ci.high), nan_ok=True)
    recall = per_q.loc["next", "recall"]
    assert set(recall[recall == 0].index) == WORSE and (recall.drop(list(WORSE)) == 1).all()
    assert rows.loc[rows[contract.METRIC] == "recall", contract.MEAN_DIFF].iloc[0] < 0


def alerted(config) -> set[tuple[str, str]]:
    alerts = store.read(config.data_dir, contract.ALERTS)
    return set(zip(alerts[contract.RULE], alerts[contract.PIPELINE].fillna("")))


def test_a_collapsed_or_failing_candidate_never_pages_while_the_same_target_watched_does(e2e_config, embedder,
                                                                                           tmp_path):
    gold = load_gold(e2e_config.gold)
    write_candidate(tmp_path / "team", gold, collapse=True)
    floors = {"recall@3": 0.5}
    watched = canary_config(e2e_config.replace(data_dir=tmp_path / "watched"), tmp_path / "team", True, False, floors)
    run_day(watched, DAY, embedder=embedder)
    assert (contract.FLOOR, "next") in alerted(watched)  # the control: the same collapse, watched, pages
    config = canary_config(e2e_config, tmp_path / "team", True, True, floors)
    result = run_day(config, DAY, embedder=embedder)
    assert not [a for a in result.alerts if a.pipeline == "next"] and not any("next" in p for _, p in alerted(config))
    metrics = store.read_metrics(config.data_dir).query("pipeline == 'next' and metric == 'recall'")
    assert (metrics["value"] == 0).all()  # evaluated, with its series: only the paging is off
    assert store.read(config.data_dir, contract.CANARY)[contract.MEAN_DIFF].lt(0).any()

    (tmp_path / "team" / "broken_retriever.py").write_text("def search(query, k):\n    raise RuntimeError('down')\n")
    broken = config.replace(targets=(*config.targets[:2],
                                     replace(config.targets[2], function="broken_retriever:search")))
    result = run_day(broken, DAY, embedder=embedder)
    assert [o.name for o in result.failed_targets] == ["next"]
    assert (contract.TARGETS_FAILED, "next") not in alerted(broken)
    assert store.read(broken.data_dir, contract.CANARY).empty  # no rankings that day: no pair, no row


def test_a_candidate_whose_per_question_series_collapses_gets_no_drop_alert(tmp_path):
    """Twenty steady runs of three pipelines (bench/_streams.py's scripted retrievers), then `dense` finds nothing
    for two runs: watched, its drop pages; as a candidate, the per-question rules (drop, slow drift) never see it."""
    rng = np.random.default_rng(0)
    rates = _streams.pipeline_rates(_streams.StreamSpec(n_questions=40, p=0.8), rng)
    gold, days = _streams.gold_set(40), _streams.run_dates(22)
    config = Config(data_dir=tmp_path, gold=tmp_path / "gold.jsonl",
                    targets=tuple(TargetConfig(name=p, kind="builtin") for p in rates))
    metric_rows, question_rows = [], []
    for i, day in enumerate(days):
        ranks = {p: _streams.draw_first_ranks(r if p != "dense" or i < 20 else r * 0, rng) for p, r in rates.items()}
        rows = evaluate_pipelines(config, _streams._ScriptedRetriever(ranks), gold, np.zeros((40, 1)),
                                  {_streams.relevant_id(q) for q in range(40)}, day)
        metric_rows, question_rows = metric_rows + rows[0], question_rows + rows[1]
    store.write_table(tmp_path, contract.METRICS, metric_rows)
    store.write_table(tmp_path, contract.PER_QUESTION, question_rows)
    runs = _streams.runs_rows(days)
    store.write_table(tmp_path, contract.RUNS, runs[:-1])

    def fired(cfg) -> set[tuple[str, str]]:
        return {(a.rule, a.pipeline) for a in evaluate_run_alerts(cfg, days[-1], runs[-1])[0]}
    assert (contract.DROP, "dense") in fired(config)
    shadow = config.replace(targets=tuple(replace(t, candidate=t.name == "dense") for t in config.targets))
    assert not [rule for rule, pipeline in fired(shadow) if pipeline == "dense"]


def assert_exact_top5(config, name: str, gold, chunks, scores: np.ndarray) -> None:
    """The target's top 5 per question are those of the exact search `scores` (questions x chunks), collapsed to
    documents; canary.csv has its row of every metric against dense over every question."""
    per_q = store.read_per_question(config.data_dir).query(f"pipeline == '{name}' and k == 5").set_index("question_id")
    for q, row in zip(gold, scores):
        ranked = list(dict.fromkeys(chunks[i].doc_id for i in np.argsort(-row, kind="stable")))[:5]
        assert store.split_ids(per_q.loc[q.id, "retrieved"]) == ranked
    rows = store.read(config.data_dir, contract.CANARY)
    assert list(rows.columns) == list(contract.CANARY_COLUMNS) and len(rows) == len(canary.METRICS)
    assert set(rows[contract.CANDIDATE]) == {name} and set(rows[contract.AGAINST]) == {"dense"}
    assert (rows[contract.N_QUESTIONS] == len(gold)).all()


def test_a_builtin_candidate_with_its_own_truncation_searches_its_own_vectors(e2e_config, embedder):
    """dense with truncate_dim = 64 against dense: its top 5 are those of an exact search over the full vectors cut
    to 64 dimensions and normalised again (what the truncating model gives), collapsed to documents."""
    config = e2e_config.replace(targets=(TargetConfig(name="dense", kind="builtin"),
                                         TargetConfig(name="dense64", kind="builtin", pipeline="dense",
                                                      truncate_dim=64, candidate=True)))
    run_day(config, DAY, embedder=embedder)
    with Corpus.in_dir(config.data_dir) as corpus:
        chunks = chunk_documents(config, corpus.snapshot(DAY))
        cached = corpus.cached_embeddings(f"{embedder.key}@dim64", [text_hash(c.text) for c in chunks])
    assert len(cached) == len(chunks) and {v.shape for v in cached.values()} == {(64,)}  # its own vectors, kept

    def cut(vectors: np.ndarray) -> np.ndarray:
        vectors = vectors[:, :64]
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    gold = load_gold(config.gold)
    scores = cut(embedder.encode([q.question for q in gold])) @ cut(embedder.encode([c.text for c in chunks])).T
    assert_exact_top5(config, "dense64", gold, chunks, scores)


def test_a_builtin_candidate_on_the_onnx_int8_backend_runs_in_the_job(e2e_config, embedder, tmp_path, monkeypatch):
    """dense on onnx-int8 against dense: embedded by the quantised model (its own cache key, every chunk), ranked,
    and compared; its rankings are an exact search over the int8 vectors."""
    monkeypatch.setenv(ENV_CACHE, str(tmp_path / "onnx-cache"))  # the export lands here (a few seconds, once)
    config = e2e_config.replace(targets=(TargetConfig(name="dense", kind="builtin"),
                                         TargetConfig(name="int8", kind="builtin", pipeline="dense",
                                                      backend="onnx-int8", candidate=True)))
    result = run_day(config, DAY, embedder=embedder)
    assert not result.failed_targets
    int8 = Embedder(EmbedderConfig(backend="onnx-int8"))
    with Corpus.in_dir(config.data_dir) as corpus:
        chunks = chunk_documents(config, corpus.snapshot(DAY))
        cached = corpus.cached_embeddings(int8.key, [text_hash(c.text) for c in chunks])
    assert int8.key != embedder.key and len(cached) == len(chunks)
    gold = load_gold(config.gold)
    scores = int8.encode([q.question for q in gold]) @ np.stack([cached[text_hash(c.text)] for c in chunks]).T
    assert_exact_top5(config, "int8", gold, chunks, scores)


SLICE = Path(__file__).parent / "data" / "news-slice"


def test_a_builtin_candidate_with_its_own_chunking_searches_its_own_chunks(tmp_path, embedder):
    """dense over 32-word chunks (overlap 8) against dense over [chunking]'s 128 words, on five days of real news:
    its chunks are the corpus split its way (cached under its settings, apart from the run's), and its top 5 are
    those of an exact search over them, collapsed to documents."""
    daily = tmp_path / "daily"
    daily.mkdir()
    for path in sorted((SLICE / "daily").iterdir())[:5]:  # 2025-09-10 .. 14: every gold item is in
        shutil.copy(path, daily / path.name)
    day = date(2025, 9, 14)
    config = Config(data_dir=tmp_path / "store", gold=SLICE / "gold.jsonl", sources=(SourceConfig("news", path=daily),),
                    drift=DriftConfig(permutations=99, page_permutations=99),
                    targets=(TargetConfig(name="dense", kind="builtin"),
                             TargetConfig(name="dense32", kind="builtin", pipeline="dense", chunk_size=32,
                                          chunk_overlap=8, candidate=True)))
    own = config.replace(chunking=candidate_chunking(config, config.targets[1]))
    assert (own.chunking.size, own.chunking.overlap) == (32, 8)
    result = run_day(config, day, embedder=embedder, notify=False)
    assert not result.failed_targets
    with Corpus.in_dir(config.data_dir) as corpus:
        snapshot = corpus.snapshot(day)
        chunks, run_chunks = chunk_documents(own, snapshot), chunk_documents(config, snapshot)
        for settings, expected in ((chunk_settings(own), chunks), (chunk_settings(config), run_chunks)):
            cached = [t for *_, texts in corpus.snapshot_chunks(day, settings) for t in texts.split("\n")]
            assert cached == [c.text for c in expected]
        vectors = corpus.cached_embeddings(embedder.key, [text_hash(c.text) for c in chunks])  # the model's own
    assert len(chunks) > 2 * len(run_chunks)  # the news items are split: a different corpus of chunks

    gold = load_gold(config.gold)
    matrix = np.stack([vectors[text_hash(c.text)] for c in chunks])
    np.testing.assert_allclose(matrix[:3], embedder.encode([c.text for c in chunks[:3]]), atol=1e-5)
    scores = embedder.encode([q.question for q in gold]) @ matrix.T
    assert_exact_top5(config, "dense32", gold, chunks, scores)
