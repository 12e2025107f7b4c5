"""Simulate's answer to "would the alerts catch this?": the conditions that fired in the sandbox and not in the
original, on hand-made alerts.csv frames; and the pack file of the inject scenario."""

from __future__ import annotations

from datetime import date

import pandas as pd
import pytest

from pipeline import contract, store
from pipeline.contract import ALERT, DRIFT_RULE, DROP, FLOOR, SLOW_DRIFT, WARNING
from pipeline.simulate import (FIRED_COLUMNS, INJECT, SIMULATED_PREFIX, Scenario, SimulationError, default_start,
                               fired_only_in_sandbox, read_pack)
from pipeline.sources import FeedError

START = date(2026, 11, 10)


def alerts(*rows) -> pd.DataFrame:
    """alerts.csv rows from (run_date, rule, pipeline, metric, severity)."""
    frame = pd.DataFrame([{c: "" for c in contract.ALERTS_COLUMNS} | {"run_date": d, "rule": r, "pipeline": p,
                                                                    "metric": m, "severity": s, "value": 0.5}
                          for d, r, p, m, s in rows], columns=list(contract.ALERTS_COLUMNS))
    return frame.assign(run_date=pd.to_datetime(frame["run_date"]))


ORIGINAL = alerts(
    ("2026-11-08", DROP, "bm25", "recall@5", ALERT),   # before the start: does not count
    ("2026-11-11", DRIFT_RULE, "", "corpus", WARNING),       # fired in both: not an answer
    ("2026-11-12", DROP, "hybrid", "mrr@5", WARNING),   # hybrid's drop, in another series than the sandbox's
)
SANDBOX = alerts(
    ("2026-11-08", DROP, "bm25", "recall@5", ALERT),
    ("2026-11-10", DROP, "bm25", "recall@5", WARNING),  # new from the start: bm25's drop
    ("2026-11-11", DROP, "bm25", "hit@5", ALERT),       # the same condition in another series, escalated
    ("2026-11-11", DROP, "bm25", "recall@5", ALERT),
    ("2026-11-11", DRIFT_RULE, "", "corpus", ALERT),
    ("2026-11-12", DROP, "hybrid", "recall@5", ALERT),  # one condition per pipeline: hybrid's drop fired in both
    ("2026-11-12", FLOOR, "dense", "recall@5", ALERT),  # floors are per series
    ("2026-11-12", FLOOR, "dense", "hit@5", WARNING),
    ("2026-11-13", SLOW_DRIFT, "dense", "ndcg@5", WARNING),
)


def test_the_conditions_fired_in_the_sandbox_and_not_in_the_original():
    fired = fired_only_in_sandbox(ORIGINAL, SANDBOX, START)
    assert list(fired.columns) == list(FIRED_COLUMNS)
    assert fired.to_dict("records") == [
        {"rule": DROP, "pipeline": "bm25", "series": "recall@5, hit@5", "first": date(2026, 11, 10),
         "severity": ALERT, "runs": 2},
        {"rule": FLOOR, "pipeline": "dense", "series": "recall@5", "first": date(2026, 11, 12),
         "severity": ALERT, "runs": 1},
        {"rule": FLOOR, "pipeline": "dense", "series": "hit@5", "first": date(2026, 11, 12),
         "severity": WARNING, "runs": 1},
        {"rule": SLOW_DRIFT, "pipeline": "dense", "series": "ndcg@5", "first": date(2026, 11, 13),
         "severity": WARNING, "runs": 1},
    ]


def test_an_alert_before_the_start_in_the_original_does_not_hide_one_after_it():
    original = alerts(("2026-11-09", DROP, "bm25", "recall@5", ALERT))
    sandbox = alerts(("2026-11-09", DROP, "bm25", "recall@5", ALERT), ("2026-11-10", DROP, "bm25", "recall@5", ALERT))
    assert fired_only_in_sandbox(original, sandbox, START)["first"].tolist() == [START]
    assert fired_only_in_sandbox(sandbox, sandbox, START).empty  # the same alerts: nothing new


def test_no_alerts_anywhere_is_an_empty_answer_with_its_columns(tmp_path):
    empty = store.read(tmp_path, contract.ALERTS)  # no alerts.csv: the empty frame
    fired = fired_only_in_sandbox(empty, empty, START)
    assert fired.empty and list(fired.columns) == list(FIRED_COLUMNS)


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
