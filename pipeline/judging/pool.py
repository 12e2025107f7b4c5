"""The pool (`pool.csv`): each run, the unjudged documents in any target's top `[judging] pool_depth` for each gold
question, with why each is there, and the shadow warning.

Reasons (contract.POOL_REASONS), one row per run date, question, document and reason:
- new_in_top_k: unjudged, and not in the question's top pool_depth of any target on the previous stored run
  (per_question.csv's `retrieved`); on the first run every unjudged document is new;
- outranks_gold: unjudged, and ranked above a relevant gold document of the question by a target (a gold document in
  the corpus that the target did not rank at all counts as ranked below everything); `gold_doc_id` is the best-ranked
  gold document it outranks;
- shadow: unjudged, and a near copy of a gold document of the question whose text differs from it: word 3-shingle
  Jaccard at least `[judging] shadow_similarity`, a different content hash and at least one sentence in one text and
  not the other; `detail` lists those sentences ("+ ..." in the copy only, "- ..." in the gold document only);
- gold_changed: the gold document's text is not the one it was judged on: the hash of the latest human judgment of
  the pair in judgments.jsonl, else the hash of its first stored version (its text when first seen);
- gold_deleted: the gold document left the corpus (rank 0, no content hash).

"Unjudged": not among the question's judged documents in the gold set (any grade), and not judged by a human in
judgments.jsonl on its current text. `pipeline` lists the targets that ranked the document in their top pool_depth,
`rank` its best rank among them (for gold_changed: its best rank in any target's ranking, 0 when none ranked it).

A shadow that a target ranks above its gold document (or ranks while the gold document is not ranked) in its top
pool_depth is a warning of rule contract.GOLD_SHADOWED, one per target, question and shadow."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date

import pandas as pd

from pipeline import contract, store
from pipeline.alerts import Alert
from pipeline.config import Config
from pipeline.corpus import Corpus
from pipeline.gold import GoldQuestion
from pipeline.judging.ledger import Judgment, judged_texts, latest
from pipeline.metrics import default_k
from pipeline.retrieval import Ranking, tokenize

SHINGLE = 3  # words per shingle
MAX_SENTENCE = 160  # characters of one differing sentence in `detail`
MAX_DETAIL = 600  # characters of `detail`
MAX_MESSAGE_DETAIL = 300  # characters of the differing sentences in a warning's message
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")  # a sentence end, or a line break (a paragraph, a title)


@dataclass(frozen=True)
class Pool:
    rows: list[dict] = field(default_factory=list)  # pool.csv rows of the run
    alerts: list[Alert] = field(default_factory=list)  # gold_shadowed warnings of the run


def pool_depth(config: Config) -> int:
    return config.judging.pool_depth or default_k(config.retrieval.k)


def shingles(text: str) -> frozenset[tuple[str, ...]]:
    """The text's word 3-shingles (lower-cased Unicode words, as retrieval tokenises); a shorter text: its words."""
    words = tokenize(text)
    if len(words) < SHINGLE:
        return frozenset([tuple(words)]) if words else frozenset()
    return frozenset(tuple(words[i:i + SHINGLE]) for i in range(len(words) - SHINGLE + 1))


def jaccard(a: frozenset, b: frozenset) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def sentences(text: str) -> list[str]:
    """The text's sentences, whitespace collapsed, in order, each once."""
    found = (" ".join(s.split()) for s in _SENTENCE.split(text))
    return list(dict.fromkeys(s for s in found if s))


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


def differing(gold: str, copy: str) -> list[str]:
    """The sentences in one text and not the other: "+ s" in `copy` only, then "- s" in `gold` only."""
    ours, theirs = sentences(gold), sentences(copy)
    mine, other = set(ours), set(theirs)
    return ([f"+ {s}" for s in theirs if s not in mine] + [f"- {s}" for s in ours if s not in other])


def detail_of(lines: Sequence[str], limit: int = MAX_DETAIL) -> str:
    """The differing sentences as one line ("+ a | - b"), each sentence and the whole capped."""
    return _short(" | ".join(_short(s, MAX_SENTENCE) for s in lines), limit)


def previous_top(per_question: pd.DataFrame, run_date: date, depth: int) -> dict[str, set[str]] | None:
    """Each question's documents in any pipeline's top `depth` on the latest stored run before `run_date`
    (per_question.csv's `retrieved` at the smallest stored k not below depth); None when there is no earlier run."""
    if per_question.empty:
        return None
    days = store.as_days(per_question[contract.RUN_DATE])
    earlier = per_question[days < pd.Timestamp(run_date)]
    if earlier.empty:
        return None
    last = earlier[store.as_days(earlier[contract.RUN_DATE]) == store.as_days(earlier[contract.RUN_DATE]).max()]
    ks = sorted({int(k) for k in last["k"]})
    k = next((k for k in ks if k >= depth), ks[-1])
    found: dict[str, set[str]] = {}
    for question, retrieved in zip(last.loc[last["k"] == k, contract.QUESTION_ID],
                                   last.loc[last["k"] == k, "retrieved"]):
        found.setdefault(str(question), set()).update(store.split_ids(retrieved)[:depth])
    return found


def _doc_of(doc_id: str, present: set[str]) -> str:
    """A ranked id as a document id: a chunk id ("doc#3") collapsed to its document when the corpus holds that."""
    if doc_id in present or "#" not in doc_id:
        return doc_id
    base = doc_id.rsplit("#", 1)[0]
    return base if base in present else doc_id


def build_pool(config: Config, run_date: date, gold: Sequence[GoldQuestion], ranked: Mapping[str, Sequence[Ranking]],
               corpus: Corpus, per_question: pd.DataFrame, judgments: Sequence[Judgment]) -> Pool:
    """The run's pool.csv rows and gold_shadowed warnings. `ranked`: each target's rankings (in gold order);
    `per_question`: per_question.csv as stored (its earlier runs give what is new); `judgments`: the ledger."""
    day = run_date.isoformat()
    depth = pool_depth(config)
    threshold = config.judging.shadow_similarity
    before = previous_top(per_question, run_date, depth)
    judged = judged_texts(judgments)
    humans = latest(judgments)
    gold_ids = sorted({d for q in gold for d in q.relevant_ids})
    ranked_ids = {d for rankings in ranked.values() for r in rankings for d in r.doc_ids}
    present = corpus.present({*gold_ids, *ranked_ids, *(d.rsplit("#", 1)[0] for d in ranked_ids)}, run_date)
    texts: dict[str, str | None] = {}
    shingled: dict[str, frozenset] = {}
    versions_of: dict[str, list[tuple[str, str, str]]] = {}

    def text(doc_id: str) -> str:
        if doc_id not in texts:
            texts[doc_id] = corpus.document_text(doc_id, run_date)
        return texts[doc_id] or ""

    def shingles_of(doc_id: str) -> frozenset:
        if doc_id not in shingled:
            shingled[doc_id] = shingles(text(doc_id))
        return shingled[doc_id]

    # Each target's full ranking per question, as documents (first occurrence wins).
    orders: dict[str, list[list[str]]] = {
        target: [list(dict.fromkeys(_doc_of(d, present) for d in r.doc_ids)) for r in rankings]
        for target, rankings in ranked.items()}
    top_docs = sorted({d for lists in orders.values() for o in lists for d in o[:depth]} | set(gold_ids))
    hashes = corpus.content_hashes([d for d in top_docs if d in present], run_date)
    rows: list[dict] = []
    alerts: list[Alert] = []

    def row(q: GoldQuestion, doc: str, reason: str, targets: Sequence[str], rank: int, gold_doc: str = "",
            detail: str = "") -> None:
        rows.append({contract.RUN_DATE: day, contract.QUESTION_ID: q.id, contract.DOC_ID: doc,
                     contract.REASON: reason, contract.PIPELINE: " ".join(targets), contract.RANK: rank,
                     contract.GOLD_DOC_ID: gold_doc, contract.CONTENT_HASH: hashes.get(doc, ""),
                     contract.DETAIL: detail})

    for i, q in enumerate(gold):
        relevant = list(q.relevant_ids)
        gold_present = [d for d in relevant if d in present]
        # the gold documents themselves: deleted, or changed since judged / first seen
        for g in relevant:
            if g not in versions_of:
                versions_of[g] = [v for v in corpus.versions(g) if v[0] <= day]  # as of the run date
            versions = versions_of[g]
            if g not in present:
                if versions:  # it was in the corpus once: it left
                    row(q, g, contract.GOLD_DELETED, [], 0, g)
                continue
            judged_on = humans.get((q.id, g))
            reference = judged_on.content_hash if judged_on is not None and judged_on.content_hash else (
                versions[0][1] if versions else "")
            if reference and hashes.get(g, reference) != reference:
                ranks = {t: lists[i].index(g) + 1 for t, lists in orders.items() if g in lists[i]}
                best = min(ranks.values(), default=0)
                row(q, g, contract.GOLD_CHANGED, [t for t, r in ranks.items() if r == best] if ranks else [], best, g)
        # the documents of every target's top depth
        in_top: dict[str, dict[str, int]] = {}  # doc -> target -> rank
        for target, lists in orders.items():
            for rank, doc in enumerate(lists[i][:depth], start=1):
                in_top.setdefault(doc, {})[target] = rank
        previous = None if before is None else before.get(q.id, set())
        for doc, ranks in in_top.items():
            if doc in q.relevant or doc not in present or (q.id, doc, hashes.get(doc, "")) in judged:
                continue
            targets = list(ranks)
            best = min(ranks.values())
            if previous is None or doc not in previous:
                row(q, doc, contract.NEW_IN_TOP_K, targets, best)
            outranked = _outranked(doc, gold_present, orders, i, ranks)
            if outranked:
                row(q, doc, contract.OUTRANKS_GOLD, targets, best, outranked[0])
            # shadow: the most similar gold document of the question, if near enough and differing
            similar = max(((jaccard(shingles_of(doc), shingles_of(g)), g) for g in gold_present
                           if hashes.get(g) != hashes.get(doc)), default=(0.0, ""))
            if similar[0] < threshold:
                continue
            g = similar[1]
            lines = differing(text(g), text(doc))
            if not lines:  # the same text (another URL or id): a duplicate, not a shadow
                continue
            detail = detail_of(lines)
            row(q, doc, contract.SHADOW, targets, best, g, detail)
            for target, rank in ranks.items():
                order = orders[target][i]
                gold_rank = order.index(g) + 1 if g in order else None
                if gold_rank is not None and gold_rank < rank:
                    continue
                where = f"rank {gold_rank}" if gold_rank is not None else "not ranked"
                alerts.append(Alert(
                    day, contract.GOLD_SHADOWED, target, f"{q.id}/{doc}", round(similar[0], 4), math.nan, math.nan,
                    threshold, contract.WARNING,
                    f"question {q.id}: {doc} (rank {rank}) is a near copy of gold document {g} ({where}) with "
                    f"different text (3-shingle Jaccard {similar[0]:.2f}): {detail_of(lines, MAX_MESSAGE_DETAIL)}"))
    return Pool(rows, alerts)


def _outranked(doc: str, gold_present: Sequence[str], orders: Mapping[str, list[list[str]]], i: int,
               ranks: Mapping[str, int]) -> list[str]:
    """The gold documents (in the corpus) that a target ranking `doc` in its top depth ranks below it, best-ranked
    first; one it does not rank at all comes after those it ranks."""
    found: dict[str, float] = {}
    for target, rank in ranks.items():
        order = orders[target][i]
        for g in gold_present:
            at = order.index(g) + 1 if g in order else math.inf
            if at > rank:
                found[g] = min(found.get(g, math.inf), at)
    return sorted(found, key=lambda g: (found[g], gold_present.index(g)))
