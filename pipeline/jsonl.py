"""The one bounded JSON parser (`loads_bounded`: a depth and a size limit, for every JSON that comes in: replies,
logged lines, the outbox, mutes, sidecars) and the one reader of JSON-object-per-line files (gold sets, query
logs, logged retrieval runs and answers), so every bad line is reported the same way: the file and line, what is
wrong, and the caller's error class."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from pipeline.errors import DriftwatchError

MAX_DEPTH = 64  # nesting levels of arrays and objects; Python's json recurses per level and dies near 100,000
MAX_CHARS = 64_000_000  # one JSON text; readers with a tighter budget pass their own
# A string, or an unterminated one up to the end: possessive, and never failing at a quote, so a hostile text
# (10 MB of \") costs one linear pass, not one pass per quote.
_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+(?:"|\Z)', re.DOTALL)
_OPENING, _CLOSING = np.frombuffer(b"[{", dtype=np.uint8), np.frombuffer(b"]}", dtype=np.uint8)


class BadJson(DriftwatchError, ValueError):
    """JSON refused where the reader has no error class of its own (a sidecar, a memo, a reply, the outbox); a
    ValueError too, so a reader that treats a damaged file as absent keeps doing so."""


def _deeper_than(text: str, limit: int) -> bool:
    """Whether arrays and objects nest deeper than `limit` in `text`, brackets inside strings not counted (a
    running sum over the bytes: no Python loop over millions of brackets)."""
    code = np.frombuffer(_STRING.sub("", text).encode("utf-8"), dtype=np.uint8)
    steps = np.isin(code, _OPENING).astype(np.int32) - np.isin(code, _CLOSING)
    return bool(len(steps)) and int(np.cumsum(steps).max()) > limit


def loads_bounded(text: str | bytes, where: object, error: type[DriftwatchError] = BadJson, *,
                  max_depth: int = MAX_DEPTH, max_chars: int = MAX_CHARS) -> Any:
    """`json.loads(text)`, refusing with `error` (a message naming `where`) a text over `max_chars`, nested
    deeper than `max_depth`, not UTF-8, or not JSON. Never RecursionError, whatever the input."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise error(f"{where}: not UTF-8 text ({exc})") from None
    if len(text) > max_chars:
        raise error(f"{where}: {len(text)} characters of JSON, over the limit of {max_chars}")
    # Counting brackets is cheap; the scan that skips strings runs only when the count could exceed the limit.
    if text.count("[") + text.count("{") > max_depth and _deeper_than(text, max_depth):
        raise error(f"{where}: JSON nested deeper than {max_depth} levels (the limit)")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{where}: not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    except RecursionError:  # a depth the scan missed (it cannot, but the run must never die of it)
        raise error(f"{where}: JSON nested too deeply") from None


def objects(lines: Iterable[str], source: object, error: type[DriftwatchError], *,
            max_length: int | None = None) -> Iterator[tuple[int, str, dict]]:
    """Yield (line number, where, object) for every non-blank line, `where` being "source:line".

    A line that is not a JSON object, longer than `max_length` characters, or nested deeper than `MAX_DEPTH`,
    raises `error` naming the file and line."""
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{source}:{lineno}"
        if max_length is not None and len(line) > max_length:
            raise error(f"{where}: the line is {len(line)} characters, over {max_length}")
        obj = loads_bounded(line, where, error)
        if not isinstance(obj, dict):
            raise error(f"{where}: expected a JSON object, got {type(obj).__name__}")
        yield lineno, where, obj
