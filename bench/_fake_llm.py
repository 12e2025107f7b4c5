"""A scripted OpenAI-compatible chat endpoint (outside the system under test) for the judge's tests and bench:
each prompt of pipeline/answers/judge.py gets a deterministic reply computed from the request."""

from __future__ import annotations

import json
import re

from pipeline.answers import judge

_CITE = re.compile(r"\s*\[[^\]]*\]")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def completion(content: str, tokens: int = 30) -> dict:
    """A chat.completion body carrying `content`."""
    return {"id": "fake", "object": "chat.completion", "created": 0, "model": "fake-judge",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": tokens - 10, "completion_tokens": 10, "total_tokens": tokens}}


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", _CITE.sub("", text)) if s.strip()]


def scripted_reply(body: dict) -> str:
    """The reply to one chat request: generation answers with the first document's first sentence; the claim
    split gives the answer's sentences; a claim is supported when its numbers all occur in the context, else
    contradicted; relevance is 0.9; reverse questions restate the answer."""
    system, user = body["messages"][0]["content"], body["messages"][1]["content"]
    if system == judge.GENERATE_PROMPT:
        first = re.search(r"\[([^\]]+)\] (.+?[.!?])(\s|$)", user, re.S)
        return f"{' '.join(first.group(2).split())} [{first.group(1)}]" if first else "The documents do not say."
    if system == judge.CLAIMS_PROMPT:
        answer = user.split("Answer: ", 1)[1]
        refusal = "do not say" in answer.lower()
        return json.dumps({"refusal": refusal, "claims": [] if refusal else _sentences(answer)})
    if system == judge.VERDICTS_PROMPT:
        context, claims = user.split("\n\nClaims:\n", 1)
        known = set(_NUMBER.findall(context))
        verdicts = []
        for line in claims.splitlines():
            claim = line.split(". ", 1)[1]
            ok = set(_NUMBER.findall(claim)) <= known
            verdicts.append({"claim": len(verdicts) + 1, "verdict": "supported" if ok else "contradicted",
                             "reason": "the figures match the context" if ok else "a figure is not the context's"})
        return json.dumps({"verdicts": verdicts})
    if system == judge.RELEVANCE_PROMPT:
        return json.dumps({"score": 0.9, "reason": "addresses the question"})
    if system == judge.REVERSE_PROMPT:
        answer = user.split("Answer: ", 1)[1]
        return json.dumps({"questions": [f"What about {answer}?"] * judge.REVERSE_QUESTIONS,
                           "noncommittal": "do not say" in answer.lower()})
    raise ValueError(f"unknown prompt {system[:60]!r}")
