"""The alert bench's pure parts: the simulated stream generator, the replay through the real rules, and
what it counts."""

from __future__ import annotations

import math
from datetime import date

import numpy as np
import pytest

from bench import _streams
from bench._streams import (HistoryWindow, StreamSpec, decline_multiplier, draw_first_ranks, question_hit_rates,
                            replay_alerts, run_dates, simulated_history)
from bench.alerts import Tally, _near_copy, first_detection, is_retrieval, main
from pipeline.alerts import Alert
from pipeline.contract import ALERT, WARNING
from pipeline.config import AlertsConfig, RetrievalConfig

KS = RetrievalConfig().k


def alert(day: str, severity: str = ALERT, since: str = "", pipeline: str = "dense") -> Alert:
    return Alert(day, "drop", pipeline, "hit@5", 0.5, 0.8, -37.5, 10.0, severity, "x", since or day)


@pytest.mark.parametrize("p", [0.5, 0.8, 0.95])
def test_question_hit_rates_have_mean_p_and_spread(p):
    rates = question_hit_rates(50, p, np.random.default_rng(0))
    assert abs(rates.mean() - p) < 0.01  # stratified quantiles: only the quadrature error is left
    assert 0 <= rates.min() < rates.max() <= 1 and rates.std() > 0.1  # heterogeneous questions


def test_simulated_stream_gives_the_requested_mean_hit_rate():
    spec = StreamSpec(100, 0.8, days=20)
    metrics = simulated_history(spec).metrics
    hit5 = metrics[(metrics["metric"] == "hit") & (metrics["k"] == 5)]
    trials = spec.n_questions * spec.days
    # Heterogeneous rates only shrink the variance of the mean below the binomial p(1-p)/trials.
    tolerance = 4 * math.sqrt(0.8 * 0.2 / trials)
    for pipeline, offset in _streams.PIPELINE_OFFSETS.items():
        mean = hit5.loc[hit5["pipeline"] == pipeline, "value"].mean()
        assert abs(mean - (0.8 + offset)) < tolerance, pipeline
    assert set(hit5["n_questions"]) == {100}
    assert len(hit5) == spec.days * len(_streams.PIPELINE_OFFSETS)


def test_first_ranks_fall_in_the_top_5_at_the_hit_rate():
    rng = np.random.default_rng(1)
    ranks = draw_first_ranks(np.full(20000, 0.7), rng)
    assert abs(np.mean((ranks >= 1) & (ranks <= 5)) - 0.7) < 4 * math.sqrt(0.7 * 0.3 / 20000)
    assert np.mean(ranks == 0) == pytest.approx(0.3 * _streams.MISS_SHARES[2], abs=0.02)
    assert ranks.max() <= _streams.DEPTH


def test_decline_multiplier_starts_on_the_decline_day():
    start = _streams.DECLINE_START
    assert decline_multiplier(start - 2) == 1.0
    assert decline_multiplier(start - 1) == _streams.DECLINE_FACTOR
    assert decline_multiplier(start + 9) == _streams.DECLINE_FACTOR ** 11
    crossing = _streams.crossing_day()
    assert decline_multiplier(crossing) <= 0.9 < decline_multiplier(crossing - 1)


def test_history_until_is_the_prefix_and_the_window_keeps_first_and_last_runs():
    history = simulated_history(StreamSpec(5, 0.8, days=12))
    days = run_dates(12)
    seen = history.until(days[5])
    assert seen.runs["run_date"].max() == np.datetime64(days[5])
    assert len(seen.per_question) == 6 * len(history.per_question) // 12
    kept = history.until(days[9], HistoryWindow(first_runs=2, last_runs=3))
    assert [d.date() for d in kept.metrics["run_date"].drop_duplicates()] == [*days[:2], *days[7:10]]


def test_a_tiny_null_stream_runs_through_the_real_rules():
    spec = StreamSpec(20, 0.8, days=20)
    fired = replay_alerts(simulated_history(spec), run_dates(spec.days), AlertsConfig(), KS)
    assert {a.run_date for a in fired} <= {d.isoformat() for d in run_dates(spec.days)}
    assert {a.pipeline for a in fired if is_retrieval(a)} <= set(_streams.PIPELINE_OFFSETS)
    tally = Tally.of(fired, spec.days)
    assert tally.alerts == sum(a.new and a.severity == ALERT for a in fired)


def test_a_collapse_warns_on_its_day_then_alerts_once_confirmed(monkeypatch):
    """Hit rates cut to a third on day 10: the drop rule warns that day and alerts on day 11 (confirm_days 2),
    which needs the alerts of earlier days handed back as alerts.csv would hold them; on day 12 the alert is
    ongoing."""
    monkeypatch.setattr(_streams, "DECLINE_START", 10)
    monkeypatch.setattr(_streams, "DECLINE_FACTOR", 0.3)
    spec = StreamSpec(50, 0.9, days=12, decline=True)
    days = run_dates(spec.days)
    fired = replay_alerts(simulated_history(spec), days, AlertsConfig(), KS)
    day10, day11, day12 = (d.isoformat() for d in days[9:12])
    warned = {a.key for a in fired if a.run_date == day10 and a.new and a.rule == "drop" and a.severity == WARNING}
    assert warned
    paged = {a.key for a in fired if a.run_date == day11 and a.new and a.severity == ALERT}
    assert warned & paged
    assert any(a.key in paged and not a.new for a in fired if a.run_date == day12)


def test_replay_stops_on_the_first_day_the_predicate_holds(monkeypatch):
    monkeypatch.setattr(_streams, "DECLINE_START", 5)
    monkeypatch.setattr(_streams, "DECLINE_FACTOR", 0.2)
    spec = StreamSpec(30, 0.9, days=10, decline=True)
    days = run_dates(spec.days)
    fired = replay_alerts(simulated_history(spec), days, AlertsConfig(), KS,
                          stop=lambda a: a.new and is_retrieval(a) and a.run_date >= days[4].isoformat())
    assert fired and max(a.run_date for a in fired) == days[4].isoformat()


def test_tally_counts_new_alerts_per_90_days():
    fired = [alert("2025-01-01"), alert("2025-01-02", since="2025-01-01"),
             alert("2025-01-03", severity=WARNING), alert("2025-01-04")]
    tally = Tally.of(fired, days=180)
    assert (tally.alerts, tally.warnings, tally.rules, tally.days_alerting) == (2, 1, {"drop": 2}, 3)
    assert tally.alerts_per_90 == 2 * 90 / 180


def test_first_detection_skips_ongoing_and_earlier_days():
    fired = [alert("2025-01-01"), alert("2025-01-03", since="2025-01-01"),
             alert("2025-01-05", severity=WARNING), alert("2025-01-04", pipeline="")]
    first = first_detection(fired, is_retrieval, date(2025, 1, 2))
    assert first is not None and first.run_date == "2025-01-05"
    assert first_detection(fired, is_retrieval, date(2025, 1, 6)) is None


def test_near_copy_changes_a_few_words():
    assert (_near_copy("At least 12 people are killed in 2025.", 0)
            == "At reportedly least 13 people are killed in 2026. according to local media.")


def test_bench_without_the_news_stream_exits_2(tmp_path, capsys):
    assert main(["--news", str(tmp_path / "absent"), "--out", str(tmp_path / "out.json")]) == 2
    assert f"{tmp_path / 'absent'}: the real news stream is not there" in capsys.readouterr().err


def test_tallies_of_several_data_directories_pool_their_days_and_counts():
    a = Tally(days=90, alerts=2, warnings=1, rules={"drop": 1, "slow_drift": 1}, days_alerting=5, pages=2)
    b = Tally(days=270, alerts=1, warnings=0, rules={"drop": 1}, days_alerting=1, pages=1)
    pooled = Tally.pooled([a, b])
    assert (pooled.days, pooled.alerts, pooled.pages, pooled.rules) == (360, 3, 3, {"drop": 2, "slow_drift": 1})
    assert pooled.pages_per_90 == 0.75 and a.pages_per_90 == 2.0
