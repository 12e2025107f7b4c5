"""The two files the team writes for the answer layer, read and validated: the logged answers (one JSONL file,
or a folder of YYYY-MM-DD.jsonl files) and the human labels (CSV). A bad line raises AnswersError naming the
file and line, before a run writes anything."""

from __future__ import annotations

import csv
import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import date
from pathlib import Path

from pipeline import jsonl
from pipeline.answers.records import (ANSWER_LABELS, LABEL_COLUMNS, LOGGED, LOGGED_KEYS, VERDICTS, AnswerRecord,
                                      AnswersError, Context, Label)
from pipeline.gold import GoldQuestion

log = logging.getLogger(__name__)

MAX_LINE_LENGTH = 10_000_000  # characters of one logged JSONL line


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


def dated_file(path: Path) -> date | None:
    """The date a YYYY-MM-DD.jsonl file is named after; None for any other name."""
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
            day = dated_file(day_file)
            if day is None:
                raise AnswersError(f"{day_file}: a folder of logged answers holds YYYY-MM-DD.jsonl files only")
            parse_logged(_read_text(day_file).splitlines(), str(day_file), questions, day)
        return
    parse_logged(_read_text(path).splitlines(), str(path), questions)


# --- human labels -----------------------------------------------------------------------------------------


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
