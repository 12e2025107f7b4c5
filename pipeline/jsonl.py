"""One reader of JSON-object-per-line files (gold sets, query logs, logged retrieval runs), so every such
file reports a bad line the same way: the file and line, what is wrong, and the caller's error class."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

from pipeline.errors import DriftwatchError


def objects(lines: Iterable[str], source: object, error: type[DriftwatchError], *,
            max_length: int | None = None) -> Iterator[tuple[int, str, dict]]:
    """Yield (line number, where, object) for every non-blank line, `where` being "source:line".

    A line that is not a JSON object, or longer than `max_length` characters, raises `error` naming the
    file and line."""
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{source}:{lineno}"
        if max_length is not None and len(line) > max_length:
            raise error(f"{where}: the line is {len(line)} characters, over {max_length}")
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise error(f"{where}: not valid JSON: {exc.msg} (column {exc.colno})") from None
        if not isinstance(obj, dict):
            raise error(f"{where}: expected a JSON object, got {type(obj).__name__}")
        yield lineno, where, obj
