"""The drift windows: which earlier drifted windows a reference leaves out (a burst does not stay in it, a lasting
change does), and the reference's documents without them, found in a real corpus."""

from __future__ import annotations

from datetime import date, timedelta

import pandas as pd
import pytest

from pipeline import contract, store, windows
from pipeline.config import Config, DriftConfig
from pipeline.corpus import Corpus
from pipeline.sources import Document

START = date(2026, 3, 1)
NAMES = {"D": "drifted", "s": "stable", "n": "not_enough_data"}


def day(i: int) -> date:
    return START + timedelta(days=i)


def rows(verdicts: str, starts: dict[int, int] | None = None) -> pd.DataFrame:
    """drift.csv rows of one corpus statistic per day (D drifted, s stable, n not enough data), each run's window
    its own day unless `starts` says on which day it began."""
    starts = starts or {}
    frame = pd.DataFrame([{"run_date": day(i).isoformat(), "statistic": "novel_share", "value": 0.5,
                           "current_start": day(starts.get(i, i)).isoformat(), "p_value": 0.01,
                           "verdict": NAMES[v]} for i, v in enumerate(verdicts)])
    frame["run_date"] = pd.to_datetime(frame["run_date"])
    return frame


def spans(found: list[tuple[pd.Timestamp, pd.Timestamp]]) -> list[tuple[int, int]]:
    return [((a.date() - START).days, (b.date() - START).days) for a, b in found]


@pytest.mark.parametrize("verdicts, today, expected", [
    ("sss", 3, []),  # nothing drifted: nothing left out
    ("sDs", 3, [(1, 1)]),  # a burst, then calm: left out
    ("sD", 2, [(1, 1)]),  # a drift with no window after it yet: left out (a shift is compared with the before)
    ("sDD", 3, [(2, 2)]),  # day 1 was followed by a drift: a lasting change, back in the reference
    ("sDnD", 4, [(3, 3)]),  # a run without a verdict is no window: day 3 follows day 1
    ("sDsD", 2, [(1, 1)]),  # only the days before today count
])
def test_left_out_windows(verdicts, today, expected):
    assert spans(windows.left_out(rows(verdicts), pd.Timestamp(day(today)))) == expected


def test_the_window_after_a_drift_must_be_disjoint_from_it():
    # Day 2's window grew back over day 1 (the same burst seen twice): it does not count as what followed day 1.
    frame = rows("sDDs", starts={2: 1})
    assert spans(windows.left_out(frame, pd.Timestamp(day(4)))) == [(1, 1), (1, 2)]


def test_the_query_logs_verdicts_are_not_the_corpus_windows():
    frame = rows("sDs")
    frame["statistic"] = "query_novel_share"
    assert windows.left_out(frame, pd.Timestamp(day(3))) == []


def _document(doc_id: str) -> Document:
    return Document(doc_id, f"title {doc_id}", f"text of {doc_id}", f"https://example.org/{doc_id}", None, "feed",
                    ("news",))


def test_the_reference_leaves_out_the_documents_of_a_burst(tmp_path):
    """A corpus with two documents a day; a burst on day 5 drifted and day 6 was calm. On day 8 the reference
    (days 1 to 7) holds every document that entered in it but day 5's; the drifted window of day 5 is named."""
    config = Config(data_dir=tmp_path, gold=tmp_path / "gold.jsonl", drift=DriftConfig(reference_days=7, window_days=1, min_current=1))
    with Corpus.in_dir(tmp_path) as corpus:
        for i in range(9):
            corpus.ingest([_document(f"d{i}a"), _document(f"d{i}b")], day(i))
        store.write_table(tmp_path, contract.DRIFT, [
            {**{c: "" for c in contract.DRIFT_COLUMNS}, "run_date": day(i).isoformat(), "statistic": "novel_share",
             "value": 0.5, "current_start": day(i).isoformat(), "p_value": 0.01,
             "verdict": "drifted" if i == 5 else "stable"} for i in range(1, 8)])
        found = windows._window_versions(config, corpus, day(8), lambda versions: 10 ** 6)
        assert (found.reference.start, found.reference.end) == (day(0), day(7))
        assert spans(found.left_out) == [(5, 5)]
        kept = windows.without(corpus.entered_versions(found.reference.start, found.reference.end), found.left_out)
        assert sorted(doc_id for doc_id, _, _ in kept) == sorted(f"d{i}{x}" for i in range(1, 8) if i != 5
                                                                for x in "ab")
        # Outside the reference the burst is not named: on day 20 its window lies before the reference.
        assert windows._window_versions(config, corpus, day(20), lambda versions: 10 ** 6).left_out == []
