"""Drift statistics: hand-computed PSI, tables of (reference, current, expected, drifted), differential tests
against scipy and scikit-learn, the window statistics with their permutation nulls (seeded null simulations
and power on synthetic embeddings), Evidently, and the query-log reader."""

from __future__ import annotations

import dataclasses
import math
import re
from datetime import date

import numpy as np
import pytest
from scipy import stats
from sklearn.decomposition import PCA

from pipeline.config import DriftConfig
from pipeline import drift as drift_module
from pipeline.drift import (CLASSIFIER, DUPLICATES, EVIDENTLY_METHOD, FAMILY, KS_MAX, NEW_CATEGORIES, NOVELTY, PSI_MEAN,
                            DriftError, QueryWindow, Sample, Verdict, _classifier_rows, _ks_rows, _labels,
                            _new_label_share, _psi_rows, decide, evidently_embedding_drift, not_enough, parse_query_log,
                            project, psi, query_top1_cosine, read_query_log, sample_rows, window_drift)
from pipeline.contract import DRIFTED, STABLE

E = 1e-4  # DriftConfig's default epsilon, the share of an empty bin before renormalising
DIM = 384
DECILES = np.arange(100.0)  # reference deciles 9.9, 19.8, ..., 89.1: bins hold 0-9, 10-19, ..., 90-99


def embeddings(n: int, seed: int, shift: float = 0.0) -> np.ndarray:
    """Unit vectors around one mean direction with 20 "topic" directions of decreasing spread plus small
    isotropic noise, like sentence embeddings; `shift` moves every row along the first topic direction."""
    basis_rng = np.random.default_rng(123)  # the same directions for every sample
    mean = basis_rng.standard_normal(DIM)
    mean /= np.linalg.norm(mean)
    topics = np.linalg.qr(basis_rng.standard_normal((DIM, 20)))[0].T
    rng = np.random.default_rng(seed)
    weights = rng.standard_normal((n, 20)) * (0.6 * 0.85 ** np.arange(20))
    x = mean + weights @ topics + 0.03 * rng.standard_normal((n, DIM)) + shift * topics[0]
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def isotropic(n: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, DIM))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def documents(n_documents: int, chunks: int, within: float, seed: int, shift: float = 0.0) -> np.ndarray:
    """`n_documents` documents of `chunks` chunks each, document after document: each document a centre drawn
    as `embeddings` draws rows, its chunks sqrt(within) * centre + sqrt(1 - within) * isotropic noise, so that
    two chunks of one document have a cosine of about `within` (0.63 in the demo, 0.17 across documents)."""
    centres = np.repeat(embeddings(n_documents, seed, shift).astype(np.float64), chunks, axis=0)
    noise = isotropic(n_documents * chunks, seed + 10_000).astype(np.float64)
    x = math.sqrt(within) * centres + math.sqrt(1 - within) * noise
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def ids(n_documents: int, chunks: int, prefix: str) -> list[str]:
    return [f"{prefix}{i}" for i in range(n_documents) for _ in range(chunks)]


def psi_of(r: list[float], c: list[float]) -> float:
    return sum((ci - ri) * math.log(ci / ri) for ri, ci in zip(r, c, strict=True))


# --- names and descriptors ---------------------------------------------------------------------------------


# --- PSI -------------------------------------------------------------------------------------------------


def test_psi_by_hand_on_quartiles():
    # Reference 0..7: quartile edges 1.75, 3.5, 5.25, so the bins hold {0,1} {2,3} {4,5} {6,7}: 1/4 each.
    # Current: four 0s, then 2, 3 | 4, 5 | nothing: shares 1/2, 1/4, 1/4, epsilon, renormalised.
    reference = np.arange(8.0)
    current = [0, 0, 0, 0, 2, 3, 4, 5]
    c0, c1, c2, c3 = 1 / 2 / (1 + E), 1 / 4 / (1 + E), 1 / 4 / (1 + E), E / (1 + E)
    r = 1 / 4
    expected_psi = ((c0 - r) * math.log(c0 / r) + (c1 - r) * math.log(c1 / r)
                    + (c2 - r) * math.log(c2 / r) + (c3 - r) * math.log(c3 / r))
    assert psi(reference, current, bins=4, epsilon=E) == pytest.approx(expected_psi, rel=1e-12)


PSI_TABLE = {
    "identical": (DECILES, DECILES, 0.0, False),
    "identical-constant": (np.full(50, 3.0), np.full(50, 3.0), 0.0, False),
    # Every value stays inside its decile bin: PSI cannot see a shift within a bin.
    "within-bin-shift": (DECILES, DECILES + 0.05, 0.0, False),
    # Current shares .12, .08, then .1 in each of the other eight deciles.
    "slight": (DECILES, np.r_[np.full(12, 5.0), np.full(8, 15.0), np.repeat(np.arange(25.0, 100, 10), 10)],
               0.02 * math.log(0.12 / 0.1) + (-0.02) * math.log(0.08 / 0.1), False),
    # Current shares .3 .2 .1 .1 .1 .1 .1, the last three deciles empty (epsilon each, renormalised).
    "deciles-given": (DECILES, np.r_[np.full(30, 5.0), np.full(20, 15.0), np.repeat(np.arange(25.0, 70, 10), 10)],
                      psi_of([0.1] * 10, [s / (1 + 3 * E) for s in (0.3, 0.2, 0.1, 0.1, 0.1, 0.1, 0.1, E, E, E)]),
                      True),
    # A constant reference c gets the bins (-inf, c), {c}, (c, inf): shares (e, 1, e) / (1 + 2e).
    "constant-moved": (np.full(50, 0.0), np.full(50, 1.0), 2 * (1 - E) / (1 + 2 * E) * math.log(1 / E), True),
    "one-row-each": (np.array([1.0]), np.array([2.0]), 2 * (1 - E) / (1 + 2 * E) * math.log(1 / E), True),
    "constant-reference-spread-current": (np.full(10, 0.0), np.arange(-5.0, 5.0),
                                          psi_of([E / (1 + 2 * E), 1 / (1 + 2 * E), E / (1 + 2 * E)], [0.5, 0.1, 0.4]),
                                          True),
    # Everything in the decile [40, 50): share 1 there, epsilon in the nine others, renormalised.
    "spread-reference-constant-current": (DECILES, np.full(50, 42.0),
                                          psi_of([0.1] * 10, [E / (1 + 9 * E)] * 4 + [1 / (1 + 9 * E)]
                                                 + [E / (1 + 9 * E)] * 5), True),
}


@pytest.mark.parametrize("reference, current, expected, drifted", PSI_TABLE.values(), ids=PSI_TABLE)
def test_psi_table(reference, current, expected, drifted):
    value = psi(reference, current, bins=10, epsilon=E)
    assert value == pytest.approx(expected, rel=1e-12, abs=1e-15)
    assert (value >= DriftConfig().psi_effect) is drifted


def test_identical_arrays_give_exactly_zero():
    sample = np.random.default_rng(0).standard_normal(333)
    assert psi(sample, sample.copy()) == 0.0


def test_clearly_shifted_distribution_psi_is_above_alert_level():
    rng = np.random.default_rng(0)
    assert psi(rng.standard_normal(5000), rng.standard_normal(5000) + 1.0) > DriftConfig().psi_effect


def test_psi_against_scipy_entropy():
    rng = np.random.default_rng(7)
    reference, current = rng.standard_normal(400), rng.standard_normal(300) * 1.3 + 0.4
    edges = np.quantile(reference, np.arange(1, 10) / 10)
    counts = [np.bincount(np.searchsorted(edges, x, side="right"), minlength=10) for x in (reference, current)]
    ref_share, cur_share = [np.where(c == 0, E, c / c.sum()) for c in counts]  # entropy() renormalises
    assert psi(reference, current, epsilon=E) == pytest.approx(
        stats.entropy(cur_share, ref_share) + stats.entropy(ref_share, cur_share), rel=1e-12)


@pytest.mark.parametrize("reference, current", [([], [1.0]), ([1.0], []), ([1.0, np.nan], [1.0]), ([[1.0]], [1.0])])
def test_unusable_samples_are_refused(reference, current):
    with pytest.raises(DriftError):
        psi(reference, current)


@pytest.mark.parametrize("bins, epsilon", [(1, E), (10, 0.0), (10, 1.0)])
def test_bad_parameters_are_refused(bins, epsilon):
    with pytest.raises(ValueError):
        psi([1.0, 2.0], [1.0, 2.0], bins=bins, epsilon=epsilon)


# --- sampling and projection ---------------------------------------------------------------------------------


def test_sample_rows_is_seeded_ordered_and_without_replacement():
    matrix = np.arange(100.0).reshape(50, 2)
    sample = sample_rows(matrix, 20, seed=3)
    rows = sample[:, 0] / 2
    assert sample.shape == (20, 2)
    assert np.all(np.diff(rows) > 0)  # original order, no row twice
    assert np.array_equal(sample, sample_rows(matrix, 20, seed=3))
    assert not np.array_equal(sample, sample_rows(matrix, 20, seed=4))
    assert sample_rows(matrix, 50, seed=3) is matrix


def test_projection_matches_scikit_learn_pca_up_to_sign():
    reference, current = embeddings(300, 1), embeddings(200, 2, shift=0.2)
    ref_proj, cur_proj = project(reference, current, 5)
    pca = PCA(n_components=5, svd_solver="full").fit(reference.astype(np.float64))
    expected_ref, expected_cur = pca.transform(reference.astype(np.float64)), pca.transform(current.astype(np.float64))
    signs = np.sign(np.sum(ref_proj * expected_ref, axis=0))
    np.testing.assert_allclose(ref_proj * signs, expected_ref, atol=1e-9)
    np.testing.assert_allclose(cur_proj * signs, expected_cur, atol=1e-9)


@pytest.mark.parametrize("n_ref, d, n_components, expected", [
    (50, 8, 10, 8), (5, 8, 10, 4), (1, 8, 10, 1), (50, 8, 0, 1), (50, 8, 3, 3)])
def test_components_are_clipped(n_ref, d, n_components, expected):
    rng = np.random.default_rng(0)
    ref_proj, cur_proj = project(rng.standard_normal((n_ref, d)), rng.standard_normal((7, d)), n_components)
    assert ref_proj.shape == (n_ref, expected) and cur_proj.shape == (7, expected)


def test_pooled_components_come_from_both_sides():
    reference, current = np.array([[1.0, 0.0], [-1.0, 0.0]]), np.array([[0.0, 5.0], [0.0, -5.0]])
    # The reference varies along x only; stacked with the current, y dominates.
    assert np.allclose(np.abs(project(reference, current, 1)[1]), 0.0)
    assert np.allclose(np.abs(project(reference, current, 1, pooled=True)[1]), 5.0)


@pytest.mark.parametrize("reference, current, message", [
    (np.zeros((0, 4)), np.zeros((3, 4)), "reference: expected a non-empty 2-D matrix"),
    (np.zeros((3, 4)), np.zeros(4), "current: expected a non-empty 2-D matrix"),
    (np.zeros((3, 4)), np.zeros((3, 5)), "reference has dimension 4 but current has 5"),
    (np.full((3, 4), np.nan), np.zeros((3, 4)), "reference: embeddings contain NaN"),
])
def test_bad_matrices_are_refused(reference, current, message):
    with pytest.raises(DriftError, match=message):
        window_drift(Sample(reference), Sample(current), DriftConfig(permutations=99))


# --- drift of what changed: the window statistics and their nulls ---------------------------------------

FAST = DriftConfig(permutations=199)


def test_vectorised_psi_and_ks_equal_the_one_split_functions():
    """Differential: the statistics over every permutation row, on the observed row, against `psi` and
    scipy's ks_2samp component by component."""
    reference, current = embeddings(150, 1), embeddings(40, 2, shift=0.1)
    ref_proj, cur_proj = project(reference, current, 6, pooled=True)
    proj = np.vstack([ref_proj, cur_proj])
    labels = _labels(np.arange(190), 150, 5, np.random.default_rng(0))
    expected_psi = np.mean([psi(ref_proj[:, j], cur_proj[:, j]) for j in range(6)])
    expected_ks = max(stats.ks_2samp(ref_proj[:, j], cur_proj[:, j]).statistic for j in range(6))
    assert _psi_rows(proj, labels, 10, 1e-4)[0] == pytest.approx(expected_psi, rel=1e-9)
    assert _ks_rows(proj, labels)[0] == pytest.approx(expected_ks, rel=1e-12)
    row = labels[3]  # a permuted split too
    shuffled_ks = max(stats.ks_2samp(proj[~row, j], proj[row, j]).statistic for j in range(6))
    assert _ks_rows(proj, labels)[3] == pytest.approx(shuffled_ks, rel=1e-12)


def test_document_permutations_keep_documents_whole_and_every_row_equals_the_one_split_functions():
    """Documents of 1 to 7 chunks: every permuted row moves whole documents (so the sides' sizes vary by row),
    and each row's PSI and KS equal `psi` and scipy's ks_2samp on that row's split."""
    rng = np.random.default_rng(4)
    sizes = rng.integers(1, 8, 60)
    groups = np.repeat(np.arange(60), sizes)
    pooled = embeddings(len(groups), 3)
    n_ref_documents = 45
    labels = _labels(groups, n_ref_documents, 40, np.random.default_rng(1))
    assert np.array_equal(labels[0], groups >= n_ref_documents)
    for row in labels:
        assert all(len(set(row[groups == g])) == 1 for g in range(60))  # a document on one side
    assert len({int(row.sum()) for row in labels}) > 1  # so the sides' sizes differ between rows
    ref_proj, cur_proj = project(pooled[~labels[0]], pooled[labels[0]], 5, pooled=True)
    proj = np.empty((len(groups), 5))
    proj[~labels[0]], proj[labels[0]] = ref_proj, cur_proj
    psis, ks = _psi_rows(proj, labels, 10, 1e-4), _ks_rows(proj, labels)
    for i in (0, 1, 7, 39):
        row = labels[i]
        assert psis[i] == pytest.approx(np.mean([psi(proj[~row, j], proj[row, j]) for j in range(5)]), rel=1e-9)
        assert ks[i] == pytest.approx(max(stats.ks_2samp(proj[~row, j], proj[row, j]).statistic
                                          for j in range(5)), rel=1e-12)


def test_one_chunk_documents_draw_the_chunk_permutations():
    """With one chunk per document the document permutations are the chunks' own: the seeded draws of a news
    stream are those of the chunk-level null."""
    labels = _labels(np.arange(30), 20, 10, np.random.default_rng(7))
    rng = np.random.default_rng(7)
    observed = np.r_[np.zeros(20, bool), np.ones(10, bool)]
    np.testing.assert_array_equal(labels[1:], np.array([rng.permutation(observed) for _ in range(10)]))


def test_ks_rows_with_ties_equal_scipy():
    proj = np.array([[0.0], [0.0], [1.0], [1.0], [2.0], [0.0], [1.0], [1.0], [1.0]])
    labels = np.array([[False] * 5 + [True] * 4])
    expected = stats.ks_2samp([0.0, 0.0, 1.0, 1.0, 2.0], [0.0, 1.0, 1.0, 1.0]).statistic
    assert _ks_rows(proj, labels)[0] == pytest.approx(expected)


def test_classifier_by_hand():
    # Two tight clusters at right angles (unit vectors within 0.1 rad of 0 and of pi/2): every chunk's 5
    # neighbours are on its own side, so the balanced accuracy is 1; labels that ignore the clusters (each
    # cluster split evenly between the sides) give 0.5 or less.
    angles = np.r_[np.linspace(-0.1, 0.1, 30), np.pi / 2 + np.linspace(-0.1, 0.1, 12)]
    pooled = np.c_[np.cos(angles), np.sin(angles)]
    similarity = pooled @ pooled.T
    by_cluster = np.array([[False] * 30 + [True] * 12])
    mixed = np.array([[False, True] * 15 + [False, True] * 6])
    alone = np.arange(42)  # every chunk a document of its own
    assert _classifier_rows(similarity, by_cluster, alone)[0] == 1.0
    assert _classifier_rows(similarity, mixed, alone)[0] <= 0.5


def test_the_classifier_and_novelty_take_no_neighbour_from_the_chunks_own_document():
    """Ten documents of four identical chunks each, every document's chunks far from the others': by its own
    document's chunks a chunk would always be classified right (accuracy 1) and never be novel. Among other
    documents' chunks only, the classifier of this random split is no better than chance and the chunks' nearest
    neighbours are the other documents'."""
    centres = isotropic(10, 5).astype(np.float64)
    pooled = np.repeat(centres, 4, axis=0)
    groups = np.repeat(np.arange(10), 4)
    similarity = pooled @ pooled.T
    labels = (groups >= 6)[None, :]
    assert _classifier_rows(similarity, labels, np.arange(40))[0] == 1.0  # the chunk-level leak
    assert _classifier_rows(similarity, labels, groups)[0] <= 0.6
    neighbours = drift_module.Neighbours(similarity, groups)
    nearest = neighbours.nearest_in(np.ones(40, bool))
    assert nearest.max() < 0.5  # isotropic centres: no other document is close
    np.testing.assert_array_equal(neighbours.novel(labels[0]), drift_module._novel(similarity, labels[0], groups))


def test_new_label_share_by_hand():
    # Reference labels {x, y}; current z, z, x, w: three of four are labels the reference lacks.
    values = np.array(["x", "y", "x", "z", "z", "x", "w"])
    labels = np.array([[False, False, False, True, True, True, True]])
    assert _new_label_share(values, labels)[0] == 0.75


def test_not_enough_data_is_a_verdict_of_its_own():
    config = DriftConfig()
    assert not_enough(300, 5, config).startswith("not enough new data: 5 new chunks")
    assert not_enough(10, 50, config).startswith("not enough reference data: 10 chunks")
    assert not_enough(300, 50, config) is None


def test_decide_needs_significance_and_effect():
    results = [Verdict("a", 0.9, 0.3, 0.2, 0.25, 0.001, 0.7, "new stuff"),  # small p, big effect
               Verdict("b", 0.3, 0.3, 0.2, 0.25, 0.001, 0.1, "x"),  # small p, small effect
               Verdict("c", 0.9, 0.3, 0.2, 0.25, 0.2, 0.7, "y")]  # big effect, not significant
    a, b, c = decide(results, 0.05, {"a": 0.25, "b": 0.25, "c": 0.25})
    assert (a.verdict, b.verdict, c.verdict) == (DRIFTED, STABLE, STABLE)
    assert a.adjusted_p == pytest.approx(0.003) and b.adjusted_p == pytest.approx(0.003)
    assert a.detail == "new stuff" and b.detail == ""


def test_the_permutation_null_knows_psis_small_sample_bias():
    """Regression: at 20 chunks per side the old formula (bins - 1)(1/n + 1/n) = 0.9 was about half the mean
    PSI of two samples of one distribution; the permutation null's mean matches that mean."""
    rng = np.random.default_rng(0)
    independent = [psi(rng.standard_normal(20), rng.standard_normal(20)) for _ in range(400)]
    null_means = []
    for seed in range(20):
        pooled = np.random.default_rng(100 + seed).standard_normal((40, 1))
        labels = _labels(np.arange(40), 20, 199, np.random.default_rng(seed))
        null_means.append(_psi_rows(pooled, labels, 10, 1e-4)[1:].mean())
    assert np.mean(null_means) == pytest.approx(np.mean(independent), rel=0.1)
    assert np.mean(independent) > 1.5 * (10 - 1) * (1 / 20 + 1 / 20)


def sample(vectors: np.ndarray, category: str = "news", source: str = "feed") -> Sample:
    n = len(vectors)
    return Sample(vectors, [category] * n, [source] * n, [f"{category} story {i}" for i in range(n)],
                  np.zeros(n, bool))


@pytest.mark.parametrize("chunks", [1, 4])
def test_null_false_positive_rate_of_every_statistic_is_within_alpha(chunks):
    """Seeded null simulation: reference and current documents from one distribution (no drift), 40 splits at
    the sizes of a real day (160 reference chunks, 40 new), in documents of `chunks` chunks whose chunks have a
    cosine of about 0.6 with each other (as a real document's do). Each statistic's raw p-value falls below
    0.05, and a split is called drifted, no more often than a binomial tolerance around 5% allows. At the
    default 500 draws a window can drift (the smallest Holm p is 7/501); with chunks permuted one by one, 4 chunks
    per document made most null windows drifted."""
    trials, hits, drifted = 40, {s.name: 0 for s in FAMILY}, 0
    for t in range(trials):
        n_ref, n_cur = 160 // chunks, 40 // chunks
        reference = Sample(documents(n_ref, chunks, 0.6, 2 * t), documents=ids(n_ref, chunks, "r"),
                           categories=["news"] * 160, sources=["feed"] * 160, duplicate=np.zeros(160, bool))
        current = Sample(documents(n_cur, chunks, 0.6, 2 * t + 1), documents=ids(n_cur, chunks, "c"),
                         categories=["news"] * 40, sources=["feed"] * 40, duplicate=np.zeros(40, bool))
        result = window_drift(reference, current, DriftConfig(seed=t))
        for v in result:
            hits[v.statistic] += v.p_value < 0.05
        drifted += any(v.verdict == DRIFTED for v in result)
    limit = stats.binom.ppf(0.999, trials, 0.05)
    assert all(n <= limit for n in hits.values()), hits
    assert drifted <= limit


def test_an_off_topic_burst_is_drifted_and_named():
    reference = sample(embeddings(200, 1))
    burst = np.vstack([embeddings(20, 2), isotropic(30, 3)])  # 30 chunks about nothing the reference holds
    current = Sample(burst, ["news"] * 20 + ["Sports"] * 30, ["feed"] * 50,
                     [f"story {i}" for i in range(20)] + [f"match {i}" for i in range(30)], np.zeros(50, bool))
    result = {v.statistic: v for v in window_drift(reference, current, FAST)}
    assert result[NOVELTY.name].verdict == DRIFTED and result[NEW_CATEGORIES.name].verdict == DRIFTED
    assert result[NEW_CATEGORIES.name].value == pytest.approx(30 / 50)
    assert "categories Sports 30" in result[NEW_CATEGORIES.name].detail and "'match" in result[NOVELTY.name].detail
    assert result[CLASSIFIER.name].value > result[CLASSIFIER.name].null_q95 and result[PSI_MEAN.name].verdict == DRIFTED
    assert result[KS_MAX.name].null_q95 < result[KS_MAX.name].value


def test_a_drifted_window_is_drawn_again_so_its_p_can_reach_the_page_level():
    """A window drifted at 199 draws is decided again on the same seeded draws continued to page_permutations;
    a stable one keeps its 199. At 2999 draws the burst's best statistics sit at the smallest possible
    permutation p, 1/3000, and Holm over the 7 statistics makes it 7/3000 (tied minima share it)."""
    reference = sample(embeddings(200, 1))
    burst = np.vstack([embeddings(20, 2), isotropic(30, 3)])
    current = Sample(burst, ["news"] * 20 + ["Sports"] * 30, ["feed"] * 50, [f"t{i}" for i in range(50)],
                     np.zeros(50, bool))
    config = DriftConfig(permutations=199, page_permutations=2999)
    adaptive = window_drift(reference, current, config)
    assert adaptive == window_drift(reference, current, dataclasses.replace(config, permutations=2999))
    best = {v.statistic: v.adjusted_p for v in adaptive if v.verdict == DRIFTED}
    assert best[NEW_CATEGORIES.name] == pytest.approx(7 / 3000) and min(best.values()) == pytest.approx(7 / 3000)
    stable = sample(embeddings(25, 2))
    kept = window_drift(reference, stable, config)
    assert not any(v.verdict == DRIFTED for v in kept)
    assert kept == window_drift(reference, stable, dataclasses.replace(config, page_permutations=199))
    assert kept != window_drift(reference, stable, dataclasses.replace(config, permutations=2999))


def test_a_flood_of_near_copies_is_drifted_by_fishers_test():
    reference = Sample(embeddings(200, 1), duplicate=np.r_[np.ones(4, bool), np.zeros(196, bool)])
    current = Sample(embeddings(50, 2), duplicate=np.r_[np.ones(30, bool), np.zeros(20, bool)])
    (dup,) = [v for v in window_drift(reference, current, FAST) if v.statistic == DUPLICATES.name]
    expected = stats.fisher_exact([[30, 20], [4, 196]], alternative="greater")[1]
    assert dup.p_value == pytest.approx(expected) and dup.effect == pytest.approx(0.6 - 0.02)
    assert dup.verdict == DRIFTED


def test_the_duplicate_test_counts_documents():
    """Four reference documents of 10 chunks, one with a near copy; two current documents of 10 chunks, both with
    near copies (in one chunk each): 2 of 2 documents against 1 of 4, Fisher's test on the documents (the chunk
    counts, 2 of 20 against 1 of 40, would be another test)."""
    ref_flags = np.zeros(40, bool)
    ref_flags[3] = True
    cur_flags = np.zeros(20, bool)
    cur_flags[[5, 12]] = True
    reference = Sample(documents(4, 10, 0.6, 1), duplicate=ref_flags, documents=ids(4, 10, "r"))
    current = Sample(documents(2, 10, 0.6, 2), duplicate=cur_flags, documents=ids(2, 10, "c"))
    (dup,) = [v for v in window_drift(reference, current, FAST) if v.statistic == DUPLICATES.name]
    assert dup.value == 1.0 and dup.effect == pytest.approx(1 - 1 / 4)
    assert dup.p_value == pytest.approx(stats.fisher_exact([[2, 0], [1, 3]], alternative="greater")[1])
    assert dup.null_q95 == stats.hypergeom.ppf(0.95, 6, 3, 2) / 2


def test_samples_keep_whole_documents_and_at_most_a_documents_cap_of_chunks():
    """kept_rows: documents of 3, 40 and 5 chunks with a per-document cap of 16: the long one gives 16 evenly
    spaced chunks (its first and last among them); over the side's cap, whole documents are drawn by the seed."""
    rows = drift_module.kept_rows([3, 40, 5], cap=100, seed=0, per_document=16)
    long = rows[(rows >= 3) & (rows < 43)] - 3
    assert len(rows) == 3 + 16 + 5 and long[0] == 0 and long[-1] == 39 and len(set(np.diff(long))) <= 2
    counts = np.array([4] * 50)
    kept = drift_module.kept_rows(counts, cap=30, seed=3, per_document=16)
    assert len(kept) == 28  # 7 whole documents of 4: the 8th would pass 30
    assert set(np.bincount(kept // 4, minlength=50)) == {0, 4}
    assert np.array_equal(kept, drift_module.kept_rows(counts, cap=30, seed=3, per_document=16))
    assert not np.array_equal(kept, drift_module.kept_rows(counts, cap=30, seed=4, per_document=16))
    assert np.array_equal(drift_module.kept_rows(counts, cap=500, seed=3), np.arange(200))


def test_a_document_split_across_rows_is_refused():
    with pytest.raises(DriftError, match="consecutive"):
        Sample(embeddings(3, 1), documents=["a", "b", "a"]).document_counts()


def test_window_drift_is_reproducible():
    reference, current = sample(embeddings(120, 1)), sample(embeddings(30, 2, shift=0.2))
    assert window_drift(reference, current, FAST) == window_drift(reference, current, FAST)


# --- Evidently -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shift, drifted", [(0.0, False), (0.3, True)], ids=["same-generator", "shifted"])
def test_evidently_domain_classifier(shift, drifted):
    reference, current = embeddings(1000, 1), embeddings(1000, 2, shift=shift)
    result = evidently_embedding_drift(reference, current, seed=0)
    assert result.drifted is drifted and result.method == EVIDENTLY_METHOD
    assert (result.score > 0.55) is drifted  # the classifier's ROC AUC: ~0.5 when it cannot tell them apart


def test_evidently_is_reproducible_and_leaves_global_random_state_alone():
    reference, current = embeddings(600, 1), embeddings(600, 2)
    np.random.seed(99)
    before = np.random.get_state()[1].copy()
    first = evidently_embedding_drift(reference, current, seed=0)
    assert np.array_equal(np.random.get_state()[1], before)
    assert evidently_embedding_drift(reference, current, seed=0) == first
    assert [name for name, _ in first.rows()] == ["evidently_model_auc", "evidently_drifted"]


@pytest.mark.parametrize("n_ref, n_cur, shift", [(600, 600, 0.0), (300, 80, 0.2), (1000, 1000, 0.3), (45, 21, 0.1)])
def test_domain_classifier_equals_evidentlys_own_method(n_ref, n_cur, shift):
    """Differential: the scikit-learn implementation gives Evidently's ModelDriftMethod's AUC and flag exactly."""
    import pandas as pd
    from evidently.legacy.metrics.data_drift.embedding_drift_methods import ModelDriftMethod

    reference, current = embeddings(n_ref, 1), embeddings(n_cur, 2, shift=shift)
    columns = [f"e{i}" for i in range(reference.shape[1])]
    state = np.random.get_state()
    score, drifted, _ = ModelDriftMethod(bootstrap=True)(
        pd.DataFrame(current.astype(np.float64), columns=columns),
        pd.DataFrame(reference.astype(np.float64), columns=columns))
    np.random.set_state(state)
    ours = evidently_embedding_drift(reference, current, seed=0, sample_cap=max(n_ref, n_cur))
    assert ours.score == pytest.approx(float(score), abs=1e-12) and ours.drifted == bool(drifted)


@pytest.mark.parametrize("seed", range(5))
def test_roc_auc_equals_scikit_learns(seed):
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, 200)
    scores = np.round(rng.random(200), 1)  # rounded: many ties
    assert drift_module.roc_auc(labels, scores) == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)
    assert drift_module.roc_auc([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]) == 3 / 4  # pairs ranked right: 3 of 4


@pytest.mark.parametrize("n_ref, n_cur, top", [(200, 40, 32), (60, 60, 2), (30, 5, 1), (3, 2, 32)])
def test_novelty_by_sorted_neighbours_equals_the_definition(n_ref, n_cur, top):
    """Every permutation's novel chunks by `Neighbours` (first neighbour of the other side) equal `_novel`'s
    copy-and-max, including rows whose nearest `top` all lie on one side."""
    pooled = np.vstack([embeddings(n_ref, 1), embeddings(n_cur, 2, shift=0.2)])
    similarity = pooled @ pooled.T
    for groups in (np.arange(n_ref + n_cur), np.arange(n_ref + n_cur) // 3):  # single chunks; documents of 3
        neighbours = drift_module.Neighbours(similarity, groups, top=top)
        first_current = int(groups[n_ref - 1]) + 1 if n_ref else 0
        labels = drift_module._labels(groups, first_current, 30, np.random.default_rng(0))
        for row in labels:
            np.testing.assert_array_equal(neighbours.novel(row), drift_module._novel(similarity, row, groups))
        shares = [drift_module._novel(similarity, row, groups).mean() for row in labels]
        np.testing.assert_array_equal(neighbours.novel_shares(labels, batch=7), shares)  # every row at once


# --- question/document similarity ----------------------------------------------------------------------------


@pytest.mark.parametrize("scores, expected", [([0.5, math.nan, 0.7], (0.5 + 0.7) / 2), ([0.9], 0.9)])
def test_query_top1_cosine_ignores_nan(scores, expected):
    assert query_top1_cosine(scores) == pytest.approx(expected)


@pytest.mark.parametrize("scores", [[], [math.nan]])
def test_query_top1_cosine_without_scores_is_nan(scores):
    assert math.isnan(query_top1_cosine(scores))


# --- query log -----------------------------------------------------------------------------------------------


def test_plain_text_log_splits_in_halves(tmp_path):
    path = tmp_path / "queries.txt"
    path.write_text("first\n second \n\nthird\nfourth\nfifth\n", encoding="utf-8")
    window = read_query_log(path, date(2025, 3, 10), 7)
    assert window == QueryWindow(reference=["first", "second"], current=["third", "fourth", "fifth"])


def test_jsonl_log_windows_by_date(tmp_path):
    lines = [
        ('2025-02-01', "old"),
        ('2025-03-03T23:59:59', "day before the window"),
        ('2025-03-04', "window start"),
        ('2025-03-05T08:00:00Z', "utc"),
        ('2025-03-10T23:30:00+02:00', "window end, its own calendar date"),
        ('2025-03-11T00:00:00', "after the run date"),
    ]
    path = tmp_path / "queries.jsonl"
    path.write_text("".join(f'{{"query": "{q}", "timestamp": "{t}"}}\n' for t, q in lines), encoding="utf-8")
    window = read_query_log(path, window_end=date(2025, 3, 10), window_days=7)  # 2025-03-04 .. 2025-03-10
    assert window.reference == ["old", "day before the window"]
    assert window.current == ["window start", "utc", "window end, its own calendar date"]


@pytest.mark.parametrize("line, message", [
    ('{"query": "a", "timestamp": "2025-03-01"', "not valid JSON"),
    ('["a", "2025-03-01"]', "expected a JSON object, got list"),
    ('{"timestamp": "2025-03-01"}', "'query' must be a non-empty string"),
    ('{"query": "  ", "timestamp": "2025-03-01"}', "'query' must be a non-empty string"),
    ('{"query": "a"}', "'timestamp' must be an ISO date or datetime string, got None"),
    ('{"query": "a", "timestamp": "yesterday"}', "'timestamp' 'yesterday' is not an ISO date or datetime"),
])
def test_bad_jsonl_line_names_file_and_line(tmp_path, line, message):
    path = tmp_path / "queries.jsonl"
    path.write_text('{"query": "fine", "timestamp": "2025-03-01"}\n\n' + line + "\n", encoding="utf-8")
    with pytest.raises(DriftError, match=re.escape(f"{path}:3: {message}")):
        read_query_log(path, date(2025, 3, 10), 7)


def test_non_utf8_line_names_file_and_line(tmp_path):
    path = tmp_path / "queries.txt"
    path.write_bytes(b"fine\nbad \xff byte\n")
    with pytest.raises(DriftError, match=re.escape(f"{path}:2: not UTF-8 text")):
        read_query_log(path, date(2025, 3, 10), 7)


def test_missing_log_names_the_file(tmp_path):
    with pytest.raises(DriftError, match=re.escape(f"{tmp_path / 'none.txt'}: query log not found")):
        read_query_log(tmp_path / "none.txt", date(2025, 3, 10), 7)


def test_empty_log_gives_empty_windows():
    assert parse_query_log([], "q.txt", date(2025, 3, 10), 7) == QueryWindow(reference=[], current=[])


def test_the_threshold_on_the_values_scale_decides_as_the_effect_line_does():
    """drift.csv's effect_from + threshold (`value_line`) is the line on the statistic's own scale: the null's mean
    of the permutation draws, or for duplicates the reference's share, plus the effect line. A row is drifted
    exactly when its value reaches that line and its Holm p is below alpha, so the Drift table can be checked by eye."""
    reference = Sample(embeddings(200, 1), ["news"] * 200, ["feed"] * 200, [f"r{i}" for i in range(200)],
                       np.r_[np.ones(4, bool), np.zeros(196, bool)])
    burst = np.vstack([embeddings(20, 2), isotropic(30, 3)])
    current = Sample(burst, ["news"] * 20 + ["Sports"] * 30, ["feed"] * 50, [f"c{i}" for i in range(50)],
                     np.r_[np.ones(30, bool), np.zeros(20, bool)])
    stable = Sample(embeddings(50, 4), ["news"] * 50, ["feed"] * 50, [f"s{i}" for i in range(50)], np.zeros(50, bool))
    seen = set()
    for current_side in (current, stable):
        for v in window_drift(reference, current_side, FAST):
            expected_base = 4 / 200 if v.statistic == DUPLICATES.name else v.null_mean
            assert v.effect_from == pytest.approx(expected_base, abs=1e-12)
            line = drift_module.value_line(v.effect_from, v.threshold)
            assert (v.verdict == DRIFTED) == (v.adjusted_p < FAST.alpha and v.value >= line - 1e-12), v
            seen.add(v.verdict)
    assert seen == {DRIFTED, STABLE}
