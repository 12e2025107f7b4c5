"""Each source's freshness and volume (sources.csv) and the rules over them: a folder source and an HTTP source made
silent alert, named, on the run their gap passes the silence line; jitter does not; a volume spike names its source;
the tails are scipy's; an old store without sources.csv loads."""

from __future__ import annotations

import math
from datetime import date, datetime, timedelta, timezone
from email.utils import format_datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from werkzeug import Response

from pipeline import contract, job, store
from pipeline.alerts import RUNBOOK, evaluate_alerts
from pipeline.config import AlertsConfig, Config, RetrievalConfig, SourceConfig
from pipeline.contract import SOURCE_SILENT, SOURCE_SPIKE
from pipeline.job import run_day
from pipeline.source_health import (last_new_line, silence_line, silent_sources, source_rows, upper_tail,
                                     volume_spikes)

START = date(2026, 3, 2)
DAYS = [START + timedelta(days=i) for i in range(12)]
LAST_WIRE_DAY = 7  # the wire brings items on DAYS[0..7], then nothing for 4 days


def _item(source: str, day: date, n: int) -> str:
    published = format_datetime(datetime(day.year, day.month, day.day, 8, n, tzinfo=timezone.utc))
    guid = f"{source}-{day:%Y%m%d}-{n}"
    return (f"<item><title>{source} report {n} of {day:%B %d}</title><guid isPermaLink=\"false\">{guid}</guid>"
            f"<link>https://{source}.example.org/{guid}</link><pubDate>{published}</pubDate>"
            f"<description>The {source} desk filed report {n} on {day:%A %B %d}: harbour traffic, grain prices "
            f"and the weather over the northern coast.</description></item>")


def _feed(source: str, items: list[str]) -> str:
    return (f'<?xml version="1.0" encoding="UTF-8"?><rss version="2.0"><channel><title>{source}</title>'
            f"<link>https://{source}.example.org/</link><description>{source}</description>{''.join(items)}"
            "</channel></rss>")


def _folder(root: Path, source: str, days: list[date]) -> Path:
    folder = root / source
    folder.mkdir(parents=True)
    for day in days:
        (folder / f"{day:%Y-%m-%d}.xml").write_text(_feed(source, [_item(source, day, n) for n in range(2)]))
    return folder


def _config(tmp_path: Path, sources: tuple[SourceConfig, ...]) -> Config:
    gold = tmp_path / "gold.jsonl"
    gold.write_text('{"id": "q1", "question": "What did the steady desk file on March 2?", '
                    '"relevant": ["steady-20260302-0"]}\n')
    return Config(data_dir=tmp_path / "store", gold=gold, sources=sources,
                  retrieval=RetrievalConfig(pipelines=("bm25",), k=(1,), candidate_depth=5))


def _source_alerts(result) -> list:
    return [a for a in result.alerts if a.rule in (SOURCE_SILENT, SOURCE_SPIKE)]


def _first_silence(results) -> tuple[int, object]:
    for i, result in enumerate(results):
        silent = [a for a in result.alerts if a.rule == SOURCE_SILENT]
        if silent:
            return i, silent
    raise AssertionError("no source_silent alert on any run")


def _assert_wire_silence(results) -> None:
    """The wire (daily until DAYS[7]) alerts on DAYS[11]: 4 days without a new item, past its line of
    max(2, 3 x 1) = 3 days, and within 2 days of its usual gap (1 day) being passed on DAYS[9]; the steady
    source never does, and no run before alerts."""
    i, silent = _first_silence(results)
    assert i == LAST_WIRE_DAY + 4
    [alert] = silent
    assert alert.metric == "wire" and alert.pipeline == contract.CORPUS_WIDE
    assert alert.message.startswith(f"source wire silent since {DAYS[LAST_WIRE_DAY]:%Y-%m-%d} (usually daily)")
    assert "no new item for 4 days" in alert.message
    assert (alert.value, alert.baseline, alert.threshold) == (4.0, 1.0, 3.0)
    assert alert.severity == contract.ALERT and alert.new
    usual_gap_passed = LAST_WIRE_DAY + 1 + 1  # the first run whose gap is larger than the usual 1 day
    assert i - usual_gap_passed <= 2
    assert not any(_source_alerts(r) for r in results[:i])


def test_a_silent_folder_source_alerts_naming_it(tmp_path, embedder):
    feeds = tmp_path / "feeds"
    config = _config(tmp_path, (SourceConfig(name="steady", path=_folder(feeds, "steady", DAYS)),
                                SourceConfig(name="wire", path=_folder(feeds, "wire", DAYS[:LAST_WIRE_DAY + 1]))))
    results = [run_day(config, day, embedder=embedder, notify=False) for day in DAYS]
    # What the issue saw: every run ok, no feed failed, nothing new from the wire for 4 days.
    assert {r.run["status"] for r in results} == {contract.STATUS_OK}
    assert all(r.run["feeds_failed"] == 0 for r in results)
    _assert_wire_silence(results)

    rows = store.read(config.data_dir, contract.SOURCES)
    wire = rows[rows[contract.SOURCE] == "wire"].set_index(contract.RUN_DATE)
    assert len(rows) == 2 * len(DAYS)  # a row per source and run, the silent days included
    assert list(wire[contract.NEW_ITEMS]) == [2] * (LAST_WIRE_DAY + 1) + [0] * 4
    assert list(wire[contract.GAP_DAYS]) == [0] * (LAST_WIRE_DAY + 1) + [1, 2, 3, 4]
    assert set(wire[contract.LAST_NEW].iloc[LAST_WIRE_DAY:]) == {f"{DAYS[LAST_WIRE_DAY]:%Y-%m-%d}"}
    assert wire[contract.TOTAL_ITEMS].iloc[-1] == 2 * (LAST_WIRE_DAY + 1)

    # The condition stays one incident: the next silent run is ongoing since the first; a re-run is the same.
    again = run_day(config, DAYS[-1], embedder=embedder, notify=False)
    assert [a.message for a in _source_alerts(again)] == [a.message for a in _source_alerts(results[-1])]
    assert store.read(config.data_dir, contract.SOURCES).equals(rows)
    (feeds / "steady" / f"{DAYS[-1] + timedelta(days=1):%Y-%m-%d}.xml").write_text(
        _feed("steady", [_item("steady", DAYS[-1] + timedelta(days=1), 0)]))
    [ongoing] = _source_alerts(run_day(config, DAYS[-1] + timedelta(days=1), embedder=embedder, notify=False))
    assert ongoing.since == f"{DAYS[-1]:%Y-%m-%d}" and not ongoing.new


def _run_with_wire(tmp_path, embedder, httpserver, monkeypatch, feed, served: dict) -> tuple[list, Config]:
    """Every run of DAYS over the steady folder and the wire, a feed on localhost answered by `feed` (served["day"]
    is the run's day)."""
    httpserver.expect_request("/wire.xml").respond_with_handler(feed)
    # Each run is the daily run of its own day (fetched, not replayed): the calendar is outside the system.
    monkeypatch.setattr(job, "_is_past", lambda config, run_date: False)
    config = _config(tmp_path, (SourceConfig(name="steady", path=_folder(tmp_path / "feeds", "steady", DAYS)),
                                SourceConfig(name="wire", url=httpserver.url_for("/wire.xml"))))
    results = []
    for day in DAYS:
        served["day"] = day
        results.append(run_day(config, day, embedder=embedder, notify=False))
    return results, config


def test_a_silent_http_source_alerts_naming_it(tmp_path, embedder, httpserver, monkeypatch):
    """The wire is a feed on localhost that brings two items a day and then stops changing: first the same items
    again (200), then a 304 to the conditional GET. Either way nothing is new, and it alerts like the folder."""
    served = {"day": DAYS[0], "requests": []}

    def feed(request):
        day = min(served["day"], DAYS[LAST_WIRE_DAY])
        etag = f'"{day:%Y%m%d}"'
        served["requests"].append(request.headers.get("If-None-Match"))
        if served["day"] > DAYS[LAST_WIRE_DAY + 1] and request.headers.get("If-None-Match") == etag:
            return Response(status=304, headers={"ETag": etag})
        items = [_item("wire", d, n) for d in (day - timedelta(days=1), day) for n in range(2) if d >= DAYS[0]]
        return Response(_feed("wire", items), content_type="application/rss+xml", headers={"ETag": etag})

    results = _run_with_wire(tmp_path, embedder, httpserver, monkeypatch, feed, served)[0]
    assert all(r.run["feeds_failed"] == 0 for r in results)
    # Fetched on every run: after the last new items, the same items again, then 304s to the conditional GET.
    assert len(served["requests"]) == len(DAYS) and served["requests"][-1] == f'"{DAYS[LAST_WIRE_DAY]:%Y%m%d}"'
    _assert_wire_silence(results)


def test_a_failing_feed_is_reported_as_failed_not_also_as_silent(tmp_path, embedder, httpserver, monkeypatch):
    """The wire brings two items a day, then its server answers 500 for 4 days: each of those runs reports
    feeds_failed and sources.csv marks its fetch failed; source_silent never fires for it (it would on the 4th day,
    as in the tests above, were it reachable and unchanged)."""
    served = {"day": DAYS[0]}

    def feed(request):
        if served["day"] > DAYS[LAST_WIRE_DAY]:
            return Response("upstream down", status=500)
        items = [_item("wire", served["day"], n) for n in range(2)]
        return Response(_feed("wire", items), content_type="application/rss+xml")

    results, config = _run_with_wire(tmp_path, embedder, httpserver, monkeypatch, feed, served)
    assert [r.run["feeds_failed"] for r in results] == [0] * (LAST_WIRE_DAY + 1) + [1] * 4
    assert all(any(a.rule == contract.FEEDS_FAILED for a in r.alerts) for r in results[LAST_WIRE_DAY + 1:])
    assert not any(a.rule == SOURCE_SILENT for r in results for a in r.alerts)
    rows = store.read(config.data_dir, contract.SOURCES)
    wire = rows[rows[contract.SOURCE] == "wire"]
    assert list(wire[contract.FETCH_FAILED]) == [0] * (LAST_WIRE_DAY + 1) + [1] * 4
    assert list(wire[contract.GAP_DAYS])[-1] == 4  # as silent as the tests above: only the failure tells them apart
    # The same rows with the fetch not failed: the rule would call it silent.
    last = rows[rows[contract.RUN_DATE] == rows[contract.RUN_DATE].max()].assign(**{contract.FETCH_FAILED: 0})
    assert [s.source for s in silent_sources(last, AlertsConfig())] == ["wire"]


# --- the series and the rules on frames ---------------------------------------------------------------------


def _rows_over(days_with_items: list[date], today: date, source: str = "s", n: int = 3) -> pd.DataFrame:
    counts = [(source, f"{d:%Y-%m-%d}", n, n) for d in days_with_items if d <= today]
    return pd.DataFrame(source_rows(counts, [source], today))


def test_the_rows_count_each_configured_source_a_silent_one_included():
    counts = [("a", "2026-03-01", 10, 9), ("a", "2026-03-02", 3, 3), ("a", "2026-03-04", 2, 2),
              ("b", "2026-03-01", 5, 5), ("gone", "2026-03-01", 4, 4)]
    rows = source_rows(counts, ["a", "b", "never"], date(2026, 3, 4))
    assert [r[contract.SOURCE] for r in rows] == ["a", "b", "never"]  # configured sources only, in their order
    a, b, never = rows
    assert (a[contract.NEW_ITEMS], a[contract.TOTAL_ITEMS], a[contract.LAST_NEW], a[contract.GAP_DAYS]) == \
        (2, 9 + 3 + 2, "2026-03-04", 0)
    assert (a[contract.ACTIVE_DAYS], a[contract.USUAL_GAP_DAYS]) == (3, 1.5)  # gaps 1 and 2: median 1.5
    assert (b[contract.NEW_ITEMS], b[contract.GAP_DAYS], b[contract.ACTIVE_DAYS]) == (0, 3, 1)
    assert math.isnan(b[contract.USUAL_GAP_DAYS])
    assert never[contract.LAST_NEW] == "" and never[contract.ACTIVE_DAYS] == 0 and math.isnan(never[contract.GAP_DAYS])


# Ten days with new items, every `every` days: 9 after the first over 9 x every days, a smoothed daily rate of
# (9 + 1/2) / (9 x every + 1); the rate line is the g where (1 - rate) ** g = silence_alpha (0.001, one source).
@pytest.mark.parametrize("every, silent_for, alerts_after", [
    (1, 4, 4),  # daily: rate 0.95, rate line ln 0.001 / ln 0.05 = 2.31; max(2, 3 x 1, 2.31) = 3: the 4th day alerts
    (1, 3, None),
    (3, 17, 17),  # every 3 days: rate 9.5 / 28, rate line 16.7 (above 3 x 3 = 9: a Bernoulli rate ignores regularity)
    (3, 16, None),
    (7, 43, 43),  # weekly: rate 9.5 / 64, rate line 42.99
])
def test_the_silence_line_is_learned_from_the_source_own_gaps(every, silent_for, alerts_after):
    config = AlertsConfig()
    history = [date(2026, 1, 1) + timedelta(days=every * i) for i in range(10)]
    last = history[-1]
    fired = [g for g in range(max(1, silent_for - 2), silent_for + 1)
             if silent_sources(_rows_over(history, last + timedelta(days=g)), config)]
    assert fired[:1] == ([alerts_after] if alerts_after else [])
    rate = 9.5 / (9 * every + 1)
    expected = max(2, 3 * every, math.log(0.001) / math.log(1 - rate))
    assert silence_line(every, config, rate) == pytest.approx(expected)
    assert silence_line(every, config) == max(2, 3 * every)  # no rate known: the median gap's line


def test_the_wording_of_the_silence_says_the_usual_cadence():
    config = AlertsConfig()
    history = [date(2026, 1, 1) + timedelta(days=3 * i) for i in range(10)]
    [silent] = silent_sources(_rows_over(history, history[-1] + timedelta(days=17)), config)
    assert silent.message == (
        f"source s silent since {history[-1]:%Y-%m-%d} (usually every 3 days): no new item for 17 days, more than "
        "16.7 (the largest of the minimum, the factor times its median gap of 3 days and the gap its rate of new items "
        "on 34% of days leaves below alpha over 1 source, over 10 days with new items)")
    daily = [date(2026, 1, 1) + timedelta(days=i) for i in range(10)]
    [silent] = silent_sources(_rows_over(daily, daily[-1] + timedelta(days=4)), config)
    assert silent.message.endswith("(usually daily): no new item for 4 days, more than 3 (the largest of the minimum, "
                                   "the factor times its median gap of 1 day and the gap its rate of new items on 95% "
                                   "of days leaves below alpha over 1 source, over 10 days with new items)")


def test_no_silence_before_the_usual_gap_is_learned():
    """Fewer than silence_min_history (5) days with new items: no usual gap to pass, however long the silence."""
    config = AlertsConfig()
    history = [date(2026, 1, 1) + timedelta(days=i) for i in range(4)]
    assert silent_sources(_rows_over(history, history[-1] + timedelta(days=30)), config) == []
    assert silent_sources(_rows_over([*history, date(2026, 1, 5)], date(2026, 1, 30)), config)


def test_a_daily_source_with_normal_jitter_never_alerts():
    """A year of a source publishing on weekdays only (Friday to Monday is a gap of 3), with a Monday holiday every
    quarter (Friday to Tuesday: 4, but a run sees at most 3 days without an item) and a Wednesday skipped one week in
    five: its usual gap is daily and no run alerts."""
    rng = np.random.default_rng(7)
    config = AlertsConfig()
    start = date(2026, 1, 5)  # a Monday
    days = [start + timedelta(days=i) for i in range(365)]
    holidays = {start + timedelta(weeks=w) for w in (10, 23, 36, 49)}
    published = [d for d in days if d.weekday() < 5 and d not in holidays
                 and not (d.weekday() == 2 and rng.random() < 0.2)]
    gaps = np.diff([d.toordinal() for d in published])
    assert gaps.max() == 4 and np.median(gaps) == 1
    assert not any(silent_sources(_rows_over(published, d), config) for d in days[10:])


# --- volume spikes ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("x, mean, variance", [(10, 3.0, 6.0), (1, 0.4, 2.0), (64, 17.0, 40.0), (30, 17.0, 17.0),
                                               (5, 4.0, 3.0), (0, 3.0, 5.0), (200, 17.0, 300.0)])
def test_the_tail_is_scipy_s_negative_binomial_or_poisson(x, mean, variance):
    if variance > mean:
        r = mean * mean / (variance - mean)
        expected = stats.nbinom.sf(x - 1, r, mean / variance)
        assert stats.nbinom.mean(r, mean / variance) == pytest.approx(mean)
        assert stats.nbinom.var(r, mean / variance) == pytest.approx(variance)
    else:
        expected = stats.poisson.sf(x - 1, mean)
    assert upper_tail(x, mean, variance) == pytest.approx(expected, rel=1e-9, abs=1e-300)


def _frame(counts: dict[str, list[int]], start: date = date(2026, 1, 1)) -> pd.DataFrame:
    rows = [{contract.RUN_DATE: pd.Timestamp(start + timedelta(days=i)), contract.SOURCE: name,
             contract.NEW_ITEMS: n, contract.ACTIVE_DAYS: 1 + i} for name, ns in counts.items()
            for i, n in enumerate(ns)]
    return pd.DataFrame(rows).reindex(columns=list(contract.SOURCES_COLUMNS))


def test_a_volume_spike_names_its_source(tmp_path):
    rng = np.random.default_rng(3)
    history = {"wire": list(rng.poisson(17, 30)), "desk": list(rng.poisson(5, 30)), "blog": list(rng.poisson(1, 30))}
    history["wire"][-1] = 64
    frame = _frame(history)
    today = frame[contract.RUN_DATE].max()
    empty = {name: store.read(tmp_path, name) for name in contract.SCHEMAS}
    alerts = evaluate_alerts(today.date(), empty[contract.METRICS], empty[contract.PER_QUESTION],
                             empty[contract.DRIFT], empty[contract.RUNS], AlertsConfig(), (5,), empty[contract.ALERTS],
                             sources=frame)
    [spike] = alerts
    median = float(np.median(history["wire"][-29:-1]))
    assert (spike.rule, spike.metric, spike.severity, spike.value, spike.baseline) == \
        (SOURCE_SPIKE, "wire", contract.WARNING, 64.0, median)
    assert spike.message.startswith(f"source wire: 64 new items, usually {median:g} (median of 28 runs)")
    assert spike.p_value < AlertsConfig().spike_alpha


def test_the_backlog_of_a_source_first_run_is_not_its_volume():
    """A source's first day with items (its folder's or feed's backlog) is left out of its history: a spike
    afterwards is measured against its daily volume, and the backlog day is no spike."""
    counts = [500] + [5, 6, 4, 5, 7, 5, 4, 6, 5] + [40]
    frame = _frame({"wire": counts})
    [spike] = volume_spikes(frame, frame[contract.RUN_DATE].max(), AlertsConfig())
    assert (spike.median, spike.n_runs) == (5.0, 9)


def test_too_little_history_or_a_small_rise_is_no_spike():
    config = AlertsConfig()
    short = _frame({"wire": [0, 5, 5, 5, 5, 5, 40]})  # 5 runs after the backlog: spike_min_history is 7
    assert volume_spikes(short, short[contract.RUN_DATE].max(), config) == []
    small = _frame({"wire": [0] + [5] * 10 + [14]})  # far in the Poisson tail, but under 3 x the median
    assert volume_spikes(small, small[contract.RUN_DATE].max(), config) == []


@pytest.mark.parametrize("dispersion", [None, 2.0, 5.0])
def test_spikes_on_null_streams_stay_rare(dispersion):
    """Seeded null streams, 6 sources x 400 runs of Poisson (mean 3 to 40) or over-dispersed negative binomial
    counts (variance 3 and 6 x the mean): the share of runs with any spike (the family-wise rate per run) stays
    under 0.5% at the default spike_alpha (0.001); a plain moment fit without the variance's upper bound gave 0.8 to
    3.5% on these streams at alpha 0.01."""
    rng = np.random.default_rng(11)
    means = [3, 5, 8, 12, 20, 40]
    counts = {}
    for i, mean in enumerate(means):
        if dispersion is None:
            counts[f"s{i}"] = [int(v) for v in rng.poisson(mean, 400)]
        else:
            r = mean / dispersion  # variance mean * (1 + dispersion)
            counts[f"s{i}"] = [int(v) for v in rng.negative_binomial(r, r / (r + mean), 400)]
    frame = _frame(counts)
    days = sorted(frame[contract.RUN_DATE].unique())[30:]
    fired = sum(bool(volume_spikes(frame, day, AlertsConfig())) for day in days)
    assert fired / len(days) <= 0.005


# --- old stores and the contract ------------------------------------------------------------------------------


def test_a_store_without_sources_csv_loads_and_raises_no_source_alert(tmp_path):
    assert store.read(tmp_path, contract.SOURCES).empty
    assert list(store.read(tmp_path, contract.SOURCES).columns) == list(contract.SOURCES_COLUMNS)
    empty = {name: store.read(tmp_path, name) for name in contract.SCHEMAS}
    assert evaluate_alerts(date(2026, 1, 1), empty[contract.METRICS], empty[contract.PER_QUESTION],
                           empty[contract.DRIFT], empty[contract.RUNS], AlertsConfig(), (5,),
                           empty[contract.ALERTS]) == []


def test_the_rules_are_in_the_contract_and_the_runbook():
    assert {SOURCE_SILENT, SOURCE_SPIKE} <= set(contract.RULES) and {SOURCE_SILENT, SOURCE_SPIKE} <= set(RUNBOOK)


# --- drift on a day with nothing new ---------------------------------------------------------------------------


def test_a_drift_window_with_nothing_new_today_says_so(tmp_path):
    """A day without a new document grows the drift's current window back over earlier days (to hold min_current
    chunks): its verdict repeats theirs, and its detail says since when nothing came in."""
    from pipeline.corpus import Corpus
    from pipeline.sources import Document
    from pipeline.windows import Window, stale_note

    with Corpus(tmp_path / "corpus.sqlite") as corpus:
        for day in DAYS[:3]:
            corpus.ingest([Document(f"d{day:%d}", "t", f"text of {day}", "", None, "wire", ())], day)
        assert stale_note(corpus, Window(DAYS[1], DAYS[2]), DAYS[2]) == ""
        assert stale_note(corpus, Window(DAYS[0], DAYS[4]), DAYS[4]) == \
            f"no new documents since {DAYS[2]:%Y-%m-%d}: the window repeats earlier days' documents"


def test_the_overview_line_gives_each_source_last_new_item():
    counts = [("a", "2026-03-01", 3, 3), ("a", "2026-03-02", 3, 3), ("a", "2026-03-03", 1, 1), ("b", "2026-03-01", 1, 1),
              ("b", "2026-03-02", 1, 1), ("b", "2026-03-03", 1, 1)]
    rows = pd.DataFrame([*source_rows(counts[:1], ["a", "b", "c"], date(2026, 3, 1)),
                         *source_rows(counts, ["a", "b", "c"], date(2026, 3, 4))])
    assert last_new_line(rows) == ("Sources' last new item: a 2026-03-03 (1 day before; usually daily), "
                                   "b 2026-03-03 (1 day before; usually daily), c none yet")
    assert last_new_line(store.read(Path("/nonexistent"), contract.SOURCES)) == ""
