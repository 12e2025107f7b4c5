"""Alert rules on constructed series: the paired contrast test and its null (against a Monte Carlo permutation
and seeded null streams), the drop rule with confirmation, slow drift, floors, corpus rules and ongoing streaks."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from datetime import date, timedelta

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from pipeline import contract, series, store
from pipeline.alerts import Alert, alerts_frame, evaluate_alerts, has_alerts, is_new, mark_ongoing
from pipeline.contract import (ALERT, CONFIG_CHANGE, DELETED, DRIFT_RULE, DROP, FEEDS_FAILED, FLOOR, GOLD_MISSING,
                               SLOW_DRIFT, WARNING)
from pipeline.config import AlertsConfig, DriftConfig
from pipeline.metrics import REGISTRY

START = date(2026, 3, 1)
KS = (5,)
HIT = AlertsConfig(metrics=("hit@5",))


def day(i: int) -> date:
    return START + timedelta(days=i)


def frame(name: str, rows: Sequence[dict]) -> pd.DataFrame:
    """Rows with the store's columns, typed like `store.read` gives them (run_date as datetime64)."""
    result = pd.DataFrame(list(rows), columns=list(contract.SCHEMAS[name]))
    result[contract.RUN_DATE] = pd.to_datetime(result[contract.RUN_DATE])
    return result


def outcomes(matrix: np.ndarray, pipeline: str = "hybrid", k: int = 5) -> tuple[list[dict], list[dict]]:
    """per_question.csv and metrics.csv rows from a questions x days matrix of values (every metric column
    carries the same value, so any watched metric reads it)."""
    matrix = np.asarray(matrix, dtype=float)
    pq, metrics = [], []
    for t in range(matrix.shape[1]):
        for q in range(matrix.shape[0]):
            v = matrix[q, t]
            pq.append({"run_date": day(t).isoformat(), "pipeline": pipeline, "k": k, "question_id": f"q{q}",
                       "hit": v, "recall": v, "precision": v, "rr": v, "ndcg": v, "unjudged": 1 - v,
                       "gold_missing": 0})
        for m in REGISTRY.values():
            col = matrix[:, t] if m.higher_is_better else 1 - matrix[:, t]
            metrics.append({"run_date": day(t).isoformat(), "pipeline": pipeline, "k": k, "metric": m.name,
                            "value": float(np.nanmean(col)), "n_questions": matrix.shape[0]})
    return pq, metrics


def run_rows(n_days: int, feeds_ok: int = 3, feeds_failed: int = 0, **extra: Sequence) -> list[dict]:
    rows = [{"run_date": day(i).isoformat(), "feeds_ok": feeds_ok, "feeds_failed": feeds_failed}
            for i in range(n_days)]
    for column, values in extra.items():
        for row, v in zip(rows, values):
            row[column] = v
    return rows


def evaluate(matrix: np.ndarray | None = None, *, config: AlertsConfig = HIT, today: int | None = None,
             runs: Sequence[dict] | None = None, drift: Sequence[dict] = (), previous: pd.DataFrame | None = None,
             per_question: Sequence[dict] | None = None, metrics: Sequence[dict] | None = None,
             drift_config: DriftConfig | None = None) -> list[Alert]:
    pq, mt = outcomes(matrix) if matrix is not None else ([], [])
    n_days = matrix.shape[1] if matrix is not None else 1
    today = n_days - 1 if today is None else today
    return evaluate_alerts(
        day(today), frame(contract.METRICS, mt if metrics is None else metrics),
        frame(contract.PER_QUESTION, pq if per_question is None else per_question), frame(contract.DRIFT, drift),
        frame(contract.RUNS, run_rows(today + 1) if runs is None else runs), config, KS,
        frame(contract.ALERTS, []) if previous is None else previous, drift_config)


def fired(alerts: Sequence[Alert], rule: str) -> list[Alert]:
    return [a for a in alerts if a.rule == rule]


def bernoulli(p: np.ndarray, days: int, seed: int) -> np.ndarray:
    """Stationary outcomes: question q hits with probability p[q] on every day, independently."""
    rng = np.random.default_rng(seed)
    return (rng.random((len(p), days)) < np.asarray(p)[:, None]).astype(float)


# --- the contrast test and its null ---------------------------------------------------------------------


def test_contrast_sd_is_the_within_question_permutation_sd():
    """Differential: the closed-form sd against 20,000 Monte Carlo shuffles of each question's run dates."""
    rng = np.random.default_rng(1)
    values = (rng.random((30, 9)) < rng.uniform(0.3, 0.9, 30)[:, None]).astype(float)
    matrix = series.Matrix.of(pd.DataFrame(values, columns=pd.date_range("2026-01-01", periods=9)))
    days = list(matrix.days)
    test = series.contrast(matrix, days[-1:], [1.0], days[:-1], True)
    draws = np.empty(20_000)
    for i in range(draws.size):
        shuffled = rng.permuted(values, axis=1)
        draws[i] = shuffled[:, -1].mean() - shuffled[:, :-1].mean()
    assert test.sd == pytest.approx(draws.std(), rel=0.02)
    assert test.difference == pytest.approx(values[:, -1].mean() - values[:, :-1].mean())


def test_contrast_by_hand():
    # Two questions, three runs: today [0, 1], baseline runs [1, 1] and [1, 0].
    matrix = series.Matrix.of(pd.DataFrame([[1.0, 1.0, 0.0], [1.0, 0.0, 1.0]],
                                           columns=pd.date_range("2026-01-01", periods=3)))
    d = list(matrix.days)
    test = series.contrast(matrix, [d[2]], [1.0], d[:2], True)
    # c = (-1/2, -1/2, 1); sum c^2 = 1.5; each question's S = 2/3; Var = (2/3 + 2/3) * 1.5 / 2 / 2**2
    assert test.sd == pytest.approx(math.sqrt((2 / 3 + 2 / 3) * 1.5 / 2 / 4))
    assert (test.value, test.baseline) == (0.5, 0.75)
    assert test.p_value == pytest.approx(stats.norm.sf(0.25 / test.sd))


def test_a_question_that_never_changes_adds_no_noise():
    matrix = series.Matrix.of(pd.DataFrame([[1.0] * 8], columns=pd.date_range("2026-01-01", periods=8)))
    d = list(matrix.days)
    test = series.contrast(matrix, d[-1:], [1.0], d[:-1], True)
    assert (test.sd, test.z, test.p_value) == (0.0, 0.0, 0.5)


def test_questions_missing_a_run_are_left_out():
    matrix = series.Matrix.of(pd.DataFrame([[1.0, 1.0, 0.0], [1.0, np.nan, 1.0]],
                                           columns=pd.date_range("2026-01-01", periods=3)))
    d = list(matrix.days)
    assert series.contrast(matrix, [d[2]], [1.0], d[:2], True).n_questions == 1


def test_holm_by_hand():
    # sorted 0.01, 0.02, 0.04 -> 3 * 0.01, max(0.03, 2 * 0.02), max(0.04, 1 * 0.04)
    assert series.holm([0.04, 0.01, 0.02]) == pytest.approx([0.04, 0.03, 0.04])
    assert series.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])


def test_ewma_weights_sum_to_one_newest_heaviest():
    w = series.ewma_weights(4, 0.5)
    assert w == pytest.approx(np.array([0.0625, 0.125, 0.25, 0.5]) / 0.9375)


# --- the drop rule -------------------------------------------------------------------------------------


def test_baseline_never_contains_the_tested_runs():
    matrix = series.Matrix.of(pd.DataFrame(np.ones((3, 12)), columns=pd.date_range("2026-01-01", periods=12)))
    d = list(matrix.days)
    one = series.drop_contrast(matrix, d[-1], HIT, True)
    two = series.drop_contrast(matrix, d[-1], HIT, True, block=2)
    assert one.tested == (d[-1],) and one.baseline_days == tuple(d[4:11])
    assert two.tested == tuple(d[-2:]) and two.baseline_days == tuple(d[3:10])


def step(n_questions: int, days: int, before: float, after: float, change_day: int, seed: int = 0) -> np.ndarray:
    p = np.full(n_questions, before)
    values = bernoulli(p, days, seed)
    values[:, change_day:] = bernoulli(np.full(n_questions, after), days - change_day, seed + 1)
    return values


def test_a_sustained_drop_warns_on_its_day_and_alerts_once_confirmed():
    values = step(200, 12, 0.85, 0.55, change_day=10)
    (first,) = fired(evaluate(values[:, :11]), DROP)
    assert first.severity == WARNING and first.p_value < 0.01
    assert "an alert once it holds 2 runs" in first.message
    (second,) = fired(evaluate(values), DROP)
    assert second.severity == ALERT and "for 2 runs against the mean" in second.message
    assert second.baseline == pytest.approx(values[:, 3:10].mean())


def test_a_one_day_flicker_never_pages():
    values = step(200, 12, 0.85, 0.55, change_day=10)
    values[:, 11] = bernoulli(np.full(200, 0.85), 1, 7)[:, 0]
    assert [a.severity for a in fired(evaluate(values), DROP)] == []
    assert [a.severity for a in fired(evaluate(values[:, :11]), DROP)] == [WARNING]


def test_confirm_days_one_alerts_at_once():
    values = step(200, 11, 0.85, 0.55, change_day=10)
    (alert,) = fired(evaluate(values, config=dataclasses.replace(HIT, confirm_days=1)), DROP)
    assert alert.severity == ALERT


def test_a_large_drop_on_few_questions_is_not_significant():
    # 5 questions: one miss more is a 20% drop but well within question-to-question noise.
    values = np.array([[1, 1, 0, 1, 1, 1, 1, 1, 1, 0, 1]] * 5, dtype=float)
    values[:, -1] = [1, 1, 0, 1, 0]
    assert fired(evaluate(values), DROP) == []


def test_a_significant_but_small_change_does_not_fire():
    values = step(2000, 11, 0.80, 0.77, change_day=10)  # -4%: significant at 2000 questions, under 10%
    test = series.drop_contrast(series.question_matrix(frame(contract.PER_QUESTION, outcomes(values)[0]),
                                                       series.SeriesKey("hybrid", REGISTRY["hit"], 5)),
                                pd.Timestamp(day(10)), HIT, True)
    assert test.p_value < 0.001 and fired(evaluate(values), DROP) == []


def test_the_unjudged_share_fires_on_a_rise_not_on_a_fall():
    config = AlertsConfig(metrics=("unjudged@5",))
    worse = step(200, 12, 0.85, 0.55, change_day=10)  # unjudged = 1 - value rises
    better = step(200, 12, 0.55, 0.85, change_day=10)
    assert [a.severity for a in fired(evaluate(worse, config=config), DROP)] == [ALERT]
    assert fired(evaluate(better, config=config), DROP) == []


@pytest.mark.parametrize("n_questions, p", [(20, 0.8), (50, 0.7), (200, 0.9)])
def test_drop_warnings_on_a_null_stream_stay_within_alpha(n_questions, p):
    """Seeded null streams: stationary heterogeneous questions, 60 days x 20 streams per setting. The rate of
    drop warnings per series-day must be within a binomial tolerance of alpha (Holm over one series is alpha
    itself)."""
    rng = np.random.default_rng(n_questions)
    warnings = tested = 0
    for stream in range(20):
        probabilities = np.clip(rng.beta(p * 4, (1 - p) * 4, n_questions), 0.02, 0.98)
        values = bernoulli(probabilities, 60, seed=1000 * n_questions + stream)
        matrix = series.Matrix.of(pd.DataFrame(values, columns=pd.date_range("2026-01-01", periods=60)))
        for t in matrix.days[10:]:
            test = series.drop_contrast(matrix, t, HIT, True)
            tested += 1
            warnings += series.fires(test, 0.10, test.p_value, HIT.alpha)
    limit = stats.binom.ppf(0.999, tested, HIT.alpha)
    assert warnings <= limit, f"{warnings} warnings in {tested} null series-days (alpha {HIT.alpha})"


# --- slow drift ---------------------------------------------------------------------------------------


def test_a_slow_decline_is_caught_soon_after_it_crosses_the_threshold():
    n, days = 300, 60
    p = np.full((n, days), 0.85)
    p[:, 20:] *= 0.985 ** np.arange(1, days - 19)[None, :]  # -1.5% a day from day 20
    values = (np.random.default_rng(3).random((n, days)) < p).astype(float)
    crossing = 20 + int(np.ceil(np.log(0.9) / np.log(0.985)))  # the day the true mean is 10% down
    first = next(t for t in range(20, days)
                 if fired(evaluate(values[:, :t + 1], today=t, runs=run_rows(t + 1)), SLOW_DRIFT))
    assert crossing <= first + 2 and first - crossing <= 7
    (alert,) = fired(evaluate(values[:, :first + 1]), SLOW_DRIFT)
    assert alert.severity == ALERT and "reference" in alert.message and alert.baseline == pytest.approx(
        values[:, :20].mean())


def test_slow_drift_waits_for_its_reference_and_can_be_pinned():
    values = bernoulli(np.full(50, 0.8), 22, 4)
    matrix = series.question_matrix(frame(contract.PER_QUESTION, outcomes(values)[0]),
                                    series.SeriesKey("hybrid", REGISTRY["hit"], 5))
    d = list(matrix.days)
    assert series.slow_contrast(matrix, d[19], HIT, True) is None  # the 20th run completes the reference
    assert series.slow_contrast(matrix, d[20], HIT, True).baseline_days == tuple(d[:20])
    pinned = dataclasses.replace(HIT, reference_runs=3)
    assert series.slow_contrast(matrix, d[11], pinned, True, start=pd.Timestamp(d[5])).baseline_days == tuple(d[5:8])


# --- floors and bands ------------------------------------------------------------------------------------


def test_floor_follows_the_metrics_direction():
    values = np.full((10, 3), 0.5)
    config = AlertsConfig(metrics=("hit@5",), floors={"recall@5": 0.6, "unjudged@5": 0.4})
    alerts = fired(evaluate(values, config=config), FLOOR)
    # recall 0.5 is below 0.6 (fires); unjudged 0.5 is above its limit 0.4 (fires: more unjudged is worse)
    assert sorted(a.metric for a in alerts) == ["recall@5", "unjudged@5"]
    better = AlertsConfig(metrics=("hit@5",), floors={"unjudged@5": 0.6})
    assert fired(evaluate(values, config=better), FLOOR) == []


def test_the_band_drawn_is_the_band_tested():
    """A run past the drawn edge fires the drop rule (warning); a run inside it, with one watched series, does
    not: the chart's edge comes from the rule's own contrast."""
    values = step(100, 12, 0.85, 0.70, change_day=11, seed=5)
    pq = frame(contract.PER_QUESTION, outcomes(values)[0])
    key = series.SeriesKey("hybrid", REGISTRY["hit"], 5)
    bands = series.bands(pq, key, HIT, n_tests=1).set_index(contract.RUN_DATE)
    for t in range(8, 12):
        today = values[:, t].mean()
        past = today < bands.at[pd.Timestamp(day(t)), "edge"]
        warned = bool(fired(evaluate(values[:, :t + 1], runs=run_rows(t + 1)), DROP))
        assert past == warned, t


def test_the_reference_drawn_is_the_pinned_reference():
    """With alerts.reference_start pinned, the chart's reference mean is the slow-drift rule's own: the mean of
    the runs from the pinned start, not of the first runs."""
    values = step(40, 14, 0.9, 0.5, change_day=4, seed=3)
    pq = frame(contract.PER_QUESTION, outcomes(values)[0])
    key = series.SeriesKey("hybrid", REGISTRY["hit"], 5)
    pinned = AlertsConfig(metrics=("hit@5",), reference_runs=3, reference_start=day(6).isoformat())
    bands = series.bands(pq, key, pinned, n_tests=1).set_index(contract.RUN_DATE)
    tested = series.slow_contrast(series.question_matrix(pq, key), pd.Timestamp(day(13)), pinned, True,
                                  start=pd.Timestamp(day(6)))
    assert bands.at[pd.Timestamp(day(13)), "reference"] == pytest.approx(values[:, 6:9].mean())
    assert bands.at[pd.Timestamp(day(13)), "reference"] == pytest.approx(tested.baseline)


# --- corpus rules --------------------------------------------------------------------------------------


def drift_row(statistic: str, verdict: str, i_day: int = 0, start: int | None = None, **extra) -> dict:
    """A drift.csv row of run day `i_day` whose current window began on day `start` (the run's own day)."""
    return {"run_date": day(i_day).isoformat(), "statistic": statistic, "value": 0.6, "reference_date": "2026-02-28",
            "n_reference": 300, "n_current": 70, "reference_start": "2026-02-15",
            "current_start": day(i_day if start is None else start).isoformat(),
            "p_value": 0.004, "null_value": 0.1, "threshold": 0.25, "verdict": verdict, "detail": "", **extra}


def test_drift_alert_names_every_drifted_statistic_and_what_is_new():
    rows = [drift_row("novel_share", "drifted", detail="33 novel chunks, categories Sports 33"),
            drift_row("psi_mean", "stable"), drift_row("new_category_share", "drifted", value=0.56)]
    (alert,) = evaluate(drift=rows)
    assert (alert.rule, alert.p_value) == (DRIFT_RULE, 0.004)
    assert "novel_share 0.600" in alert.message and "new_category_share 0.560" in alert.message
    assert "psi_mean" not in alert.message and "Sports 33" in alert.message


def drift_days(verdicts: str, query: str = "", **extra) -> list[dict]:
    """drift.csv rows of one statistic per day: D drifted, s stable, n not enough data (1-day windows); the
    same for the query log's statistic in `query`."""
    names = {"D": "drifted", "s": "stable", "n": "not_enough_data"}
    return ([drift_row("novel_share", names[v], i, **extra) for i, v in enumerate(verdicts)]
            + [drift_row("query_novel_share", names[v], i, **extra) for i, v in enumerate(query)])


@pytest.mark.parametrize("verdicts, severity", [
    ("D", WARNING),  # drifted once: "drifted, not confirmed"
    ("DsD", ALERT),  # 2 of the last 3 disjoint windows
    ("DD", ALERT),
    ("DssD", WARNING),  # the first drift is 4 windows back
    ("DnnD", ALERT),  # runs without a verdict neither confirm nor break
    ("sDs", None),  # only a run whose own window drifted alerts
])
def test_a_drift_pages_once_confirmed_by_disjoint_windows(verdicts, severity):
    alerts = evaluate(drift=drift_days(verdicts), today=len(verdicts) - 1)
    assert [a.severity for a in alerts] == ([severity] if severity else [])
    if severity == WARNING:
        assert "Drifted, not confirmed" in alerts[0].message
    if severity == ALERT:
        assert re.search(r"Confirmed: drifted in 2 of the last [23] disjoint windows", alerts[0].message)


def test_overlapping_windows_do_not_confirm_each_other():
    # Day 1's window grew back over day 0 (too few new chunks on day 1 alone): the same burst seen twice.
    rows = [drift_row("novel_share", "drifted", 0), drift_row("novel_share", "drifted", 1, start=0)]
    (alert,) = evaluate(drift=rows, today=1)
    assert alert.severity == WARNING and "now 1 of the last 1 disjoint window" in alert.message
    # A window beginning the day after day 0's ended is disjoint from it.
    rows[1] = drift_row("novel_share", "drifted", 2, start=1)
    (alert,) = evaluate(drift=rows, today=2)
    assert alert.severity == ALERT


def test_a_one_day_drift_pages_at_the_page_level():
    config = DriftConfig()
    (alert,) = evaluate(drift=[drift_row("novel_share", "drifted", p_value=0.0017)], drift_config=config)
    assert alert.severity == ALERT and "below the page level 0.002" in alert.message
    (alert,) = evaluate(drift=[drift_row("novel_share", "drifted", p_value=0.002)], drift_config=config)
    assert alert.severity == WARNING  # the page level is strict: p < page_alpha
    every_day = dataclasses.replace(config, confirm_windows=1)  # the rule before confirmation: every drift pages
    assert [a.severity for a in evaluate(drift=drift_days("D"), drift_config=every_day)] == [ALERT]


def test_a_window_that_paged_confirms_no_later_window():
    """A burst that paged on its own day (p below the page level) is not one of the 2 drifted windows of 3 that
    confirm an ordinary excursion two days later: that one stays a warning. Its confirmation by two drifted
    windows that did not page is unchanged, and a drift confirmed by two windows confirms no third either."""
    burst = drift_row("novel_share", "drifted", 0, p_value=0.0017)
    excursion = [burst, drift_row("novel_share", "stable", 1), drift_row("novel_share", "drifted", 2)]
    (alert,) = evaluate(drift=excursion, today=2)
    assert alert.severity == WARNING and "now 1 of the last 3 disjoint windows" in alert.message
    (alert,) = evaluate(drift=drift_days("DsD"), today=2)  # the same days, no page on day 0
    assert alert.severity == ALERT and "(2026-03-03, 2026-03-01)" in alert.message
    (alert,) = evaluate(drift=drift_days("DDsD"), today=3)  # day 1 paged (with day 0): day 3 stands alone
    assert alert.severity == WARNING


def test_psi_and_ks_alone_page_by_confirmation_only():
    """PSI and KS at the page level on one day are a warning (a day of long documents written together sits apart
    on the principal components); a content statistic at that level pages; with every statistic allowed (the rule
    before), PSI alone pages too."""
    shape = [drift_row("psi_mean", "drifted", p_value=0.0017), drift_row("ks_max", "drifted", p_value=0.0017)]
    (alert,) = evaluate(drift=shape)
    assert alert.severity == WARNING
    (alert,) = evaluate(drift=[*shape, drift_row("novel_share", "drifted", p_value=0.0017)])
    assert alert.severity == ALERT and "below the page level" in alert.message
    before = dataclasses.replace(DriftConfig(), page_statistics=contract.DRIFT_FAMILY)
    (alert,) = evaluate(drift=shape, drift_config=before)
    assert alert.severity == ALERT


def test_the_query_log_and_the_corpus_confirm_only_themselves():
    rows = drift_days("Ds", query="sD")  # corpus drifted on day 0, queries on day 1
    (alert,) = evaluate(drift=rows, today=1)
    assert alert.severity == WARNING
    (alert,) = evaluate(drift=drift_days("Ds", query="DD"), today=1)
    assert alert.severity == ALERT


def test_a_confirmed_drift_after_its_warning_is_notified():
    config = DriftConfig()
    rows = drift_days("DD")
    warning = evaluate(drift=[r for r in rows if r["run_date"] == day(0).isoformat()], today=0,
                       runs=run_rows(1), drift_config=config)
    (alert,) = evaluate(drift=rows, today=1, runs=run_rows(2), previous=alerts_frame(warning), drift_config=config)
    assert alert.severity == ALERT and alert.new


def test_confirmation_pages_at_most_its_bound_on_a_seeded_null():
    """A null stream of daily runs whose current windows are 3 days long, as on a quiet feed where a window grows
    until it holds min_current chunks: each window overlaps the two before it. A window drifts when one of its days
    brought an unusual sample (a day's draw u below q, with q set so that a window drifts with probability alpha,
    and at the page level, u below r, with probability page_alpha): overlapping windows see the same days, so
    their verdicts are correlated, as real ones are. Disjoint windows share no day, so the share of days that page
    stays within the rule's bound page_alpha + alpha * (1 - (1 - alpha) ** (confirm_of - 1)) for
    confirm_windows = 2. A rule that also counted overlapping windows would let one unusual day confirm itself:
    it pages on about 2/3 of the drifted days, five times the bound."""
    from pipeline.alerts import DriftWindow, confirm_drift

    config = DriftConfig()
    assert (config.confirm_windows, config.confirm_of) == (2, 3)  # the bound below is for these
    rng = np.random.default_rng(5)
    n, length = 100_000, 3
    days = pd.date_range("1700-01-01", periods=n)  # pandas' dates end in 2262
    q = 1 - (1 - config.alpha) ** (1 / length)  # P(a window of `length` days drifts) = alpha
    r = 1 - (1 - config.page_alpha) ** (1 / length)  # P(it drifts at the page level) = page_alpha
    u = rng.random(n)
    lowest = np.minimum.reduce([np.concatenate([np.ones(lag), u[:n - lag]]) for lag in range(length)])
    windows = [DriftWindow(d, d - pd.Timedelta(days=length - 1), bool(x < q),
                           (0.0 if x < r else config.alpha / 2) if x < q else math.inf)
               for d, x in zip(days, lowest)]
    pages = sum(confirm_drift(windows[max(0, i - 30):i + 1], days[i], config).confirmed for i in range(n))
    bound = config.page_alpha + config.alpha * (1 - (1 - config.alpha) ** (config.confirm_of - 1))
    assert np.mean(lowest < q) == pytest.approx(config.alpha, rel=0.2)  # each window alone is a fair null
    # A day's page depends on the draws of the days its windows share with its neighbours' (2 * length - 1 of
    # them), so pages cluster: the tolerance counts that many times fewer independent days (over 12 seeds at
    # n = 40,000 the share's standard deviation was 0.0009, this formula's 0.0009).
    assert pages / n <= bound + 3 * math.sqrt((2 * length - 1) * bound / n)
    assert pages / n > 0.5 * bound  # and the rule does page: the bound is nearly reached


@pytest.mark.parametrize("verdict", ["stable", "not_enough_data", "context"])
def test_no_drift_alert_without_a_drifted_verdict(verdict):
    assert evaluate(drift=[drift_row("novel_share", verdict)]) == []


def test_deleting_a_large_share_of_the_corpus_alerts():
    runs = run_rows(2, docs_total=[1000, 700], docs_deleted=[0, 300])
    (alert,) = evaluate(runs=runs, today=1)
    assert (alert.rule, alert.severity) == (DELETED, ALERT) and "30%" in alert.message
    calm = run_rows(2, docs_total=[1000, 990], docs_deleted=[0, 20])
    assert evaluate(runs=calm, today=1) == []


def test_an_embedder_change_alerts_and_a_settings_change_warns():
    swap = run_rows(2, model=["minilm", "minilm@128"], config_hash=["a", "b"])
    (alert,) = evaluate(runs=swap, today=1)
    assert (alert.rule, alert.severity, alert.metric) == (CONFIG_CHANGE, ALERT, "model")
    settings = run_rows(2, model=["minilm", "minilm"], config_hash=["a", "b"])
    assert [(a.rule, a.severity) for a in evaluate(runs=settings, today=1)] == [(CONFIG_CHANGE, WARNING)]


def question_rows(gold_missing: Sequence[int], i_day: int = 0) -> list[dict]:
    return [{"run_date": day(i_day).isoformat(), "pipeline": pipeline, "k": k, "question_id": f"q{q}",
             "recall": 1.0, "rr": 1.0, "hit": 1.0, "gold_missing": missing}
            for pipeline in ("bm25", "hybrid") for k in (1, 5) for q, missing in enumerate(gold_missing)]


def test_gold_missing_counts_documents_once_and_names_the_questions():
    missing = [0, 2, 0, 1, 1, 1, 1, 3]
    (alert,) = evaluate(per_question=question_rows(missing), metrics=[])
    assert (alert.rule, alert.severity, alert.pipeline) == (GOLD_MISSING, ALERT, "")
    assert alert.value == sum(missing)  # not multiplied by pipelines and ks
    assert alert.message.startswith(f"{sum(missing)} relevant documents of the gold set are missing from the "
                                    "corpus, for 6 questions (q1, q3, q4, q5, q6 and 1 more)")


def test_gold_missing_only_counts_today():
    rows = question_rows([0, 0], i_day=1) + question_rows([1, 1], i_day=0)
    assert evaluate(per_question=rows, metrics=[], today=1) == []


@pytest.mark.parametrize("ok, failed, severity", [(0, 3, ALERT), (2, 1, WARNING), (3, 0, None)])
def test_feeds_failed(ok, failed, severity):
    alerts = evaluate(runs=run_rows(1, feeds_ok=ok, feeds_failed=failed))
    assert [(a.rule, a.severity, a.value) for a in alerts] == ([] if severity is None else
                                                              [(FEEDS_FAILED, severity, failed)])


def test_has_alerts_ignores_warnings():
    warning = evaluate(runs=run_rows(1, feeds_ok=2, feeds_failed=1))
    alert = evaluate(runs=run_rows(1, feeds_ok=0, feeds_failed=1))
    assert not has_alerts(warning) and has_alerts(alert) and not has_alerts([])


# --- ongoing conditions ------------------------------------------------------------------------------


def daily_feeds(failed: Sequence[int], tmp_path) -> list[list[Alert]]:
    """Each day as the job runs it: evaluate against the store, then write that day's alerts."""
    out = []
    for i in range(len(failed)):
        runs = [{"run_date": day(j).isoformat(), "feeds_ok": 0 if failed[j] > 1 else 2, "feeds_failed": failed[j]}
                for j in range(i + 1)]
        alerts = evaluate(runs=runs, today=i, previous=store.read(tmp_path, contract.ALERTS))
        store.replace_date(tmp_path, contract.ALERTS, day(i), alerts_frame(alerts))
        out.append(alerts)
    return out


def test_same_condition_on_consecutive_runs_carries_its_start(tmp_path):
    days = daily_feeds([0, 3, 3, 3], tmp_path)
    assert [[(a.since, a.new) for a in alerts] for alerts in days] == [
        [], [(day(1).isoformat(), True)], [(day(1).isoformat(), False)], [(day(1).isoformat(), False)]]
    stored = store.read(tmp_path, contract.ALERTS)
    assert list(stored.columns) == list(contract.ALERTS_COLUMNS)
    assert list(is_new(stored)) == [True, False, False]


def test_a_flicker_continues_its_streak_and_a_condition_back_after_three_quiet_runs_is_new(tmp_path):
    days = daily_feeds([3, 0, 0, 3, 0, 0, 0, 3], tmp_path)
    assert [[a.new for a in alerts] for alerts in days] == [[True], [], [], [False], [], [], [], [True]]
    assert days[3][0].since == day(0).isoformat() and days[7][0].since == day(7).isoformat()


def test_an_escalation_is_new_and_a_deescalation_ongoing(tmp_path):
    days = daily_feeds([1, 3, 1], tmp_path)  # warning, alert, warning
    assert [[(a.severity, a.new) for a in alerts] for alerts in days] == [
        [(WARNING, True)], [(ALERT, True)], [(WARNING, False)]]
    assert days[2][0].since == day(0).isoformat()


def test_rerunning_a_date_ignores_that_dates_own_stored_alerts():
    runs = run_rows(1, feeds_ok=0, feeds_failed=2)
    first = evaluate(runs=runs)
    assert first and evaluate(runs=runs, previous=alerts_frame(first)) == first


def test_alert_row_is_the_csv_contract():
    (alert,) = evaluate(runs=run_rows(1, feeds_ok=0, feeds_failed=2))
    assert tuple(f.name for f in dataclasses.fields(Alert)) == contract.ALERTS_COLUMNS
    assert tuple(alert.row()) == contract.ALERTS_COLUMNS
    assert list(alerts_frame([]).columns) == list(contract.ALERTS_COLUMNS)


def test_the_monte_carlo_null_matches_full_enumeration():
    """Differential: 3 questions x 3 runs, every one of the (3!)^3 = 216 within-question shuffles enumerated;
    the seeded Monte Carlo p-value lands within sampling error of the exact one (and the normal tail does not:
    at 3 questions it is an approximation only)."""
    import itertools

    values = np.array([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    matrix = series.Matrix.of(pd.DataFrame(values, columns=pd.date_range("2026-01-01", periods=3)))
    d = list(matrix.days)
    test = series.contrast(matrix, d[-1:], [1.0], d[:-1], True)
    observed = -test.difference
    harms = []
    for perms in itertools.product(itertools.permutations(range(3)), repeat=3):
        shuffled = np.array([row[list(p)] for row, p in zip(values, perms)])
        harms.append(-(shuffled[:, -1].mean() - shuffled[:, :-1].mean()))
    exact = np.mean(np.array(harms) >= observed - 1e-12)
    assert test.permutation_p(20_000, seed=0) == pytest.approx(exact, abs=0.01)


def test_the_monte_carlo_null_stops_early_only_above_the_level():
    """With stop_above, the draws stop once the full draw's p is sure to exceed the level: the decision at
    that level is the full draw's, for a clear null (stopped, p above the level) and a clear shift alike."""
    rng = np.random.default_rng(3)
    values = rng.binomial(1, 0.6, size=(50, 12)).astype(float)
    shifted = values.copy()
    shifted[:, -1] = rng.binomial(1, 0.2, size=50)
    for block, drop in ((values, False), (shifted, True)):
        matrix = series.Matrix.of(pd.DataFrame(block, columns=pd.date_range("2026-01-01", periods=12)))
        d = list(matrix.days)
        test = series.contrast(matrix, d[-1:], [1.0], d[:-1], True)
        full = test.permutation_p(5000, seed=0)
        early = test.permutation_p(5000, seed=0, stop_above=0.01)
        assert (full < 0.01) == (early < 0.01) == drop
        if not drop:
            assert early > 0.01
        else:
            assert early == full


def test_a_pipelines_drop_is_one_incident_whichever_series_shows_it():
    """mrr@5 of bm25 alerted yesterday: ndcg@5 of bm25 today continues that incident (not paged again);
    ndcg@5 of dense is a new one; a floor (per series) keeps its own key."""
    runs = frame(contract.RUNS, run_rows(2))
    yesterday = Alert(day(0).isoformat(), DROP, "bm25", "mrr@5", 0.5, 0.7, -28.0, 10.0, ALERT, "x",
                      since=day(0).isoformat())
    previous = alerts_frame([yesterday]).astype({contract.RUN_DATE: "datetime64[ns]"})
    today = [dataclasses.replace(yesterday, run_date=day(1).isoformat(), metric="ndcg@5", since=""),
             dataclasses.replace(yesterday, run_date=day(1).isoformat(), pipeline="dense", metric="ndcg@5", since=""),
             dataclasses.replace(yesterday, run_date=day(1).isoformat(), rule=FLOOR, metric="ndcg@5", since="")]
    marked = mark_ongoing(today, pd.Timestamp(day(1)), runs, previous)
    assert [(a.pipeline, a.rule, a.since, a.new) for a in marked] == [
        ("bm25", DROP, day(0).isoformat(), False), ("dense", DROP, day(1).isoformat(), True),
        ("bm25", FLOOR, day(1).isoformat(), True)]


def test_normal_tails_from_scipy_special_equal_scipy_stats_norm():
    """series takes the normal tails from scipy.special (scipy.stats costs a second to import): the same
    numbers as scipy.stats.norm.sf and .isf, to the last bit, over the z and alpha a rule meets."""
    import numpy as np
    from scipy import stats

    from pipeline import series

    for alpha in (0.5, 0.1, 0.05, 0.01, 1e-3, 1e-6):
        for n_tests in (1, 3, 12, 200):
            assert series.critical_z(alpha, n_tests) == float(stats.norm.isf(alpha / n_tests))
    for z in np.linspace(-8, 12, 401):
        assert float(series.special.ndtr(-z)) == float(stats.norm.sf(z))
