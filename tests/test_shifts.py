"""Named shifts (pipeline/shifts.py): c-TF-IDF against numbers worked by hand, the language identifier per document,
and the drift alert of the real job naming what came in: the sports pack in real news, the cooking pack in PEPs, a
foreign-language pack (tests/data: news-slice and peps-slice, with their license notes); the Drift page saying it."""

from __future__ import annotations

import math
import re
import shutil
from datetime import date
from pathlib import Path

import feedparser
import numpy as np
import pandas as pd
import pytest

from pipeline import contract, shifts, store
from pipeline.alerts import drift_windows
from pipeline.config import Config, DriftConfig, SourceConfig
from pipeline.job import backfill, run_day
from pipeline.views import drift as drift_views
from tests.test_alerts import day, drift_row, evaluate, frame
from tests.test_app import fresh_caches, history, open_app, visit  # noqa: F401 (the dashboard's fixtures)

DATA = Path(__file__).parent / "data"
NEWS, PEPS = DATA / "news-slice", DATA / "peps-slice"


# --- c-TF-IDF -------------------------------------------------------------------------------------------------


def test_class_tfidf_is_bertopics_formula_worked_by_hand():
    # Three classes, each its documents joined: A = "apple apple banana", B = "banana cherry", C = "cherry cherry
    # cherry". Words per class 3, 2, 3: A = int(8 / 3) = 2 (BERTopic truncates the average). Frequencies over the
    # classes: apple 2, banana 2, cherry 4, so idf = log(1 + 2/2) = log 2 for apple and banana, log(1 + 2/4) =
    # log 1.5 for cherry; tf is each class's counts over its words.
    counts = np.array([[2, 1, 0], [0, 1, 1], [0, 0, 3]])
    expected = np.array([[2 / 3 * math.log(2), 1 / 3 * math.log(2), 0],
                         [0, 1 / 2 * math.log(2), 1 / 2 * math.log(1.5)],
                         [0, 0, 1 * math.log(1.5)]])
    np.testing.assert_allclose(shifts.class_tfidf(counts), expected, rtol=1e-12)


def test_top_terms_rank_what_the_current_documents_hold_more_of():
    reference = ["The minister said the budget will pass parliament.", "Parliament debates the budget today.",
                 "The budget vote is delayed, the minister said."]
    current = ["The league match ended in a draw.", "Coach praises the league leaders after the match.",
               "Budget talks continue in parliament.", "League leaders win again; the match was close."]
    terms = shifts.top_terms(reference, current, n=5, min_documents=2)
    # Classes (stop words and tokens of fewer than two letters out): reference minister 2, said 2, budget 3,
    # parliament 2, debates 1, today 1, vote 1, delayed 1, pass 1 (14 words); current league 3, match 3, leaders 2,
    # ... Only league (3 documents), match (3) and leaders (2) are in at least 2 current documents and in a larger
    # share of them than of the reference's; budget and parliament are not (1 of 4 against 3 of 3, 2 of 3).
    assert [t.term for t in terms] == ["league", "match", "leaders"]
    assert (terms[0].current_share, terms[0].reference_share) == (0.75, 0.0)
    assert terms[0].current_weight > terms[2].current_weight and terms[0].reference_weight == 0


def test_one_long_document_cannot_name_the_shift_alone():
    reference = ["Parliament passed the budget."] * 4
    current = ["Parliament passed the budget."] * 3 + ["zebra " * 500 + "giraffe savanna"]
    assert shifts.top_terms(reference, current, n=5, min_documents=2) == []
    assert [t.term for t in shifts.top_terms(reference, current, n=5, min_documents=1)][:1] == ["zebra"]


def test_many_short_documents_outweigh_a_few_long_ones():
    """Each document weighs the same in its class: three long documents about the old topic's words (say a day's
    PEPs) and six short ones about a new topic; joined as they are, the long ones' words fill the class's tf and
    rank first, while the new topic is in twice as many documents."""
    reference = ["parser grammar token syntax"] * 3 + ["budget vote parliament"] * 3
    long_doc = " ".join(["function scope closure"] * 200)
    current = [long_doc] * 3 + ["water the plants, soil dry"] * 6
    # Per document: function, scope, closure each 1/3 of 3 documents (class sum 1 each); water, plants, soil, dry
    # each 1/4 of 6 documents (class sum 1.5 each): the pack's words rank first.
    assert {t.term for t in shifts.top_terms(reference, current, n=4, min_documents=3)} == {
        "water", "plants", "soil", "dry"}


# --- languages ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, code", [
    ("The prime minister said on Tuesday that the budget would be published next week.", "en"),
    ("El gobierno anunció hoy un nuevo plan para la vivienda en Madrid y Barcelona.", "es"),
    ("Die Bundesregierung hat heute neue Maßnahmen gegen die steigenden Energiepreise beschlossen.", "de"),
    ("Le gouvernement a présenté mercredi son projet de loi sur les retraites.", "fr"),
    ("1234 5678", shifts.UNKNOWN_LANGUAGE),
])
def test_the_language_identifier_answers_per_document(text, code):
    assert shifts.language(text) == code


def test_languages_are_named_only_when_their_shares_differ_from_the_reference():
    english = ["en"] * 20
    assert shifts.languages_phrase(english, ["en"] * 7, 0.1) == ""
    assert shifts.languages_phrase(["en"] * 18 + ["de"] * 2, ["en"] * 9 + ["de"], 0.1) == ""  # 10% German on both
    assert (shifts.languages_phrase(english, ["en"] * 5 + ["es"] * 3, 0.1)
            == "languages: 62% English, 38% Spanish (reference: 100% English)")


def test_new_categories_and_sources_are_named_by_documents():
    assert shifts.new_labels_phrase("sources", ["news", "news"], ["news", "sports", "sports"]) == \
        "sources: sports (2 new documents)"
    assert shifts.new_labels_phrase("sources", ["news", "sports"], ["sports"]) == ""


# --- a gradual shift ------------------------------------------------------------------------------------------


def test_a_gradual_shift_names_the_terms_whose_share_grows():
    named = lambda i, detail: drift_row(contract.NAMED_SHIFT, contract.CONTEXT, i, detail=detail)  # noqa: E731
    rows = [drift_row("psi_mean", "drifted", 0), named(0, "new content about league (20%), budget (30%)"),
            drift_row("psi_mean", "stable", 1),
            drift_row("psi_mean", "drifted", 2), named(2, "new content about league (45%), match (40%), budget (10%)")]
    (alert,) = evaluate(drift=rows, today=2)
    assert alert.severity == contract.ALERT  # confirmed by 2 disjoint windows, not on its own day
    assert alert.message.startswith("corpus drift: new content about league (45%), match (40%), budget (10%); "
                                    f"growing over 2 windows ({day(0)}, {day(2)}): league 20% → 45%. The 70 chunks")
    # The Drift page's conclusion says the same.
    drift = frame(contract.DRIFT, rows)
    confirmed = drift_views.confirmation(drift, day(2), DriftConfig())
    sentence = drift_views.conclusion(drift_views.drift_verdicts(drift, day(2)), confirmed, DriftConfig(),
                                      drift_views.named_shift(drift, day(2), confirmed))[1]
    assert "growing over 2 windows" in sentence and "league 20% → 45%" in sentence
    # A window that did not drift names nothing, even with a named_shift row of an older store's making.
    assert [w.drifted for w in drift_windows(drift)] == [True, False, True]
    assert drift_views.named_shift(drift, day(1), confirmed) == ""


# --- the real job -------------------------------------------------------------------------------------------


def entries(path: Path) -> list[str]:
    return [f"{e.title}\n{e.get('description', '')}".lower() for e in feedparser.parse(str(path)).entries]


def named_terms(message: str) -> list[str]:
    return list(shifts.term_shares(message.removeprefix("corpus drift: ").split(". The ")[0]))


def holding(term: str, documents: list[str]) -> int:
    return sum(bool(re.search(rf"\b{term}\b", d)) for d in documents)


def with_pack(tmp_path: Path, data: Path, pack: str, day: date, drift: DriftConfig = DriftConfig(evidently=False),
              *, alone: bool = False) -> Config:
    """A config over a copy of `data`'s daily folder with `pack` injected on `day` (`alone`: instead of the day's own
    file), and a fresh data directory."""
    daily = tmp_path / "daily"
    shutil.copytree(data / "daily", daily)
    if alone:
        (daily / f"{day.isoformat()}.xml").unlink()
    shutil.copy(data / pack, daily / f"{day.isoformat()}-offtopic.xml")
    return Config(data_dir=tmp_path / "store", gold=data / "gold.jsonl",
                  sources=(SourceConfig(name=data.name, path=daily),), drift=drift)


def drift_alert(results, run_date: date):
    (alert,) = [a for r in results if r.run_date == run_date for a in r.alerts if a.rule == contract.DRIFT_RULE]
    return alert


def test_the_sports_pack_in_the_news_is_named_by_its_terms(tmp_path, embedder):
    start, event = date(2025, 9, 10), date(2025, 9, 13)
    config = with_pack(tmp_path, NEWS, "offtopic_sports.xml", event)
    results = backfill(config, start, event, embedder=embedder)
    alert = drift_alert(results, event)
    terms = named_terms(alert.message)
    assert len(terms) == 5 and "categories: Sports (43 new documents)" in alert.message
    sports = entries(NEWS / "offtopic_sports.xml")
    news = [d for f in sorted((NEWS / "daily").glob("*.xml")) if f.stem <= event.isoformat() for d in entries(f)]
    for term in terms:  # each named term is held by a larger share of the sports items than of the news items
        assert holding(term, sports) / len(sports) > holding(term, news) / len(news), term
    drift = store.read(config.data_dir, contract.DRIFT)
    named = drift[drift[contract.STATISTIC] == contract.NAMED_SHIFT]
    assert list(named[contract.RUN_DATE]) == [pd.Timestamp(event)]  # named on the drifted day only
    assert (named[contract.VERDICT] == contract.CONTEXT).all()
    # A re-run of the day reads the memo: the named shift is kept.
    again = run_day(config, event, embedder=embedder)
    assert drift_alert([again], event).message == alert.message


def test_the_cooking_pack_in_peps_is_named_by_its_terms(tmp_path, embedder):
    config = with_pack(tmp_path, PEPS, "offtopic_cooking.xml", date(2025, 6, 2))
    results = backfill(config, date(2025, 6, 1), date(2025, 6, 2), embedder=embedder)
    alert = drift_alert(results, date(2025, 6, 2))
    terms = named_terms(alert.message)
    assert len(terms) == 5 and "categories: Cooking (6 new documents)" in alert.message
    cooking = entries(PEPS / "offtopic_cooking.xml")
    peps = [d for f in sorted((PEPS / "daily").glob("*.xml")) for d in entries(f)]
    for term in terms:
        assert holding(term, cooking) / len(cooking) > holding(term, peps) / len(peps), term


def test_a_foreign_language_burst_is_named_by_its_languages(tmp_path, embedder):
    start, event = date(2025, 9, 10), date(2025, 9, 13)
    # The day brings only the foreign wire's 12 items (a window of 10 chunks is enough).
    config = with_pack(tmp_path, NEWS, "offtopic_foreign.xml", event, DriftConfig(evidently=False, min_current=10),
                       alone=True)
    alert = drift_alert(backfill(config, start, event, embedder=embedder), event)
    assert re.search(r"languages: (33% (German|Spanish|French), ){2}33% (German|Spanish|French) "
                     r"\(reference: 100% English\)", alert.message), alert.message
    assert "new content about" not in alert.message  # the burst's own stop words are not its topic


# --- the Drift page -------------------------------------------------------------------------------------------

def test_the_drift_page_says_what_came_in(history, open_app):  # noqa: F811
    drift = store.read(history, contract.DRIFT)
    named = drift[drift[contract.STATISTIC] == contract.NAMED_SHIFT]
    (day,) = named[contract.RUN_DATE]  # the demo's drift day, the only one that drifted
    at = visit(open_app(history), "pages/drift.py")
    at.selectbox(key="drift_run").select(day.date()).run()
    assert not at.exception
    said = [e.value.replace("\\", "") for e in (*at.error, *at.warning)]  # markdown-escaped on the page
    (conclusion,) = [s for s in said if s.startswith("This run's verdict")]
    (detail,) = named["detail"]
    assert detail.startswith(shifts.TERMS_LEAD) and f"the effect line; {detail}" in conclusion, conclusion
