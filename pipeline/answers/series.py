"""A run's scored records turned into rows: the judge's failure verdict and the layer attribution of each
record, per_answer.csv's row and the answers/DATE.jsonl object of a record, generation.csv's means per pipeline,
and agreement.csv's rows (the judge's and the heuristics' agreement with the human labels)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from pipeline import store
from pipeline.answers.agreement import agreement
from pipeline.answers.heuristics import heuristic_failure, heuristic_scores, qa_cosines
from pipeline.answers.records import (ANSWER_LABELS, BOTH_FINE, CONTRADICTED, GENERATION_MISS, HEURISTIC, JUDGE,
                                      K_PRECISION_MIN, LAYERS, NO_CLAIMS, NO_DETERMINABLE, NOT_JUDGED, QA_COSINE_MIN,
                                      REFUSAL, RELEVANCE_MIN, RETRIEVAL_MISS, SCORED, SUPPORTED, AnswerRecord,
                                      Judgement, Label, undetermined)
from pipeline.gold import GoldQuestion


def judged_failure(judgement: Judgement) -> bool | None:
    """Generation failure by the judge: a refusal, a contradicted claim, or no claim the context supports or
    contradicts (an answer from memory); None when the judge gave no verdict."""
    if judgement.refusal or judgement.state == undetermined(REFUSAL):
        return True
    if judgement.state == SCORED:
        return judgement.faithfulness < 1.0
    if judgement.state == undetermined(NO_DETERMINABLE):
        return True
    return None


def layer(gold: int | None, failed: bool | None) -> str:
    """retrieval_miss when no gold document reached the context (whatever the answer), else generation_miss
    or both_fine by `failed`; "" when the gold or the verdict is unknown."""
    if gold is None:
        return ""
    if gold == 0:
        return RETRIEVAL_MISS
    if failed is None:
        return ""
    return GENERATION_MISS if failed else BOTH_FINE


# --- a run's rows -----------------------------------------------------------------------------------------


@dataclass
class Scored:
    """One record with every score: heuristics, the judge's verdicts and both layer attributions."""

    record: AnswerRecord
    heuristic: dict
    qa_cosine: float | None = None
    judgement: Judgement = field(default_factory=Judgement)
    judged: bool = False  # the judge was asked (enabled for the run)

    @property
    def heuristic_layer(self) -> str:
        return layer(self.heuristic["gold_in_context"], heuristic_failure(self.heuristic))

    @property
    def judge_layer(self) -> str:
        return layer(self.heuristic["gold_in_context"], judged_failure(self.judgement))

    @property
    def layer(self) -> str:
        """The judge's attribution where it gave a verdict, else the heuristics'."""
        return (self.judge_layer or self.heuristic_layer) if self.judged else self.heuristic_layer


def score_records(records: Sequence[AnswerRecord], gold: Sequence[GoldQuestion], require_citations: bool,
                  encode: Callable[[Sequence[str]], np.ndarray] | None) -> list[Scored]:
    """The heuristics of every record (qa_cosine only with `encode`)."""
    questions = {q.id: q for q in gold}
    scored = [Scored(r, heuristic_scores(r, questions.get(r.question_id), require_citations)) for r in records]
    if encode is not None and records:
        for s, cosine in zip(scored, qa_cosines([r.question for r in records], [r.answer for r in records], encode)):
            s.qa_cosine = cosine
    return scored


def _cell(value: float | int | bool | None) -> float | int | str:
    if value is None:
        return ""
    return int(value) if isinstance(value, bool) else value


def per_answer_row(day: str, s: Scored) -> dict:
    j, h = s.judgement, s.heuristic
    # the claim counts are known once the answer was split (scored, or undetermined for want of claims)
    split = s.judged and j.state in (SCORED, undetermined(NO_CLAIMS), undetermined(NO_DETERMINABLE),
                                     undetermined(REFUSAL))
    return {
        "run_date": day, "pipeline": s.record.pipeline, "question_id": s.record.question_id,
        "gold_in_context": _cell(h["gold_in_context"]), "faithfulness": _cell(j.faithfulness),
        "faithfulness_state": j.state if s.judged else NOT_JUDGED,
        "n_claims": _cell(len(j.claims) if split else None),
        "n_supported": _cell(sum(c.verdict == SUPPORTED for c in j.claims) if split else None),
        "n_contradicted": _cell(sum(c.verdict == CONTRADICTED for c in j.claims) if split else None),
        "answer_relevance": _cell(j.answer_relevance), "reverse_relevance": _cell(j.reverse_relevance),
        "noncommittal": _cell(j.noncommittal), "k_precision": _cell(h["k_precision"]),
        "unsupported": store.join_ids(h["unsupported"]), "citations_invalid": store.join_ids(h["citations_invalid"]),
        "citation_missing": _cell(h["citation_missing"]), "refusal": h["refusal"], "qa_cosine": _cell(s.qa_cosine),
        "layer": s.layer,
    }


def full_record(day: str, s: Scored) -> dict:
    """The answers/DATE.jsonl object: the record's text, contexts, claims and every per-answer score."""
    row = {k: (None if v == "" and k not in ("layer",) else v) for k, v in per_answer_row(day, s).items()}
    row["unsupported"], row["citations_invalid"] = s.heuristic["unsupported"], s.heuristic["citations_invalid"]
    return {
        **{k: v for k, v in row.items() if k not in ("run_date", "pipeline", "question_id")},
        "run_date": day, "question_id": s.record.question_id, "pipeline": s.record.pipeline,
        "question": s.record.question, "answer": s.record.answer,
        "contexts": [asdict(c) for c in s.record.contexts], "reference": s.record.reference,
        "claims": [asdict(c) for c in s.judgement.claims], "citations": s.heuristic["citations"],
        "relevance_reason": s.judgement.relevance_reason, "reverse_questions": list(s.judgement.reverse_questions),
        "heuristic_layer": s.heuristic_layer, "judge_layer": s.judge_layer if s.judged else "",
    }


def _mean_row(day: str, pipeline: str, source: str, metric: str, values: Sequence[float | None],
              undetermined_count: int | None = None) -> dict:
    defined = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return {"run_date": day, "pipeline": pipeline, "source": source, "metric": metric,
            "value": float(np.mean(defined)) if defined else math.nan, "n": len(values),
            "undetermined": len(values) - len(defined) if undetermined_count is None else undetermined_count}


def generation_rows(day: str, scored: Sequence[Scored]) -> list[dict]:
    """generation.csv's rows: per pipeline, the heuristics (source heuristic), the judge's metrics (source
    judge, when it was asked) and the layer shares of each source. `undetermined` counts the records without
    a value (for faithfulness: every state but scored, not_judged included)."""
    rows = []
    for pipeline in dict.fromkeys(s.record.pipeline for s in scored):
        group = [s for s in scored if s.record.pipeline == pipeline]
        h = [s.heuristic for s in group]

        def add(source: str, metric: str, values: Sequence, undetermined_count: int | None = None) -> None:
            rows.append(_mean_row(day, pipeline, source, metric, values, undetermined_count))

        add(HEURISTIC, "k_precision", [x["k_precision"] for x in h])
        add(HEURISTIC, "unsupported_facts", [float(bool(x["unsupported"])) for x in h])
        add(HEURISTIC, "citation_validity",
            [1 - len(x["citations_invalid"]) / len(x["citations"]) if x["citations"] else None for x in h])
        if any(x["citation_missing"] is not None for x in h):
            add(HEURISTIC, "citation_missing", [x["citation_missing"] for x in h])
        add(HEURISTIC, "refusal_rate", [float(x["refusal"]) for x in h])
        add(HEURISTIC, "refusal_with_gold",
            [float(x["refusal"] and x["gold_in_context"] == 1) if x["gold_in_context"] is not None else None for x in h])
        add(HEURISTIC, "qa_cosine", [s.qa_cosine for s in group])
        rows += _layer_rows(day, pipeline, HEURISTIC, [s.heuristic_layer for s in group])
        if any(s.judged for s in group):
            add(JUDGE, "faithfulness", [s.judgement.faithfulness for s in group])
            add(JUDGE, "answer_relevance", [s.judgement.answer_relevance for s in group])
            add(JUDGE, "reverse_relevance", [s.judgement.reverse_relevance for s in group])
            rows += _layer_rows(day, pipeline, JUDGE, [s.judge_layer for s in group])
    return rows


def _layer_rows(day: str, pipeline: str, source: str, layers: Sequence[str]) -> list[dict]:
    known = [x for x in layers if x]
    return [{"run_date": day, "pipeline": pipeline, "source": source, "metric": name,
             "value": sum(x == name for x in known) / len(known) if known else math.nan, "n": len(layers),
             "undetermined": len(layers) - len(known)} for name in LAYERS]


# --- agreement with the human labels ----------------------------------------------------------------------


def _claim_key(text: str) -> str:
    return " ".join(text.lower().split()).rstrip(".")


def _applies(label: Label, day: str) -> bool:
    return not label.run_date or label.run_date == day


def _flags(scored: Sequence[Scored], labels: Sequence[Label], day: str, metric: str,
           predict: Callable[[Scored], bool | None]) -> tuple[list[bool], list[bool]]:
    """(human, predicted) failure flags of the answer-level labels of `metric` that `predict` has a value for."""
    by_question = {s.record.question_id: s for s in scored}
    human, predicted = [], []
    for label in labels:
        s = by_question.get(label.question_id)
        if label.metric != metric or label.claim or not _applies(label, day) or s is None:
            continue
        p = predict(s)
        if p is not None:
            human.append(label.label == ANSWER_LABELS[metric][1])
            predicted.append(p)
    return human, predicted


def _claim_flags(scored: Sequence[Scored], labels: Sequence[Label], day: str) -> tuple[list[bool], list[bool]]:
    """Claim-level labels matched to the judge's claims by text (case and spacing aside); flag = not supported."""
    verdicts = {(s.record.question_id, _claim_key(c.claim)): c.verdict for s in scored for c in s.judgement.claims}
    human, predicted = [], []
    for label in labels:
        verdict = verdicts.get((label.question_id, _claim_key(label.claim)))
        if label.claim and _applies(label, day) and verdict is not None:
            human.append(label.label != SUPPORTED)
            predicted.append(verdict != SUPPORTED)
    return human, predicted


def _judged_unfaithful(s: Scored) -> bool | None:
    if s.judgement.state == SCORED:
        return s.judgement.faithfulness < 1.0
    return True if s.judgement.state == undetermined(NO_DETERMINABLE) else None


def _heuristic_unfaithful(s: Scored) -> bool:
    kp = s.heuristic["k_precision"]
    return bool(s.heuristic["unsupported"] or s.heuristic["citations_invalid"]
                or (kp is not None and kp < K_PRECISION_MIN))


def agreement_rows(day: str, scored: Sequence[Scored], labels: Sequence[Label], judge_name: str,
                   min_kappa: float, labels_file: str) -> list[dict]:
    """agreement.csv's rows: per metric and level, the judge's (when asked) and the heuristics' agreement with
    the labels of `day` (and the undated ones). Failure is the positive class (see agreement.Agreement)."""
    judged = any(s.judged for s in scored)
    checks: list[tuple[str, str, str, tuple[list[bool], list[bool]]]] = [
        ("faithfulness", HEURISTIC, "answer", _flags(scored, labels, day, "faithfulness", _heuristic_unfaithful)),
        ("answer_relevance", HEURISTIC, "answer", _flags(
            scored, labels, day, "answer_relevance", lambda s: None if s.qa_cosine is None else s.qa_cosine < QA_COSINE_MIN)),
        ("refusal", HEURISTIC, "answer", _flags(scored, labels, day, "refusal", lambda s: bool(s.heuristic["refusal"]))),
    ]
    if judged:
        checks += [
            ("faithfulness", judge_name, "answer", _flags(scored, labels, day, "faithfulness", _judged_unfaithful)),
            ("faithfulness", judge_name, "claim", _claim_flags(scored, labels, day)),
            ("answer_relevance", judge_name, "answer", _flags(
                scored, labels, day, "answer_relevance",
                lambda s: None if s.judgement.answer_relevance is None else s.judgement.answer_relevance < RELEVANCE_MIN)),
            ("refusal", judge_name, "answer", _flags(scored, labels, day, "refusal", lambda s: s.judgement.refusal)),
        ]
    rows = []
    for metric, judge, level, (human, predicted) in checks:
        if not human:
            continue
        a = agreement(human, predicted)
        rows.append({"run_date": day, "metric": metric, "judge": judge, "level": level, "n": a.n,
                     "agreement": a.agreement, "kappa": a.kappa, "tpr": a.tpr, "fpr": a.fpr, "tp": a.tp,
                     "fp": a.fp, "fn": a.fn, "tn": a.tn,
                     "trusted": int(not math.isnan(a.kappa) and a.kappa >= min_kappa), "labels_file": labels_file})
    return rows


def replace_judgement(s: Scored, judgement: Judgement) -> Scored:
    return replace(s, judgement=judgement, judged=True)
