"""The offline heuristics of an answer: checks that need no LLM (K-precision, unsupported numbers/dates/ids,
citations, refusal patterns, the question-answer cosine), each with the failures it misses in its docstring,
and the heuristic verdict the layer attribution and the agreement gate use."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from pipeline.answers.records import K_PRECISION_MIN, AnswerRecord, Context
from pipeline.gold import GoldQuestion

STOPWORDS = frozenset("""a about above after again against all also am an and any are as at be because been before
being below between both but by can could did do does doing down during each few for from further had has have
having he her here hers herself him himself his how i if in into is it its itself just me more most my myself no
nor not now of off on once only or other our ours ourselves out over own same she should so some such than that
the their theirs them themselves then there these they this those through to too under until up very was we were
what when where which while who whom why will with would you your yours yourself yourselves""".split())
_WORD = re.compile(r"[a-z0-9]+")
# Cited ids, written like [doc-1] or [doc-1, doc-2] (see pipeline.answers.judge.GENERATE_PROMPT).
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
