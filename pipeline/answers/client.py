"""A generic OpenAI-compatible chat client for a run or a command: a wall-clock deadline per call, bounded retries
with backoff, a concurrency limit, a call and token budget, and a cache of replies by (model, prompt hash) in the
data directory. It knows nothing of what it is asked: the answer layer's judge (pipeline/answers/judge.py) and
any other LLM step (relevance judging) bring their own prompts and a parser for the reply (`parse_json` for
the usual JSON object)."""

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
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pipeline import jsonl, netio
from pipeline.errors import DriftwatchError
from pipeline.redact import redact

log = logging.getLogger(__name__)

CACHE_FILE = "judge_cache.sqlite"
BACKOFF = 0.5  # seconds before the first retry; doubled each time (with jitter), capped at BACKOFF_CAP
BACKOFF_CAP = 8.0


class EndpointConfig(Protocol):
    """What the client reads of its configuration section ([generation] is one: GenerationConfig)."""

    base_url: str | None
    api_key_env: str | None  # NAME of the environment variable holding the API key (none: no key)
    temperature: float
    max_tokens: int  # per completion
    timeout: float  # wall-clock seconds per call
    retries: int  # further attempts after a timeout, a connection error, 429 or 5xx
    concurrency: int  # calls in flight at once (for the callers' thread pools)
    max_calls: int
    max_tokens_per_run: int


class JudgeError(DriftwatchError):
    """The endpoint cannot be configured (its API key variable is not set); the message names the setting."""


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
    bounded retries with backoff, a concurrency limit, the run's budget and the cache. `section` names the
    configuration section (generation, judging) in its errors."""

    def __init__(self, config: EndpointConfig, data_dir: Path, *, backoff: float = BACKOFF,
                 section: str = "generation") -> None:
        import openai

        key = "not-needed"  # local servers (vLLM, Ollama, llama.cpp) take any key
        if config.api_key_env:
            key = os.environ.get(config.api_key_env, "")
            if not key:
                raise JudgeError(f"{section}.api_key_env: the environment variable {config.api_key_env} is not set")
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


# --- parsing a reply --------------------------------------------------------------------------------------

_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$")


def parse_json(text: str) -> dict:
    """A reply that should be one JSON object (a ```json fence around it is taken off), as a dict; ValueError
    otherwise, so that `Client.chat` asks again. Bounded like every JSON the pipeline reads."""
    try:
        value = jsonl.loads_bounded(_FENCE.sub("", text.strip()), "the reply")
    except jsonl.BadJson as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value
