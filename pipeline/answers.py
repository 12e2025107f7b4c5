"""The answer layer: answer records (logged or generated) and their readers, the human labels, the offline
heuristics, layer attribution, and the rows of generation.csv, per_answer.csv, agreement.csv and answers/."""

from __future__ import annotations

import csv
import functools
import json
import logging
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline import contract, jsonl, store
from pipeline.agreement import agreement
from pipeline.errors import DriftwatchError
from pipeline.gold import GoldQuestion
from pipeline.redact import redact

log = logging.getLogger(__name__)

LOGGED = "logged"  # the `pipeline` of logged answers
HEURISTIC, JUDGE = "heuristic", "judge"  # generation.csv's `source`
LOGGED_KEYS = ("question_id", "answer", "contexts", "run_date", "reference")
LABEL_COLUMNS = ("question_id", "run_date", "metric", "claim", "label", "note")
# Per metric: the labels a human may give, the first of each pair being the pass (claim-level labels for
# faithfulness have a claim's text in `claim`).
ANSWER_LABELS = {"faithfulness": ("faithful", "unfaithful"), "answer_relevance": ("relevant", "irrelevant"),
                 "refusal": ("answer", "refusal")}
SUPPORTED, CONTRADICTED, UNDETERMINED = "supported", "contradicted", "undetermined"
VERDICTS = (SUPPORTED, CONTRADICTED, UNDETERMINED)
MAX_LINE_LENGTH = 10_000_000  # characters of one logged JSONL line

# per_answer.csv's faithfulness_state
SCORED, NOT_JUDGED = "scored", "not_judged"
UNDETERMINED_PREFIX = "undetermined:"
NO_CLAIMS, REFUSAL, UNPARSEABLE, UNREACHABLE = "no_claims", "refusal", "unparseable", "unreachable"
NO_DETERMINABLE = "no_determinable"  # every claim undetermined: the context neither supports nor contradicts it

# per_answer.csv's layer
RETRIEVAL_MISS, GENERATION_MISS, BOTH_FINE = "retrieval_miss", "generation_miss", "both_fine"
LAYERS = (RETRIEVAL_MISS, GENERATION_MISS, BOTH_FINE)

# Thresholds that turn scores into the pass/fail the labels and the layer attribution compare.
K_PRECISION_MIN = 0.5  # heuristic: an answer with fewer of its content words in the context is unfaithful
QA_COSINE_MIN = 0.3  # heuristic: a question-answer cosine under this is an irrelevant answer
RELEVANCE_MIN = 0.5  # judge: a judged relevance under this is an irrelevant answer

HEURISTIC_METRICS = ("k_precision", "unsupported_facts", "citation_validity", "citation_missing", "refusal_rate",
                     "refusal_with_gold", "qa_cosine")
JUDGE_METRICS = ("faithfulness", "answer_relevance", "reverse_relevance")
JUDGED_WATCHED = ("faithfulness", "answer_relevance")  # watched by the alert rules once the judge is trusted
HEURISTIC_WATCHED = "k_precision"  # the heuristic the alert rules watch, while the heuristics pass their gate
WATCHED = (*JUDGED_WATCHED, HEURISTIC_WATCHED)


class AnswersError(DriftwatchError):
    """A logged-answers or labels file that cannot be used; the message names the file and line."""


@dataclass(frozen=True)
class Context:
    id: str
    text: str


@dataclass(frozen=True)
class AnswerRecord:
    """One answer to one gold question on one run: what the generator was given and what it said."""

    question_id: str
    question: str
    answer: str
    contexts: tuple[Context, ...]
    pipeline: str = LOGGED
    reference: str | None = None


@dataclass(frozen=True)
class Claim:
    claim: str
    verdict: str  # supported | contradicted | undetermined
    reason: str = ""


@dataclass(frozen=True)
class Judgement:
    """What the judge said of one record; every score None where it was not computed."""

    state: str = NOT_JUDGED  # per_answer.csv's faithfulness_state
    claims: tuple[Claim, ...] = ()
    refusal: bool | None = None
    answer_relevance: float | None = None
    reverse_relevance: float | None = None
    noncommittal: bool | None = None
    relevance_reason: str = ""
    reverse_questions: tuple[str, ...] = ()  # the questions the judge wrote for the answer

    @property
    def faithfulness(self) -> float | None:
        """supported / (supported + contradicted): undetermined claims are left out, and a record without a
        determinable claim has no score (its state says why)."""
        if self.state != SCORED:
            return None
        supported = sum(c.verdict == SUPPORTED for c in self.claims)
        return supported / (supported + sum(c.verdict == CONTRADICTED for c in self.claims))


def undetermined(reason: str) -> str:
    return UNDETERMINED_PREFIX + reason


# --- logged answers ---------------------------------------------------------------------------------------


def _string(obj: dict, key: str, where: str, *, empty: bool = False) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or (not empty and not value.strip()):
        raise AnswersError(f"{where}: {key!r} must be a{'' if empty else ' non-empty'} string, got {value!r}")
    return value


def _contexts(value: object, where: str) -> tuple[Context, ...]:
    if not isinstance(value, list):
        raise AnswersError(f"{where}: 'contexts' must be a list of {{\"id\": ..., \"text\": ...}} objects")
    contexts = []
    for i, item in enumerate(value):
        if not isinstance(item, dict) or set(item) - {"id", "text"}:
            raise AnswersError(f"{where}: contexts[{i}] must be an object with 'id' and 'text' only")
        contexts.append(Context(_string(item, "id", f"{where}: contexts[{i}]"),
                                _string(item, "text", f"{where}: contexts[{i}]", empty=True)))
    return tuple(contexts)


def parse_logged(lines: Iterable[str], source: str, gold: Mapping[str, GoldQuestion],
                 fixed_date: date | None = None) -> list[tuple[date | None, AnswerRecord]]:
    """Every line of a logged-answers file as (run_date or None for every date, record); AnswersError naming
    the file and line for a bad one. In a folder's dated file (`fixed_date`) a line's run_date must be the
    file's date."""
    records: list[tuple[date | None, AnswerRecord]] = []
    seen: dict[tuple[str, date | None], int] = {}
    for lineno, where, obj in jsonl.objects(lines, source, AnswersError, max_length=MAX_LINE_LENGTH):
        unknown = sorted(set(obj) - set(LOGGED_KEYS))
        if unknown:
            raise AnswersError(f"{where}: unknown key {unknown[0]!r} (valid: {', '.join(LOGGED_KEYS)})")
        for key in ("question_id", "answer", "contexts"):
            if key not in obj:
                raise AnswersError(f"{where}: missing key {key!r}")
        qid = _string(obj, "question_id", where)
        if qid not in gold:
            raise AnswersError(f"{where}: question_id {qid!r} is not in the gold set")
        answer = _string(obj, "answer", where, empty=True)
        contexts = _contexts(obj["contexts"], where)
        day = fixed_date
        if obj.get("run_date") is not None:
            try:
                day = date.fromisoformat(_string(obj, "run_date", where))
            except ValueError:
                raise AnswersError(f"{where}: run_date {obj['run_date']!r} is not YYYY-MM-DD") from None
            if fixed_date is not None and day != fixed_date:
                raise AnswersError(f"{where}: run_date {day} in the file of {fixed_date}")
        reference = obj.get("reference")
        if reference is not None and not isinstance(reference, str):
            raise AnswersError(f"{where}: 'reference' must be a string")
        if (qid, day) in seen:
            raise AnswersError(f"{where}: a second answer to {qid!r} for "
                               f"{day or 'every date'} (first on line {seen[(qid, day)]})")
        seen[(qid, day)] = lineno
        records.append((day, AnswerRecord(qid, gold[qid].question, answer, contexts, LOGGED, reference)))
    return records


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise AnswersError(f"{path}: logged answers not found") from None
    except UnicodeDecodeError as exc:
        raise AnswersError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _dated_file(path: Path) -> date | None:
    try:
        return date.fromisoformat(path.stem)
    except ValueError:
        return None


def read_logged(path: Path, gold: Sequence[GoldQuestion], run_date: date) -> list[AnswerRecord]:
    """The logged answers of `run_date`: from the file (lines of that date and lines without one; a dated
    line wins over an undated one for the same question), or from the folder's YYYY-MM-DD.jsonl of that date
    (none when the folder has no file for it)."""
    path = Path(path)
    questions = {q.id: q for q in gold}
    if path.is_dir():
        day_file = path / f"{run_date.isoformat()}.jsonl"
        if not day_file.exists():
            log.warning("%s: no logged answers for %s", path, run_date)
            return []
        return [r for _, r in parse_logged(_read_text(day_file).splitlines(), str(day_file), questions, run_date)]
    parsed = parse_logged(_read_text(path).splitlines(), str(path), questions)
    dated = {r.question_id: r for d, r in parsed if d == run_date}
    undated = {r.question_id: r for d, r in parsed if d is None}
    return [dated.get(q.id) or undated[q.id] for q in gold if q.id in dated or q.id in undated]


def check_logged(path: Path, gold: Sequence[GoldQuestion]) -> None:
    """Validate every line of the logged answers (a file, or every dated file of a folder) before a run writes."""
    path = Path(path)
    questions = {q.id: q for q in gold}
    if path.is_dir():
        for day_file in sorted(path.glob("*.jsonl")):
            day = _dated_file(day_file)
            if day is None:
                raise AnswersError(f"{day_file}: a folder of logged answers holds YYYY-MM-DD.jsonl files only")
            parse_logged(_read_text(day_file).splitlines(), str(day_file), questions, day)
        return
    parse_logged(_read_text(path).splitlines(), str(path), questions)


# --- human labels -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Label:
    question_id: str
    run_date: str  # YYYY-MM-DD, or "" for every run date
    metric: str
    claim: str
    label: str
    note: str = ""


def read_labels(path: Path) -> list[Label]:
    """The human labels (CSV with a header: question_id, run_date, metric, claim, label, note); AnswersError
    naming the file and line of a bad row."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise AnswersError(f"{path}: labels file not found") from None
    except UnicodeDecodeError as exc:
        raise AnswersError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    rows = csv.reader(text.splitlines())
    header = next(rows, None)
    if header is None or tuple(h.strip() for h in header) != LABEL_COLUMNS:
        raise AnswersError(f"{path}:1: the header must be {','.join(LABEL_COLUMNS)}, got {header}")
    labels = []
    for lineno, row in enumerate(rows, start=2):
        if not any(cell.strip() for cell in row):
            continue
        where = f"{path}:{lineno}"
        if len(row) != len(LABEL_COLUMNS):
            raise AnswersError(f"{where}: {len(row)} fields, expected {len(LABEL_COLUMNS)}")
        label = Label(*(cell.strip() for cell in row))
        if not label.question_id:
            raise AnswersError(f"{where}: empty question_id")
        if label.run_date:
            try:
                date.fromisoformat(label.run_date)
            except ValueError:
                raise AnswersError(f"{where}: run_date {label.run_date!r} is not YYYY-MM-DD") from None
        if label.metric not in ANSWER_LABELS:
            raise AnswersError(f"{where}: unknown metric {label.metric!r} (valid: {', '.join(ANSWER_LABELS)})")
        valid = VERDICTS if label.claim else ANSWER_LABELS[label.metric]
        if label.claim and label.metric != "faithfulness":
            raise AnswersError(f"{where}: only faithfulness labels name a claim")
        if label.label not in valid:
            raise AnswersError(f"{where}: label {label.label!r} for {label.metric}"
                               f"{' (a claim)' if label.claim else ''} must be one of {', '.join(valid)}")
        labels.append(label)
    return labels


# --- heuristics -------------------------------------------------------------------------------------------

STOPWORDS = frozenset("""a about above after again against all also am an and any are as at be because been before
being below between both but by can could did do does doing down during each few for from further had has have
having he her here hers herself him himself his how i if in into is it its itself just me more most my myself no
nor not now of off on once only or other our ours ourselves out over own same she should so some such than that
the their theirs them themselves then there these they this those through to too under until up very was we were
what when where which while who whom why will with would you your yours yourself yourselves""".split())
_WORD = re.compile(r"[a-z0-9]+")
# Cited ids, written like [doc-1] or [doc-1, doc-2] (see judge.GENERATE_PROMPT).
_CITATION = re.compile(r"\[([^\[\]\s,;]+(?:\s*[,;]\s*[^\[\]\s,;]+)*)\]")
_MONTHS = ("january february march april may june july august september october november december").split()
_MONTH = r"(jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|jun(?:e)?|jul(?:y)?|aug(?:ust)?|sep(?:t(?:ember)?)?" \
         r"|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
_ISO_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
_DAY_MONTH = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH}\b")  # on lower-cased text
_MONTH_DAY = re.compile(rf"\b{_MONTH}\s+(\d{{1,2}})(?:st|nd|rd|th)?\b")
_NUMBER = re.compile(r"(?<![a-z0-9.,])\d+(?:[.,]\d+)*")
_IDENTIFIER = re.compile(r"\b[a-z]+[-_/]?\d+[a-z0-9]*(?:-[a-z0-9]+)*\b")
REFUSAL_PATTERNS = tuple(re.compile(p) for p in (
    r"\bno (?:relevant |specific |such )?information\b",
    r"\b(?:does|do|did) not (?:say|mention|contain|provide|specify|include|state|cover)\b",
    r"\b(?:doesn't|don't|didn't) (?:say|mention|contain|provide|specify|include|state|cover)\b",
    r"\bsays? nothing (?:about|on)\b",
    r"\b(?:is|are) not (?:mentioned|stated|specified|provided|covered|given)\b",
    r"\b(?:i|we) (?:don't|do not|cannot|can't) (?:know|say|answer|find|tell)\b",
    r"\b(?:i|we) (?:could not|couldn't|was not able to|were not able to) (?:find|locate|determine|identify)\b",
    r"\b(?:cannot|can't|unable to) (?:be )?(?:answer|determine|find|answered|determined)\b",
    r"\b(?:not|in)(?: enough|sufficient) information\b",
    r"\binsufficient information\b",
))


def _without_citations(text: str) -> str:
    return _CITATION.sub(" ", text)


def content_words(text: str) -> list[str]:
    """Lower-cased words and numbers of `text`, stopwords and cited ids left out, in order (repeats kept)."""
    return [w for w in _WORD.findall(_number(_without_citations(text)).lower()) if w not in STOPWORDS]


def k_precision(answer: str, contexts: Sequence[Context]) -> float | None:
    """Share of the answer's content words (occurrences) that occur anywhere in the context; None for an
    answer without content words.

    Misses: a paraphrase ("called off" for "cancelled") counts as unsupported, and a negation or a swapped
    figure made of context words ("not 14 days", "14 days" written as "41 days" when 41 occurs elsewhere)
    counts as supported: the words are checked, not what the answer says with them."""
    words = content_words(answer)
    if not words:
        return None
    known = set().union(*(_words_of(c.text) for c in contexts))
    return sum(w in known for w in words) / len(words)


def _number(text: str) -> str:
    """1,250 -> 1250 (a comma before three digits groups thousands); other text as it is."""
    return re.sub(r",(?=\d{3}(?!\d))", "", text)


def facts(text: str) -> list[str]:
    """The numbers, dates and identifiers of `text`, normalised so that the same fact written two usual ways
    compares equal: "12 March" and "March 12th" -> "march 12", "1,250" -> "1250", ids lower-cased
    ("A320", "covid-19"). Cited ids ([doc-1]) are not facts. In order of appearance, each once."""
    text = _without_citations(text).lower()
    found: list[str] = []
    found += _ISO_DATE.findall(text)
    found += [f"{_month(m)} {int(d)}" for d, m in _DAY_MONTH.findall(text)]
    found += [f"{_month(m)} {int(d)}" for m, d in _MONTH_DAY.findall(text)]
    found += _IDENTIFIER.findall(text)
    found += [_number(n) for n in _NUMBER.findall(_IDENTIFIER.sub(" ", _ISO_DATE.sub(" ", text)))]
    return list(dict.fromkeys(found))


# A context document recurs in the top k of many questions and runs: its words and facts are computed once.
@functools.lru_cache(maxsize=4096)
def _words_of(text: str) -> frozenset[str]:
    return frozenset(_WORD.findall(_number(text).lower()))


@functools.lru_cache(maxsize=4096)
def _facts_of(text: str) -> frozenset[str]:
    return frozenset(facts(text))


def _month(name: str) -> str:
    return next(m for m in _MONTHS if m.startswith(name[:3]))


def unsupported_facts(answer: str, contexts: Sequence[Context]) -> list[str]:
    """The answer's numbers, dates and identifiers (see `facts`) that the context does not contain.

    Misses: the unit or qualifier around a number ("14 days" vs "14 working days": both give 14, so it
    passes), numbers written as words ("fourteen"), a figure the context holds in another role (the fare is
    40 where the context's 40 is the length in km), dates written in forms `facts` does not parse
    ("the 12th", "next Tuesday"), and derived figures the context supports by arithmetic (flagged)."""
    known = set().union(*(_facts_of(c.text) for c in contexts))
    return [f for f in facts(answer) if f not in known]


def citations(answer: str) -> list[str]:
    """The cited ids of the answer, written like [doc-1] or [doc-1, doc-2], each once, in order."""
    ids = [part.strip() for group in _CITATION.findall(answer) for part in re.split(r"[,;]", group)]
    return list(dict.fromkeys(i for i in ids if i))


def invalid_citations(answer: str, contexts: Sequence[Context]) -> list[str]:
    """Cited ids that are not among the context's ids.

    Misses: a valid id cited for a sentence its document does not support (the id is checked, not the
    attribution), and citations in any other form (footnotes, "(source: ...)", bare ids)."""
    given = {c.id for c in contexts}
    return [i for i in citations(answer) if i not in given]


def is_refusal(answer: str) -> bool:
    """Whether the answer declines ("no information", "the documents do not say", "I cannot answer").

    Misses: refusals in other words or languages ("that is beyond these articles"), a partial refusal that
    answers half the question, and an answer that hedges without declining; an answer that quotes a document
    saying "did not say" is taken for a refusal (the patterns do not know who is speaking)."""
    text = answer.lower().replace("\u2019", "'")
    return not text.strip() or any(p.search(text) for p in REFUSAL_PATTERNS)


def qa_cosines(questions: Sequence[str], answers: Sequence[str],
               encode: Callable[[Sequence[str]], np.ndarray]) -> list[float | None]:
    """Cosine of each question with its answer under `encode` (L2-normalised vectors: the bundled MiniLM);
    None for an empty answer.

    Misses: it measures topic, not correctness: an answer that restates the question, or answers it wrongly
    in its own words, scores high; a terse right answer ("14 days.") scores low."""
    present = [i for i, a in enumerate(answers) if a.strip()]
    out: list[float | None] = [None] * len(answers)
    if not present:
        return out
    vectors = encode([questions[i] for i in present] + [answers[i] for i in present])
    q, a = vectors[:len(present)], vectors[len(present):]
    for i, cosine in zip(present, np.sum(q * a, axis=1)):
        out[i] = float(cosine)
    return out


# --- per record, layer attribution ------------------------------------------------------------------------


def gold_in_context(record: AnswerRecord, question: GoldQuestion | None) -> int | None:
    """1 when a relevant gold document is among the contexts, 0 when none is, None when no gold is known."""
    if question is None or not question.relevant_ids:
        return None
    ids = {c.id for c in record.contexts}
    return int(any(d in ids for d in question.relevant_ids))


def heuristic_scores(record: AnswerRecord, question: GoldQuestion | None, require_citations: bool) -> dict:
    """The offline heuristics of one record (per_answer.csv's heuristic columns; qa_cosine comes in a batch)."""
    cited = citations(record.answer)
    return {
        "gold_in_context": gold_in_context(record, question),
        "k_precision": k_precision(record.answer, record.contexts),
        "unsupported": unsupported_facts(record.answer, record.contexts),
        "citations": cited,
        "citations_invalid": invalid_citations(record.answer, record.contexts),
        "citation_missing": int(not cited) if require_citations else None,
        "refusal": int(is_refusal(record.answer)),
    }


def heuristic_failure(scores: Mapping) -> bool:
    """Generation failure by the heuristics: a refusal, a number/date/id absent from the context, a cited id
    that is not in it, or under K_PRECISION_MIN of its content words in it."""
    kp = scores.get("k_precision")
    return bool(scores["refusal"] or scores["unsupported"] or scores["citations_invalid"]
                or (kp is not None and kp < K_PRECISION_MIN))


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


# --- reading back (the dashboard and the gate) ------------------------------------------------------------


def records_path(data_dir: Path, day: date | str) -> Path:
    return Path(data_dir) / contract.ANSWERS_DIR / f"{day}.jsonl"


def write_records(data_dir: Path, day: str, objects: Sequence[dict]) -> None:
    """answers/DATE.jsonl, atomically, replacing the date's earlier file."""
    path = records_path(data_dir, day)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = "".join(json.dumps(o, ensure_ascii=False, allow_nan=False, default=_json_default) + "\n"
                   for o in objects).encode()
    store.atomic_write(path, lambda f: f.write(body))


def _json_default(value: object) -> object:
    raise TypeError(f"cannot write {value!r} to an answers file")


def read_records(data_dir: Path, day: date | str) -> list[dict]:
    """The full answer records of a run date (answers/DATE.jsonl), [] when the date has none."""
    path = records_path(data_dir, day)
    if not path.exists():
        return []
    try:
        return [jsonl.loads_bounded(line, f"{path}:{n}", store.StoreSchemaError)
                for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1) if line.strip()]
    except UnicodeDecodeError as exc:
        raise store.StoreSchemaError(f"{path}: not an answers file: {exc}") from None


def record_dates(data_dir: Path) -> list[str]:
    """The run dates with an answers file, oldest first."""
    folder = Path(data_dir) / contract.ANSWERS_DIR
    return sorted(p.stem for p in folder.glob("*.jsonl") if _dated_file(p) is not None) if folder.is_dir() else []


def _latest_agreement(agreement_frame: pd.DataFrame, metric: str, judge_name: str) -> pd.Series | None:
    """The latest answer-level agreement row of `metric` by `judge_name` (None without labels)."""
    rows = agreement_frame[(agreement_frame["metric"] == metric) & (agreement_frame["judge"] == judge_name)
                           & (agreement_frame["level"] == "answer")]
    return None if rows.empty else rows.sort_values(contract.RUN_DATE, kind="stable").iloc[-1]


def trusted_metrics(agreement_frame: pd.DataFrame, judge_name: str) -> dict[str, tuple[bool, str]]:
    """Per judged metric (faithfulness, answer_relevance): whether the judge `judge_name` may fire an alert or
    fail a gate, and why: its latest answer-level kappa against the labels must reach min_kappa (`trusted`).
    Without labels the judge is not trusted: its verdicts were never checked against people."""
    out = {}
    for metric in JUDGED_WATCHED:
        latest = _latest_agreement(agreement_frame, metric, judge_name)
        if latest is None:
            out[metric] = (False, f"{metric} by {judge_name or 'the judge'} has no human labels to agree with: "
                                  "recorded, but it cannot fire an alert or fail a gate")
            continue
        ok = bool(latest["trusted"] == 1)
        day = pd.Timestamp(latest[contract.RUN_DATE]).strftime("%Y-%m-%d")
        out[metric] = (ok, f"{metric} by {judge_name}: kappa {float(latest['kappa']):.2f} against the labels of "
                           f"{day} is {'at least' if ok else 'below'} generation.min_kappa"
                           + ("" if ok else ": recorded, but it cannot fire an alert or fail a gate"))
    return out


def heuristic_trust(agreement_frame: pd.DataFrame) -> tuple[bool, str]:
    """Whether the heuristics' answer-level faithfulness verdict (which K-precision decides with the unsupported
    facts and invalid citations) passed its agreement gate on its latest labels, and why. A heuristic that fails
    it is a hint on the Answers page, never an alert condition; without labels it has failed nothing."""
    latest = _latest_agreement(agreement_frame, "faithfulness", HEURISTIC)
    if latest is None:
        return True, f"{HEURISTIC_WATCHED}: no human labels to check the heuristics against; watched by the rules"
    ok = bool(latest["trusted"] == 1)
    day = pd.Timestamp(latest[contract.RUN_DATE]).strftime("%Y-%m-%d")
    return ok, (f"{HEURISTIC_WATCHED} (the heuristics' faithfulness): kappa {float(latest['kappa']):.2f} against the "
                f"labels of {day} is {'at least' if ok else 'below'} generation.min_kappa"
                + ("" if ok else ": a hint on the Answers page, it cannot fire an alert"))


def alert_inputs(config) -> tuple:
    """(per_answer, trusted) for the alert rules: the stored per-answer series and, per judged metric, whether
    its judge's latest kappa reaches generation.min_kappa (for K-precision, the heuristics' own: `heuristic_trust`);
    (None, None) when the answer layer is off."""
    if config.generation.mode == "off":
        return None, None
    agreement_frame = store.read(config.data_dir, contract.AGREEMENT)
    trust = {**trusted_metrics(agreement_frame, config.generation.judge_name),
             HEURISTIC_WATCHED: heuristic_trust(agreement_frame)}
    return store.read(config.data_dir, contract.PER_ANSWER), {m: ok for m, (ok, _) in trust.items()}


def replace_judgement(s: Scored, judgement: Judgement) -> Scored:
    return replace(s, judgement=judgement, judged=True)


# --- one run ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AnswerRun:
    """One run date's answer layer: the rows of its three CSVs, its answers/ objects and what to note."""

    generation: list[dict]
    per_answer: list[dict]
    agreement: list[dict]
    records: list[dict]
    events: list[str]


SUMMARY = (("judge", "faithfulness"), ("judge", "answer_relevance"), ("heuristic", "k_precision"),
           ("heuristic", "unsupported_facts"), ("heuristic", "refusal_with_gold"), ("heuristic", "retrieval_miss"),
           ("heuristic", "generation_miss"))


def summary(run: AnswerRun) -> str:
    """One line of the run's answer layer for the command line: per pipeline the main means (with how many
    records had no value), then the events."""
    parts = []
    for pipeline in dict.fromkeys(r["pipeline"] for r in run.generation):
        rows = {(r["source"], r["metric"]): r for r in run.generation if r["pipeline"] == pipeline}
        shown = [f"{metric} {rows[key]['value']:.3f}" + (f" ({rows[key]['undetermined']} of {rows[key]['n']} "
                                                         "undetermined)" if rows[key]["undetermined"] else "")
                 for key in SUMMARY if key in rows for metric in [key[1]]]
        parts.append(f"{pipeline} " + ", ".join(shown))
    return "; ".join(parts + run.events) or "no answers"


def check_inputs(config, gold: Sequence[GoldQuestion]) -> None:
    """Everything the answer layer reads, validated before a run writes: the logged answers, the labels, the
    API key variable. Raises AnswersError or JudgeError."""
    g = config.generation
    if g.mode == "off":
        return
    if g.mode == "logged":
        check_logged(g.logged, gold)
    if g.labels is not None:
        read_labels(g.labels)
    if g.api_key_env and (g.mode == "generate" or g.judging) and not os.environ.get(g.api_key_env):
        from pipeline.judge import JudgeError

        raise JudgeError(f"generation.api_key_env: the environment variable {g.api_key_env} is not set")


def _contexts_of(ranking, documents: Mapping[str, str], k: int) -> tuple[Context, ...]:
    texts = list(ranking.texts) + [None] * (len(ranking.doc_ids) - len(ranking.texts))
    return tuple(Context(d, t if t else documents.get(d, "")) for d, t in list(zip(ranking.doc_ids, texts))[:k])


def run_answers(config, run_date: date, gold: Sequence[GoldQuestion], rankings: Mapping[str, Sequence],
                documents: Mapping[str, str], encode: Callable[[Sequence[str]], np.ndarray]) -> AnswerRun | None:
    """The answer layer of one run: the records (logged, or generated from the top k of generation.pipeline's
    `rankings`, with `documents` giving each doc id's text), the heuristics, the judge when configured, the
    labels' agreement. None when generation.mode is off. An endpoint that fails never stops it: the records
    it could not judge are undetermined:unreachable or not_judged, and `events` says so."""
    g = config.generation
    if g.mode == "off":
        return None
    day = run_date.isoformat()
    events: list[str] = []
    client = None
    try:
        if g.base_url is not None and (g.mode == "generate" or g.judging):
            from pipeline.judge import Client

            client = Client(g, config.data_dir)
        if g.mode == "logged":
            records = read_logged(g.logged, gold, run_date)
        else:
            records = _generate(config, client, gold, rankings, documents, events)
        scored = score_records(records, gold, g.citations_required, encode)
        if g.judging and client is not None and scored:
            from pipeline.judge import judge_records

            done = judge_records(client, g.judge_name, [s.record for s in scored], encode)
            scored = [replace_judgement(s, j) for s, j in zip(scored, done.judgements)]
            events.append(done.summary(g.judge_name))
            if done.not_judged or done.unreachable:
                log.warning("%s: %s", day, redact(events[-1]))
    finally:
        if client is not None:
            client.close()
    labels = read_labels(g.labels) if g.labels is not None else []
    agreement_rows_ = agreement_rows(day, scored, labels, g.judge_name, g.min_kappa,
                                     str(g.labels) if g.labels is not None else "")
    if g.judging:
        history = store.read(config.data_dir, contract.AGREEMENT)
        history = history[store.as_days(history[contract.RUN_DATE]) < pd.Timestamp(run_date)]
        today = pd.DataFrame(agreement_rows_, columns=contract.AGREEMENT_COLUMNS).astype({"run_date": "datetime64[ns]"})
        trust = trusted_metrics(pd.concat([history, today], ignore_index=True), g.judge_name)
        events += [why for ok, why in trust.values() if not ok]
    return AnswerRun(generation_rows(day, scored), [per_answer_row(day, s) for s in scored], agreement_rows_,
                     [full_record(day, s) for s in scored], events)


def _generate(config, client, gold: Sequence[GoldQuestion], rankings: Mapping[str, Sequence],
              documents: Mapping[str, str], events: list[str]) -> list[AnswerRecord]:
    from pipeline.config import target_list
    from pipeline.judge import context_block, generate_answers

    g = config.generation
    pipeline = g.pipeline or next(t.name for t in target_list(config) if not t.candidate)  # a watched one
    ranked = rankings.get(pipeline)
    if ranked is None:
        events.append(f"answers: target {pipeline} returned no rankings; nothing generated")
        return []
    drafts = [AnswerRecord(q.id, q.question, "", _contexts_of(r, documents, g.k), pipeline)
              for q, r in zip(gold, ranked)]
    answers = generate_answers(client, [(d.question_id, d.question) for d in drafts],
                               [context_block(d) for d in drafts])
    failed = sum(a is None for a in answers)
    if failed:
        events.append(f"answers: {failed} of {len(drafts)} could not be generated ({g.base_url})")
    return [replace(d, answer=a) for d, a in zip(drafts, answers) if a is not None]


def write_run(data_dir: Path, run_date: date, run: AnswerRun) -> None:
    """The run's answer files: answers/DATE.jsonl, then generation.csv, per_answer.csv and agreement.csv."""
    day = run_date.isoformat()
    write_records(data_dir, day, run.records)
    store.replace_date(data_dir, contract.PER_ANSWER, day, run.per_answer)
    store.replace_date(data_dir, contract.GENERATION, day, run.generation)
    store.replace_date(data_dir, contract.AGREEMENT, day, run.agreement)
