"""Drift on real news (a bundled 12-day slice of Wikipedia's Portal:Current events, CC BY-SA 4.0): normal
turnover raises no corpus-drift alert, and the off-topic sports pack is flagged on the day it lands, naming it."""

from __future__ import annotations

from datetime import date
from pathlib import Path

from pipeline import contract, store
from pipeline.contract import DRIFT_FAMILY, DRIFTED, NOT_ENOUGH_DATA
from pipeline.job import backfill
from tests.test_shifts import with_pack

SLICE = Path(__file__).parent / "data" / "news-slice"
START, EVENT, END = date(2025, 9, 10), date(2025, 9, 20), date(2025, 9, 21)
CORPUS_RULES = {"drift", "deleted", "config_change"}


def test_normal_news_is_not_drift_and_the_sports_pack_is_flagged_on_its_day(tmp_path, embedder):
    config = with_pack(tmp_path, SLICE, "offtopic_sports.xml", EVENT)
    results = backfill(config, START, END, embedder=embedder)
    before = [a for r in results if r.run_date < EVENT for a in r.alerts if a.rule in CORPUS_RULES]
    assert before == [], [a.message for a in before]
    drift = store.read(config.data_dir, contract.DRIFT)
    family = drift[drift["statistic"].isin(list(DRIFT_FAMILY))]
    normal = family[family["run_date"] < str(EVENT)]
    assert (normal["verdict"] != DRIFTED).all()
    assert (normal["verdict"] == NOT_ENOUGH_DATA).sum() < len(normal)  # most days were judged, not skipped
    (alert,) = [a for r in results if r.run_date == EVENT for a in r.alerts if a.rule == "drift"]
    assert alert.severity == "alert" and alert.new
    assert "Sports" in alert.message and "novel_share" in alert.message and "new_category_share" in alert.message
    event = family[family["run_date"] == str(EVENT)].set_index("statistic")
    assert event.loc["new_category_share", "verdict"] == DRIFTED
    assert event.loc["new_category_share", "value"] > 0.4  # 43 sports items among the day's new chunks
