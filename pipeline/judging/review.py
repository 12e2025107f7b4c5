"""Human judging of the queue, shared by the Judge page and `driftwatch judge`: each queued pair as a reviewer sees
it (the question, its gold document's text beside the candidate's, their overlap marked, the reasons, any LLM
suggestion), recording a grade on the text that was shown, progress, skipping, and importing judgments made
elsewhere. Skips are the reviewer's own (a session's): nothing is written for them."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from pipeline import contract, jsonl, store
from pipeline.corpus import Corpus, CorpusError
from pipeline.gold import GoldQuestion
from pipeline.judging import ledger
from pipeline.judging.ledger import Judgment, JudgmentError

MIN_RUN = 3  # words: a shared run shorter than this is common phrasing, not copied text
_WORD = re.compile(r"\w+")
SKIP, QUIT = "s", "q"  # the terminal's answers besides the grades (the page's keys are the same)
KEYS = (*(str(g) for g in contract.JUDGMENT_GRADES), SKIP)
GRADE_NAMES = {0: "not relevant", 1: "relevant", 2: "highly relevant"}
REASON_LABELS = {contract.NEW_IN_TOP_K: "new in the top k", contract.OUTRANKS_GOLD: "outranks a gold document",
                 contract.SHADOW: "shadow of a gold document (near copy, differing text)",
                 contract.GOLD_CHANGED: "the gold document's text changed",
                 contract.GOLD_DELETED: "the gold document was deleted"}
QUEUE_FIELDS = ("question_id", "doc_id", "reason", "run_date", "pipeline", "rank", "gold_doc_id", "content_hash",
                "question")  # `--queue --json`: one object a line


@dataclass(frozen=True)
class Span:
    """A piece of a text, and whether it lies in a word run the other text shares."""

    text: str
    shared: bool


@dataclass(frozen=True)
class Overlap:
    gold: tuple[Span, ...]
    candidate: tuple[Span, ...]
    shared_words: int  # of the candidate's words, how many lie in a shared run

    @property
    def candidate_words(self) -> int:
        return sum(len(_WORD.findall(s.text)) for s in self.candidate)


@dataclass(frozen=True)
class Progress:
    judged: int  # pairs of the pool a human has judged on their latest text
    total: int  # pairs of the pool with a text to judge

    @property
    def remaining(self) -> int:
        return self.total - self.judged

    @property
    def fraction(self) -> float:
        return self.judged / self.total if self.total else 1.0

    def describe(self) -> str:
        return f"{self.judged} of {self.total} judged, {self.remaining} to go"


@dataclass(frozen=True)
class ReviewItem:
    """One queued pair as the reviewer sees it."""

    question_id: str
    doc_id: str
    question: str
    reasons: tuple[str, ...]
    run_date: str
    pipeline: str
    rank: int
    content_hash: str  # of the candidate's text shown: the grade is recorded on it
    candidate_text: str
    gold_doc_id: str  # "" when the question has no gold document in the corpus
    gold_label: str  # what the left-hand text is ("gold document d1", "d1's earlier text")
    gold_text: str
    detail: str  # a shadow's differing sentences
    overlap: Overlap
    suggestion: Judgment | None  # the latest LLM judgment of the pair: a suggestion, never a human judgment
    suggestion_current: bool  # whether the suggestion was made on the text shown
    earlier: Judgment | None  # the latest human judgment of the pair, on an earlier text


# --- the overlap ------------------------------------------------------------------------------------------------


def _words(text: str) -> list[re.Match]:
    return list(_WORD.finditer(text))


def _runs(words: Sequence[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def _marked(text: str, words: list[re.Match], shared_runs: set[tuple[str, ...]], n: int) -> tuple[tuple[Span, ...],
                                                                                                  int]:
    lowered = [w.group().lower() for w in words]
    shared = [False] * len(words)
    for i in range(len(words) - n + 1):
        if tuple(lowered[i:i + n]) in shared_runs:
            shared[i:i + n] = [True] * n
    spans: list[Span] = []
    start, state = 0, False
    for i, word in enumerate(words):
        if shared[i] != state:
            # a run starts at its first word and ends after its last (the gap after it is not marked)
            cut = word.start() if shared[i] else words[i - 1].end()
            if cut > start:
                spans.append(Span(text[start:cut], state))
            start, state = cut, shared[i]
    if state:
        cut = words[-1].end()
        spans.append(Span(text[start:cut], True))
        start, state = cut, False
    if start < len(text):
        spans.append(Span(text[start:], False))
    return tuple(spans), sum(shared)


def overlap(gold: str, candidate: str, min_run: int = MIN_RUN) -> Overlap:
    """The word runs of at least `min_run` words (case-insensitive, punctuation ignored) that both texts hold, as
    each text's spans, shared or not; the spans of a text joined give it back unchanged."""
    gold_words, candidate_words = _words(gold), _words(candidate)
    gold_runs = _runs([w.group().lower() for w in gold_words], min_run)
    candidate_runs = _runs([w.group().lower() for w in candidate_words], min_run)
    common = gold_runs & candidate_runs
    gold_spans, _ = _marked(gold, gold_words, common, min_run)
    candidate_spans, shared = _marked(candidate, candidate_words, common, min_run)
    return Overlap(gold_spans, candidate_spans, shared)


def terminal_text(spans: Sequence[Span], ansi: bool) -> str:
    """Spans for a terminal: shared runs in reverse video (`ansi`), else between « and »."""
    opening, closing = ("\x1b[7m", "\x1b[0m") if ansi else ("«", "»")
    return "".join(f"{opening}{s.text}{closing}" if s.shared else s.text for s in spans)


# --- the queue as a reviewer sees it ------------------------------------------------------------------------------


def read_pool(data_dir: Path) -> pd.DataFrame:
    return store.read(Path(data_dir), contract.POOL)


def progress(pool: pd.DataFrame, judgments: Sequence[Judgment]) -> Progress:
    """Of the pool's pairs with a text to judge (each at its latest pool row), how many a human judged on it."""
    total = len(ledger.queue(pool, []))
    return Progress(total - len(ledger.queue(pool, judgments)), total)


def order(queue: pd.DataFrame, skipped: Sequence[tuple[str, str]] = ()) -> list[tuple[str, str]]:
    """The queue's pairs in the order to review them: the queue's, the pairs skipped (in the order skipped) last."""
    pairs = list(zip(queue[contract.QUESTION_ID], queue[contract.DOC_ID]))
    later = [p for p in dict.fromkeys(skipped) if p in set(pairs)]
    return [p for p in pairs if p not in set(later)] + later


def skip(skipped: Sequence[tuple[str, str]], pair: tuple[str, str]) -> list[tuple[str, str]]:
    """The skipped pairs after skipping `pair` (again: it goes last)."""
    return [p for p in skipped if p != pair] + [pair]


@dataclass(frozen=True)
class Review:
    """A data directory's queue at one moment: the pool, the ledger, the queue and the question texts."""

    data_dir: Path
    pool: pd.DataFrame
    judgments: list[Judgment]
    queue: pd.DataFrame
    questions: Mapping[str, GoldQuestion]

    @property
    def progress(self) -> Progress:
        return progress(self.pool, self.judgments)

    def row(self, question_id: str, doc_id: str) -> pd.Series:
        rows = self.queue[(self.queue[contract.QUESTION_ID] == question_id) & (self.queue[contract.DOC_ID] == doc_id)]
        if rows.empty:
            raise JudgmentError(f"({question_id}, {doc_id}) is not in the queue of {self.data_dir}")
        return rows.iloc[0]

    def question_text(self, question_id: str) -> str:
        found = self.questions.get(question_id)
        return found.question if found else f"(question {question_id} is not in the gold set)"

    def queue_records(self) -> list[dict]:
        """The queue as plain records (QUEUE_FIELDS): `--queue --json`'s lines, the readable table's rows."""
        records = []
        for row in self.queue.itertuples(index=False):
            records.append({"question_id": row.question_id, "doc_id": row.doc_id, "reason": row.reason,
                            "run_date": f"{pd.Timestamp(row.run_date):%Y-%m-%d}", "pipeline": row.pipeline,
                            "rank": int(row.rank), "gold_doc_id": row.gold_doc_id or "",
                            "content_hash": row.content_hash, "question": self.question_text(row.question_id)})
        return records


def load(data_dir: Path, questions: Mapping[str, GoldQuestion]) -> Review:
    """The review of `data_dir` (its pool.csv and judgments.jsonl) for the gold set `questions` (by id)."""
    pool = read_pool(data_dir)
    judgments = ledger.read_judgments(data_dir)
    return Review(Path(data_dir), pool, judgments, ledger.queue(pool, judgments), questions)


def _text_of(versions: Sequence[tuple[str, str, str]], content_hash: str) -> str | None:
    return next((text for _, digest, text in reversed(versions) if digest == content_hash), None)


def _gold_side(corpus: Corpus, question: GoldQuestion | None, row: pd.Series, candidate_versions: list,
               candidate_hash: str) -> tuple[str, str, str]:
    """(gold doc id, label, text) to set beside the candidate: the gold document the reason names, else the
    question's best graded one present; the candidate's own earlier text when it is the gold document itself."""
    gold_id = row[contract.GOLD_DOC_ID] or ""
    if gold_id and gold_id == row[contract.DOC_ID]:  # the gold document changed: its earlier text beside it
        hashes = [digest for _, digest, _ in candidate_versions]
        shown = len(hashes) - 1 - hashes[::-1].index(candidate_hash) if candidate_hash in hashes else len(hashes)
        before = candidate_versions[:shown]
        return gold_id, f"{gold_id}'s earlier text", before[-1][2] if before else "(no earlier text stored)"
    ids = [gold_id] if gold_id else []
    if question is not None:
        ids += sorted(question.relevant_ids, key=lambda d: -question.relevant[d])
    for doc_id in dict.fromkeys(ids):
        versions = corpus.versions(doc_id)
        if versions:
            return doc_id, f"gold document {doc_id}", versions[-1][2]
    return "", "no gold document", "(the question's gold documents are not in the corpus)"


def item(review: Review, question_id: str, doc_id: str) -> ReviewItem:
    """The queued pair as the reviewer sees it (JudgmentError when it is not queued)."""
    row = review.row(question_id, doc_id)
    question = review.questions.get(question_id)
    content_hash = row[contract.CONTENT_HASH]
    try:
        with Corpus.in_dir(review.data_dir, readonly=True) as corpus:
            versions = corpus.versions(doc_id)
            gold_id, label, gold_text = _gold_side(corpus, question, row, versions, content_hash)
    except CorpusError as exc:
        raise JudgmentError(f"cannot show ({question_id}, {doc_id}): {exc}") from None
    candidate = _text_of(versions, content_hash)
    if candidate is None:
        candidate = versions[-1][2] if versions else "(the document is not in the corpus)"
    suggestion = ledger.latest(review.judgments, human=False).get((question_id, doc_id))
    earlier = ledger.latest(review.judgments).get((question_id, doc_id))
    detail = row[contract.DETAIL] if isinstance(row[contract.DETAIL], str) else ""
    return ReviewItem(question_id, doc_id, review.question_text(question_id),
                      tuple(row[contract.REASON].split()), f"{pd.Timestamp(row[contract.RUN_DATE]):%Y-%m-%d}",
                      row[contract.PIPELINE] or "", int(row[contract.RANK]), content_hash, candidate, gold_id, label,
                      gold_text, detail, overlap(gold_text, candidate), suggestion,
                      suggestion is not None and suggestion.content_hash == content_hash, earlier)


# --- writing judgments ---------------------------------------------------------------------------------------------


def _latest_pool_hash(pool: pd.DataFrame, question_id: str, doc_id: str) -> str | None:
    rows = pool[(pool[contract.QUESTION_ID] == question_id) & (pool[contract.DOC_ID] == doc_id)]
    rows = rows[rows[contract.CONTENT_HASH].fillna("") != ""]
    if rows.empty:
        return None
    return rows.sort_values(contract.RUN_DATE, kind="stable")[contract.CONTENT_HASH].iloc[-1]


def _corpus_hashes(data_dir: Path, doc_ids: Sequence[str]) -> dict[str, str]:
    """The content hash of each document's latest stored version (documents the corpus never held are absent)."""
    try:
        with Corpus.in_dir(data_dir, readonly=True) as corpus:
            return {d: versions[-1][1] for d in dict.fromkeys(doc_ids) if (versions := corpus.versions(d))}
    except CorpusError:
        return {}


def record(data_dir: Path, question_id: str, doc_id: str, grade: int, judge: str) -> Judgment:
    """Append `judge`'s grade of the pair to the ledger, on the text the queue shows (the pair's latest pool row;
    the corpus's latest text for a pair the pool never held). JudgmentError for a bad grade or judge, or a
    document of neither."""
    data_dir = Path(data_dir)
    content_hash = _latest_pool_hash(read_pool(data_dir), question_id, doc_id)
    if content_hash is None:
        content_hash = _corpus_hashes(data_dir, [doc_id]).get(doc_id)
    where = f"judgment of ({question_id}, {doc_id})"
    if content_hash is None:
        raise JudgmentError(f"{where}: {doc_id!r} is neither in the pool nor in the corpus of {data_dir}")
    judgment = ledger.judgment_from({"question_id": question_id, "doc_id": doc_id, "grade": grade,
                                     "judge": judge.strip() if isinstance(judge, str) else judge}, where,
                                    required=ledger.IMPORT_KEYS, content_hash=content_hash)
    ledger.append_judgments(data_dir, [judgment])
    return judgment


def read_import(path: Path, data_dir: Path, question_ids: set[str]) -> list[Judgment]:
    """Every line of a JSONL file of judgments made elsewhere (question_id, doc_id, grade, judge; time optional),
    validated whole before anything is written: a bad line raises JudgmentError naming the file and line. The
    content hash is the corpus's latest text of the document; a question must be in `question_ids` (the gold
    set's and the pool's), a document in the corpus."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        raise JudgmentError(f"{path}: no such file of judgments to import") from None
    except UnicodeDecodeError as exc:
        raise JudgmentError(f"{path}: not UTF-8 text ({exc})") from None
    lines = list(jsonl.objects(text.split("\n"), path, JudgmentError, max_length=ledger.MAX_LINE_LENGTH))
    hashes = _corpus_hashes(data_dir, [obj["doc_id"] for _, _, obj in lines if isinstance(obj.get("doc_id"), str)])
    found = []
    for _, where, obj in lines:
        judgment = ledger.judgment_from(obj, where, required=ledger.IMPORT_KEYS, content_hash="")
        if judgment.question_id not in question_ids:
            raise JudgmentError(f"{where}: question {judgment.question_id!r} is neither in the gold set nor in the "
                                "pool")
        if judgment.doc_id not in hashes:
            raise JudgmentError(f"{where}: document {judgment.doc_id!r} is not in the corpus of {data_dir}")
        found.append(Judgment(judgment.question_id, judgment.doc_id, judgment.grade, judgment.judge, judgment.time,
                              judgment.content_hash or hashes[judgment.doc_id]))
    return found


def import_judgments(path: Path, data_dir: Path, questions: Mapping[str, GoldQuestion]) -> list[Judgment]:
    """`read_import`, then all of them appended in one write; returns what was appended."""
    known = set(questions) | set(read_pool(data_dir)[contract.QUESTION_ID])
    judgments = read_import(path, data_dir, known)
    ledger.append_judgments(data_dir, judgments)
    return judgments
