"""Loading and validating the gold set: JSONL questions with binary or graded relevant documents."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pipeline import jsonl
from pipeline.contract import MAX_ID_LENGTH
from pipeline.errors import DriftwatchError

log = logging.getLogger(__name__)

KEYS = ("id", "question", "relevant", "tags")
MAX_GRADE = 10  # graded relevance runs 0 (judged not relevant) to 10; nDCG's gain 2**grade - 1 stays finite
MAX_LINE_LENGTH = 1_000_000  # characters of one JSONL line
MAX_QUESTION_LENGTH = 10_000  # characters of a question's text (it is embedded and searched every run)


class GoldError(DriftwatchError):
    """A gold set that cannot be used; the message names the file and line."""


@dataclass(frozen=True)
class GoldQuestion:
    id: str
    question: str
    relevant: Mapping[str, int]  # doc id -> grade (> 0 relevant, 0 judged not relevant)
    tags: tuple[str, ...] = ()

    @property
    def relevant_ids(self) -> tuple[str, ...]:
        return tuple(d for d, g in self.relevant.items() if g > 0)


def _check_ids(doc_ids: Iterable[str], where: str) -> None:
    for d in doc_ids:
        if len(d) > MAX_ID_LENGTH:
            raise GoldError(f"{where}: doc id {d[:40]!r}... is {len(d)} characters, over {MAX_ID_LENGTH}")


def _grades(value: object, where: str) -> dict[str, int]:
    """`["d1", "d2"]` means grade 1 each; `{"d1": 2, "d2": 1}` gives grades (0 = judged not relevant)."""
    if isinstance(value, list):
        if not all(isinstance(d, str) and d for d in value):
            raise GoldError(f"{where}: 'relevant' must list non-empty doc id strings")
        if len(set(value)) != len(value):
            raise GoldError(f"{where}: 'relevant' lists a doc id twice")
        _check_ids(value, where)
        return {d: 1 for d in value}
    if isinstance(value, dict):
        for d, g in value.items():
            if not d:
                raise GoldError(f"{where}: 'relevant' has an empty doc id")
            if type(g) is not int or not 0 <= g <= MAX_GRADE:
                raise GoldError(f"{where}: grade of {d!r} must be an integer from 0 to {MAX_GRADE}, got {g!r}")
        _check_ids(value, where)
        return dict(value)
    raise GoldError(f"{where}: 'relevant' must be a list of doc ids or an object of doc id -> grade")


def parse_gold(lines: Iterable[str], source: str) -> list[GoldQuestion]:
    questions: list[GoldQuestion] = []
    seen: dict[str, int] = {}
    for lineno, where, obj in jsonl.objects(lines, source, GoldError, max_length=MAX_LINE_LENGTH):
        unknown = sorted(set(obj) - set(KEYS))
        if unknown:
            raise GoldError(f"{where}: unknown key {unknown[0]!r} (valid: {', '.join(KEYS)})")
        qid, text = obj.get("id"), obj.get("question")
        if not isinstance(qid, str) or not qid.strip():
            raise GoldError(f"{where}: 'id' must be a non-empty string")
        if len(qid) > MAX_ID_LENGTH:
            raise GoldError(f"{where}: 'id' {qid[:40]!r}... is {len(qid)} characters, over {MAX_ID_LENGTH}")
        if "\r" in qid:  # the store keeps text with newlines only (see store._without_carriage_returns)
            raise GoldError(f"{where}: 'id' {qid!r} contains a carriage return")
        if qid in seen:
            raise GoldError(f"{where}: duplicate question id {qid!r} (first on line {seen[qid]})")
        if not isinstance(text, str) or not text.strip():
            raise GoldError(f"{where}: question {qid!r} has an empty 'question'")
        if len(text) > MAX_QUESTION_LENGTH:
            raise GoldError(f"{where}: question {qid!r} is {len(text)} characters, over {MAX_QUESTION_LENGTH}")
        if "relevant" not in obj:
            raise GoldError(f"{where}: question {qid!r} has no 'relevant'")
        grades = _grades(obj["relevant"], where)
        tags = obj.get("tags", [])
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise GoldError(f"{where}: 'tags' must be a list of strings")
        if not any(g > 0 for g in grades.values()):
            log.warning("%s: question %r has no relevant document: its metrics are undefined and left "
                        "out of the means", where, qid)
        seen[qid] = lineno
        questions.append(GoldQuestion(qid, text.strip(), grades, tuple(tags)))
    if not questions:
        raise GoldError(f"{source}: the gold set has no questions")
    return questions


def load_gold(path: Path) -> list[GoldQuestion]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise GoldError(f"{path}: gold set not found") from None
    except (IsADirectoryError, NotADirectoryError):
        raise GoldError(f"{path}: the gold set must be a file (this is a directory, or under a file)") from None
    except UnicodeDecodeError as exc:
        raise GoldError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return parse_gold(text.splitlines(), str(path))
