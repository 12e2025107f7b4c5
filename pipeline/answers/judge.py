"""The LLM side of the answer layer, on the generic client (pipeline/answers/client.py): the prompts,
generation, the claim split, claim verdicts, the judged and the reverse-question relevance, and their parsers."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import numpy as np

from pipeline.answers.client import BudgetExhausted, Client, Unparseable, Unreachable, parse_json
from pipeline.answers.records import (CONTRADICTED, NO_CLAIMS, NO_DETERMINABLE, NOT_JUDGED, REFUSAL, SCORED,
                                      SUPPORTED, UNPARSEABLE, UNREACHABLE, VERDICTS, AnswerRecord, Claim, Judgement,
                                      undetermined)
from pipeline.redact import redact

log = logging.getLogger(__name__)

CLAIM_BATCH = 10  # claims per verdict call
REVERSE_QUESTIONS = 3  # questions the judge writes for the reverse-question relevance
MAX_CONTEXT_CHARS = 4000  # of one context document in a prompt

GENERATE_PROMPT = """You answer questions from the documents given, and from nothing else.
Each document starts with its id in square brackets, e.g. [doc-1].
Answer in a few sentences. After each sentence, cite the ids of the documents that support it, written in square
brackets exactly as given, e.g. [doc-1] or [doc-1, doc-2]. If the documents do not contain the answer, say
"The documents do not say." and nothing else."""

CLAIMS_PROMPT = """Split the answer below into atomic claims: short standalone statements, each checkable on its own,
with pronouns resolved and citations like [doc-1] left out. Do not add anything the answer does not say.
If the answer declines to answer (for example "the documents do not say"), set "refusal" to true and give no claims.
Reply with JSON only: {"refusal": false, "claims": ["...", "..."]}"""

VERDICTS_PROMPT = """For each numbered claim, decide from the context alone (not from what you know):
- "supported": the context states it or directly implies it;
- "contradicted": the context states something incompatible with it;
- "undetermined": the context neither supports nor contradicts it.
Give a one-line reason for each. Reply with JSON only:
{"verdicts": [{"claim": 1, "verdict": "supported", "reason": "..."}, ...]} with one entry per claim, in order."""

RELEVANCE_PROMPT = """Rate how well the answer addresses the question (not whether it is true): 1 when it answers
exactly what was asked, 0 when it does not address it at all, values between for partial answers.
Reply with JSON only: {"score": 0.0, "reason": "one line"}"""

REVERSE_PROMPT = f"""Write {REVERSE_QUESTIONS} different questions that the answer below would be a good answer to.
Set "noncommittal" to true when the answer is evasive, vague or declines ("I don't know", "it depends").
Reply with JSON only: {{"questions": ["...", "...", "..."], "noncommittal": false}}"""

PROMPTS = {"generate": GENERATE_PROMPT, "claims": CLAIMS_PROMPT, "verdicts": VERDICTS_PROMPT,
           "relevance": RELEVANCE_PROMPT, "reverse": REVERSE_PROMPT}


# --- parsing the replies ----------------------------------------------------------------------------------


def parse_claims(text: str) -> tuple[bool, list[str]]:
    value = parse_json(text)
    claims = value.get("claims", [])
    if not isinstance(claims, list) or not all(isinstance(c, str) for c in claims):
        raise ValueError("'claims' is not a list of strings")
    return bool(value.get("refusal", False)), [c.strip() for c in claims if c.strip()]


def verdict_parser(n: int) -> Callable[[str], list[tuple[str, str]]]:
    def parse(text: str) -> list[tuple[str, str]]:
        items = parse_json(text).get("verdicts")
        if not isinstance(items, list) or len(items) != n:
            raise ValueError(f"expected {n} verdicts, got {items!r}"[:200])
        out = []
        for item in items:
            verdict = item.get("verdict") if isinstance(item, dict) else None
            if verdict not in VERDICTS:
                raise ValueError(f"verdict {verdict!r} is not one of {', '.join(VERDICTS)}")
            reason = str(item.get("reason", "")).strip()
            out.append((verdict, reason.splitlines()[0] if reason else ""))
        return out
    return parse


def parse_relevance(text: str) -> tuple[float, str]:
    value = parse_json(text)
    score = value.get("score")
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not 0 <= score <= 1:
        raise ValueError(f"score {score!r} is not a number within [0, 1]")
    return float(score), str(value.get("reason", ""))


def parse_reverse(text: str) -> tuple[list[str], bool]:
    value = parse_json(text)
    questions = value.get("questions", [])
    if not isinstance(questions, list) or not all(isinstance(q, str) for q in questions):
        raise ValueError("'questions' is not a list of strings")
    return [q for q in questions if q.strip()], bool(value.get("noncommittal", False))


# --- the prompts' user parts ------------------------------------------------------------------------------


def context_block(record: AnswerRecord) -> str:
    return "\n\n".join(f"[{c.id}] {c.text[:MAX_CONTEXT_CHARS]}" for c in record.contexts)


def generation_user(question: str, contexts: str) -> str:
    return f"Documents:\n{contexts}\n\nQuestion: {question}"


def claims_user(record: AnswerRecord) -> str:
    return f"Question: {record.question}\n\nAnswer: {record.answer}"


def verdicts_user(record: AnswerRecord, claims: Sequence[str]) -> str:
    numbered = "\n".join(f"{i}. {c}" for i, c in enumerate(claims, start=1))
    return f"Context:\n{context_block(record)}\n\nClaims:\n{numbered}"


def relevance_user(record: AnswerRecord) -> str:
    return f"Question: {record.question}\n\nAnswer: {record.answer}"


def reverse_user(record: AnswerRecord) -> str:
    return f"Answer: {record.answer}"


# --- one record -------------------------------------------------------------------------------------------


def _state_of(error: Exception) -> str:
    return undetermined(UNPARSEABLE) if isinstance(error, Unparseable) else undetermined(UNREACHABLE)


def judge_record(client: Client, model: str, record: AnswerRecord,
                 encode: Callable[[Sequence[str]], np.ndarray]) -> Judgement:
    """Claims and verdicts (faithfulness), judged relevance and the reverse-question relevance of one record.
    A failing part leaves its own scores undetermined; BudgetExhausted propagates (the record is not judged)."""
    return with_reverse_relevance([record], [_judge_calls(client, model, record)], encode)[0]


def with_reverse_relevance(records: Sequence[AnswerRecord], judgements: Sequence[Judgement],
                           encode: Callable[[Sequence[str]], np.ndarray]) -> list[Judgement]:
    """The reverse-question relevance: the mean cosine of the judge's questions with the real one (0 for a
    noncommittal answer), encoded in one batch in the calling thread (the embedding cache is not thread-safe)."""
    todo = [i for i, j in enumerate(judgements) if j.reverse_questions and not j.noncommittal]
    texts = [t for i in todo for t in (records[i].question, *judgements[i].reverse_questions)]
    vectors = encode(texts) if texts else np.zeros((0, 0))
    out, at = list(judgements), 0
    for i in todo:
        n = len(judgements[i].reverse_questions)
        block = vectors[at:at + n + 1]
        out[i] = replace(judgements[i], reverse_relevance=float(np.mean(block[1:] @ block[0])))
        at += n + 1
    return out


def _judge_calls(client: Client, model: str, record: AnswerRecord) -> Judgement:
    """Every judge call of one record (the reverse questions asked, not yet compared with the question)."""
    state, claims, refusal = SCORED, (), None
    try:
        refusal, texts = client.chat(model, CLAIMS_PROMPT, claims_user(record), parse_claims)
        if refusal:
            state = undetermined(REFUSAL)
        elif not texts:
            state = undetermined(NO_CLAIMS)
        else:
            found: list[Claim] = []
            for start in range(0, len(texts), CLAIM_BATCH):
                batch = texts[start:start + CLAIM_BATCH]
                verdicts = client.chat(model, VERDICTS_PROMPT, verdicts_user(record, batch), verdict_parser(len(batch)))
                found += [Claim(c, v, r) for c, (v, r) in zip(batch, verdicts)]
            claims = tuple(found)
            if not any(c.verdict in (SUPPORTED, CONTRADICTED) for c in claims):
                state = undetermined(NO_DETERMINABLE)
    except (Unparseable, Unreachable) as error:
        log.warning("faithfulness of %s: %s", record.question_id, redact(error))
        state = _state_of(error)
    relevance = reverse = noncommittal = None
    reason, asked = "", ()
    try:
        relevance, reason = client.chat(model, RELEVANCE_PROMPT, relevance_user(record), parse_relevance)
    except (Unparseable, Unreachable) as error:
        log.warning("relevance of %s: %s", record.question_id, redact(error))
    try:
        questions, noncommittal = client.chat(model, REVERSE_PROMPT, reverse_user(record), parse_reverse)
        if noncommittal or not questions:
            reverse = 0.0
        else:
            asked = tuple(questions)
    except (Unparseable, Unreachable) as error:
        log.warning("reverse-question relevance of %s: %s", record.question_id, redact(error))
    return Judgement(state, claims, refusal, relevance, reverse, noncommittal, reason, asked)


@dataclass(frozen=True)
class JudgeRun:
    judgements: list[Judgement]
    calls: int  # calls made (the cache's replies not counted)
    cached: int
    not_judged: int  # records the budget left unjudged
    unreachable: int  # calls that failed every attempt

    def summary(self, model: str) -> str:
        parts = [f"judge {model}: {self.calls} calls, {self.cached} cached"]
        if self.not_judged:
            parts.append(f"{self.not_judged} answers not judged (budget spent)")
        if self.unreachable:
            parts.append(f"{self.unreachable} calls unreachable")
        return "; ".join(parts)


def judge_records(client: Client, model: str, records: Sequence[AnswerRecord],
                  encode: Callable[[Sequence[str]], np.ndarray]) -> JudgeRun:
    """Every record judged, `concurrency` at a time; once the budget is spent the rest are not_judged."""
    def one(record: AnswerRecord) -> Judgement:
        try:
            return _judge_calls(client, model, record)
        except BudgetExhausted:
            return Judgement()

    calls_before, cached_before = client.budget.calls, client.cached
    with ThreadPoolExecutor(max_workers=client.config.concurrency) as pool:
        judgements = with_reverse_relevance(records, list(pool.map(one, records)), encode)
    not_judged = sum(j.state == NOT_JUDGED for j in judgements)
    return JudgeRun(judgements, client.budget.calls - calls_before, client.cached - cached_before, not_judged,
                    client.failures)


def generate_answers(client: Client, questions: Sequence[tuple[str, str]], contexts: Sequence[str]) -> list[str | None]:
    """The generator's answer to each (question id, question) from its context block; None where the call
    failed or the budget is spent (that question then has no answer record this run)."""
    def one(i: int) -> str | None:
        try:
            return client.chat(client.config.model, GENERATE_PROMPT,
                               generation_user(questions[i][1], contexts[i])).strip()
        except (Unreachable, Unparseable, BudgetExhausted) as error:
            log.warning("generation for %s: %s", questions[i][0], redact(error))
            return None

    with ThreadPoolExecutor(max_workers=client.config.concurrency) as pool:
        return list(pool.map(one, range(len(questions))))
