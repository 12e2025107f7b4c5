"""The Judge page: the pool per run by reason (its chart), a review item's texts as literal Markdown with the shared
word runs highlighted, and the keys that press its buttons. The queue, the items and the writes are
pipeline/judging/review.py's, shared with `driftwatch judge`."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from pipeline import contract
from pipeline.judging import review
from pipeline.judging.ledger import Judgment
from pipeline.views import escape_markdown

HIGHLIGHT = "orange-background"  # Streamlit's Markdown colour directive for a shared run
POOL_COUNT_COLUMNS = [contract.RUN_DATE, contract.REASON, "pairs"]
# The buttons (their widget keys) and the keyboard shortcut of each (st.button's own: not while typing in a box).
GRADE_BUTTONS = {grade: f"judge_grade_{grade}" for grade in contract.JUDGMENT_GRADES}
SKIP_BUTTON = "judge_skip"
SHORTCUTS = {**{key: str(grade) for grade, key in GRADE_BUTTONS.items()}, SKIP_BUTTON: review.SKIP}
NAME_INPUT = "judge_name"


def pool_counts(pool: pd.DataFrame) -> pd.DataFrame:
    """Pairs pooled per run date and reason (run_date, reason, pairs), in the order of contract.POOL_REASONS."""
    if pool.empty:
        return pd.DataFrame(columns=POOL_COUNT_COLUMNS)
    counts = (pool.drop_duplicates([contract.RUN_DATE, contract.QUESTION_ID, contract.DOC_ID, contract.REASON])
              .groupby([contract.RUN_DATE, contract.REASON]).size().rename("pairs").reset_index())
    rank = {reason: i for i, reason in enumerate(contract.POOL_REASONS)}
    order = counts[contract.REASON].map(rank).fillna(len(rank))
    return counts.assign(_order=order).sort_values([contract.RUN_DATE, "_order"])[POOL_COUNT_COLUMNS].reset_index(
        drop=True)


def highlighted(spans: Sequence[review.Span]) -> str:
    """The spans as literal Markdown (feed text: every mark escaped), shared runs highlighted."""
    parts = []
    for span in spans:
        text = escape_markdown(span.text)
        if span.shared and text.strip():
            lead, core, trail = text[:len(text) - len(text.lstrip())], text.strip(), text[len(text.rstrip()):]
            text = f"{lead}:{HIGHLIGHT}[{core}]{trail}"
        parts.append(text)
    return "".join(parts)


def reasons_line(reasons: Sequence[str]) -> str:
    return ", ".join(review.REASON_LABELS.get(r, r) for r in reasons)


def prelabel_line(judgments: Sequence[Judgment]) -> str | None:
    """Under the progress, when the LLM pre-label has made suggestions: its kappa with the human judgments of the
    same texts ("LLM pre-label: kappa 0.66 with the human judgments over 120 pairs ..."); None without one."""
    from pipeline.judging import prelabel

    if all(j.human for j in judgments):
        return None
    return prelabel.human_agreement(judgments).describe()


DRAFTS_SHOWN = 20  # drafted questions listed on the page at once (the rest after these are reviewed)


def drafts_to_review(data_dir) -> list:
    """The drafted questions still to review (provenance generated), flagged ones last (QuestionError for a bad
    questions.jsonl, naming its line)."""
    from pipeline.judging import questions

    found = [d for d in questions.latest(data_dir).values() if d.provenance == contract.PROVENANCE_GENERATED]
    return sorted(found, key=lambda d: d.flagged)


def draft_caption(draft) -> str:
    found = (f"{draft.retriever} finds it at rank {draft.found_rank}" if draft.found_rank
             else f"flagged: {draft.retriever} does not find it in the top 10")
    return f"{draft.id} · from {draft.doc_id} ({draft.run_date}) · {found}"
