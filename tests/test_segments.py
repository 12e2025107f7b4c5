"""Segments: a decline confined to one segment alerts naming it (the overall rules stay quiet), small segments are
not tested, Holm over many null segments keeps quiet, the paired test against scipy, and a run writes the series."""

from __future__ import annotations

import dataclasses
import json
import re
from datetime import date

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from pipeline import contract, segments, store
from pipeline.alerts import evaluate_alerts
from pipeline.config import AlertsConfig
from pipeline.contract import DROP, SEGMENT_SLOW_DRIFT, SLOW_DRIFT
from pipeline.gold import GoldQuestion
from tests.test_alerts import HIT, KS, day, evaluate, frame, outcomes, run_rows

N_QUESTIONS, N_DAYS = 40, 40


def null_history(seed: int, flicker: float = 0.03, hits: float = 0.8) -> np.ndarray:
    """Questions x days of hit@5: each question hits (probability `hits`) or not, seeded, and flips on a day with
    probability `flicker` (back the next day)."""
    rng = np.random.default_rng(seed)
    state = (rng.random(N_QUESTIONS) < hits).astype(float)
    values = np.repeat(state[:, None], N_DAYS, axis=1)
    flips = rng.random(values.shape) < flicker
    values[flips] = 1 - values[flips]
    return values


def qid(q: int) -> str:
    return f"q{q}"


PARAPHRASE = tuple(range(12))  # the segment that declines


def declining() -> tuple[np.ndarray, dict[str, tuple[str, ...]]]:
    """12 paraphrase questions of 40 (10 hit at first): from days 22 to 27 on, six of them miss every other run; the
    other 28 flat. A decline of many questions of a segment: a few questions losing their hits cannot say "this
    segment" (3 of 40 falling all inside a segment of 12 happens by chance 2% of the time)."""
    values = null_history(1, hits=0.95)
    values[list(PARAPHRASE), :] = np.repeat([[1.0]] * 10 + [[0.0]] * 2, N_DAYS, axis=1)
    for q in range(6):
        values[q, 22 + q::2] = 0.0
    members = {"tag:paraphrase": tuple(map(qid, PARAPHRASE)),
               "tag:easy": tuple(qid(q) for q in range(12, N_QUESTIONS))}
    return values, members


def per_question(values: np.ndarray) -> pd.DataFrame:
    return frame(contract.PER_QUESTION, outcomes(values)[0])


def test_a_decline_confined_to_one_segment_alerts_naming_it_while_the_overall_rules_stay_quiet():
    values, members = declining()
    today = N_DAYS - 1
    overall = evaluate(values, config=HIT)
    assert not [a for a in overall if a.rule in (DROP, SLOW_DRIFT)]
    # The overall mean fell, under its practical threshold (10%): the decline is hidden in it.
    means = values.mean(axis=0)
    assert 0.05 < 1 - means[-10:].mean() / means[:20].mean() < 0.10
    found = segments.segment_alerts(day(today).isoformat(), pd.Timestamp(day(today)), per_question(values), members,
                                    HIT, KS)
    assert [(a.rule, a.metric) for a in found] == [(SEGMENT_SLOW_DRIFT, "hit@5 tag:paraphrase")]
    alert = found[0]
    assert alert.severity == contract.ALERT
    assert re.match(r"paraphrase questions \(12\): hit@5 0\.83 → 0\.5\d since 2026-03-01; the other 28 flat \(hybrid,",
                    alert.message), alert.message
    # Caught within days of the first lost hit (day 22): the first run a segment alert fires on.
    frame_ = per_question(values)
    first = next(t for t in range(20, N_DAYS)
                 if segments.segment_alerts("d", pd.Timestamp(day(t)), frame_, members, HIT, KS))
    assert 22 < first <= 26
    # Through evaluate_alerts with the run's other alerts: marked as a new condition like them.
    pq, mt = outcomes(values)
    every = evaluate_alerts(day(today), frame(contract.METRICS, mt), frame(contract.PER_QUESTION, pq),
                            frame(contract.DRIFT, []), frame(contract.RUNS, run_rows(N_DAYS)), HIT, KS,
                            frame(contract.ALERTS, []), more=found)
    assert [a for a in every if a.rule == SEGMENT_SLOW_DRIFT] == [
        dataclasses.replace(alert, since=day(today).isoformat())]


def test_no_segment_alert_when_the_rest_moved_too():
    """A decline of the whole set is the overall rules' concern: with eight of the other 28 questions losing their hits
    as well, the rest is not flat and the segment stays quiet (it would otherwise page once per segment)."""
    values, members = declining()
    today = N_DAYS - 1
    alone = segments.segment_alerts(day(today).isoformat(), pd.Timestamp(day(today)), per_question(values), members,
                                    HIT, KS)
    assert [a for a in alone if a.metric.endswith("tag:paraphrase")]
    values[12:20, 25:] = 0.0
    found = segments.segment_alerts(day(today).isoformat(), pd.Timestamp(day(today)), per_question(values), members,
                                    HIT, KS)
    assert not [a for a in found if a.metric.endswith("tag:paraphrase")]


def test_a_segment_under_the_minimum_n_is_not_tested():
    values, _ = declining()
    small = {"tag:paraphrase": tuple(map(qid, range(7)))}  # 7 questions, six of them decline
    today = pd.Timestamp(day(N_DAYS - 1))
    frame_ = per_question(values)
    assert segments.segment_tests(frame_, small, HIT, KS, today) == []
    assert segments.segment_alerts("d", today, frame_, small, HIT, KS) == []
    lower = AlertsConfig(metrics=("hit@5",), segment_min_n=7)
    assert {t.key.segment for t in segments.segment_tests(frame_, small, lower, KS, today)} == {"tag:paraphrase"}
    assert [a.rule for a in segments.segment_alerts("d", today, frame_, small, lower, KS)] == [SEGMENT_SLOW_DRIFT]


def test_a_segment_of_every_question_is_the_overall_series_and_not_tested_again():
    values, _ = declining()
    every = {"source:peps": tuple(map(qid, range(N_QUESTIONS)))}
    assert segments.segment_tests(per_question(values), every, HIT, KS, pd.Timestamp(day(N_DAYS - 1))) == []


def test_holm_over_many_null_segments_raises_no_alert():
    """Seeded null histories (no change), 14 overlapping segments as the PEP gold set's tags make them, four watched
    series: the last 10 runs of three streams raise no segment alert."""
    rng = np.random.default_rng(3)
    sizes = (25, 15, 11, 9, 8, 8, 8, 10, 12, 14, 16, 20, 30, 8)
    members = {f"tag:t{i}": tuple(qid(q) for q in sorted(rng.choice(N_QUESTIONS, size, replace=False)))
               for i, size in enumerate(sizes)}
    config = AlertsConfig()
    fired, tested = [], 0
    for seed in range(3):
        frame_ = per_question(null_history(100 + seed, flicker=0.08))
        for t in range(N_DAYS - 10, N_DAYS):
            today = pd.Timestamp(day(t))
            found = segments.segment_tests(frame_, members, config, KS, today)
            tested += len(found)
            fired += [t for t in found if t.fires(config)]
    assert tested == 3 * 10 * len(sizes) * 4 * 2  # both rules' runs
    assert fired == []


@pytest.mark.parametrize("higher_is_better", [True, False])
def test_the_interaction_test_is_the_independent_permutation_test_scipy_computes(higher_is_better):
    """The segment x rest interaction: the permutation p of mean(d | segment) - mean(d | rest) with the labels
    relabelled among the questions is scipy's independent-samples permutation test (exact here: 2002 relabellings)."""
    rng = np.random.default_rng(5)
    d = rng.normal(0, 0.2, 14)
    d[:5] -= 0.15  # the segment's questions fell a little more
    inside = np.arange(14) < 5
    exact = stats.permutation_test((d[inside], d[~inside]), lambda x, y: np.mean(x) - np.mean(y),
                                   permutation_type="independent", n_resamples=np.inf,
                                   alternative="less" if higher_is_better else "greater").pvalue
    [p] = segments.interaction_p(d, [inside], higher_is_better, 40_000, seed=0)
    assert p == pytest.approx(exact, abs=0.005)
    assert 0.005 < exact < 0.995  # a p that can tell a wrong direction or statistic


def test_the_interaction_tests_null_holds_on_autocorrelated_streams():
    """A null with strong day-to-day autocorrelation (every question's value a random walk, no segment effect): the
    segment x rest test, which conditions on each question's change, rejects at about its level, and never more."""
    rng = np.random.default_rng(7)
    inside = np.arange(40) < 12
    rejected = 0
    for _ in range(400):
        walks = np.clip(0.6 + np.cumsum(rng.normal(0, 0.05, (40, 30)), axis=1), 0, 1)
        d = walks[:, -5:].mean(axis=1) - walks[:, :20].mean(axis=1)
        [p] = segments.interaction_p(d, [inside], True, 999, seed=int(rng.integers(1 << 30)))
        rejected += p < 0.05
    assert rejected / 400 < 0.05 + 3 * (0.05 * 0.95 / 400) ** 0.5  # the level, within 3 binomial sds


def test_membership_from_tags_and_the_gold_documents_source_and_category():
    gold = [GoldQuestion("a", "?", {"d1": 1}, ("paraphrase",)), GoldQuestion("b", "?", {"d2": 2, "d3": 0}, ()),
            GoldQuestion("c", "?", {"d1": 1, "d2": 1}, ("paraphrase", "easy"))]
    documents = {"d1": ("peps", "Standards Track"), "d2": ("peps", ""), "d3": ("news", "Process")}
    assert segments.membership(gold, documents) == {
        "category:Standards Track": ("a", "c"), "source:peps": ("a", "b", "c"), "tag:easy": ("c",),
        "tag:paraphrase": ("a", "c")}


def test_a_run_writes_the_segment_series_and_members(e2e_config, embedder):
    from pipeline.job import run_day

    gold = e2e_config.gold
    lines = [json.loads(line) for line in gold.read_text().splitlines()]
    for i, q in enumerate(lines):
        q["tags"] = ["easy" if i % 2 else "paraphrase"]
    gold.write_text("".join(json.dumps(q) + "\n" for q in lines))
    run_day(e2e_config, date(2026, 11, 4), embedder=embedder, notify=False)
    data = e2e_config.data_dir
    members = store.read(data, contract.SEGMENT_QUESTIONS)
    written = store.read(data, contract.SEGMENTS)
    by_segment = members.groupby(contract.SEGMENT)[contract.QUESTION_ID].apply(set).to_dict()
    assert by_segment["tag:paraphrase"] == {q["id"] for q in lines[0::2]}
    assert by_segment["tag:easy"] == {q["id"] for q in lines[1::2]}
    assert by_segment["source:ledger"] == {q["id"] for q in lines}
    assert any(s.startswith("category:") for s in by_segment)
    hits = written[(written[contract.METRIC] == "hit") & (written[contract.K] == 5)
                   & (written[contract.PIPELINE] == "hybrid")].set_index(contract.SEGMENT)
    pq = store.read_per_question(data)
    pq = pq[(pq[contract.PIPELINE] == "hybrid") & (pq[contract.K] == 5)].set_index(contract.QUESTION_ID)
    for segment, ids in by_segment.items():
        assert hits.loc[segment, "n_questions"] == len(ids)
        assert hits.loc[segment, contract.VALUE] == pytest.approx(pq.loc[sorted(ids), "hit"].mean())
    # Re-running the date replaces its rows.
    run_day(e2e_config, date(2026, 11, 4), embedder=embedder, notify=False)
    assert len(store.read(data, contract.SEGMENTS)) == len(written)
    assert {s: set(ids) for s, ids in segments.members_on(members, pd.Timestamp("2026-11-05")).items()} == by_segment
    assert segments.members_on(members, pd.Timestamp("2026-11-03")) == {}


def test_the_banner_and_the_segments_page_name_a_segment_alert_in_its_own_words():
    from pipeline import views
    from pipeline.alerts import alerts_frame
    from pipeline.views import segments as segment_views
    from pipeline.views.alerts import chart_link

    values, members = declining()
    today = day(N_DAYS - 1)
    found = segments.segment_alerts(today.isoformat(), pd.Timestamp(today), per_question(values), members, HIT, KS)
    rows = alerts_frame(found).astype({contract.RUN_DATE: "datetime64[ns]"})
    [condition] = views.open_conditions(rows)
    head = found[0].message.partition(" (hybrid, ")[0]
    assert head.startswith("paraphrase questions (12): hit@5 0.83 → ") and head.endswith("; the other 28 flat")
    assert condition.line == f"{SEGMENT_SLOW_DRIFT} on hybrid since {today:%Y-%m-%d}: {head}"
    assert segment_views.segment_alert_lines(rows) == [f"{SEGMENT_SLOW_DRIFT} on hybrid: {head}"]
    # The Alerts page's incident links to the Segments page on its segment, series and pipeline.
    assert chart_link("hybrid", found[0].metric, pd.Timestamp(today)) == \
        "segments?segment=tag%3Aparaphrase&metric=hit&k=5&pipeline=hybrid"
    assert chart_link("hybrid", "hit@5", pd.Timestamp(today)) == "trends?metric=hit&k=5&pipeline=hybrid"


def test_the_segment_heatmap_names_each_segment_with_its_n_and_drills_down_to_its_questions():
    from pipeline.views import segments as segment_views

    values, members = declining()
    pq = per_question(values)
    written = frame(contract.SEGMENTS, segments.series_rows(pq.assign(**{contract.RUN_DATE: pq[contract.RUN_DATE].dt
                                                                         .strftime("%Y-%m-%d")}), members))
    matrix = segment_views.segment_heatmap(written, "hybrid", "hit", 5)
    assert list(matrix.index) == ["easy (28)", "paraphrase (12)"]
    assert matrix.iloc[1].iloc[-1] == pytest.approx(values[:12, -1].mean())
    stored = frame(contract.SEGMENT_QUESTIONS, segments.member_rows(day(N_DAYS - 1).isoformat(), members))
    assert segment_views.segment_names(stored) == ["tag:easy", "tag:paraphrase"]
    drill = segment_views.segment_questions(pq, stored, "tag:paraphrase", "hybrid", 5, "hit")
    assert set(drill.index) == set(members["tag:paraphrase"]) and drill.index[0] in ("q0", "q1", "q2")


def test_a_large_family_can_still_fire_the_draws_resolve_holms_first_step():
    """68 tests (17 segments x 4 watched series): 5000 draws resolve p to 1/5001, which Holm's first step multiplies
    past alpha (68/5001 > 0.01), so no segment could ever fire; the family's draws grow with it."""
    values, members = declining()
    values[:10, 22::2] = 0.0  # all ten hitting paraphrase questions decline: strong enough for Holm over 136 tests
    rest = [qid(q) for q in range(12, N_QUESTIONS)]
    members |= {f"tag:other{i}": tuple(rest[i:i + 10]) for i in range(15)}
    config = AlertsConfig()
    today = pd.Timestamp(day(N_DAYS - 1))
    assert len(segments.segment_tests(per_question(values), members, config, KS, today)) == 68 * 2  # both rules
    assert segments.draws_for(config, 68) >= 5 * 68 / config.segment_alpha
    found = segments.segment_alerts("d", today, per_question(values), members, config, KS)
    assert {a.metric.split(" ")[1] for a in found} == {"tag:paraphrase"}



def test_a_segments_series_on_one_pipeline_are_one_condition_paged_once():
    """hit@5 and recall@5 of a segment move together: one condition per rule, pipeline and segment (as the overall
    rules make a pipeline's series one), so the second series firing days later does not page again."""
    from pipeline.alerts import Alert, alerts_frame, condition_of, mark_ongoing

    first = Alert("2026-03-20", SEGMENT_SLOW_DRIFT, "dense", "ndcg@5 tag:paraphrase", 0.6, 0.7, -14.0, 10.0,
                  contract.ALERT, "m")
    later = dataclasses.replace(first, run_date="2026-03-22", metric="hit@5 tag:paraphrase")
    assert first.condition == later.condition == (SEGMENT_SLOW_DRIFT, "dense", "tag:paraphrase")
    assert condition_of(SEGMENT_SLOW_DRIFT, "dense", "hit@5 tag:easy") != first.condition
    runs = frame(contract.RUNS, run_rows(22))
    previous = alerts_frame([dataclasses.replace(first, since=first.run_date)]).astype(
        {contract.RUN_DATE: "datetime64[ns]"})
    [marked] = mark_ongoing([later], pd.Timestamp(later.run_date), runs, previous)
    assert marked.since == "2026-03-20" and not marked.new


def test_the_banner_summarises_several_segment_alerts_in_one_line():
    """Four segments on two pipelines: one banner line naming three and "…", the other conditions kept; one segment
    keeps its own words."""
    from pipeline import views
    from pipeline.alerts import Alert, alerts_frame

    def segment_alert(rule: str, pipeline: str, segment: str) -> Alert:
        return Alert("2026-03-20", rule, pipeline, f"hit@5 {segment}", 0.4, 0.7, -40.0, 10.0, contract.ALERT,
                     f"{segments.label(segment)} questions (9): hit@5 0.70 → 0.40 since 2026-03-01; the other 31 flat "
                     f"({pipeline}, the test)")

    drop = Alert("2026-03-20", DROP, "dense", "hit@5", 0.5, 0.7, -28.0, 10.0, contract.ALERT, "hit@5 of dense fell")
    fired = [segment_alert(SEGMENT_SLOW_DRIFT, "hybrid", s)
             for s in ("tag:paraphrase", "tag:stdlib", "tag:syntax", "category:Process")]
    fired.insert(1, segment_alert(contract.SEGMENT_DROP, "bm25", "tag:paraphrase"))
    rows = alerts_frame([drop, *fired]).astype({contract.RUN_DATE: "datetime64[ns]"})
    items = views.banner_items(views.open_conditions(rows))
    assert [item.line for item in items] == [
        "drop on dense since 2026-03-20: hit rate@5 -28.0%",
        "4 segments declined: paraphrase, stdlib, syntax, … (on hybrid, bm25 since 2026-03-20; each on the Segments "
        "page)"]
    assert items[1].runbook.rule == SEGMENT_SLOW_DRIFT
    one = views.banner_items(views.open_conditions(alerts_frame(fired[:2]).astype(
        {contract.RUN_DATE: "datetime64[ns]"})))
    assert [c.line for c in one] == [
        f"{SEGMENT_SLOW_DRIFT} on hybrid since 2026-03-20: paraphrase questions (9): hit@5 0.70 → 0.40 since "
        "2026-03-01; the other 31 flat",
        f"{contract.SEGMENT_DROP} on bm25 since 2026-03-20: paraphrase questions (9): hit@5 0.70 → 0.40 since 2026-03-01; the "
        "other 31 flat"]


@pytest.mark.parametrize("switched_on", [False, True])
def test_the_segment_alerts_setting_gates_the_daily_runs_segment_alerts(e2e_config, embedder, switched_on):
    """A 16-question gold set (the four e2e questions, each four times), half of it tagged paraphrase, with 25 earlier
    runs stored in which the paraphrase questions lost their hits after the 20th; then a real run. Off: the segment
    series are written and alerts.csv holds no segment alert; on: the paraphrase decline alerts, named."""
    from pipeline.job import run_day

    lines = [json.loads(line) for line in e2e_config.gold.read_text().splitlines()]
    gold = [{**q, "id": f"{q['id']}-{copy}", "tags": ["paraphrase" if copy % 2 else "easy"]}
            for copy in range(4) for q in lines]
    e2e_config.gold.write_text("".join(json.dumps(q) + "\n" for q in gold))
    values = np.ones((len(gold), 25))
    values[[i for i, q in enumerate(gold) if q["tags"] == ["paraphrase"]], 20:] = 0.0
    ids = {f"q{i}": q["id"] for i, q in enumerate(gold)}
    days = {day(t).isoformat(): (date(2026, 10, 1) + pd.Timedelta(days=t)).isoformat() for t in range(25)}
    rows = pd.DataFrame([{**r, contract.QUESTION_ID: ids[r[contract.QUESTION_ID]],
                          contract.RUN_DATE: days[r[contract.RUN_DATE]], "first_relevant_rank": 1 if r["hit"] else None,
                          "top1_score": 0.5, "retrieved": ""}
                         for p in e2e_config.retrieval.pipelines for k in e2e_config.retrieval.k
                         for r in outcomes(values, p, k)[0]])
    for d, group in rows.groupby(contract.RUN_DATE):  # runs.csv first: rows of a date without a run are quarantined
        store.replace_date(e2e_config.data_dir, contract.RUNS, d, [
            {c: 0 for c in contract.SCHEMAS[contract.RUNS]} | {contract.RUN_DATE: d, "run_id": d, "status": "ok",
                                                              "model": "", "config_hash": "", "events": ""}])
        store.replace_date(e2e_config.data_dir, contract.PER_QUESTION, d, group.to_dict("records"))
    config = e2e_config.replace(alerts=AlertsConfig(metrics=("hit@5",), segment_alerts=switched_on))
    run_day(config, date(2026, 11, 4), embedder=embedder, notify=False)
    assert len(store.read(config.data_dir, contract.SEGMENTS))
    fired = store.read(config.data_dir, contract.ALERTS)
    mine = fired[fired[contract.RULE].isin(contract.SEGMENT_RULES)]
    if not switched_on:
        assert mine.empty
    else:
        assert set(mine[contract.METRIC]) == {"hit@5 tag:paraphrase"}
        assert mine[contract.MESSAGE].str.startswith("paraphrase questions (8): hit@5 1.00 → ").all()
