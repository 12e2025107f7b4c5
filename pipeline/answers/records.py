"""The answer layer's records and their vocabulary: an answer record (logged or generated) with its contexts, the
judge's verdicts on it, a human label, and the constants the rows, labels and alert rules share. Nothing here
reads or writes a file, so every other module of the package (and the alert rules) can import it cheaply."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.errors import DriftwatchError

LOGGED = "logged"  # the `pipeline` of logged answers
HEURISTIC, JUDGE = "heuristic", "judge"  # generation.csv's `source`
LOGGED_KEYS = ("question_id", "answer", "contexts", "run_date", "reference")
LABEL_COLUMNS = ("question_id", "run_date", "metric", "claim", "label", "note")
# Per metric: the labels a human may give, the first of each pair being the pass (claim-level labels for
# faithfulness have a claim's text in `claim`).
ANSWER_LABELS = {"faithfulness": ("faithful", "unfaithful"), "answer_relevance": ("relevant", "irrelevant"),
                 "refusal": ("answer", "refusal")}
SUPPORTED, CONTRADICTED, UNDETERMINED = "supported", "contradicted", "undetermined"
VERDICTS = (SUPPORTED, CONTRADICTED, UNDETERMINED)


# per_answer.csv's faithfulness_state
SCORED, NOT_JUDGED = "scored", "not_judged"
UNDETERMINED_PREFIX = "undetermined:"
NO_CLAIMS, REFUSAL, UNPARSEABLE, UNREACHABLE = "no_claims", "refusal", "unparseable", "unreachable"
NO_DETERMINABLE = "no_determinable"  # every claim undetermined: the context neither supports nor contradicts it

# per_answer.csv's layer
RETRIEVAL_MISS, GENERATION_MISS, BOTH_FINE = "retrieval_miss", "generation_miss", "both_fine"
LAYERS = (RETRIEVAL_MISS, GENERATION_MISS, BOTH_FINE)

# Thresholds that turn scores into the pass/fail the labels and the layer attribution compare.
K_PRECISION_MIN = 0.5  # heuristic: an answer with fewer of its content words in the context is unfaithful
QA_COSINE_MIN = 0.3  # heuristic: a question-answer cosine under this is an irrelevant answer
RELEVANCE_MIN = 0.5  # judge: a judged relevance under this is an irrelevant answer

HEURISTIC_METRICS = ("k_precision", "unsupported_facts", "citation_validity", "citation_missing", "refusal_rate",
                     "refusal_with_gold", "qa_cosine")
JUDGE_METRICS = ("faithfulness", "answer_relevance", "reverse_relevance")
JUDGED_WATCHED = ("faithfulness", "answer_relevance")  # watched by the alert rules once the judge is trusted
HEURISTIC_WATCHED = "k_precision"  # the heuristic the alert rules watch, while the heuristics pass their gate
WATCHED = (*JUDGED_WATCHED, HEURISTIC_WATCHED)


class AnswersError(DriftwatchError):
    """A logged-answers or labels file that cannot be used; the message names the file and line."""


@dataclass(frozen=True)
class Context:
    id: str
    text: str


@dataclass(frozen=True)
class AnswerRecord:
    """One answer to one gold question on one run: what the generator was given and what it said."""

    question_id: str
    question: str
    answer: str
    contexts: tuple[Context, ...]
    pipeline: str = LOGGED
    reference: str | None = None


@dataclass(frozen=True)
class Claim:
    claim: str
    verdict: str  # supported | contradicted | undetermined
    reason: str = ""


@dataclass(frozen=True)
class Judgement:
    """What the judge said of one record; every score None where it was not computed."""

    state: str = NOT_JUDGED  # per_answer.csv's faithfulness_state
    claims: tuple[Claim, ...] = ()
    refusal: bool | None = None
    answer_relevance: float | None = None
    reverse_relevance: float | None = None
    noncommittal: bool | None = None
    relevance_reason: str = ""
    reverse_questions: tuple[str, ...] = ()  # the questions the judge wrote for the answer

    @property
    def faithfulness(self) -> float | None:
        """supported / (supported + contradicted): undetermined claims are left out, and a record without a
        determinable claim has no score (its state says why)."""
        if self.state != SCORED:
            return None
        supported = sum(c.verdict == SUPPORTED for c in self.claims)
        return supported / (supported + sum(c.verdict == CONTRADICTED for c in self.claims))


def undetermined(reason: str) -> str:
    return UNDETERMINED_PREFIX + reason


@dataclass(frozen=True)
class Label:
    question_id: str
    run_date: str  # YYYY-MM-DD, or "" for every run date
    metric: str
    claim: str
    label: str
    note: str = ""
