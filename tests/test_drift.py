"""Drift statistics: hand-computed PSI/KL, tables of (reference, current, expected, drifted), differential tests
against scipy and scikit-learn, embedding drift on synthetic embeddings, Evidently, and the query-log reader."""

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
from pipeline.drift import (
    EMBEDDING_STATISTICS,
    EVIDENTLY_METHOD,
    KL,
    KS_MIN_P,
    PSI,
    QUERY_PREFIX,
    STATISTICS,
    DriftError,
    EmbeddingDrift,
    KsResult,
    QueryWindow,
    bonferroni,
    embedding_drift,
    evidently_embedding_drift,
    expected_psi_no_drift,
    kl_divergence,
    ks_test,
    parse_query_log,
    project,
    psi,
    query_top1_cosine,
    read_query_log,
    sample_rows,
)

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


def psi_of(r: list[float], c: list[float]) -> float:
    return sum((ci - ri) * math.log(ci / ri) for ri, ci in zip(r, c, strict=True))


# --- names and descriptors ---------------------------------------------------------------------------------


def test_statistic_names_are_fixed_and_unique():
    assert [s.name for s in EMBEDDING_STATISTICS] == [
        "psi_mean", "psi_max", "psi_expected", "kl_mean", "kl_max", "ks_max", "ks_min_p_bonferroni"]
    names = [s.name for s in STATISTICS]
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("value, expected", [(0.19, False), (0.2, True), (0.5, True)])
def test_descriptor_threshold_is_inclusive_above(value, expected):
    assert PSI.drifted(value) is expected


@pytest.mark.parametrize("value, expected", [(0.049, True), (0.05, False), (1.0, False)])
def test_pvalue_descriptor_signals_drift_below(value, expected):
    assert KS_MIN_P.drifted(value) is expected


# --- PSI and KL ----------------------------------------------------------------------------------------------


def test_psi_and_kl_by_hand_on_quartiles():
    # Reference 0..7: quartile edges 1.75, 3.5, 5.25, so the bins hold {0,1} {2,3} {4,5} {6,7}: 1/4 each.
    # Current: four 0s, then 2, 3 | 4, 5 | nothing: shares 1/2, 1/4, 1/4, epsilon, renormalised.
    reference = np.arange(8.0)
    current = [0, 0, 0, 0, 2, 3, 4, 5]
    c0, c1, c2, c3 = 1 / 2 / (1 + E), 1 / 4 / (1 + E), 1 / 4 / (1 + E), E / (1 + E)
    r = 1 / 4
    expected_psi = ((c0 - r) * math.log(c0 / r) + (c1 - r) * math.log(c1 / r)
                    + (c2 - r) * math.log(c2 / r) + (c3 - r) * math.log(c3 / r))
    expected_kl = c0 * math.log(c0 / r) + c1 * math.log(c1 / r) + c2 * math.log(c2 / r) + c3 * math.log(c3 / r)
    assert psi(reference, current, bins=4, epsilon=E) == pytest.approx(expected_psi, rel=1e-12)
    assert kl_divergence(reference, current, bins=4, epsilon=E) == pytest.approx(expected_kl, rel=1e-12)


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
    assert PSI.drifted(value) is drifted


def test_identical_arrays_give_exactly_zero():
    sample = np.random.default_rng(0).standard_normal(333)
    assert psi(sample, sample.copy()) == 0.0
    assert kl_divergence(sample, sample.copy()) == 0.0


def test_same_distribution_psi_is_near_its_no_drift_expectation():
    values = [psi(np.random.default_rng(s).standard_normal(1000), np.random.default_rng(1000 + s).standard_normal(1000))
              for s in range(40)]
    assert np.mean(values) == pytest.approx(expected_psi_no_drift(10, 1000, 1000), rel=0.2)
    assert max(values) < PSI.threshold


def test_clearly_shifted_distribution_psi_is_above_alert_level():
    rng = np.random.default_rng(0)
    assert psi(rng.standard_normal(5000), rng.standard_normal(5000) + 1.0) > PSI.threshold


def test_kl_direction_is_current_given_reference():
    # Reference spread over four quartile bins, current all in the first: KL(cur||ref) = ln(4)-ish, while
    # KL(ref||cur) would be dominated by three empty bins (ln(1/epsilon)).
    c0, ce, r = 1 / (1 + 3 * E), E / (1 + 3 * E), 1 / 4
    expected = c0 * math.log(c0 / r) + 3 * ce * math.log(ce / r)
    assert kl_divergence(np.arange(8.0), np.zeros(8), bins=4) == pytest.approx(expected, rel=1e-12)


def test_psi_and_kl_against_scipy_entropy():
    rng = np.random.default_rng(7)
    reference, current = rng.standard_normal(400), rng.standard_normal(300) * 1.3 + 0.4
    edges = np.quantile(reference, np.arange(1, 10) / 10)
    counts = [np.bincount(np.searchsorted(edges, x, side="right"), minlength=10) for x in (reference, current)]
    ref_share, cur_share = [np.where(c == 0, E, c / c.sum()) for c in counts]  # entropy() renormalises
    assert kl_divergence(reference, current, epsilon=E) == pytest.approx(stats.entropy(cur_share, ref_share), rel=1e-12)
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


def test_expected_psi_no_drift_formula():
    assert expected_psi_no_drift(10, 1000, 500) == (10 - 1) * (1 / 1000 + 1 / 500)
    assert expected_psi_no_drift(4, 50, 50) == 3 * (1 / 50 + 1 / 50)


# --- KS ------------------------------------------------------------------------------------------------------

KS_EXAMPLES = {
    "separated": ([1.0, 2.0, 3.0], [4.0, 5.0, 6.0]),
    "interleaved": ([1.0, 3.0, 5.0, 7.0], [2.0, 4.0, 6.0]),
    "ties": ([0.0, 0.0, 1.0, 1.0, 2.0], [0.0, 1.0, 1.0, 1.0]),
    "identical-constant": ([0.0] * 5, [0.0] * 5),
    "normal": (np.random.default_rng(1).standard_normal(200), np.random.default_rng(2).standard_normal(150) + 0.3),
}


@pytest.mark.parametrize("reference, current", KS_EXAMPLES.values(), ids=KS_EXAMPLES)
def test_ks_equals_scipy(reference, current):
    expected = stats.ks_2samp(reference, current, alternative="two-sided")
    assert ks_test(reference, current) == KsResult(expected.statistic, expected.pvalue)


def test_ks_by_hand_on_separated_samples():
    # All 3 current values above all 3 reference ones: D = 1, and exactly 2 of the C(6, 3) orderings are as
    # extreme (all below, all above).
    assert ks_test([1.0, 2.0, 3.0], [4.0, 5.0, 6.0]) == pytest.approx((1.0, 2 / math.comb(6, 3)))


@pytest.mark.parametrize("pvalue, n_tests, expected", [(0.01, 10, 0.01 * 10), (0.2, 10, 1.0), (0.03, 1, 0.03)])
def test_bonferroni(pvalue, n_tests, expected):
    assert bonferroni(pvalue, n_tests) == pytest.approx(expected)


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
        embedding_drift(reference, current, DriftConfig())


# --- embedding drift -----------------------------------------------------------------------------------------


def test_same_distribution_shows_no_drift():
    drift = embedding_drift(embeddings(1000, 1), embeddings(1000, 2), DriftConfig())
    assert drift.psi_expected == (10 - 1) * (1 / 1000 + 1 / 1000)
    assert drift.psi_mean < 2 * drift.psi_expected and not drift.small_sample
    assert not KS_MIN_P.drifted(drift.ks_min_p)
    assert (drift.n_reference, drift.n_current, drift.n_components) == (1000, 1000, 10)


def test_shifted_mean_direction_drifts():
    drift = embedding_drift(embeddings(1000, 1), embeddings(1000, 2, shift=0.3), DriftConfig())
    assert drift.psi_max > PSI.threshold and drift.kl_max > KL.threshold
    assert KS_MIN_P.drifted(drift.ks_min_p)


def test_summaries_agree_with_per_component_scipy():
    reference, current = embeddings(300, 1), embeddings(200, 2, shift=0.1)
    config = DriftConfig(n_components=4)
    ref_proj, cur_proj = project(reference, current, 4)
    ks = [stats.ks_2samp(ref_proj[:, j], cur_proj[:, j]) for j in range(4)]
    psis = [psi(ref_proj[:, j], cur_proj[:, j]) for j in range(4)]
    kls = [kl_divergence(ref_proj[:, j], cur_proj[:, j]) for j in range(4)]
    drift = embedding_drift(reference, current, config)
    assert drift.ks_max == max(r.statistic for r in ks)
    assert drift.ks_min_p == min(1.0, min(r.pvalue for r in ks) * 4)
    assert drift.psi_mean == pytest.approx(sum(psis) / 4) and drift.psi_max == max(psis)
    assert drift.kl_mean == pytest.approx(sum(kls) / 4) and drift.kl_max == max(kls)


def test_sampling_is_reproducible_and_capped():
    reference, current = embeddings(800, 1), embeddings(800, 2)
    config = DriftConfig(sample_cap=300, seed=5)
    first = embedding_drift(reference, current, config)
    assert first == embedding_drift(reference, current, config)
    assert first != embedding_drift(reference, current, dataclasses.replace(config, seed=6))
    assert (first.n_reference, first.n_current) == (300, 300)


def test_small_samples_are_flagged():
    drift = embedding_drift(embeddings(50, 1), embeddings(50, 2), DriftConfig())
    assert drift.psi_expected == (10 - 1) * (1 / 50 + 1 / 50) and drift.small_sample


def test_constant_embeddings_do_not_crash():
    row = embeddings(1, 1)
    drift = embedding_drift(np.repeat(row, 20, axis=0), np.repeat(row, 30, axis=0), DriftConfig())
    assert (drift.psi_max, drift.kl_max, drift.ks_max, drift.ks_min_p) == (0.0, 0.0, 0.0, 1.0)


def test_reference_fit_overstates_drift_on_flat_spectra_and_pooled_does_not():
    # Pins why `pooled` exists: isotropic 384-d vectors, 200 per side, one distribution.
    reference, current = isotropic(200, 1), isotropic(200, 2)
    by_reference = embedding_drift(reference, current, DriftConfig())
    by_both = embedding_drift(reference, current, DriftConfig(), pooled=True)
    assert by_reference.psi_mean > 5 * by_reference.psi_expected
    assert by_both.psi_mean < 2 * by_both.psi_expected


def test_rows_use_the_fixed_names_and_a_prefix():
    drift = EmbeddingDrift(psi_mean=0.1, psi_max=0.3, psi_expected=0.02, kl_mean=0.05, kl_max=0.2, ks_max=0.4,
                           ks_min_p=0.001, n_reference=100, n_current=90, n_components=10)
    assert drift.rows() == [("psi_mean", 0.1), ("psi_max", 0.3), ("psi_expected", 0.02), ("kl_mean", 0.05),
                            ("kl_max", 0.2), ("ks_max", 0.4), ("ks_min_p_bonferroni", 0.001)]
    assert [name for name, _ in drift.rows(prefix=QUERY_PREFIX)][:2] == ["query_psi_mean", "query_psi_max"]


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
