"""The LLM side of the answer layer: the OpenAI-compatible client (deadline, retries, concurrency, budget),
the prompts, generation, claim split, claim verdicts, relevance, and the judge cache."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from pipeline import jsonl, netio
from pipeline.answers import (
    CONTRADICTED,
    NO_CLAIMS,
    NO_DETERMINABLE,
    NOT_JUDGED,
    REFUSAL,
    SCORED,
    SUPPORTED,
    UNPARSEABLE,
    UNREACHABLE,
    VERDICTS,
    AnswerRecord,
    Claim,
    Judgement,
    undetermined,
)
from pipeline.config import GenerationConfig
from pipeline.errors import DriftwatchError
from pipeline.redact import redact

log = logging.getLogger(__name__)

CACHE_FILE = "judge_cache.sqlite"
CLAIM_BATCH = 10  # claims per verdict call
REVERSE_QUESTIONS = 3  # questions the judge writes for the reverse-question relevance
BACKOFF = 0.5  # seconds before the first retry; doubled each time (with jitter), capped at BACKOFF_CAP
BACKOFF_CAP = 8.0
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


class JudgeError(DriftwatchError):
    """The judge cannot be configured (its API key variable is not set)."""


class Unreachable(Exception):
    """Every attempt at a call failed (time-out, connection, 429, 5xx) or the server refused it (4xx)."""


class Unparseable(Exception):
    """The reply was not the JSON asked for, after every retry."""


class BudgetExhausted(Exception):
    """The run's call or token budget is spent: what is left is not judged."""


# --- the cache --------------------------------------------------------------------------------------------


class Cache:
    """Replies by (model, prompt hash) in the data directory's judge_cache.sqlite: a re-run costs no calls."""

    def __init__(self, data_dir: Path) -> None:
        Path(data_dir).mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(Path(data_dir) / CACHE_FILE, check_same_thread=False)
        self._db.execute("CREATE TABLE IF NOT EXISTS replies (model TEXT, prompt_hash TEXT, reply TEXT, "
                         "PRIMARY KEY (model, prompt_hash))")
        self._lock = threading.Lock()

    def get(self, model: str, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT reply FROM replies WHERE model = ? AND prompt_hash = ?",
                                   (model, key)).fetchone()
        return row[0] if row else None

    def put(self, model: str, key: str, reply: str) -> None:
        with self._lock, self._db:
            self._db.execute("INSERT OR REPLACE INTO replies VALUES (?, ?, ?)", (model, key, reply))

    def close(self) -> None:
        self._db.close()


def prompt_hash(messages: Sequence[dict], temperature: float, max_tokens: int) -> str:
    blob = json.dumps({"messages": list(messages), "temperature": temperature, "max_tokens": max_tokens},
                      sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


# --- the budget and the client ----------------------------------------------------------------------------


@dataclass
class Budget:
    """Calls and tokens a run may spend; `take` reserves a call or raises BudgetExhausted."""

    max_calls: int
    max_tokens: int
    calls: int = 0
    tokens: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def take(self) -> None:
        with self._lock:
            if self.calls >= self.max_calls or self.tokens >= self.max_tokens:
                raise BudgetExhausted(f"budget spent: {self.calls} calls, {self.tokens} tokens")
            self.calls += 1

    def spend(self, tokens: int) -> None:
        with self._lock:
            self.tokens += tokens


def _retryable(error: Exception) -> bool:
    import openai

    if isinstance(error, (openai.APITimeoutError, openai.APIConnectionError, TimeoutError)):
        return True
    return isinstance(error, openai.APIStatusError) and (error.status_code == 429 or error.status_code >= 500)


def _call_with_deadline(fn: Callable[[], object], seconds: float) -> object:
    """fn() given up after `seconds` of wall-clock time (TimeoutError). The client's own timeout (the same
    seconds, per socket operation) ends the abandoned thread's read soon after."""
    return netio.within(seconds, "the endpoint", fn)


class Client:
    """One OpenAI-compatible endpoint for a run: chat completions with a wall-clock deadline per call,
    bounded retries with backoff, a concurrency limit, the run's budget and the cache."""

    def __init__(self, config: GenerationConfig, data_dir: Path, *, backoff: float = BACKOFF) -> None:
        import openai

        key = "not-needed"  # local servers (vLLM, Ollama, llama.cpp) take any key
        if config.api_key_env:
            key = os.environ.get(config.api_key_env, "")
            if not key:
                raise JudgeError(f"generation.api_key_env: the environment variable {config.api_key_env} is not set")
        self.config = config
        self._openai = openai.OpenAI(base_url=config.base_url, api_key=key, timeout=config.timeout, max_retries=0)
        self.cache = Cache(data_dir)
        self.budget = Budget(config.max_calls, config.max_tokens_per_run)
        self.backoff = backoff
        self.failures = 0  # calls that ended unreachable
        self.cached = 0  # replies served from the cache

    def close(self) -> None:
        self.cache.close()
        self._openai.close()

    def _once(self, model: str, messages: list[dict]) -> tuple[str, int]:
        response = self._openai.chat.completions.create(
            model=model, messages=messages, temperature=self.config.temperature,
            max_tokens=self.config.max_tokens)
        text = (response.choices[0].message.content or "") if response.choices else ""
        usage = getattr(response, "usage", None)
        tokens = getattr(usage, "total_tokens", None) if usage else None
        return text, int(tokens) if tokens is not None else (len(json.dumps(messages)) + len(text)) // 4

    def _sleep(self, attempt: int, error: Exception) -> None:
        wait = min(BACKOFF_CAP, self.backoff * 2 ** attempt) * (0.5 + random.random() / 2)
        retry_after = getattr(getattr(error, "response", None), "headers", {}).get("retry-after", "")
        if retry_after.replace(".", "", 1).isdigit():
            wait = min(BACKOFF_CAP, max(wait, float(retry_after)))
        time.sleep(wait)

    def chat(self, model: str, system: str, user: str, parse: Callable[[str], object] | None = None) -> object:
        """The reply (parsed by `parse`, which raises ValueError on a bad reply) to one prompt, from the cache
        when this model was asked exactly this before. A bad reply is asked again (`retries` times) and then
        raises Unparseable; a call failing every attempt raises Unreachable; the budget raises BudgetExhausted."""
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        key = prompt_hash(messages, self.config.temperature, self.config.max_tokens)
        parse = parse or (lambda text: text)
        hit = self.cache.get(model, key)
        if hit is not None:
            self.cached += 1
            return parse(hit)
        last: Exception | None = None
        for attempt in range(self.config.retries + 1):
            if attempt:
                self._sleep(attempt - 1, last)
            self.budget.take()
            try:
                text, tokens = _call_with_deadline(lambda: self._once(model, messages), self.config.timeout)
            except Exception as error:
                if not _retryable(error):
                    import openai

                    if isinstance(error, openai.OpenAIError):
                        self.failures += 1
                        raise Unreachable(redact(f"{self.config.base_url}: {error}")) from None
                    raise
                last = error
                log.info("%s", redact(f"{self.config.base_url}: attempt {attempt + 1} failed: {error}"))
                continue
            self.budget.spend(tokens)
            try:
                value = parse(text)
            except ValueError as error:
                last = Unparseable(f"{model}: {error}; reply {text[:200]!r}")
                log.info("%s", redact(f"{self.config.base_url}: attempt {attempt + 1} gave an unparseable reply: {error}"))
                continue
            self.cache.put(model, key, text)
            return value
        if isinstance(last, Unparseable):
            raise last
        self.failures += 1
        raise Unreachable(f"{self.config.base_url}: {last} (after {self.config.retries + 1} attempts)")


# --- parsing the replies ----------------------------------------------------------------------------------

_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$")


def _json(text: str) -> dict:
    try:
        value = jsonl.loads_bounded(_FENCE.sub("", text.strip()), "the reply")
    except jsonl.BadJson as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value


def parse_claims(text: str) -> tuple[bool, list[str]]:
    value = _json(text)
    claims = value.get("claims", [])
    if not isinstance(claims, list) or not all(isinstance(c, str) for c in claims):
        raise ValueError("'claims' is not a list of strings")
    return bool(value.get("refusal", False)), [c.strip() for c in claims if c.strip()]


def verdict_parser(n: int) -> Callable[[str], list[tuple[str, str]]]:
    def parse(text: str) -> list[tuple[str, str]]:
        items = _json(text).get("verdicts")
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
    value = _json(text)
    score = value.get("score")
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not 0 <= score <= 1:
        raise ValueError(f"score {score!r} is not a number within [0, 1]")
    return float(score), str(value.get("reason", ""))


def parse_reverse(text: str) -> tuple[list[str], bool]:
    value = _json(text)
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

