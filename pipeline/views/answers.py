"""The Answers page: the retrieval and generation layers side by side over time, the per-question layer
attribution of a run, one answer with its claims and the context it was judged against, and the agreement of
the judge and the heuristics with the human labels. Pure functions over generation.csv, per_answer.csv,
agreement.csv, the answers/DATE.jsonl records and the labels file."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date

import pandas as pd

from pipeline import store
from pipeline.answers import (BOTH_FINE, CONTRADICTED, GENERATION_MISS, HEURISTIC, JUDGE, LAYERS, RETRIEVAL_MISS,
                              SUPPORTED, UNDETERMINED, VERDICTS, Label)
from pipeline.contract import GOLD_IN_CONTEXT, K, LAYER, METRIC, PIPELINE, QUESTION_ID, RUN_DATE, SOURCE, VALUE
from pipeline.views import _day, values_of

SERIES = "series"  # the long frames' line name, as the charts group them
# The generation layer's series, in the order the chart lists them: (source, metric) -> label.
GENERATION_SERIES = {
    (JUDGE, "faithfulness"): "faithfulness (judge)",
    (JUDGE, "answer_relevance"): "answer relevance (judge)",
    (JUDGE, "reverse_relevance"): "reverse-question relevance (judge)",
    (HEURISTIC, "k_precision"): "K-precision (heuristic)",
    (HEURISTIC, "citation_validity"): "valid citations (heuristic)",
    (HEURISTIC, "unsupported_facts"): "answers with an unsupported number/date/id (heuristic)",
    (HEURISTIC, "refusal_with_gold"): "refusals with the gold document present (heuristic)",
    (HEURISTIC, "qa_cosine"): "question-answer cosine (heuristic)",
}
LAYER_LABELS = {RETRIEVAL_MISS: "retrieval miss", GENERATION_MISS: "generation miss", BOTH_FINE: "both fine",
                "": "unknown"}
VERDICT_ORDER = {CONTRADICTED: 0, UNDETERMINED: 1, SUPPORTED: 2}
ATTRIBUTION_COLUMNS = [QUESTION_ID, "question", LAYER, GOLD_IN_CONTEXT, "faithfulness", "faithfulness_state",
                       "k_precision", "unsupported", "citations_invalid", "refusal"]
AGREEMENT_KEYS = ["metric", "judge", "level"]
AGREEMENT_COLUMNS = [*AGREEMENT_KEYS, RUN_DATE, "n", "agreement", "kappa", "tpr", "fpr", "tp", "fp", "fn", "tn",
                     "trusted"]


def answer_dates(per_answer: pd.DataFrame) -> list[date]:
    """The run dates with answers, oldest first."""
    return sorted(per_answer[RUN_DATE].dt.date.unique())


def answer_pipelines(per_answer: pd.DataFrame) -> list[str]:
    """The pipelines whose answers were scored (`logged` for logged answers), in order of first appearance."""
    return values_of(per_answer, PIPELINE)


# --- the two layers over time ------------------------------------------------------------------------------


def retrieval_layer(metrics: pd.DataFrame, per_answer: pd.DataFrame, pipeline: str | None, k: int,
                    answered: str | None) -> pd.DataFrame:
    """The retrieval layer per run date (run_date, series, value): hit@k of `pipeline` from metrics.csv and
    the share of `answered`'s answers whose context held a gold document (per_answer.csv's gold_in_context,
    over the answers where a gold document is known)."""
    parts = []
    if pipeline is not None:
        rows = metrics[(metrics[PIPELINE] == pipeline) & (metrics[K] == k) & (metrics[METRIC] == "hit")]
        parts.append(pd.DataFrame({RUN_DATE: rows[RUN_DATE], SERIES: f"hit@{k} ({pipeline})", VALUE: rows[VALUE]}))
    if answered is not None:
        rows = per_answer[per_answer[PIPELINE] == answered]
        share = rows.groupby(RUN_DATE)[GOLD_IN_CONTEXT].mean().dropna()
        parts.append(pd.DataFrame({RUN_DATE: share.index, SERIES: f"gold in the answers' context ({answered})",
                                   VALUE: share.to_numpy()}))
    return _long(parts)


def generation_layer(generation: pd.DataFrame, pipeline: str | None) -> pd.DataFrame:
    """The generation layer per run date (run_date, series, value): the judged and heuristic series of
    GENERATION_SERIES that `pipeline` has, in that order (a run's undefined value is left out, not drawn as 0)."""
    rows = generation[generation[PIPELINE] == pipeline].dropna(subset=[VALUE])
    parts = []
    for (source, metric), label in GENERATION_SERIES.items():
        part = rows[(rows[SOURCE] == source) & (rows[METRIC] == metric)]
        parts.append(pd.DataFrame({RUN_DATE: part[RUN_DATE], SERIES: label, VALUE: part[VALUE]}))
    return _long(parts)


def _long(parts: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """The parts as one long frame, each series in its part's order, by date within it."""
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame({RUN_DATE: pd.Series(dtype="datetime64[ns]"), SERIES: pd.Series(dtype=object),
                             VALUE: pd.Series(dtype=float)})
    frame = pd.concat([p.assign(_part=i) for i, p in enumerate(parts)], ignore_index=True)
    return frame.sort_values(["_part", RUN_DATE], kind="stable").drop(columns="_part").reset_index(drop=True)


def run_summary(generation: pd.DataFrame, day: date, pipeline: str) -> pd.DataFrame:
    """One run's generation.csv rows of `pipeline`: source, metric, value, n, undetermined (how many records
    had no value: shown beside the mean, never folded into it)."""
    rows = generation[(generation[RUN_DATE] == _day(day)) & (generation[PIPELINE] == pipeline)]
    return rows[[SOURCE, METRIC, VALUE, "n", "undetermined"]].reset_index(drop=True)


# --- layer attribution -------------------------------------------------------------------------------------


def attribution(per_answer: pd.DataFrame, day: date, pipeline: str,
                texts: Mapping[str, str] | None = None) -> pd.DataFrame:
    """Per question of one run and pipeline: question_id, question, layer (retrieval miss / generation miss /
    both fine / unknown), gold_in_context, faithfulness and its state, k_precision, unsupported (the numbers,
    dates and ids absent from the context), citations_invalid, refusal. Misses first, then by question id."""
    rows = per_answer[(per_answer[RUN_DATE] == _day(day)) & (per_answer[PIPELINE] == pipeline)].copy()
    rows["question"] = rows[QUESTION_ID].map(dict(texts or {})).fillna("")
    rows[LAYER] = rows[LAYER].fillna("").map(LAYER_LABELS).fillna("unknown")
    for column in ("unsupported", "citations_invalid"):
        rows[column] = [", ".join(store.split_ids(v)) for v in rows[column].fillna("")]
    order = {LAYER_LABELS[name]: i for i, name in enumerate((RETRIEVAL_MISS, GENERATION_MISS, BOTH_FINE, ""))}
    rows = rows.assign(_order=rows[LAYER].map(order)).sort_values(["_order", QUESTION_ID], kind="stable")
    return rows[ATTRIBUTION_COLUMNS].reset_index(drop=True)


def layer_counts(attributed: pd.DataFrame) -> dict[str, int]:
    """How many questions fell in each layer (the attribution table's labels), every layer present."""
    counts = attributed[LAYER].value_counts()
    return {LAYER_LABELS[name]: int(counts.get(LAYER_LABELS[name], 0)) for name in (*LAYERS, "")}


# --- one answer --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClaimView:
    claim: str
    verdict: str  # supported | contradicted | undetermined
    reason: str


@dataclass(frozen=True)
class AnswerView:
    """One answer as the page shows it: texts stay plain text (the page never renders them as HTML)."""

    question_id: str
    question: str
    answer: str
    contexts: pd.DataFrame  # rank, doc_id, gold, cited, text
    claims: tuple[ClaimView, ...]
    claims_by: str  # "judge", "human" (the labels file's claim verdicts) or "" (no claims)
    unsupported: tuple[str, ...]
    citations_invalid: tuple[str, ...]
    scores: dict  # the per-answer scores and states, for a small table
    human: dict[str, str]  # metric -> the human's answer-level label (with its note)
    relevance_reason: str = ""  # the judge's one line on answer relevance
    reverse_questions: tuple[str, ...] = ()  # the questions the judge wrote for the answer


SCORE_KEYS = ("layer", "faithfulness_state", "faithfulness", "answer_relevance", "reverse_relevance", "noncommittal",
              "k_precision", "qa_cosine", "refusal", "citation_missing", "gold_in_context")


def answer_view(record: Mapping, gold: Iterable[str] = (), labels: Sequence[Label] = (),
                day: date | str | None = None) -> AnswerView:
    """An answers/DATE.jsonl record for display: its contexts in order with the gold and cited documents marked,
    its claims worst verdict first (the judge's; without them the human's claim labels of that answer and
    date, when the labels file has some), the unsupported numbers and invalid citations, its scores and the
    human's answer-level labels."""
    gold, cited = set(gold), set(record.get("citations") or ())
    contexts = pd.DataFrame([{"rank": i, "doc_id": c["id"], "gold": c["id"] in gold, "cited": c["id"] in cited,
                              "text": c["text"]} for i, c in enumerate(record.get("contexts") or (), start=1)],
                            columns=["rank", "doc_id", "gold", "cited", "text"])
    qid = record["question_id"]
    day = str(day or record.get("run_date") or "")[:10]
    mine = [lab for lab in labels if lab.question_id == qid and (not lab.run_date or lab.run_date == day)]
    claims = tuple(ClaimView(c["claim"], c["verdict"], c.get("reason") or "") for c in record.get("claims") or ())
    by = JUDGE if claims else ""
    if not claims:
        claims = tuple(ClaimView(lab.claim, lab.label, lab.note) for lab in mine
                       if lab.metric == "faithfulness" and lab.claim and lab.label in VERDICTS)
        by = "human" if claims else ""
    claims = tuple(sorted(claims, key=lambda c: VERDICT_ORDER.get(c.verdict, 1)))
    human = {lab.metric: lab.label + (f" ({lab.note})" if lab.note else "") for lab in mine if not lab.claim}
    return AnswerView(qid, record.get("question") or "", record.get("answer") or "", contexts, claims, by,
                      tuple(record.get("unsupported") or ()), tuple(record.get("citations_invalid") or ()),
                      {k: record.get(k) for k in SCORE_KEYS if k in record}, human,
                      record.get("relevance_reason") or "", tuple(record.get("reverse_questions") or ()))


def scores_table(view: AnswerView) -> pd.DataFrame:
    """The answer's scores as two text columns (score, value): empty values say "–", numbers are rounded."""
    def shown(value: object) -> str:
        if value is None or value == "" or (isinstance(value, float) and math.isnan(value)):
            return "–"
        return f"{value:.3f}" if isinstance(value, float) else str(value)
    return pd.DataFrame({"score": list(view.scores), "value": [shown(v) for v in view.scores.values()]})


# --- judge and heuristics against the humans ---------------------------------------------------------------


def agreement_table(agreement: pd.DataFrame, day: date | None = None) -> pd.DataFrame:
    """The latest agreement.csv row per (metric, judge, level) on or before `day` (every date when None):
    what the page's agreement table shows."""
    rows = agreement if day is None else agreement[agreement[RUN_DATE] <= _day(day)]
    latest = rows.sort_values(RUN_DATE, kind="stable").groupby(AGREEMENT_KEYS, sort=False).tail(1)
    return latest.sort_values(AGREEMENT_KEYS, kind="stable")[AGREEMENT_COLUMNS].reset_index(drop=True)


def confusion(row: Mapping) -> pd.DataFrame:
    """An agreement row's 2x2 confusion matrix: rows the human's verdict, columns the judge's or the
    heuristic's ("predicted"); "flagged" is the failure (unfaithful, irrelevant, refusal, not supported)."""
    return pd.DataFrame({"human": ["flagged", "passed"], "predicted: flagged": [int(row["tp"]), int(row["fp"])],
                         "predicted: passed": [int(row["fn"]), int(row["tn"])]})


def trust_notes(table: pd.DataFrame, min_kappa: float) -> list[str]:
    """A plain sentence per agreement row that cannot be trusted (kappa below min_kappa, or undefined)."""
    notes = []
    for row in table.itertuples(index=False):
        kappa = float(row.kappa)
        what = f"{row.metric} by {row.judge} ({row.level} level, {int(row.n)} labels)"
        if row.judge == HEURISTIC:
            if math.isnan(kappa) or kappa < min_kappa:
                notes.append(f"{what}: kappa {_kappa(kappa)} is below generation.min_kappa ({min_kappa:g}); "
                             "read the heuristic's values as hints, not verdicts.")
        elif not row.trusted:
            notes.append(f"{what}: kappa {_kappa(kappa)} is below generation.min_kappa ({min_kappa:g}): "
                         "recorded, cannot alert or fail the gate.")
    return notes


def _kappa(kappa: float) -> str:
    return "undefined (one label only)" if math.isnan(kappa) else f"{kappa:.2f}"
