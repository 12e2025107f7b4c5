"""The language_share drift statistic (pipeline/drift.py): its G statistic is scipy's, its permutation p agrees with
the chi-square and Fisher tests where they apply, seeded nulls with misread items stay within alpha and never pass the
effect line, and the real job drifts on 12 foreign items among a day's 13 English news items, naming the languages,
and not by languages on the English day after."""

from __future__ import annotations

import re
from datetime import date

import numpy as np
import pytest
from scipy import stats

from pipeline import contract, drift, store
from pipeline.config import DriftConfig
from pipeline.job import backfill
from tests.test_shifts import NEWS, drift_alert, with_pack


def _split(n_ref: int, n_cur: int, draws: int, seed: int = 0) -> np.ndarray:
    """Row 0 the observed split of the documents (reference first), then `draws` seeded permutations of it."""
    return drift._labels(np.arange(n_ref + n_cur), n_ref, draws, np.random.default_rng(seed))


def _languages(reference: dict[str, int], current: dict[str, int]) -> list[str]:
    return [code for side in (reference, current) for code, n in side.items() for _ in range(n)]


@pytest.mark.parametrize("table", [
    [[12, 13, 0], [3, 190, 7]],
    [[1, 24], [0, 60]],
    [[5, 5, 5, 5], [10, 20, 30, 40]],
    [[0, 25], [0, 60]],  # one language only: nothing differs
])
def test_the_g_statistic_is_scipy_s_log_likelihood_ratio(table):
    table = np.array(table, dtype=float)
    nonempty = table[:, table.sum(axis=0) > 0]
    expected = (0.0 if nonempty.shape[1] < 2 else
                stats.chi2_contingency(nonempty, correction=False, lambda_="log-likelihood")[0])
    assert drift.g_statistic(table[:1], table[1:]) == pytest.approx([expected], abs=1e-12)


def test_the_permutation_p_agrees_with_the_chi_square_and_fisher_tests():
    # Large counts: the G-test's chi-square p is a good approximation of the exact (permutation) one.
    reference, current = {"en": 150, "de": 30, "fr": 20}, {"en": 60, "de": 22, "fr": 18}
    verdict = drift.language_shares(_languages(reference, current), _split(200, 100, 4000), 1)
    table = [[150, 30, 20], [60, 22, 18]]
    chi2_p = stats.chi2_contingency(table, correction=False, lambda_="log-likelihood")[1]
    assert verdict.p_value == pytest.approx(chi2_p, abs=0.01)
    assert 0.005 < chi2_p < 0.1  # a p the comparison can tell apart
    # A 2 x 2 table of few items, where the chi-square is off: the exact conditional test is the reference, each
    # table's probability scipy's hypergeometric (Fisher's), the tables at least as extreme those of a G at least
    # the observed one: Fisher's one-sided tail (4, 5 or 6 German items) plus the table of none, which G counts as
    # extreme (Fisher's two-sided test, ordering the tables by probability, does not).
    reference, current = {"en": 58, "de": 2}, {"en": 21, "de": 4}
    verdict = drift.language_shares(_languages(reference, current), _split(60, 25, 4000), 1)
    tables = np.array([[[25 - k, k], [54 + k, 6 - k]] for k in range(7)], dtype=float)
    g = drift.g_statistic(tables[:, 0], tables[:, 1])
    exact = stats.hypergeom.pmf(np.arange(7), 85, 6, 25)[g >= g[4] - 1e-9].sum()
    assert verdict.p_value == pytest.approx(exact, abs=0.015)
    assert g[0] >= g[4] and exact == pytest.approx(stats.fisher_exact([[4, 21], [2, 58]], alternative="greater")[1]
                                                   + stats.hypergeom.pmf(0, 85, 6, 25))
    # Its value is the total variation between the shares: |2/60 - 4/25| over the two languages, halved twice.
    assert verdict.value == pytest.approx(abs(2 / 60 - 4 / 25))


def test_a_rare_language_is_pooled_as_other():
    columns, one_hot = drift.language_table(["en"] * 5 + ["de", "fr", "fr", "fr"], 3)
    assert columns == ["en", "fr", drift.OTHER_LANGUAGE]
    assert one_hot.sum(axis=0).tolist() == [5, 3, 1]


def test_one_misread_item_does_not_drift():
    """One of a day's 13 items read as German against 60 English reference items: 1/13 = 0.08 is below the effect
    line, whatever its p."""
    config = DriftConfig()
    verdict = drift.language_shares(_languages({"en": 60}, {"en": 12, "de": 1}), _split(60, 13, 500), 3)
    [decided] = drift.decide([verdict], config.alpha, drift.effect_thresholds(config))
    assert decided.verdict == contract.STABLE and decided.value == pytest.approx(1 / 13)
    # In a window of three long documents (a day of PEPs) one misread is a third of it, and significant on its own:
    # fewer than language_min_documents (3) documents in excess of the reference's shares is no effect.
    verdict = drift.language_shares(_languages({"en": 200}, {"en": 2, "de": 1}), _split(200, 3, 500), 3)
    [decided] = drift.decide([verdict], config.alpha, drift.effect_thresholds(config))
    assert verdict.value == pytest.approx(1 / 3) and verdict.p_value < config.alpha
    assert decided.verdict == contract.STABLE and verdict.effect == 0


def test_seeded_nulls_with_misread_items_stay_within_alpha():
    """300 seeded null windows (60 reference and 25 current documents, each read as English 95% of the time and
    otherwise German, French or Spanish at random): p < 0.05 in at most alpha plus three standard errors of them, and
    no window passes the effect line (so none drifts)."""
    rng = np.random.default_rng(11)
    config = DriftConfig()
    low, drifted, sims = 0, 0, 300
    for i in range(sims):
        languages = rng.choice(["en", "de", "fr", "es"], size=85, p=[0.95, 0.02, 0.02, 0.01]).tolist()
        verdict = drift.language_shares(languages, _split(60, 25, 199, seed=i), config.language_min_documents)
        [decided] = drift.decide([verdict], config.alpha, drift.effect_thresholds(config))
        low += verdict.p_value < 0.05
        drifted += decided.verdict == contract.DRIFTED
    assert low / sims <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / sims)
    assert drifted == 0


def test_foreign_items_among_a_day_of_news_drift_and_are_named_by_their_languages(tmp_path, embedder):
    """The tests' foreign-language pack (12 items: German, Spanish, French) beside the 13 English news items of
    2025-09-13: language_share drifts and the drift alert names the languages; the English-only day after does not."""
    start, event, after = date(2025, 9, 10), date(2025, 9, 13), date(2025, 9, 14)
    # A window of 10 chunks is enough: the day after's 12 items are its window alone (not grown back over the pack).
    config = with_pack(tmp_path, NEWS, "offtopic_foreign.xml", event, DriftConfig(evidently=False, min_current=10))
    results = backfill(config, start, after, embedder=embedder)
    rows = store.read(config.data_dir, contract.DRIFT)
    language = rows[rows[contract.STATISTIC] == contract.LANGUAGE_SHARE].set_index(contract.RUN_DATE)
    assert language.loc[str(event), contract.VERDICT] == contract.DRIFTED
    assert language.loc[str(event), contract.VALUE] == pytest.approx(12 / 25)  # 13 English of 25, none of 12 before
    assert language.loc[str(after), contract.VERDICT] == contract.STABLE
    alert = drift_alert(results, event)
    assert alert.severity == contract.ALERT  # it pages on its own day
    assert re.search(r"languages: 52% English, (16% (German|Spanish|French), ){2}16% other \(reference: 100% English\)",
                     alert.message), alert.message
    assert "German 4/25 (reference 0/" in alert.message
    # The day after's news may drift in what it is about (a few items of a new topic), never by its languages.
    assert not [a for r in results if r.run_date == after for a in r.alerts if contract.LANGUAGE_SHARE in a.message]
