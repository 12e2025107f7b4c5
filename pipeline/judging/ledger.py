"""The judgments ledger (`judgments.jsonl` in the data directory) and the review queue.

The ledger is append-only: one JSON object a line with the question id, the document id, the grade (0-2, as the gold
set grades), the judge (a person's name, or `llm:<model>` for a suggestion that never counts as a human judgment),
the time (ISO 8601, UTC) and the content hash of the text that was judged. A judgment holds for that text only: when
the document's text changes, the pair comes back into the queue. A later judgment of the same pair and text by a
human supersedes an earlier one (the ledger keeps both: nothing is ever rewritten).

The queue is the pool (pool.csv, pipeline/judging/pool.py) minus what a human has judged: each (question, document)
pair at its latest pool row, unless a human judged that pair on that text."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from pipeline import contract, jsonl
from pipeline.errors import DriftwatchError

MAX_JUDGE_LENGTH = 200  # characters of a judge's name
MAX_LINE_LENGTH = 10_000  # characters of one ledger line
# The queue's order: what most threatens the frozen numbers first.
REASON_PRIORITY = {contract.SHADOW: 0, contract.GOLD_CHANGED: 1, contract.OUTRANKS_GOLD: 2,
                   contract.NEW_IN_TOP_K: 3, contract.GOLD_DELETED: 4}
IMPORT_KEYS = ("question_id", "doc_id", "grade", "judge")  # required in an imported line; time and hash optional


class JudgmentError(DriftwatchError):
    """A judgment that cannot be used; the message names the file and line (or the pair)."""


@dataclass(frozen=True)
class Judgment:
    question_id: str
    doc_id: str
    grade: int
    judge: str
    time: str
    content_hash: str

    @property
    def human(self) -> bool:
        return not self.judge.startswith(contract.LLM_JUDGE_PREFIX)

    @property
    def key(self) -> tuple[str, str]:
        return self.question_id, self.doc_id


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def ledger_path(data_dir: Path) -> Path:
    return Path(data_dir) / contract.JUDGMENTS


def _text(obj: Mapping, key: str, where: str, limit: int, *, empty: bool = False) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or (not empty and not value.strip()):
        raise JudgmentError(f"{where}: {key!r} must be a {'' if empty else 'non-empty '}string, got {value!r}")
    if len(value) > limit:
        raise JudgmentError(f"{where}: {key!r} is {len(value)} characters, over {limit}")
    if "\n" in value or "\r" in value:
        raise JudgmentError(f"{where}: {key!r} contains a line break")
    return value


def judgment_from(obj: Mapping, where: str, *, required: Sequence[str] = contract.JUDGMENT_KEYS,
                  time: str | None = None, content_hash: str | None = None) -> Judgment:
    """One judgment from a JSON object, validated; `time` and `content_hash` fill keys an import may leave out."""
    unknown = sorted(set(obj) - set(contract.JUDGMENT_KEYS))
    if unknown:
        raise JudgmentError(f"{where}: unknown key {unknown[0]!r} (valid: {', '.join(contract.JUDGMENT_KEYS)})")
    missing = [k for k in required if k not in obj]
    if missing:
        raise JudgmentError(f"{where}: missing key {missing[0]!r}")
    grade = obj["grade"]
    if type(grade) is not int or grade not in contract.JUDGMENT_GRADES:
        raise JudgmentError(f"{where}: 'grade' must be one of {', '.join(map(str, contract.JUDGMENT_GRADES))}, "
                            f"got {grade!r}")
    stamp = obj.get("time", time) or now()
    try:
        datetime.fromisoformat(stamp) if isinstance(stamp, str) else None
    except ValueError:
        raise JudgmentError(f"{where}: 'time' must be an ISO 8601 time, got {stamp!r}") from None
    values = {**obj, "time": stamp, "content_hash": obj.get("content_hash", content_hash or "")}
    return Judgment(_text(values, "question_id", where, contract.MAX_ID_LENGTH),
                    _text(values, "doc_id", where, contract.MAX_ID_LENGTH), grade,
                    _text(values, "judge", where, MAX_JUDGE_LENGTH), _text(values, "time", where, 64),
                    _text(values, "content_hash", where, 128, empty=True))


def parse_judgments(lines: Iterable[str], source: object, *, required: Sequence[str] = contract.JUDGMENT_KEYS
                    ) -> list[Judgment]:
    return [judgment_from(obj, where, required=required)
            for _, where, obj in jsonl.objects(lines, source, JudgmentError, max_length=MAX_LINE_LENGTH)]


def read_judgments(data_dir: Path) -> list[Judgment]:
    """Every judgment in the ledger, in the order written; none when there is no ledger. A last line without its
    newline (a writer killed mid-line) is left out: append_judgments writes each batch in one write."""
    path = ledger_path(data_dir)
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    return parse_judgments(lines[:-1] if not text.endswith("\n") else lines, path)


def append_judgments(data_dir: Path, judgments: Sequence[Judgment]) -> None:
    """Append `judgments` to the ledger, all or none: validated already (Judgment), written in one write under an
    exclusive lock and synced. A ledger whose last line lacks its newline gets one first."""
    if not judgments:
        return
    append_lines(ledger_path(data_dir), [jsonl_line(j) for j in judgments])


def append_lines(path: Path, lines: Sequence[str]) -> None:
    """Append these lines (each ending in a newline) to an append-only JSONL file in one write, under an exclusive
    lock, synced; a file whose last line lacks its newline gets one first. The ledger's and questions.jsonl's."""
    payload = "".join(lines).encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size:
            with open(path, "rb") as existing:
                existing.seek(size - 1)
                if existing.read(1) != b"\n":
                    payload = b"\n" + payload
        os.write(fd, payload)
        os.fsync(fd)
    finally:
        os.close(fd)


def jsonl_line(judgment: Judgment) -> str:
    return json.dumps(asdict(judgment), ensure_ascii=False) + "\n"


def latest(judgments: Iterable[Judgment], *, human: bool = True) -> dict[tuple[str, str], Judgment]:
    """Each pair's latest judgment by a human (or, `human=False`, by an LLM), in ledger order."""
    found: dict[tuple[str, str], Judgment] = {}
    for j in judgments:
        if j.human == human:
            found[j.key] = j
    return found


def judged_texts(judgments: Iterable[Judgment]) -> set[tuple[str, str, str]]:
    """(question, document, content hash) of every human judgment."""
    return {(j.question_id, j.doc_id, j.content_hash) for j in judgments if j.human}


def queue(pool: pd.DataFrame, judgments: Sequence[Judgment]) -> pd.DataFrame:
    """The pairs still to judge: each (question, document) pair's latest pool row (with every reason it had on that
    run, joined by spaces), minus the pairs a human judged on that text; a deleted document (no text) is not
    queued. Ordered by reason (shadows first), then the latest run first, then rank."""
    columns = list(contract.POOL_COLUMNS)
    if pool.empty:
        return pd.DataFrame(columns=columns)
    pool = pool.copy()
    pool[contract.CONTENT_HASH] = pool[contract.CONTENT_HASH].fillna("")
    last = pool.groupby([contract.QUESTION_ID, contract.DOC_ID])[contract.RUN_DATE].transform("max")
    pool = pool[(pool[contract.RUN_DATE] == last) & (pool[contract.CONTENT_HASH] != "")]
    done = judged_texts(judgments)
    keep = [(q, d, h) not in done for q, d, h in
            zip(pool[contract.QUESTION_ID], pool[contract.DOC_ID], pool[contract.CONTENT_HASH])]
    pool = pool[keep]
    if pool.empty:
        return pd.DataFrame(columns=columns)
    pool["_priority"] = pool[contract.REASON].map(REASON_PRIORITY).fillna(len(REASON_PRIORITY))
    pool = pool.sort_values(["_priority", contract.RUN_DATE, contract.RANK],
                            ascending=[True, False, True], kind="stable")
    first = pool.groupby([contract.QUESTION_ID, contract.DOC_ID], sort=False)
    merged = first.head(1).copy()
    reasons = first[contract.REASON].agg(lambda r: " ".join(dict.fromkeys(r)))
    merged[contract.REASON] = [reasons[(q, d)] for q, d in zip(merged[contract.QUESTION_ID],
                                                                merged[contract.DOC_ID])]
    return merged[columns].reset_index(drop=True)
