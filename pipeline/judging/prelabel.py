"""The optional LLM pre-label of the judging queue: each queued pair graded by an LLM with a graded relevance
prompt in the style of UMBRELA (Upadhyay et al. 2024, the open reproduction of Bing's relevance assessor: a 0-3
scale, "##final score: N" on the last line), mapped to the gold grades (0 and 1 -> 0, 2 -> 1, 3 -> 2) and appended
to judgments.jsonl as judge `llm:<model>` with the content hash of the text shown. A suggestion, never a human
judgment: the queue ignores it; the Judge page and `driftwatch judge` show it beside the pair.

`human_agreement` measures the suggestions against the humans' judgments of the same (question, document, text):
Cohen's kappa, graded (0-2) and binary (relevant or not), with the number of pairs. The judge model must not be one
a monitored pipeline uses (config.monitored_judge): it would grade its own results."""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pipeline import contract
from pipeline.answers.agreement import cohen_kappa
from pipeline.config import Config, ConfigError, judging_endpoint, monitored_judge
from pipeline.corpus import Corpus
from pipeline.gold import GoldQuestion
from pipeline.judging import ledger, review
from pipeline.judging.ledger import Judgment

log = logging.getLogger(__name__)

MAX_PASSAGE_CHARS = 4000  # of the candidate's text in a prompt (UMBRELA judges passages)
GIVE_UP_AFTER = 3  # consecutive unreachable pairs: the endpoint is down, the rest is left unlabelled
# UMBRELA's 0-3 scale to the gold set's 0-2 grades: "related but does not answer" is not relevant.
UMBRELA_TO_GRADE = {0: 0, 1: 0, 2: 1, 3: 2}

SYSTEM_PROMPT = "You are a search quality rater evaluating the relevance of passages to queries."
USER_PROMPT = """Given a query and a passage, you must provide a score on an integer scale of 0 to 3 with the \
following meanings:
0 = the passage has nothing to do with the query,
1 = the passage seems related to the query but does not answer it,
2 = the passage has some answer for the query, but the answer may be a bit unclear, or hidden amongst extraneous \
information,
3 = the passage is dedicated to the query and contains the exact answer.

Important instruction: assign 1 if the passage is somewhat related to the topic but not completely, 2 if it \
presents something very important related to the entire topic but also has some extra information, and 3 if it \
only and entirely refers to the topic. If none of these holds, assign 0.

Query: {query}
Passage: {passage}

Split this problem into steps: consider the underlying intent of the search; measure how well the content matches a \
likely intent of the query (M); measure how trustworthy the passage is (T); consider the aspects above and their \
relative importance, and decide on a final score (O). Answer with the final score only, on the last line, as \
"##final score: " followed by the score, with no further text."""
_FINAL = re.compile(r"##\s*final\s+score\s*:\s*\**\s*([0-3])\b", re.IGNORECASE)


def prompt(question: str, passage: str) -> str:
    return USER_PROMPT.format(query=" ".join(question.split()), passage=" ".join(passage.split())[:MAX_PASSAGE_CHARS])


def parse_score(text: str) -> int:
    """The 0-3 score of a reply: its last "##final score: N" (or a reply that is only the digit); ValueError
    otherwise, so that the client asks again."""
    found = _FINAL.findall(text)
    if found:
        return int(found[-1])
    bare = text.strip().strip("*#. ")
    if bare in {"0", "1", "2", "3"}:
        return int(bare)
    raise ValueError("no '##final score: N' (N 0 to 3) in the reply")


def judge_name(model: str) -> str:
    return f"{contract.LLM_JUDGE_PREFIX}{model}"


def check_model(config: Config, model: str | None) -> None:
    """ConfigError (exit 2) when the judge model is one a monitored pipeline uses, naming the key that uses it."""
    refused = monitored_judge(config, model)
    if refused:
        raise ConfigError(f"{config.file or 'the config'}: judging.model: {refused}")


# --- agreement with the humans --------------------------------------------------------------------------------


@dataclass(frozen=True)
class HumanAgreement:
    """The LLM's suggestions against the humans' judgments of the same (question, document, text)."""

    n: int  # pairs both judged
    kappa: float  # graded 0-2 (NaN with no pairs, or when both give one grade to everything)
    kappa_binary: float  # relevant (grade > 0) or not

    def describe(self) -> str:
        if not self.n:
            return "LLM pre-label: no pair both the LLM and a human judged yet, so no agreement to show"
        fmt = lambda k: "n/a" if math.isnan(k) else f"{k:.2f}"  # noqa: E731
        return (f"LLM pre-label: kappa {fmt(self.kappa)} with the human judgments over {self.n} pairs "
                f"(relevant or not: {fmt(self.kappa_binary)})")


def agreement_pairs(judgments: Sequence[Judgment]) -> list[tuple[int, int]]:
    """(human grade, LLM grade) of each (question, document, content hash) both judged: each side's latest."""
    human: dict[tuple[str, str, str], int] = {}
    llm: dict[tuple[str, str, str], int] = {}
    for j in judgments:
        (human if j.human else llm)[(j.question_id, j.doc_id, j.content_hash)] = j.grade
    return [(grade, llm[key]) for key, grade in human.items() if key in llm]


def human_agreement(judgments: Sequence[Judgment]) -> HumanAgreement:
    pairs = agreement_pairs(judgments)
    humans, llms = [h for h, _ in pairs], [g for _, g in pairs]
    return HumanAgreement(len(pairs), cohen_kappa(humans, llms),
                          cohen_kappa([h > 0 for h in humans], [g > 0 for g in llms]))


# --- labelling the queue --------------------------------------------------------------------------------------


@dataclass
class PrelabelResult:
    model: str
    queued: int  # pairs in the queue
    already: int  # of them, with this model's suggestion on the text shown
    labelled: list[Judgment] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # one line per pair that got no suggestion, with why
    left: int = 0  # pairs not tried (the limit, the budget, or the endpoint given up)
    note: str = ""

    @property
    def attempted(self) -> int:
        return len(self.labelled) + len(self.failed)


def _texts(data_dir: Path, pairs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """The stored text of each (doc id, content hash)."""
    found: dict[tuple[str, str], str] = {}
    with Corpus.in_dir(data_dir, readonly=True) as corpus:
        for doc_id in dict.fromkeys(d for d, _ in pairs):
            for _, digest, text in corpus.versions(doc_id):
                found[(doc_id, digest)] = text
    return found


def prelabel(config: Config, questions: Mapping[str, GoldQuestion], *, limit: int | None = None,
             client=None, progress: Callable[[int, int], None] | None = None) -> PrelabelResult:
    """Suggest a grade for each queued pair without this model's suggestion on its text (at most `limit`), in
    the queue's order, each appended to the ledger as it comes. An endpoint failure is counted per pair (never
    raised); GIVE_UP_AFTER consecutive unreachable pairs, or the call budget, end it with a note. ConfigError for
    no endpoint or model, or a monitored model; JudgeError for an API key variable that is not set."""
    from pipeline.answers import client as endpoint

    settings = judging_endpoint(config)
    model = settings.model
    check_model(config, model)
    data_dir = config.data_dir
    judgments = ledger.read_judgments(data_dir)
    queue = ledger.queue(review.read_pool(data_dir), judgments)
    name = judge_name(model)
    done = {(j.question_id, j.doc_id, j.content_hash) for j in judgments if j.judge == name}
    todo = [(q, d, h) for q, d, h in zip(queue[contract.QUESTION_ID], queue[contract.DOC_ID],
                                         queue[contract.CONTENT_HASH]) if (q, d, h) not in done]
    result = PrelabelResult(model, len(queue), len(queue) - len(todo))
    if limit is not None:
        result.left, todo = max(0, len(todo) - limit), todo[:limit]
    if not todo:
        return result
    texts = _texts(data_dir, [(d, h) for _, d, h in todo])
    own = client is None
    client = client or endpoint.Client(settings, data_dir, section="judging")
    streak = 0
    try:
        for n, (question_id, doc_id, content_hash) in enumerate(todo):
            where = f"({question_id}, {doc_id})"
            question, text = questions.get(question_id), texts.get((doc_id, content_hash))
            if question is None or text is None:
                result.failed.append(f"{where}: " + ("the question is not in the gold set" if question is None
                                                      else "the text shown is not in the corpus"))
                continue
            try:
                score = client.chat(model, SYSTEM_PROMPT, prompt(question.question, text), parse_score)
            except endpoint.BudgetExhausted:
                result.left += len(todo) - n
                result.note = f"judging.max_calls ({config.judging.max_calls}) spent: the rest is left unlabelled"
                break
            except (endpoint.Unreachable, endpoint.Unparseable) as error:
                result.failed.append(f"{where}: {error}")
                streak = streak + 1 if isinstance(error, endpoint.Unreachable) else 0
                if streak >= GIVE_UP_AFTER:
                    result.left += len(todo) - n - 1
                    result.note = (f"{GIVE_UP_AFTER} pairs in a row found the endpoint unreachable: given up, the "
                                   "rest is left unlabelled")
                    break
                continue
            streak = 0
            suggestion = Judgment(question_id, doc_id, UMBRELA_TO_GRADE[score], name, ledger.now(), content_hash)
            ledger.append_judgments(data_dir, [suggestion])
            result.labelled.append(suggestion)
            if progress:
                progress(n + 1, len(todo))
    finally:
        if own:
            client.close()
    return result
