"""Alert rules on constructed series, the paired randomisation test and ongoing conditions."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from datetime import date, timedelta

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from pipeline import store
from pipeline.alerts import (
    ALERT, DROP, FEEDS_FAILED, FLOOR, GOLD_MISSING, MIN_BASELINE, ONGOING_PREFIX, PSI, SIGMA, WARNING, Alert,
    alerts_frame, evaluate_alerts, has_alerts, paired_randomisation_test, question_differences,
)
from pipeline.config import CRITICALITY, AlertsConfig

START = date(2026, 3, 1)
KS = (5,)
RECALL = AlertsConfig(metrics=("recall@5",))


def day(i: int) -> date:
    return START + timedelta(days=i)


def frame(name: str, rows: Sequence[dict]) -> pd.DataFrame:
    """Rows with the store's columns, typed like `store.read` gives them (run_date as datetime64)."""
    result = pd.DataFrame(list(rows), columns=list(store.SCHEMAS[name]))
    result[store.RUN_DATE] = pd.to_datetime(result[store.RUN_DATE])
    return result


# Many questions, so that the sigma band's one-question minimum width (1/N) stays out of the way
# except in the tests about it.
N_QUESTIONS = 10_000


def metric_rows(values: Sequence[float], metric: str = "recall", k: int = 5, pipeline: str = "hybrid",
                n_questions: int = N_QUESTIONS) -> list[dict]:
    """One metrics.csv row per day from START; the last value is today's."""
    return [{"run_date": day(i).isoformat(), "pipeline": pipeline, "k": k, "metric": metric, "value": v,
             "n_questions": n_questions} for i, v in enumerate(values)]


def run_rows(n_days: int, feeds_ok: int = 3, feeds_failed: int = 0) -> list[dict]:
    return [{"run_date": day(i).isoformat(), "feeds_ok": feeds_ok, "feeds_failed": feeds_failed}
            for i in range(n_days)]


def evaluate(metric_values: Sequence[float] = (), *, metric: str = "recall", config: AlertsConfig = RECALL,
             per_question: Sequence[dict] = (), drift: Sequence[dict] = (), runs: Sequence[dict] | None = None,
             today: int | None = None, previous: pd.DataFrame | None = None,
             n_questions: int = N_QUESTIONS) -> list[Alert]:
    """Evaluate on today = the last day of the metric series (or `today`)."""
    today = len(metric_values) - 1 if today is None else today
    return evaluate_alerts(
        day(today), frame(store.METRICS, metric_rows(metric_values, metric, n_questions=n_questions)),
        frame(store.PER_QUESTION, per_question), frame(store.DRIFT, drift),
        frame(store.RUNS, run_rows(today + 1) if runs is None else runs), config, KS,
        frame(store.ALERTS, []) if previous is None else previous)


def fired(alerts: Sequence[Alert], rule: str) -> list[Alert]:
    return [a for a in alerts if a.rule == rule]


# --- drop ---------------------------------------------------------------------------------------

BASE = [0.8] * 7


@pytest.mark.parametrize("history, today, metric, config, fires", [
    (BASE, 0.8 * (1 - 0.12), "recall", RECALL, True),  # 12% fall, standard 10%
    (BASE, 0.8 * (1 - 0.04), "recall", RECALL, False),  # 4% fall
    (BASE, 0.8 * (1 - 0.04), "recall", AlertsConfig(metrics=("recall@5",), drop={"recall@5": 0.03}), True),
    (BASE, 0.8 * (1 - 0.12), "recall", AlertsConfig(metrics=("recall@5",), drop={"recall@5": 0.15}), False),
    (BASE, 0.8 * (1 - 0.07), "recall", AlertsConfig(metrics=("recall@5",), criticality="critical"), True),
    (BASE, 0.8 * (1 - 0.07), "recall", RECALL, False),
    (BASE, 0.8 * (1 - 0.12), "recall", AlertsConfig(metrics=("recall@5",), criticality="exploratory"), False),
    (BASE, 0.8 * (1 + 0.30), "recall", RECALL, False),  # higher is better: a rise never fires
    ([0.1] * 7, 0.1 * (1 + 0.30), "unjudged", AlertsConfig(metrics=("unjudged@5",)), True),  # lower is better
    ([0.1] * 7, 0.1 * (1 - 0.30), "unjudged", AlertsConfig(metrics=("unjudged@5",)), False),
    ([0.0] * 7, 0.2, "unjudged", AlertsConfig(metrics=("unjudged@5",)), True),  # any rise from zero
    ([0.8] * (MIN_BASELINE - 1), 0.5, "recall", RECALL, False),  # too few earlier runs for a baseline
    ([0.8] * MIN_BASELINE, 0.5, "recall", RECALL, True),
])
def test_drop_rule_follows_threshold_and_direction(history, today, metric, config, fires):
    alerts = fired(evaluate([*history, today], metric=metric, config=config), DROP)
    assert len(alerts) == int(fires)
    if fires:
        (alert,) = alerts
        assert alert.severity == ALERT and alert.pipeline == "hybrid" and alert.metric == f"{metric}@5"
        assert alert.baseline == pytest.approx(np.mean(history))
        threshold = config.drop.get(f"{metric}@5", CRITICALITY[config.criticality])
        assert alert.threshold == pytest.approx(threshold * 100)


def test_drop_values_and_message():
    (alert,) = fired(evaluate([*BASE, 0.704]), DROP)
    assert alert.value == 0.704
    assert alert.change_pct == pytest.approx((0.704 - 0.8) / 0.8 * 100)
    assert alert.message.startswith("recall@5 of hybrid fell 12.0% to 0.704 against its 7-run mean 0.800 "
                                    "(threshold 10%, standard criticality)")


def test_today_is_not_in_its_own_baseline_and_older_runs_leave_the_window():
    # Baseline = the 7 runs before today = 0.8, a fall of (0.8 - 0.71) / 0.8 = 11.25% > 10%.
    # With today inside the window the mean would be (6 * 0.8 + 0.71) / 7 and the fall 9.8%;
    # with the 0.2 of eight runs ago inside it the mean would be 0.725 and the fall 2%.
    values = [0.2, *BASE, 0.71]
    (alert,) = fired(evaluate(values), DROP)
    assert alert.baseline == pytest.approx(0.8)
    included = (6 * 0.8 + 0.71) / 7
    assert (included - 0.71) / included < CRITICALITY["standard"]  # the verdict would flip


# --- sigma --------------------------------------------------------------------------------------

NOISY = [0.80, 0.82, 0.78, 0.81, 0.79, 0.80, 0.80]
NOISY_MEAN, NOISY_SD = float(np.mean(NOISY)), float(np.std(NOISY, ddof=1))


@pytest.mark.parametrize("history, today, fires", [
    (NOISY, NOISY_MEAN - 3.5 * NOISY_SD, True),
    (NOISY, NOISY_MEAN - 2.5 * NOISY_SD, False),
    (NOISY, NOISY_MEAN + 3.5 * NOISY_SD, False),  # a rise of recall is not harmful
    (NOISY[1:], NOISY_MEAN - 3.5 * NOISY_SD, False),  # 6 earlier runs: the window (7) is not full
    (BASE, 0.8, False),  # constant history, equal today: zero sd must neither fire nor divide by zero
    (BASE, 0.79, True),  # constant history, lower today: 0.01 is 100 widths of one question (1/10000)
    ([0.1 + 0.2] * 7, 0.1 + 0.2, False),  # equal values whose mean may round differently
])
def test_sigma_band(history, today, fires):
    alerts = fired(evaluate([*history, today]), SIGMA)
    assert len(alerts) == int(fires)
    if fires:
        assert alerts[0].threshold == 3.0 and alerts[0].baseline == pytest.approx(np.mean(history))


def test_sigma_message_counts_standard_deviations():
    (alert,) = fired(evaluate([*NOISY, NOISY_MEAN - 3.5 * NOISY_SD]), SIGMA)
    assert "3.5 standard deviations below its 7-run mean 0.800" in alert.message
    (flat,) = fired(evaluate([*BASE, 0.79]), SIGMA)
    assert "100.0 standard deviations below" in flat.message
    assert "sd 0.000, widened to one question's worth 1/10000" in flat.message
    (flat,) = fired(evaluate([*BASE, 0.79], n_questions=0), SIGMA)  # no count: the band has zero width
    assert "below the constant 0.800 of its previous 7 runs" in flat.message


def test_sigma_band_is_at_least_one_question_wide():
    # 50 questions: the band's sd is at least 1/50, so on a flat series one question flipping
    # (a change of 0.02) stays inside 3 sd, while a change of 4 questions (0.08 > 3 * 0.02) leaves it.
    assert not fired(evaluate([*BASE, 0.8 - 1 / 50], n_questions=50), SIGMA)
    assert not fired(evaluate([*BASE, 0.8 - 3 / 50], n_questions=50), SIGMA)  # exactly 3 sd: not beyond
    (alert,) = fired(evaluate([*BASE, 0.8 - 4 / 50], n_questions=50), SIGMA)
    assert "4.0 standard deviations below" in alert.message


def test_sigma_for_a_lower_is_better_metric_fires_on_a_rise():
    config = AlertsConfig(metrics=("unjudged@5",))
    assert fired(evaluate([0.1] * 7 + [0.11], metric="unjudged", config=config), SIGMA)
    assert not fired(evaluate([0.1] * 7 + [0.09], metric="unjudged", config=config), SIGMA)


# --- floor --------------------------------------------------------------------------------------

@pytest.mark.parametrize("values, fires", [
    ([0.55], True),  # the first run ever: no baseline needed
    ([*BASE, 0.55], True),
    ([*BASE, 0.6], False),  # at the floor is not below it
])
def test_floor(values, fires):
    # The floor applies to recall@5 although only hit@5 is watched by the drop and sigma rules.
    config = AlertsConfig(metrics=("hit@5",), floors={"recall@5": 0.6})
    alerts = evaluate(values, config=config)
    assert [a.rule for a in alerts] == ([FLOOR] if fires else [])
    if fires:
        assert alerts[0].threshold == 0.6 and alerts[0].value == values[-1]
        assert "below its configured floor 0.600" in alerts[0].message


# --- psi ----------------------------------------------------------------------------------------

def drift_rows(psi_mean: float, psi_max: float, psi_expected: float) -> list[dict]:
    return [{"run_date": day(0).isoformat(), "statistic": name, "value": value, "reference_date": "2026-02-01",
             "n_reference": 5000, "n_current": 40}
            for name, value in (("psi_mean", psi_mean), ("psi_max", psi_max), ("psi_expected", psi_expected))]


@pytest.mark.parametrize("psi_mean, severity, threshold", [
    (0.25, ALERT, 0.2),
    (0.2, ALERT, 0.2),  # at the threshold
    (0.15, WARNING, 0.1),
    (0.1, WARNING, 0.1),
    (0.05, None, None),
])
def test_psi_thresholds(psi_mean, severity, threshold):
    alerts = evaluate(today=0, drift=drift_rows(psi_mean, psi_max=0.9, psi_expected=0.01))
    if severity is None:
        assert alerts == []
        return
    (alert,) = alerts
    assert (alert.rule, alert.metric, alert.severity, alert.threshold) == (PSI, "psi_mean", severity, threshold)
    assert alert.value == psi_mean and alert.baseline == 0.01
    assert "psi_max 0.900" in alert.message and "too small" not in alert.message


def test_psi_says_when_samples_are_too_small_for_the_threshold():
    (alert,) = evaluate(today=0, drift=drift_rows(0.25, psi_max=0.4, psi_expected=0.12))
    assert alert.severity == ALERT
    assert "the samples are too small for the threshold to mean much" in alert.message
    assert "about 0.120 at 5000 reference and 40 current samples" in alert.message


def test_psi_ignores_other_dates():
    assert evaluate(today=1, drift=drift_rows(0.9, psi_max=0.9, psi_expected=0.0)) == []


# --- gold_missing and feeds_failed ------------------------------------------------------------

def question_rows(gold_missing: Sequence[int], i_day: int = 0) -> list[dict]:
    return [{"run_date": day(i_day).isoformat(), "pipeline": pipeline, "k": k, "question_id": f"q{q}",
             "recall": 1.0, "rr": 1.0, "gold_missing": missing}
            for pipeline in ("bm25", "hybrid") for k in (1, 5) for q, missing in enumerate(gold_missing)]


def test_gold_missing_counts_documents_once_and_names_the_questions():
    missing = [0, 2, 0, 1, 1, 1, 1, 3]
    (alert,) = evaluate(today=0, per_question=question_rows(missing))
    assert (alert.rule, alert.severity, alert.pipeline) == (GOLD_MISSING, ALERT, "")
    assert alert.value == sum(missing)  # not multiplied by pipelines and ks
    assert alert.message.startswith(f"{sum(missing)} relevant documents of the gold set are missing from the "
                                    "corpus, for 6 questions (q1, q3, q4, q5, q6 and 1 more)")


def test_gold_missing_only_counts_today():
    rows = question_rows([0, 0], i_day=1) + question_rows([1, 1], i_day=0)
    assert evaluate(today=1, per_question=rows) == []


@pytest.mark.parametrize("ok, failed, severity", [(0, 3, ALERT), (2, 1, WARNING), (3, 0, None)])
def test_feeds_failed(ok, failed, severity):
    alerts = evaluate(today=0, runs=run_rows(1, feeds_ok=ok, feeds_failed=failed))
    assert [(a.rule, a.severity, a.value) for a in alerts] == ([] if severity is None else
                                                              [(FEEDS_FAILED, severity, failed)])


def test_has_alerts_ignores_warnings():
    warning = evaluate(today=0, runs=run_rows(1, feeds_ok=2, feeds_failed=1))
    alert = evaluate(today=0, runs=run_rows(1, feeds_ok=0, feeds_failed=1))
    assert not has_alerts(warning) and has_alerts(alert) and not has_alerts([])


# --- the paired randomisation test -------------------------------------------------------------

def test_randomisation_all_equal_negative_differences():
    # Only the draw that keeps every sign reaches the observed mean: probability 2**-30, so no draw
    # of 999 does and p is the +1 correction alone.
    assert paired_randomisation_test([-0.1] * 30, 999, 0, "fall") == 1 / (999 + 1)
    assert paired_randomisation_test([0.1] * 30, 999, 0, "rise") == 1 / (999 + 1)
    # In the other direction every draw is at least as extreme.
    assert paired_randomisation_test([0.1] * 30, 999, 0, "fall") == (999 + 1) / (999 + 1)


def test_randomisation_ten_equal_differences_is_near_one_in_1024():
    permutations = 10000
    p = paired_randomisation_test([-0.1] * 10, permutations, 0, "fall")
    expected = (permutations / 2 ** 10 + 1) / (permutations + 1)
    sd = math.sqrt(permutations * 2 ** -10 * (1 - 2 ** -10)) / (permutations + 1)
    assert abs(p - expected) < 4 * sd


def test_randomisation_zero_mean_noise_is_not_significant():
    d = np.random.default_rng(1).normal(0, 0.2, 50)
    d -= d.mean()
    assert 0.4 < paired_randomisation_test(d, 5000, 0, "fall") < 0.6
    assert paired_randomisation_test(np.zeros(20), 500, 0, "fall") == 1.0


def test_randomisation_matches_scipy_exact_sign_flip_test():
    d = np.array([-0.3, -0.1, 0.05, -0.2, 0.1, -0.15, -0.05, 0.02])
    exact = stats.permutation_test((d,), np.mean, permutation_type="samples", alternative="less",
                                   n_resamples=10**6).pvalue  # 2**8 sign patterns: enumerated exactly
    assert paired_randomisation_test(d, 20000, 0, "fall") == pytest.approx(exact, abs=0.015)


def test_randomisation_is_reproducible_and_checks_its_input():
    d = np.random.default_rng(2).normal(-0.02, 0.1, 40)
    assert paired_randomisation_test(d, 1000, 0, "fall") == paired_randomisation_test(d, 1000, 0, "fall")
    for bad in ([], [0.1, math.nan]):
        with pytest.raises(ValueError, match="non-empty"):
            paired_randomisation_test(bad, 1000, 0, "fall")
    with pytest.raises(ValueError, match="direction"):
        paired_randomisation_test([0.1], 1000, 0, "down")


def test_question_differences_use_the_baseline_runs_and_map_mrr_to_rr():
    rows = [{"run_date": day(i).isoformat(), "pipeline": "hybrid", "k": 5, "question_id": q, "rr": v}
            for i, values in enumerate([{"a": 0.1, "b": 0.2}, {"a": 0.5, "b": math.nan}, {"a": 0.7, "b": 0.4},
                                        {"a": 0.4, "b": 0.3}])
            for q, v in values.items()]
    pq = frame(store.PER_QUESTION, rows)
    baseline = [pd.Timestamp(day(1)), pd.Timestamp(day(2))]
    d = question_differences(pq, "hybrid", "mrr", 5, pd.Timestamp(day(3)), baseline)
    # a: 0.4 - mean(0.5, 0.7); b: 0.3 - 0.4 (its NaN day is left out); day 0 is not in the baseline
    assert d == pytest.approx([0.4 - (0.5 + 0.7) / 2, 0.3 - 0.4])


def per_question_for(history: int, shift: Sequence[float]) -> list[dict]:
    """recall@5 of hybrid per question: 0.8 on `history` days, then 0.8 + shift[q] today."""
    return [{"run_date": day(i).isoformat(), "pipeline": "hybrid", "k": 5, "question_id": f"q{q}",
             "recall": 0.8 + (s if i == history else 0.0), "gold_missing": 0}
            for i in range(history + 1) for q, s in enumerate(shift)]


def test_drop_message_carries_the_paired_test():
    config = AlertsConfig(metrics=("recall@5",), permutations=999)
    everyone = [-0.1] * 30  # every question fell: p is the +1 correction alone
    (alert,) = fired(evaluate([*BASE, 0.7], config=config, per_question=per_question_for(7, everyone)), DROP)
    p = paired_randomisation_test(np.full(30, (0.8 - 0.1) - 0.8), 999, 0, "fall")
    assert p == 1 / 1000
    assert alert.message.endswith(f"the drop is larger than question-to-question noise "
                                  f"(paired randomisation test p={p:.2g}, 30 questions)")
    # The same fall of the mean carried by a few questions against noisy others: within the noise.
    few = [-1.0, -1.0, -1.0] + [0.4, -0.4] * 10 + [0.0] * 7
    (alert,) = fired(evaluate([*BASE, 0.7], config=config, per_question=per_question_for(7, few)), DROP)
    assert "the drop is within question-to-question noise" in alert.message


# --- ongoing conditions ------------------------------------------------------------------------

def daily(values: Sequence[float], tmp_path, config: AlertsConfig = RECALL) -> list[list[Alert]]:
    """Each day as the job runs it: evaluate against the store, then write that day's alerts."""
    out = []
    for i in range(len(values)):
        previous = store.read(tmp_path, store.ALERTS)
        alerts = evaluate(values[: i + 1], config=config, previous=previous)
        store.replace_date(tmp_path, store.ALERTS, day(i), alerts_frame(alerts))
        out.append(alerts)
    return out


FLOOR_ONLY = AlertsConfig(metrics=("hit@5",), floors={"recall@5": 0.6})  # only the floor watches recall@5


def test_same_condition_on_consecutive_runs_is_ongoing(tmp_path):
    days = daily([0.8, 0.5, 0.55, 0.52], tmp_path, FLOOR_ONLY)
    assert [a.new for a in days[1]] == [True]
    for alerts in days[2:]:
        (alert,) = alerts
        assert alert.message.startswith(f"{ONGOING_PREFIX}{day(1).isoformat()}: recall@5 of hybrid is")
        assert not alert.new
    stored = store.read(tmp_path, store.ALERTS)
    assert list(stored.columns) == list(store.ALERTS_COLUMNS)
    assert list(stored["message"]) == [a.message for alerts in days for a in alerts]


def test_a_condition_that_cleared_and_came_back_is_new(tmp_path):
    days = daily([0.5, 0.5, 0.7, 0.5], tmp_path, FLOOR_ONLY)
    assert [[a.new for a in alerts] for alerts in days] == [[True], [False], [], [True]]


def test_the_previous_run_is_the_last_run_date_not_yesterday():
    runs = [run for run in run_rows(3) if run["run_date"] != day(1).isoformat()]  # no run on day 1
    previous = alerts_frame(evaluate([0.5], config=FLOOR_ONLY, runs=runs[:1]))
    (alert,) = evaluate([0.5, math.nan, 0.5], config=FLOOR_ONLY, runs=runs, previous=previous)
    assert alert.message.startswith(f"{ONGOING_PREFIX}{day(0).isoformat()}: ")


def on_day(rows: Sequence[dict], i: int) -> list[dict]:
    return [{**row, "run_date": day(i).isoformat()} for row in rows]


def test_an_escalation_is_new_and_a_deescalation_ongoing():
    warning, alert = drift_rows(0.15, 0.3, 0.01), drift_rows(0.25, 0.3, 0.01)
    previous = alerts_frame(evaluate(today=0, drift=warning))
    (escalated,) = evaluate(today=1, drift=warning + on_day(alert, 1), previous=previous)
    assert escalated.severity == ALERT and escalated.new
    previous = alerts_frame(evaluate(today=0, drift=alert))
    (calmer,) = evaluate(today=1, drift=alert + on_day(warning, 1), previous=previous)
    assert calmer.severity == WARNING and calmer.message.startswith(f"{ONGOING_PREFIX}{day(0).isoformat()}: ")


def test_rerunning_a_date_ignores_that_dates_own_stored_alerts():
    values = [*BASE, 0.5]
    first = evaluate(values)
    assert first and evaluate(values, previous=alerts_frame(first)) == first


def test_alert_row_is_the_csv_contract():
    (alert,) = evaluate(today=0, runs=run_rows(1, feeds_ok=0, feeds_failed=2))
    assert tuple(f.name for f in dataclasses.fields(Alert)) == store.ALERTS_COLUMNS
    assert tuple(alert.row()) == store.ALERTS_COLUMNS
    assert list(alerts_frame([]).columns) == list(store.ALERTS_COLUMNS)
