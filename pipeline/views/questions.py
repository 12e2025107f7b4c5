"""The Questions page: per-question changes between two runs, the heatmap, the drill-down into one question
(its ranks, what it retrieved then and now, the documents that displaced its gold documents)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline import store
from pipeline.corpus import Corpus, CorpusError
from pipeline.metrics import metric_info
from pipeline.contract import FIRST_RANK, K, PIPELINE, QUESTION_ID, RETRIEVED, RUN_DATE
from pipeline.views import _day, between, question_column, safe_url


def _slice(per_question: pd.DataFrame, pipeline: str, k: int) -> pd.DataFrame:
    return per_question[(per_question[PIPELINE] == pipeline) & (per_question[K] == k)]


def _rank_key(rank: pd.Series) -> pd.Series:
    """first_relevant_rank with 0 (no relevant document within the candidate depth) as the worst rank."""
    values = pd.to_numeric(rank, errors="coerce").astype(float)
    return values.where(values > 0, math.inf)


def question_changes(per_question: pd.DataFrame, pipeline: str, k: int, metric: str,
                     then: date, now: date) -> pd.DataFrame:
    """Per question (index question_id): the metric then and now, change (now - then), harm (the change
    signed so that positive is worse), first relevant rank then and now (0: not retrieved) and whether
    the rank worsened. Questions present on either date; sorted worst first, then by question id."""
    column = question_column(metric)
    rows = _slice(per_question, pipeline, k)
    pair = rows[rows[RUN_DATE].isin([_day(then), _day(now)])]
    value = pair.pivot_table(index=QUESTION_ID, columns=RUN_DATE, values=column, aggfunc="first", dropna=False)
    rank = pair.pivot_table(index=QUESTION_ID, columns=RUN_DATE, values=FIRST_RANK, aggfunc="first", dropna=False)
    ids = sorted(set(pair[QUESTION_ID]))
    get = lambda table, day: table.reindex(index=ids).get(_day(day), pd.Series(np.nan, index=ids))  # noqa: E731
    out = pd.DataFrame(index=pd.Index(ids, name=QUESTION_ID))
    out["then"] = get(value, then).astype(float)
    out["now"] = get(value, now).astype(float)
    out["change"] = out["now"] - out["then"]
    out["harm"] = -out["change"] if metric_info(metric).higher_is_better else out["change"]
    out["rank_then"] = get(rank, then).astype("Int64")
    out["rank_now"] = get(rank, now).astype("Int64")
    out["rank_worse"] = (_rank_key(out["rank_now"]) > _rank_key(out["rank_then"])) & out["rank_then"].notna() \
        & out["rank_now"].notna()
    out = out.assign(_harm=out["harm"].fillna(-math.inf))
    out = out.sort_values(["_harm", "rank_worse"], ascending=[False, False], kind="stable")
    return out.drop(columns="_harm")


def question_heatmap(per_question: pd.DataFrame, pipeline: str, k: int, metric: str, then: date, now: date,
                     start: date | None = None, end: date | None = None) -> pd.DataFrame:
    """Questions x run dates of one metric, rows ordered by the largest regression between `then` and
    `now` first (see `question_changes`); columns cut to [start, end]."""
    column = question_column(metric)
    rows = between(_slice(per_question, pipeline, k), start, end)
    matrix = rows.pivot_table(index=QUESTION_ID, columns=RUN_DATE, values=column, aggfunc="first", dropna=False)
    order = question_changes(per_question, pipeline, k, metric, then, now).index
    order = [q for q in order if q in matrix.index] + sorted(set(matrix.index) - set(order))
    return matrix.reindex(order)


def regressed_questions(per_question: pd.DataFrame, pipeline: str, k: int, metric: str, then: date, now: date,
                        texts: Mapping[str, str] | None = None) -> pd.DataFrame:
    """The questions whose metric got worse, or whose first relevant document fell lower, from `then` to
    `now`: question_id, question, then, now, change, rank_then, rank_now (0: not retrieved), worst first."""
    changes = question_changes(per_question, pipeline, k, metric, then, now)
    worse = changes[(changes["harm"] > 0) | changes["rank_worse"]].reset_index()
    worse.insert(1, "question", worse[QUESTION_ID].map(dict(texts or {})).fillna(""))
    return worse[[QUESTION_ID, "question", "then", "now", "change", "rank_then", "rank_now"]]


def question_rows(per_question: pd.DataFrame, question_id: str) -> pd.DataFrame:
    """Every per_question.csv row of one question (all pipelines, k and dates): what a drill-down reads."""
    return per_question[per_question[QUESTION_ID] == question_id].reset_index(drop=True)


def rank_history(per_question: pd.DataFrame, question_id: str) -> pd.DataFrame:
    """A question's first relevant rank per run date and pipeline (NaN when no relevant document was within
    the candidate depth). The rank does not depend on k: the smallest k's rows are read."""
    rows = per_question[per_question[QUESTION_ID] == question_id]
    if rows.empty:
        return pd.DataFrame({RUN_DATE: pd.Series(dtype="datetime64[ns]"), PIPELINE: pd.Series(dtype=object),
                             "rank": pd.Series(dtype=float)})
    rows = rows[rows[K] == rows[K].min()]
    rank = pd.to_numeric(rows[FIRST_RANK], errors="coerce").astype(float)
    out = pd.DataFrame({RUN_DATE: rows[RUN_DATE], PIPELINE: rows[PIPELINE], "rank": rank.where(rank > 0)})
    return out.sort_values([PIPELINE, RUN_DATE], kind="stable").reset_index(drop=True)


def retrieved(per_question: pd.DataFrame, question_id: str, pipeline: str, k: int, day: date) -> list[str]:
    """The top-k doc ids a pipeline retrieved for a question on a date, best first ([] without a row)."""
    rows = _slice(per_question, pipeline, k)
    row = rows[(rows[QUESTION_ID] == question_id) & (rows[RUN_DATE] == _day(day))]
    return store.split_ids(row[RETRIEVED].iloc[-1]) if len(row) else []


def displacing(per_question: pd.DataFrame, question_id: str, pipeline: str, k: int, then: date, now: date,
               gold: Iterable[str]) -> pd.DataFrame:
    """The documents that overtook a gold document from `then` to `now` within the top k: a non-gold document
    ranked above a gold document now (or anywhere in the top k when that gold document has left it) that
    ranked below it then (or was not in the top k then). Covers gold documents pushed out of the top k, not
    only the first one. Columns: rank (now), doc_id, rank_then (<NA>: not in the top k then), displaced (the
    gold ids it overtook, space separated); best rank first."""
    gold = list(dict.fromkeys(gold))
    rank_now = {d: r for r, d in enumerate(retrieved(per_question, question_id, pipeline, k, now), start=1)}
    rank_then = {d: r for r, d in enumerate(retrieved(per_question, question_id, pipeline, k, then), start=1)}
    outside = math.inf  # the rank of a document not in the top k
    rows = []
    for doc_id, rank in rank_now.items():
        if doc_id in gold:
            continue
        overtaken = [g for g in gold if g in rank_then and rank < rank_now.get(g, outside)
                     and rank_then.get(doc_id, outside) > rank_then[g]]
        if overtaken:
            rows.append({"rank": rank, "doc_id": doc_id, "rank_then": rank_then.get(doc_id),
                         "displaced": " ".join(overtaken)})
    frame = pd.DataFrame(rows, columns=["rank", "doc_id", "rank_then", "displaced"])
    frame["rank_then"] = frame["rank_then"].astype("Int64")
    return frame


def documents_info(data_dir: Path, doc_ids: Sequence[str]) -> dict[str, dict]:
    """Title, url, source, first_seen and deleted_at per doc id, read from the corpus opened read-only
    ({} when there is no corpus yet)."""
    ids = list(dict.fromkeys(doc_ids))
    if not ids:
        return {}
    try:
        with Corpus.in_dir(data_dir, readonly=True) as corpus:
            return corpus.documents_info(ids)
    except CorpusError:
        return {}


def document_table(doc_ids: Sequence[str], info: Mapping[str, Mapping], gold: Iterable[str] = ()) -> pd.DataFrame:
    """Ranked documents for display: rank, doc_id, title, link (http(s) only), feed, first_seen, deleted_at,
    gold (True for the question's relevant documents). Titles stay text: the table is never rendered as HTML."""
    gold = set(gold)
    rows = []
    for rank, doc_id in enumerate(doc_ids, start=1):
        meta = info.get(doc_id, {})
        rows.append({"rank": rank, "doc_id": doc_id, "title": meta.get("title") or "(not in the corpus)",
                     "link": safe_url(meta.get("url")), "feed": meta.get("source") or "",
                     "first_seen": meta.get("first_seen") or "", "deleted_at": meta.get("deleted_at") or "",
                     "gold": doc_id in gold})
    columns = ["rank", "doc_id", "title", "link", "feed", "first_seen", "deleted_at", "gold"]
    return pd.DataFrame(rows, columns=columns)





def default_then(days: Sequence[date], alerts: pd.DataFrame, runs: pd.DataFrame, window: int) -> date:
    """The "Then" a reviewer wants first: the last run before the latest incident started (so "Now" shows what
    it changed); without an incident, `window` runs before the latest."""
    from pipeline.views.alerts import episodes, incidents  # one page's view reads another's: the incident

    stories = episodes(incidents(alerts, runs), runs)
    if stories:
        before = [d for d in days if d < stories[-1].start.date()]
        if before:
            return before[-1]
    return days[max(0, len(days) - 1 - window)]
