"""The pool (pipeline/judging/pool.py) built by the real daily job: two runs of the news slice with, on the second
day, a gold document edited, one deleted, a near copy of one (a sentence added, the question's words first: it
outranks the gold document) and an exact copy of another; then judgments and re-runs. And a long PEP's shadow."""

from __future__ import annotations

import dataclasses
import shutil
from datetime import date
from pathlib import Path

import pandas as pd
import pytest

from pipeline import contract, store
from pipeline.config import Config, JudgingConfig, SourceConfig
from pipeline.corpus import Corpus
from pipeline.gold import load_gold
from pipeline.job import run_day
from pipeline.judging import ledger, pool

DATA = Path(__file__).parent / "data"
NEWS = DATA / "news-slice"
DAY1, DAY2 = date(2025, 9, 10), date(2025, 9, 11)
ADDED = "A second suspect was charged on Thursday."
EDIT = "Officials later revised the account."


@dataclasses.dataclass(frozen=True)
class History:
    root: Path
    config: Config
    gold: dict[str, tuple[str, ...]]  # question -> relevant doc ids
    shadow: str  # the near copy of n42's gold document
    duplicate: str  # the exact copy (another id and URL, the same title and text) of n43's gold document
    edited: str  # n45's first gold document, given a sentence more on day 2
    deleted: str  # n46's gold document, deleted on day 2


def news_config(root: Path) -> Config:
    return Config(data_dir=root / "store", gold=root / "gold.jsonl",
                  sources=(SourceConfig("news", path=root / "daily"),))


def item(guid: str, *, new_guid: str | None = None, before: str = "", after: str = "") -> str:
    """The RSS item of `guid` in the slice's daily files, under `new_guid` (its link given a fragment), with a
    paragraph `before` its text and one `after` its first paragraph."""
    for path in sorted((NEWS / "daily").glob("*.xml")):
        text = path.read_text(encoding="utf-8")
        at = text.find(f">{guid}</guid>")
        if at >= 0:
            block = text[text.rfind("<item>", 0, at):text.find("</item>", at) + len("</item>")]
            break
    else:
        raise KeyError(guid)
    if new_guid:
        block = block.replace(f">{guid}</guid>", f">{new_guid}</guid>").replace("</link>", f"#{new_guid}</link>")
    if before:
        block = block.replace("<description>", f"<description>&lt;p&gt;{before}&lt;/p&gt;", 1)
    if after:
        first = block.index("&lt;/p&gt;", block.index("<description>") + len(f"&lt;p&gt;{before}&lt;/p&gt;"))
        block = block[:first] + f"&lt;/p&gt;&lt;p&gt;{after}" + block[first:]
    return block


def feed(path: Path, *items: str) -> None:
    path.write_text('<?xml version="1.0" encoding="UTF-8"?>\n<rss version="2.0"><channel><title>extra</title>'
                    f'<link>https://example.org/</link><description>test</description>{"".join(items)}'
                    "</channel></rss>\n", encoding="utf-8")


def build(root: Path, embedder) -> History:
    (root / "daily").mkdir(parents=True)
    for day in (DAY1, DAY2):
        shutil.copy(NEWS / "daily" / f"{day}.xml", root / "daily" / f"{day}.xml")
    shutil.copy(NEWS / "gold.jsonl", root / "gold.jsonl")
    config = news_config(root)
    gold = {q.id: q.relevant_ids for q in load_gold(config.gold)}
    questions = {q.id: q.question for q in load_gold(config.gold)}
    run_day(config, DAY1, embedder=embedder, notify=False)
    # Day 2's changes, in a second file of its date: a shadow, an exact copy, an edited gold document.
    shadow, duplicate, edited = f"{gold['n42'][0]}-copy", f"{gold['n43'][0]}-twin", gold["n45"][0]
    feed(root / "daily" / f"{DAY2}-extra.xml",
         item(gold["n42"][0], new_guid=shadow, before=questions["n42"], after=ADDED),
         item(gold["n43"][0], new_guid=duplicate), item(edited, after=EDIT))
    with Corpus.in_dir(config.data_dir) as corpus:  # and a gold document deleted (a tombstone: it stays deleted)
        corpus.delete([gold["n46"][0]], DAY2, "test: removed")
    run_day(config, DAY2, embedder=embedder, notify=False)
    return History(root, config, gold, shadow, duplicate, edited, gold["n46"][0])


@pytest.fixture(scope="module")
def history(tmp_path_factory, embedder) -> History:
    return build(tmp_path_factory.mktemp("pool") / "news", embedder)


def pool_of(config: Config, day: date) -> pd.DataFrame:
    found = store.read(config.data_dir, contract.POOL)
    return found[store.as_days(found[contract.RUN_DATE]) == pd.Timestamp(day)].reset_index(drop=True)


def rows(frame: pd.DataFrame, question: str | None = None, doc: str | None = None, reason: str | None = None
         ) -> pd.DataFrame:
    keep = pd.Series(True, index=frame.index)
    for column, value in ((contract.QUESTION_ID, question), (contract.DOC_ID, doc), (contract.REASON, reason)):
        if value is not None:
            keep &= frame[column] == value
    return frame[keep]


def top(config: Config, day: date, question: str, depth: int = 5) -> set[str]:
    """The question's documents in any pipeline's top `depth` on `day`, from per_question.csv."""
    pq = store.read_per_question(config.data_dir)
    pq = pq[(store.as_days(pq[contract.RUN_DATE]) == pd.Timestamp(day)) & (pq[contract.QUESTION_ID] == question)
            & (pq["k"] == depth)]
    return {d for value in pq["retrieved"] for d in store.split_ids(value)[:depth]}


def test_the_first_run_pools_every_unjudged_document_of_the_top_k_as_new(history):
    first = pool_of(history.config, DAY1)
    assert set(first[contract.REASON]) <= {contract.NEW_IN_TOP_K, contract.OUTRANKS_GOLD}
    for question, relevant in history.gold.items():
        expected = top(history.config, DAY1, question) - set(relevant)
        assert set(rows(first, question, reason=contract.NEW_IN_TOP_K)[contract.DOC_ID]) == expected
    assert (first[contract.RANK].between(1, 5)).all()
    assert not first[contract.CONTENT_HASH].isna().any()


def test_day_two_new_in_top_k_is_what_was_not_in_the_top_k_the_day_before(history):
    second = pool_of(history.config, DAY2)
    new = rows(second, reason=contract.NEW_IN_TOP_K)
    assert len(new)
    for question, doc in zip(new[contract.QUESTION_ID], new[contract.DOC_ID]):
        assert doc not in top(history.config, DAY1, question)
        assert doc in top(history.config, DAY2, question)
    kept = [(q, d) for q in history.gold for d in top(history.config, DAY1, q) & top(history.config, DAY2, q)
            if d not in history.gold[q]]
    assert kept  # documents in the top k both days: pooled on day 1, not new on day 2
    assert not any(len(rows(new, q, d)) for q, d in kept)
    assert len(rows(second, "n42", history.shadow, contract.NEW_IN_TOP_K)) == 1


def test_outranks_gold_names_a_gold_document_ranked_below(history):
    pq = store.read_per_question(history.config.data_dir)
    out = rows(pool_of(history.config, DAY2), reason=contract.OUTRANKS_GOLD)
    assert len(out)
    for question, doc, gold_doc, rank in zip(out[contract.QUESTION_ID], out[contract.DOC_ID],
                                             out[contract.GOLD_DOC_ID], out[contract.RANK]):
        assert gold_doc in history.gold[question] and doc not in history.gold[question]
        ranked = [store.split_ids(r) for r in pq.loc[(store.as_days(pq[contract.RUN_DATE]) == pd.Timestamp(DAY2))
                                                     & (pq[contract.QUESTION_ID] == question) & (pq["k"] == 5),
                                                     "retrieved"]]
        assert any(doc in r and (gold_doc not in r or r.index(gold_doc) > r.index(doc)) for r in ranked)


def test_a_near_copy_that_outranks_its_gold_document_is_a_shadow_and_a_warning(history):
    second = pool_of(history.config, DAY2)
    gold_doc = history.gold["n42"][0]
    shadow = rows(second, "n42", history.shadow, contract.SHADOW)
    assert len(shadow) == 1
    row = shadow.iloc[0]
    assert row[contract.GOLD_DOC_ID] == gold_doc
    assert row[contract.DETAIL] == f"+ Where was Charlie Kirk killed? | + {ADDED}"  # the copy's sentences only
    assert "- " not in row[contract.DETAIL]  # nothing of the gold document is missing from the copy
    with Corpus.in_dir(history.config.data_dir, readonly=True) as corpus:
        assert row[contract.CONTENT_HASH] == corpus.content_hashes([history.shadow], DAY2)[history.shadow]
    alerts = store.read(history.config.data_dir, contract.ALERTS)
    warned = alerts[(alerts["rule"] == contract.GOLD_SHADOWED) & (store.as_days(alerts[contract.RUN_DATE])
                                                                  == pd.Timestamp(DAY2))]
    assert len(warned) >= 1
    assert set(warned["severity"]) == {contract.WARNING}
    assert set(warned["pipeline"]) <= set(row[contract.PIPELINE].split())
    for message in warned["message"]:
        assert "n42" in message and gold_doc in message and history.shadow in message and ADDED in message
    # what the pipelines ranked: the shadow above the gold document in each warned pipeline's top 5
    pq = store.read_per_question(history.config.data_dir)
    for target in warned["pipeline"]:
        ranked = store.split_ids(pq.loc[(store.as_days(pq[contract.RUN_DATE]) == pd.Timestamp(DAY2))
                                        & (pq[contract.QUESTION_ID] == "n42") & (pq["k"] == 5)
                                        & (pq["pipeline"] == target), "retrieved"].iloc[0])
        assert history.shadow in ranked and (gold_doc not in ranked or
                                             ranked.index(gold_doc) > ranked.index(history.shadow))
    assert not len(rows(pool_of(history.config, DAY1), reason=contract.SHADOW))
    assert not (store.as_days(alerts[contract.RUN_DATE]) == pd.Timestamp(DAY1))[
        alerts["rule"] == contract.GOLD_SHADOWED].any()


def test_an_exact_copy_is_pooled_but_is_not_a_shadow(history):
    second = pool_of(history.config, DAY2)
    assert history.duplicate in top(history.config, DAY2, "n43")  # a candidate: in the top k beside its twin
    assert len(rows(second, "n43", history.duplicate, contract.NEW_IN_TOP_K)) == 1
    assert not len(rows(second, doc=history.duplicate, reason=contract.SHADOW))
    assert set(rows(second, reason=contract.SHADOW)[contract.DOC_ID]) == {history.shadow}


def test_an_edited_gold_document_is_gold_changed_and_a_deleted_one_gold_deleted(history):
    second = pool_of(history.config, DAY2)
    changed = rows(second, "n45", history.edited, contract.GOLD_CHANGED)
    assert len(changed) == 1
    assert changed.iloc[0][contract.GOLD_DOC_ID] == history.edited
    with Corpus.in_dir(history.config.data_dir, readonly=True) as corpus:
        assert changed.iloc[0][contract.CONTENT_HASH] == corpus.content_hashes([history.edited], DAY2)[history.edited]
    deleted = rows(second, "n46", history.deleted, contract.GOLD_DELETED)
    assert len(deleted) == 1
    assert deleted.iloc[0][contract.RANK] == 0 and deleted.iloc[0][contract.GOLD_DOC_ID] == history.deleted
    assert deleted.fillna("").iloc[0][contract.CONTENT_HASH] == ""
    assert set(rows(second, reason=contract.GOLD_CHANGED)[contract.DOC_ID]) == {history.edited}
    assert set(rows(second, reason=contract.GOLD_DELETED)[contract.DOC_ID]) == {history.deleted}
    assert not len(rows(pool_of(history.config, DAY1), reason=contract.GOLD_CHANGED))


def test_judging_by_a_human_takes_pairs_out_of_the_pool_and_a_rerun_gives_the_same_pool(history, tmp_path, embedder):
    shutil.copytree(history.root, tmp_path / "news")
    config = news_config(tmp_path / "news")
    before = pool_of(config, DAY2)
    alerts_before = store.read(config.data_dir, contract.ALERTS)
    run_day(config, DAY2, embedder=embedder, notify=False)  # a re-run: the same pool, the same alerts
    pd.testing.assert_frame_equal(pool_of(config, DAY2), before)
    pd.testing.assert_frame_equal(store.read(config.data_dir, contract.ALERTS), alerts_before)
    new = rows(before, reason=contract.NEW_IN_TOP_K)
    new = new[~new[contract.DOC_ID].isin([history.shadow, history.duplicate])]
    question, doc, digest = new.iloc[0][[contract.QUESTION_ID, contract.DOC_ID, contract.CONTENT_HASH]]
    with Corpus.in_dir(config.data_dir, readonly=True) as corpus:
        gold_hash = corpus.content_hashes([history.edited], DAY2)[history.edited]
    ledger.append_judgments(config.data_dir, [
        ledger.Judgment(question, doc, 0, "ana", ledger.now(), digest),
        ledger.Judgment("n45", history.edited, 2, "ana", ledger.now(), gold_hash),  # judged again on its new text
        ledger.Judgment("n42", history.shadow, 0, "llm:some-model", ledger.now(),
                        before.loc[before[contract.DOC_ID] == history.shadow, contract.CONTENT_HASH].iloc[0])])
    run_day(config, DAY2, embedder=embedder, notify=False)
    after = pool_of(config, DAY2)
    assert not len(rows(after, question, doc))  # judged on its text: no longer in the pool
    assert not len(rows(after, reason=contract.GOLD_CHANGED))  # the gold document's new text is judged
    assert len(rows(after, "n42", history.shadow, contract.SHADOW)) == 1  # an LLM's suggestion is no judgment
    assert len(after) == len(before) - len(rows(before, question, doc)) - 1
    # a judgment of another text does not count: the pair comes back when the document changes
    feed(config.data_dir.parent / "daily" / f"{DAY2}-update.xml", item(doc, after="Updated."))
    run_day(config, DAY2, embedder=embedder, notify=False)
    assert len(rows(pool_of(config, DAY2), question, doc))


def test_the_pool_off_writes_no_rows_and_a_failing_pool_never_stops_the_run(history, tmp_path, embedder,
                                                                           monkeypatch):
    shutil.copytree(history.root, tmp_path / "news")
    config = news_config(tmp_path / "news")
    # A judgments.jsonl line that cannot be read is bad input: the run stops before any write (exit 2), naming it.
    (config.data_dir / contract.JUDGMENTS).write_text("not json\n", encoding="utf-8")
    before = (config.data_dir / contract.POOL).read_bytes()
    with pytest.raises(ledger.JudgmentError, match=f"{contract.JUDGMENTS}:1"):
        run_day(config, DAY2, embedder=embedder, notify=False)
    assert (config.data_dir / contract.POOL).read_bytes() == before
    (config.data_dir / contract.JUDGMENTS).unlink()

    def failing(*args, **kwargs):
        raise RuntimeError("the pool broke")

    monkeypatch.setattr(pool, "build_pool", failing)  # a failure inside the pool: noted, the run goes on
    result = run_day(config, DAY2, embedder=embedder, notify=False)
    assert "pool not built: the pool broke" in result.run["events"]
    assert pool_of(config, DAY2).empty and len(pool_of(config, DAY1))
    assert result.run["status"] == contract.STATUS_OK
    monkeypatch.undo()
    off = dataclasses.replace(config, judging=JudgingConfig(pool=False))
    run_day(off, DAY1, embedder=embedder, notify=False)
    assert pool_of(config, DAY1).empty


def test_a_long_document_s_shadow_names_the_changed_sentence_both_ways(tmp_path, embedder):
    peps = DATA / "peps-slice"
    root = tmp_path / "peps"
    (root / "daily").mkdir(parents=True)
    shutil.copy(peps / "daily" / "2025-06-01.xml", root / "daily" / "2025-06-01.xml")
    config = Config(data_dir=root / "store", gold=peps / "gold.jsonl",
                    sources=(SourceConfig("peps", path=root / "daily"),), judging=JudgingConfig(shadow_similarity=0.8))
    day = date(2025, 6, 1)
    run_day(config, day, embedder=embedder, notify=False)
    with Corpus.in_dir(config.data_dir) as corpus:
        pep = next(s.document for s in corpus.snapshot(day) if s.document.id == "pep-0239")
        sentence = next(s for s in pool.sentences(pep.text) if len(s.split()) > 6)
        words = sentence.split()
        altered = " ".join([*words[:-2], "1999", words[-1]])
        question = next(q.question for q in load_gold(config.gold) if "pep-0239" in q.relevant)
        corpus.ingest([dataclasses.replace(pep, id="pep-0239-mirror", url=pep.url + "#mirror",
                                           text=question + "\n" + pep.text.replace(sentence, altered, 1))], day)
    assert len(pep.text.split()) > 300  # a long document: a one-sentence change keeps it a near copy
    run_day(config, day, embedder=embedder, notify=False)
    found = pool_of(config, day)
    shadow = rows(found, doc="pep-0239-mirror", reason=contract.SHADOW)
    assert len(shadow) == 1 and shadow.iloc[0][contract.GOLD_DOC_ID] == "pep-0239"
    detail = shadow.iloc[0][contract.DETAIL]
    assert f"- {sentence[:40]}" in detail and f"+ {altered[:40]}" in detail
    assert len(detail) <= pool.MAX_DETAIL


def test_shingle_jaccard_and_the_differing_sentences():
    gold = "The fire killed 12 people in the city. Rescue teams searched the site overnight."
    copy = "The fire killed 21 people in the city. Rescue teams searched the site overnight."
    a, b = pool.shingles(gold), pool.shingles(copy)
    # 14 words, 12 shingles each; the changed word is in 3 of them: 9 shared of 15
    assert len(a) == len(b) == 12 and pool.jaccard(a, b) == pytest.approx(9 / 15)
    assert pool.differing(gold, copy) == ["+ The fire killed 21 people in the city.",
                                          "- The fire killed 12 people in the city."]
    assert pool.differing(gold, gold) == []
    long = pool.detail_of([f"+ {'word ' * 100}"] * 10)
    assert len(long) == pool.MAX_DETAIL and long.endswith("…")
