"""Simulate's answer to "would the alerts catch this?": each condition the sandbox fired, dated against the original,
on hand-made alerts.csv frames; and the pack file of the inject scenario."""

from __future__ import annotations

from datetime import date

import pandas as pd
import pytest

from pipeline import contract, store
from pipeline.contract import ALERT, DRIFT_RULE, DROP, FLOOR, SLOW_DRIFT, WARNING
from pipeline.simulate import (CAUGHT_COLUMNS, INJECT, SIMULATED_PREFIX, Scenario, SimulationError, catch_verdict,
                               compare_conditions, default_start, read_pack)
from pipeline.sources import FeedError
from pipeline.views.simulate import caught_lines

START = date(2026, 11, 10)


def alerts(*rows) -> pd.DataFrame:
    """alerts.csv rows from (run_date, rule, pipeline, metric, severity[, since])."""
    frame = pd.DataFrame([{c: "" for c in contract.ALERTS_COLUMNS} | {"run_date": d, "rule": r, "pipeline": p,
                                                                    "metric": m, "severity": s, "value": 0.5,
                                                                    "since": since[0] if since else d}
                          for d, r, p, m, s, *since in rows], columns=list(contract.ALERTS_COLUMNS))
    return frame.assign(run_date=pd.to_datetime(frame["run_date"]))


ORIGINAL = alerts(
    ("2026-11-08", DROP, "bm25", "recall@5", ALERT),   # before the start: does not count
    ("2026-11-11", DRIFT_RULE, "", "corpus", WARNING),       # fired in both, the same day
    ("2026-11-12", DROP, "hybrid", "mrr@5", WARNING),   # hybrid's drop, in another series than the sandbox's
    ("2026-11-14", FLOOR, "dense", "hit@5", WARNING),   # fired later in the original
)
SANDBOX = alerts(
    ("2026-11-08", DROP, "bm25", "recall@5", ALERT),
    ("2026-11-10", DROP, "bm25", "recall@5", WARNING),  # new from the start: bm25's drop
    ("2026-11-11", DROP, "bm25", "hit@5", ALERT),       # the same condition in another series, escalated
    ("2026-11-11", DROP, "bm25", "recall@5", ALERT),
    ("2026-11-11", DRIFT_RULE, "", "corpus", ALERT),
    ("2026-11-13", DROP, "hybrid", "recall@5", ALERT),  # one condition per pipeline: the original's came a day before
    ("2026-11-12", FLOOR, "dense", "recall@5", ALERT),  # floors are per series
    ("2026-11-12", FLOOR, "dense", "hit@5", WARNING),
    ("2026-11-13", SLOW_DRIFT, "dense", "ndcg@5", WARNING),
)


def test_each_condition_the_sandbox_fired_is_dated_against_the_original():
    compared = compare_conditions(ORIGINAL, SANDBOX, START)
    assert list(compared.columns) == list(CAUGHT_COLUMNS)
    d = lambda day: date(2026, 11, day)  # noqa: E731
    assert compared.drop(columns="answer").to_dict("records") == [
        {"rule": DROP, "pipeline": "bm25", "series": "recall@5, hit@5", "caught": d(10), "original": None,
         "earlier": True, "severity": ALERT, "runs": 2},
        {"rule": DRIFT_RULE, "pipeline": "", "series": "corpus", "caught": d(11), "original": d(11),
         "earlier": False, "severity": ALERT, "runs": 1},
        {"rule": FLOOR, "pipeline": "dense", "series": "recall@5", "caught": d(12), "original": None,
         "earlier": True, "severity": ALERT, "runs": 1},
        {"rule": FLOOR, "pipeline": "dense", "series": "hit@5", "caught": d(12), "original": d(14),
         "earlier": True, "severity": WARNING, "runs": 1},
        {"rule": DROP, "pipeline": "hybrid", "series": "recall@5", "caught": d(13), "original": d(12),
         "earlier": False, "severity": ALERT, "runs": 1},
        {"rule": SLOW_DRIFT, "pipeline": "dense", "series": "ndcg@5", "caught": d(13), "original": None,
         "earlier": True, "severity": WARNING, "runs": 1},
    ]
    assert compared["answer"].tolist() == [
        "caught on 2026-11-10 (the original: never, from 2026-11-10 on)",
        "not earlier: the original fired it too, on the same day (2026-11-11)",
        "caught on 2026-11-12 (the original: never, from 2026-11-10 on)",
        "caught on 2026-11-12 (the original: not until 2026-11-14)",
        "not earlier: the original fired it too, on 2026-11-12 (the sandbox on 2026-11-13)",
        "caught on 2026-11-13 (the original: never, from 2026-11-10 on)",
    ]
    assert catch_verdict(compared, START).startswith("Yes: 4 of the 6 condition(s)")



def test_each_answer_reads_as_one_line_naming_the_condition_once():
    lines = caught_lines(compare_conditions(ORIGINAL, SANDBOX, START))
    assert lines[:2] == [
        "caught on 2026-11-10 (the original: never, from 2026-11-10 on): drop on bm25 (recall@5, hit@5), alert, "
        "2 runs fired in the sandbox",
        "not earlier: the original fired it too, on the same day (2026-11-11): drift on the corpus, alert, "
        "1 run fired in the sandbox"]  # not "on the corpus (corpus)"


INJECTED = date(2026, 11, 5)


def test_an_original_with_its_own_later_incident_does_not_hide_the_sandboxs_earlier_catch():
    """The issue's case: injected on 11-05, corpus drift paged that day in the sandbox; the original's own corpus
    drift came on 11-13. A comparison without dates answered No."""
    original = alerts(("2026-11-13", DRIFT_RULE, "", "corpus", ALERT), ("2026-11-14", DRIFT_RULE, "", "corpus", ALERT,
                                                                       "2026-11-13"))
    sandbox = alerts(("2026-11-05", DRIFT_RULE, "", "corpus", ALERT), ("2026-11-13", DRIFT_RULE, "", "corpus", ALERT),
                     ("2026-11-14", DRIFT_RULE, "", "corpus", ALERT, "2026-11-13"))
    compared = compare_conditions(original, sandbox, INJECTED)
    assert compared["answer"].tolist() == ["caught on 2026-11-05 (the original: not until 2026-11-13)"]
    assert catch_verdict(compared, INJECTED).startswith("Yes: 1 of the 1 condition(s)")


def test_an_original_with_an_earlier_incident_is_no_catch():
    """The original's incident was open before the change (11-03, 11-04) and the sandbox's firing on 11-05 only
    continues its streak (since 11-03): not a catch. A comparison from the start on only answered Yes."""
    history = [("2026-11-03", DRIFT_RULE, "", "corpus", ALERT), ("2026-11-04", DRIFT_RULE, "", "corpus", ALERT,
                                                                "2026-11-03")]
    original = alerts(*history)
    sandbox = alerts(*history, ("2026-11-05", DRIFT_RULE, "", "corpus", ALERT, "2026-11-03"))
    compared = compare_conditions(original, sandbox, INJECTED)
    assert compared["answer"].tolist() == [
        "not earlier: the original fired it too, on 2026-11-03, before the change on 2026-11-05 "
        "(the sandbox on 2026-11-05)"]
    assert catch_verdict(compared, INJECTED) == ("No: each of the 1 condition(s) the sandbox fired from 2026-11-05 "
                                                 "on fired in the original too, as early or earlier.")
    # the original's earlier incident on or after the change: the sandbox's later firing is no catch either
    original = alerts(("2026-11-06", DROP, "bm25", "recall@5", ALERT))
    sandbox = alerts(("2026-11-08", DROP, "bm25", "recall@5", ALERT))
    assert compare_conditions(original, sandbox, INJECTED)["answer"].tolist() == [
        "not earlier: the original fired it too, on 2026-11-06 (the sandbox on 2026-11-08)"]


def test_an_alert_long_before_the_start_in_the_original_does_not_hide_one_after_it():
    original = alerts(("2026-11-01", DROP, "bm25", "recall@5", ALERT))
    sandbox = alerts(("2026-11-01", DROP, "bm25", "recall@5", ALERT), ("2026-11-10", DROP, "bm25", "recall@5", ALERT))
    assert compare_conditions(original, sandbox, START)[["caught", "earlier"]].values.tolist() == [[START, True]]
    same = compare_conditions(sandbox, sandbox, START)  # the same alerts: nothing earlier
    assert same["earlier"].tolist() == [False] and catch_verdict(same, START).startswith("No:")


def test_no_alerts_anywhere_is_an_empty_answer_with_its_columns(tmp_path):
    empty = store.read(tmp_path, contract.ALERTS)  # no alerts.csv: the empty frame
    compared = compare_conditions(empty, empty, START)
    assert compared.empty and list(compared.columns) == list(CAUGHT_COLUMNS)
    assert catch_verdict(compared, START) == "No: no rule fired in the sandbox from 2026-11-10 on."


def test_the_default_start_leaves_the_alert_window_of_runs_to_answer():
    days = [date(2026, 11, d) for d in range(1, 21)]
    assert default_start(days, 7) == date(2026, 11, 13)  # 13 to 20: the start and 7 runs after it
    assert default_start(days[:3], 7) == days[0]


RSS = """<?xml version="1.0" encoding="UTF-8"?>
<rss version="2.0"><channel><title>Mine</title><link>https://example.invalid/</link><description>d</description>
<item><guid>m-1</guid><title>Lighthouse keepers strike</title><link>https://example.invalid/1</link>
<pubDate>Mon, 02 Mar 2026 08:00:00 +0000</pubDate><category>labour</category>
<description>Keepers of the northern lighthouses stopped work on Monday.</description></item>
<item><guid>m-2</guid><title>Ferry timetable changes</title><link>https://example.invalid/2</link>
<description>The island ferry runs twice a day from April.</description></item>
</channel></rss>
"""


def test_a_pack_file_becomes_documents_injected_on_the_start(tmp_path):
    path = tmp_path / "mine.xml"
    path.write_text(RSS, encoding="utf-8")
    documents = read_pack(path, START)
    assert [d.id for d in documents] == [f"{SIMULATED_PREFIX}m-1", f"{SIMULATED_PREFIX}m-2"]
    assert {d.source for d in documents} == {"simulation:mine.xml"}
    assert {d.published.date() for d in documents} == {START}
    assert documents[0].categories == ("labour",) and documents[1].title == "Ferry timetable changes"
    assert Scenario(INJECT, START, pack=str(path)).describe() == "simulation: injected the entries of mine.xml"


@pytest.mark.parametrize("content, error, message", [
    (None, SimulationError, "--pack {path}: no such file"),
    ("just some notes, not a feed\n", FeedError, "{path}: not a valid feed"),
    ('<rss version="2.0"><channel><title>x</title></channel></rss>', FeedError, "{path}: feed has no entries"),
], ids=["missing", "not-a-feed", "no-entries"])
def test_a_bad_pack_file_is_named_by_the_check(tmp_path, content, error, message):
    path = tmp_path / "pack.xml"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(error, match=message.format(path=path).replace("(", r"\(")):
        Scenario(INJECT, START, pack=str(path)).check()


def test_pack_belongs_to_inject_only(tmp_path):
    with pytest.raises(SimulationError, match="inject needs --pack FILE"):
        Scenario(INJECT, START).check()
    with pytest.raises(SimulationError, match="--pack is for the inject scenario, not offtopic"):
        Scenario("offtopic", START, n=3, pack=str(tmp_path / "x.xml")).check()
