"""Questions for new documents: the judging LLM drafts one question per document first seen on a date (a one-sentence
item too), stored append-only in questions.jsonl (contract.QUESTIONS; the latest line of an id wins) with its
provenance: generated, then reviewed (accepted) or rejected by a person; human for one a person wrote.

A draft is dropped (and counted) when it duplicates a gold question or an accepted draft: the same text (case and
spacing aside), or an embedding cosine of at least [judging] duplicate_cosine. Each kept draft is checked the other
way round: does it find its document? A TF-IDF over the corpus's documents on the date ("tfidf-documents": no
monitored retriever, so the check does not favour what is monitored) ranks them for the question; the source
document's rank is recorded, and a draft whose document is not in the top ROUND_TRIP_DEPTH is kept but flagged.

Accepted drafts (`accepted_gold`) join the maintained qrels: the daily run searches them with the gold set on each
builtin pipeline and writes their rows to added_per_question.csv; per_question.csv and its series never change."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

import numpy as np

from pipeline import contract, jsonl
from pipeline.config import Config, judging_endpoint
from pipeline.corpus import Corpus
from pipeline.errors import DriftwatchError
from pipeline.gold import GoldQuestion
from pipeline.judging import ledger
from pipeline.judging.prelabel import check_model, judge_name

RETRIEVER = "tfidf-documents"  # the round trip's retriever, recorded with each draft
ROUND_TRIP_DEPTH = 10  # a draft whose document is not in this top of the TF-IDF ranking is flagged
ADDED_GRADE = 2  # the source document's grade in the maintained qrels
MAX_QUESTION_CHARS = 500
MAX_PASSAGE_CHARS = 4000
MAX_LINE_LENGTH = 10_000
ID_PREFIX = "q-"

SYSTEM_PROMPT = ("You write evaluation questions for a search engine. Given a document, write one natural question "
                 "a user might ask that this document answers, specific enough that this document is the best "
                 "answer. Do not mention the document itself. Reply with a JSON object: {\"question\": \"...\"}.")
USER_PROMPT = "Document:\n{document}"


class QuestionError(DriftwatchError):
    """A questions.jsonl line, or a review, that cannot be used; the message names the file and line, or the id."""


@dataclass(frozen=True)
class Drafted:
    """A question's latest line in questions.jsonl."""

    id: str
    question: str
    doc_id: str
    content_hash: str
    run_date: str
    provenance: str
    time: str
    judge: str
    retriever: str
    found_rank: int | None
    flagged: bool

    def record(self) -> dict:
        return {k: getattr(self, k) for k in contract.QUESTION_KEYS}

    @property
    def accepted(self) -> bool:
        return self.provenance in contract.PROVENANCES_ACCEPTED


def path_of(data_dir: Path) -> Path:
    return Path(data_dir) / contract.QUESTIONS


def _drafted(obj: dict, where: str) -> Drafted:
    unknown = sorted(set(obj) - set(contract.QUESTION_KEYS))
    if unknown:
        raise QuestionError(f"{where}: unknown key {unknown[0]!r} (valid: {', '.join(contract.QUESTION_KEYS)})")
    missing = [k for k in ("id", "question", "doc_id", "provenance") if not isinstance(obj.get(k), str)
               or not obj[k].strip()]
    if missing:
        raise QuestionError(f"{where}: {missing[0]!r} must be a non-empty string")
    if obj["provenance"] not in contract.PROVENANCES:
        raise QuestionError(f"{where}: 'provenance' must be one of {', '.join(contract.PROVENANCES)}, "
                            f"got {obj['provenance']!r}")
    rank = obj.get("found_rank")
    if rank is not None and (type(rank) is not int or rank < 1):
        raise QuestionError(f"{where}: 'found_rank' must be a rank (1 or more) or null, got {rank!r}")
    text = lambda k: str(obj.get(k) or "")  # noqa: E731
    return Drafted(obj["id"], obj["question"], obj["doc_id"], text("content_hash"), text("run_date"),
                   obj["provenance"], text("time"), text("judge"), text("retriever"), rank, bool(obj.get("flagged")))


def read_all(data_dir: Path) -> list[Drafted]:
    """Every line of questions.jsonl in order (none without the file); a last line without its newline is left
    out (a writer killed mid-line)."""
    path = path_of(data_dir)
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    lines = lines[:-1] if not text.endswith("\n") else lines
    return [_drafted(obj, where) for _, where, obj in
            jsonl.objects(lines, path, QuestionError, max_length=MAX_LINE_LENGTH)]


def latest(data_dir: Path) -> dict[str, Drafted]:
    """Each question's latest line, by id, in the order the ids first appeared."""
    found: dict[str, Drafted] = {}
    for d in read_all(data_dir):
        found[d.id] = d
    return found


def append(data_dir: Path, drafts: Sequence[Drafted]) -> None:
    if drafts:
        ledger.append_lines(path_of(data_dir), [json.dumps(d.record(), ensure_ascii=False) + "\n" for d in drafts])


def accepted(data_dir: Path) -> list[Drafted]:
    """The questions whose latest line is accepted (reviewed, or written by a person)."""
    return [d for d in latest(data_dir).values() if d.accepted]


def accepted_gold(data_dir: Path, run_date: date | None = None) -> list[GoldQuestion]:
    """The accepted questions as gold questions (their source document relevant, grade ADDED_GRADE), for the
    maintained qrels; with `run_date`, only those drafted for a document first seen on or before it."""
    day = run_date.isoformat() if run_date else None
    return [GoldQuestion(d.id, d.question, {d.doc_id: ADDED_GRADE}, ("drafted",)) for d in accepted(data_dir)
            if day is None or not d.run_date or d.run_date <= day]


def review(data_dir: Path, question_id: str, judge: str, *, accept: bool) -> Drafted:
    """Append the question's review (provenance reviewed or rejected, by `judge`); QuestionError for an unknown id
    or an empty name."""
    judge = (judge or "").strip()
    if not judge:
        raise QuestionError("give your name with --judge NAME: it is recorded with the review")
    if len(judge) > ledger.MAX_JUDGE_LENGTH or "\n" in judge:
        raise QuestionError(f"--judge: a name of at most {ledger.MAX_JUDGE_LENGTH} characters on one line")
    found = latest(data_dir).get(question_id)
    if found is None:
        raise QuestionError(f"{path_of(data_dir)}: no drafted question {question_id!r}")
    values = found.record() | {"provenance": contract.PROVENANCE_REVIEWED if accept else contract.PROVENANCE_REJECTED,
                               "time": ledger.now(), "judge": judge}
    reviewed = Drafted(**values)
    append(data_dir, [reviewed])
    return reviewed


# --- drafting -------------------------------------------------------------------------------------------------


def question_id(doc_id: str, content_hash: str) -> str:
    return ID_PREFIX + hashlib.sha256(f"{doc_id}\n{content_hash}".encode()).hexdigest()[:12]


def parse_question(text: str) -> str:
    from pipeline.answers.client import parse_json

    value = parse_json(text).get("question")
    if not isinstance(value, str) or not value.strip():
        raise ValueError("no 'question' string in the reply")
    value = " ".join(value.split())
    if len(value) > MAX_QUESTION_CHARS:
        raise ValueError(f"the question is {len(value)} characters, over {MAX_QUESTION_CHARS}")
    return value


_WORDS = re.compile(r"\w+")


def _normal(text: str) -> str:
    return " ".join(_WORDS.findall(text.casefold()))


def tfidf_ranks(documents: Sequence[tuple[str, str]], queries: Sequence[str], targets: Sequence[str],
                depth: int = ROUND_TRIP_DEPTH) -> list[int | None]:
    """The rank (1-based) of each query's target document among `documents` ((doc id, text)) by TF-IDF cosine
    (scikit-learn's TfidfVectorizer, English stop words; ties broken by doc id), None when below `depth`."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    if not documents or not queries:
        return [None] * len(queries)
    ids = [d for d, _ in documents]
    vectorizer = TfidfVectorizer(stop_words="english", sublinear_tf=True)
    matrix = vectorizer.fit_transform([t for _, t in documents])
    scores = (vectorizer.transform(list(queries)) @ matrix.T).toarray()
    ranks: list[int | None] = []
    by_id = sorted(range(len(ids)), key=lambda i: ids[i])
    for row, target in zip(scores, targets):
        ranked = sorted(by_id, key=lambda i: -row[i])  # stable: ties stay in doc id order
        top = [ids[i] for i in ranked[:depth]]
        ranks.append(top.index(target) + 1 if target in top else None)
    return ranks


@dataclass
class SuggestResult:
    model: str
    new_documents: int  # first seen on the date
    already: int  # of them, drafted before (the same text)
    kept: list[Drafted] = field(default_factory=list)
    duplicates: list[tuple[str, str, str]] = field(default_factory=list)  # (doc id, question, what it duplicates)
    failed: list[str] = field(default_factory=list)
    note: str = ""

    @property
    def flagged(self) -> int:
        return sum(d.flagged for d in self.kept)


def suggest(config: Config, run_date: date, gold: Sequence[GoldQuestion], *, client=None,
            encode: Callable[[Sequence[str]], np.ndarray] | None = None, limit: int | None = None) -> SuggestResult:
    """Draft a question for each document first seen on `run_date` (not drafted before on the same text), drop
    the duplicates of `gold` and of accepted drafts, record each kept draft's round trip, and append them to
    questions.jsonl in one write. `encode` gives L2-normalised vectors (default: the configured embedder). Endpoint
    failures are counted per document, never raised; ConfigError for no endpoint or model, or a monitored one."""
    from pipeline.answers import client as endpoint

    settings = judging_endpoint(config)
    model = settings.model
    check_model(config, model)
    data_dir = config.data_dir
    day = run_date.isoformat()
    known = latest(data_dir)
    drafted_texts = {(d.doc_id, d.content_hash) for d in known.values()}
    with Corpus.in_dir(data_dir, readonly=True) as corpus:
        snapshot = corpus.snapshot(run_date)
    documents = [(s.document.id, f"{s.document.title}\n{s.document.text}".strip()) for s in snapshot]
    new = [(s.document.id, s.content_hash, text) for s, (_, text) in zip(snapshot, documents)
           if s.first_seen == day and text]
    todo = [n for n in new if (n[0], n[1]) not in drafted_texts]
    result = SuggestResult(model, len(new), len(new) - len(todo))
    if limit is not None:
        todo = todo[:limit]
    if not todo:
        return result
    own = client is None
    client = client or endpoint.Client(settings, data_dir, section="judging")
    drafts: list[tuple[str, str, str]] = []  # (doc id, content hash, question)
    try:
        for n, (doc_id, content_hash, text) in enumerate(todo):
            user = USER_PROMPT.format(document=" ".join(text.split())[:MAX_PASSAGE_CHARS])
            try:
                drafts.append((doc_id, content_hash, client.chat(model, SYSTEM_PROMPT, user, parse_question)))
            except endpoint.BudgetExhausted:
                result.note = (f"judging.max_calls ({config.judging.max_calls}) spent: {len(todo) - n} document(s) "
                               "left without a question")
                break
            except (endpoint.Unreachable, endpoint.Unparseable) as error:
                result.failed.append(f"{doc_id}: {error}")
    finally:
        if own:
            client.close()
    references = [q.question for q in gold] + [d.question for d in known.values() if d.accepted]
    kept = _deduplicated(drafts, references, config.judging.duplicate_cosine, encode or _encoder(config), result)
    ranks = tfidf_ranks(documents, [q for _, _, q in kept], [d for d, _, _ in kept])
    stamp = ledger.now()
    result.kept = [Drafted(question_id(doc_id, h), question, doc_id, h, day, contract.PROVENANCE_GENERATED, stamp,
                           judge_name(model), RETRIEVER, rank, rank is None)
                   for (doc_id, h, question), rank in zip(kept, ranks)]
    append(data_dir, result.kept)
    return result


def write(config: Config, question: str, doc_id: str, judge: str, gold: Sequence[GoldQuestion], *,
          encode: Callable[[Sequence[str]], np.ndarray] | None = None) -> Drafted:
    """A question a person wrote for a document of the corpus (provenance human: accepted as written, it joins the
    maintained qrels as a reviewed draft does). Checked as a draft is, with no LLM: the document must be in the
    corpus (its latest text), the question must duplicate no gold question nor accepted one (QuestionError naming
    it), and its round trip is recorded (a document not found is kept but flagged). Appended in one write."""
    judge, question = (judge or "").strip(), " ".join((question or "").split())
    if not judge:
        raise QuestionError("give your name with --judge NAME: it is recorded with the question")
    if len(judge) > ledger.MAX_JUDGE_LENGTH or "\n" in judge:
        raise QuestionError(f"--judge: a name of at most {ledger.MAX_JUDGE_LENGTH} characters on one line")
    if not question or len(question) > MAX_QUESTION_CHARS:
        raise QuestionError(f"--write: a question of 1 to {MAX_QUESTION_CHARS} characters, got {len(question)}")
    data_dir = config.data_dir
    from pipeline import store

    runs = store.read_runs(data_dir)
    latest_day = max([date.today(), *([runs[contract.RUN_DATE].max().date()] if len(runs) else [])])
    with Corpus.in_dir(data_dir, readonly=True) as corpus:
        found = next((s for s in corpus.snapshot(latest_day) if s.document.id == doc_id), None)
        if found is None:
            raise QuestionError(f"--doc: {doc_id!r} is not a document of the corpus in {data_dir}")
        day = found.first_seen
        documents = [(s.document.id, f"{s.document.title}\n{s.document.text}".strip())
                     for s in corpus.snapshot(date.fromisoformat(day))]
    known = latest(data_dir)
    references = [q.question for q in gold] + [d.question for d in known.values() if d.accepted]
    result = SuggestResult("", 1, 0)
    if not _deduplicated([(doc_id, found.content_hash, question)], references, config.judging.duplicate_cosine,
                         encode or _encoder(config), result):
        (_, _, same), = result.duplicates
        raise QuestionError(f"--write: {question!r} duplicates {same!r} (the same text, or a cosine of at least "
                            f"judging.duplicate_cosine {config.judging.duplicate_cosine:g})")
    (rank,) = tfidf_ranks(documents, [question], [doc_id])
    digest = hashlib.sha256(f"{doc_id}\n{found.content_hash}\n{question}".encode()).hexdigest()[:12]
    written = Drafted(ID_PREFIX + digest, question, doc_id, found.content_hash, day, contract.PROVENANCE_HUMAN,
                      ledger.now(), judge, RETRIEVER, rank, rank is None)
    append(data_dir, [written])
    return written


def _encoder(config: Config) -> Callable[[Sequence[str]], np.ndarray]:
    from pipeline.embeddings import Embedder

    embedder = Embedder(config.embedder)
    return lambda texts: embedder.encode(list(texts))


def _deduplicated(drafts: list[tuple[str, str, str]], references: list[str], threshold: float,
                  encode: Callable[[Sequence[str]], np.ndarray], result: SuggestResult) -> list[tuple[str, str, str]]:
    """The drafts that duplicate no reference (nor an earlier draft of the batch): the same normalised text, or a
    cosine at least `threshold`; each dropped one is noted in `result.duplicates`."""
    if not drafts:
        return []
    texts = [q for _, _, q in drafts]
    vectors = np.asarray(encode(texts + references), dtype=np.float32)
    mine, theirs = vectors[:len(texts)], vectors[len(texts):]
    normal = {_normal(r): r for r in references}
    kept: list[tuple[str, str, str]] = []
    kept_rows: list[int] = []
    for i, draft in enumerate(drafts):
        same = normal.get(_normal(draft[2]))
        if same is None and len(theirs):
            cosines = theirs @ mine[i]
            best = int(np.argmax(cosines))
            same = references[best] if cosines[best] >= threshold else None
        if same is None and kept_rows:
            cosines = mine[kept_rows] @ mine[i]
            best = int(np.argmax(cosines))
            same = kept[best][2] if cosines[best] >= threshold or _normal(kept[best][2]) == _normal(draft[2]) else None
        if same is not None:
            result.duplicates.append((draft[0], draft[2], same))
            continue
        kept.append(draft)
        kept_rows.append(i)
    return kept
