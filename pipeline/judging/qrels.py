"""The maintained qrels, their versions, and the history re-scored with them.

The frozen gold set (`config.gold`) keeps its series (metrics.csv, per_question.csv) exactly as the runs wrote them.
The maintained qrels are that gold set plus the humans' latest judgments in judgments.jsonl (an `llm:` judgment
never counts) plus the accepted drafted questions: a human judgment of a (question, document) pair sets that
document's grade for the question (grade 0: judged not relevant, which counts as judged for unjudged@k).

Each distinct maintained qrels (the SHA-256 of its sorted content) is a version: qrels_versions.csv gains a row when
the qrels change, and never rewrites one. The maintained series (maintained_metrics.csv: metrics.csv's columns and
the version) holds every metric of pipeline/metrics.py per run date, pipeline and k, re-scored from the stored
rankings (per_question.csv's `retrieved` lists, and added_per_question.csv's rows when that file exists) with the
current maintained qrels: no retrieval runs again. `update` is the daily job's step (under its run journal, which
keeps both files whole: `store.WHOLE_PARTS`); `rescore` is `driftwatch rescore`."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

import pandas as pd

from pipeline import contract, metrics, store
from pipeline.config import Config
from pipeline.gold import GoldQuestion, load_gold
from pipeline.judging import ledger

log = logging.getLogger(__name__)

VERSION_LABEL = "qrels v{}"  # how a chart and a message name a version


def _accepted_questions(config: Config) -> list[GoldQuestion]:
    """The drafted questions accepted in review (pipeline/judging/questions.py): their rows come from
    added_per_question.csv, which the run writes for the dates on or after their document's first day."""
    from pipeline.judging import questions  # the drafting module loads the LLM client: only when maintained

    return questions.accepted_gold(Path(config.data_dir))


@dataclass(frozen=True)
class Maintained:
    """The maintained qrels: its questions (the gold set's order, then the accepted ones), the human judgments
    applied (the latest of each pair whose question is known) and its hash."""

    questions: tuple[GoldQuestion, ...]
    n_judgments: int
    digest: str

    @property
    def qrels(self) -> dict[str, dict[str, int]]:
        return {q.id: dict(q.relevant) for q in self.questions}

    @property
    def n_relevant(self) -> int:
        return sum(len(q.relevant_ids) for q in self.questions)


def qrels_hash(questions: Sequence[GoldQuestion]) -> str:
    """The SHA-256 of the qrels' sorted content (question ids and each one's sorted grades): its identity."""
    content = sorted((q.id, sorted(q.relevant.items())) for q in questions)
    return hashlib.sha256(json.dumps(content, ensure_ascii=False).encode()).hexdigest()


def apply_judgments(gold: Sequence[GoldQuestion], judgments: Sequence[ledger.Judgment]
                    ) -> tuple[list[GoldQuestion], int]:
    """The questions with each pair's latest human judgment applied (its grade overrides or extends the question's
    grades), and how many judgments were applied; a judgment of a question not in `gold` is left out (logged)."""
    latest = ledger.latest(judgments, human=True)
    grades = {q.id: dict(q.relevant) for q in gold}
    applied, unknown = 0, set()
    for (question_id, doc_id), judgment in latest.items():
        if question_id not in grades:
            unknown.add(question_id)
            continue
        grades[question_id][doc_id] = judgment.grade
        applied += 1
    if unknown:
        log.warning("%s: judgments of %d questions not in the gold set are left out of the maintained qrels (%s)",
                    contract.JUDGMENTS, len(unknown), ", ".join(sorted(unknown)[:5]))
    return [GoldQuestion(q.id, q.question, grades[q.id], q.tags) for q in gold], applied


def maintained(config: Config, judgments: Sequence[ledger.Judgment] | None = None) -> Maintained:
    """The maintained qrels of the configuration's data directory now."""
    if judgments is None:
        judgments = ledger.read_judgments(config.data_dir)
    gold = [*load_gold(config.gold), *_accepted_questions(config)]
    questions, applied = apply_judgments(gold, judgments)
    return Maintained(tuple(questions), applied, qrels_hash(questions))


def gold_lines(questions: Sequence[GoldQuestion]) -> str:
    """The qrels as a gold set (gold.jsonl lines, grades as objects): what a fresh evaluation with them reads."""
    return "".join(json.dumps({"id": q.id, "question": q.question, "relevant": dict(q.relevant),
                               "tags": list(q.tags)}, ensure_ascii=False) + "\n" for q in questions)


# --- reading what is stored ---------------------------------------------------------------------------------------

def read_versions(data_dir: Path) -> pd.DataFrame:
    return store.read(data_dir, contract.QRELS_VERSIONS)


def read_maintained(data_dir: Path) -> pd.DataFrame:
    return store.read(data_dir, contract.MAINTAINED_METRICS)


def _rankings(data_dir: Path, per_question: pd.DataFrame | None) -> pd.DataFrame:
    """The stored rankings: per_question.csv's rows (and added_per_question.csv's after them, when it exists)."""
    frame = store.read_per_question(data_dir) if per_question is None else per_question
    added = data_dir / contract.ADDED_PER_QUESTION
    if added.exists():
        extra = store.read(data_dir, contract.ADDED_PER_QUESTION)
        if len(extra):
            frame = pd.concat([frame, extra], ignore_index=True) if len(frame) else extra
    return frame


def _days(values) -> list[str]:
    return [store.iso_day(pd.Timestamp(d)) for d in values]


def _as_text(days: pd.Series) -> pd.Series:
    """A run_date column as YYYY-MM-DD text, each distinct day formatted once."""
    distinct = pd.unique(days)
    return days.map(dict(zip(distinct, _days(distinct))))


# --- scoring ------------------------------------------------------------------------------------------------------

def score(rankings: pd.DataFrame, qrels: dict[str, dict[str, int]], version: int) -> pd.DataFrame:
    """maintained_metrics.csv's rows of the stored rankings (per_question.csv's columns) scored with `qrels`, by
    pipeline/metrics.py's `evaluate` and `mean_rows`, as the run scores them: per run date and pipeline, each
    question's ranking is its `retrieved` at the largest k stored (every metric at k needs only the top k), in the
    order stored; a question not in the qrels is left out."""
    columns = list(contract.MAINTAINED_METRICS_COLUMNS)
    if rankings.empty:
        return pd.DataFrame(columns=columns)
    frame = rankings[rankings[contract.QUESTION_ID].isin(list(qrels))]
    out: list[dict] = []
    for (day, pipeline), rows in frame.groupby([contract.RUN_DATE, contract.PIPELINE], sort=True):
        ks = [int(k) for k in pd.unique(rows[contract.K])]
        deepest = rows[rows[contract.K] == max(ks)]
        deepest = deepest.drop_duplicates(contract.QUESTION_ID, keep="last")
        ids = list(deepest[contract.QUESTION_ID])
        ranked = [store.split_ids(r) if isinstance(r, str) else [] for r in deepest[contract.RETRIEVED]]
        result = metrics.evaluate(ranked, [qrels[q] for q in ids], ks)
        out += metrics.mean_rows(result, store.iso_day(pd.Timestamp(day)), pipeline, ks)
    scored = pd.DataFrame(out, columns=list(contract.METRICS_COLUMNS))
    scored[contract.VERSION] = version
    return scored[columns]


@dataclass(frozen=True)
class Rescore:
    """What an update or a re-score did: the version the series is scored with, whether it is new, the run dates
    scored (all of them on a new version), and the seconds taken."""

    version: int
    new_version: bool
    dates: tuple[str, ...]
    seconds: float
    previous: int | None = None
    notes: tuple[str, ...] = field(default=())

    def describe(self) -> str:
        head = (f"maintained qrels: {VERSION_LABEL.format(self.version)} (new; was "
                f"{VERSION_LABEL.format(self.previous) if self.previous else 'none'})" if self.new_version
                else f"maintained qrels: {VERSION_LABEL.format(self.version)} (unchanged)")
        span = f"{self.dates[0]}..{self.dates[-1]}" if len(self.dates) > 1 else "".join(self.dates) or "none"
        return f"{head}; re-scored {len(self.dates)} run dates ({span}) in {self.seconds:.2f} s"


def active(config: Config) -> bool:
    """The maintained series is kept once there is anything to maintain: a ledger with a human judgment, an
    accepted question, or a series already written."""
    data_dir = Path(config.data_dir)
    return ((data_dir / contract.MAINTAINED_METRICS).exists() or (data_dir / contract.QRELS_VERSIONS).exists()
            or any(j.human for j in ledger.read_judgments(data_dir)) or bool(_accepted_questions(config)))


def update(config: Config, run_date: date | str | None = None, *, per_question: pd.DataFrame | None = None,
           full: bool = False) -> Rescore | None:
    """Keep the maintained series up to date (the daily job calls it after alerts.csv, under its run journal):
    a new qrels version is recorded and the whole history re-scored; otherwise only the run dates the series lacks,
    and `run_date` (a re-run replaces its rankings), are scored. `full`: re-score every date anyway (`rescore`).
    maintained_metrics.csv is rewritten whole. None (nothing written) while there is nothing to maintain."""
    t0 = time.perf_counter()
    data_dir = Path(config.data_dir)
    if not full and not active(config):
        return None
    now = maintained(config)
    versions = read_versions(data_dir)
    rankings = _rankings(data_dir, per_question)
    stored_dates = sorted(_days(pd.unique(rankings[contract.RUN_DATE]))) if len(rankings) else []
    previous = int(versions[contract.VERSION].iloc[-1]) if len(versions) else None
    new_version = previous is None or versions[contract.QRELS_HASH].iloc[-1] != now.digest
    version = (previous or 0) + 1 if new_version else previous
    if new_version:
        last = store.iso_day(versions[contract.RUN_DATE].iloc[-1]) if len(versions) else ""
        day = max([*stored_dates[-1:], *([str(run_date)] if run_date else []), last]) or store.iso_day(date.today())
        store.add_rows(data_dir, contract.QRELS_VERSIONS, [{
            contract.RUN_DATE: day, contract.VERSION: version, contract.CREATED: ledger.now(),
            contract.N_QUESTIONS: len(now.questions), contract.N_JUDGMENTS: now.n_judgments,
            contract.N_RELEVANT: now.n_relevant, contract.QRELS_HASH: now.digest}])
    existing = read_maintained(data_dir)
    if len(existing):  # the days as written (YYYY-MM-DD text), converted once per distinct day
        existing = existing.assign(run_date=_as_text(existing[contract.RUN_DATE]))
    stale = len(existing) and (existing[contract.VERSION] != version).any()
    if new_version or full or stale or existing.empty:
        dates = stored_dates
    else:
        have = set(existing[contract.RUN_DATE])
        dates = sorted({d for d in stored_dates if d not in have} | ({str(run_date)} & set(stored_dates)))
    chosen = rankings[rankings[contract.RUN_DATE].isin(pd.to_datetime(dates))] if dates else rankings.iloc[:0]
    scored = score(chosen, now.qrels, version)
    kept = (existing[existing[contract.RUN_DATE].isin(set(stored_dates) - set(dates))]
            if len(existing) else existing)
    frame = pd.concat([f for f in (kept, scored) if len(f)], ignore_index=True) if len(kept) or len(scored) \
        else scored
    if len(frame) or (data_dir / contract.MAINTAINED_METRICS).exists() or new_version:
        frame = frame.sort_values(contract.RUN_DATE, kind="stable")
        store.write_table(data_dir, contract.MAINTAINED_METRICS, frame)
    return Rescore(version, new_version, tuple(dates), round(time.perf_counter() - t0, 3),
                   previous if new_version else None)


def rescore(config: Config, accept_edits: bool = False) -> Rescore | None:
    """`driftwatch rescore`: the whole history re-scored now with the current maintained qrels, under the run lock
    and a run journal of the latest run date (a kill leaves both files as they were), then sealed."""
    data_dir = Path(config.data_dir)
    runs = store.read_runs(data_dir)
    day = store.iso_day(runs[contract.RUN_DATE].max()) if len(runs) else store.iso_day(date.today())
    with store.run_lock(data_dir), store.run_journal(data_dir, day, accept_edits):
        return update(config, full=True)  # nothing judged yet: version 1 is the gold set, its series the frozen one


# --- what the Trends chart draws -----------------------------------------------------------------------------------

def maintained_trend(maintained_frame: pd.DataFrame, metric: str, k: int, pipelines: Sequence[str]) -> pd.DataFrame:
    """The maintained series of metric@k for the pipelines: run_date, pipeline, value, version."""
    if maintained_frame.empty:
        return pd.DataFrame(columns=[contract.RUN_DATE, contract.PIPELINE, contract.VALUE, contract.VERSION])
    rows = maintained_frame[(maintained_frame[contract.METRIC] == metric) & (maintained_frame[contract.K] == k)
                            & maintained_frame[contract.PIPELINE].isin(list(pipelines))]
    return rows[[contract.RUN_DATE, contract.PIPELINE, contract.VALUE, contract.VERSION]].sort_values(
        [contract.PIPELINE, contract.RUN_DATE], kind="stable").reset_index(drop=True)


def version_marks(versions: pd.DataFrame) -> pd.DataFrame:
    """Each qrels version as a chart marker: run_date (the first run date it scored), label ("qrels v2"), and a
    note of what it holds."""
    if versions.empty:
        return pd.DataFrame(columns=[contract.RUN_DATE, "label", "note"])
    return pd.DataFrame({
        contract.RUN_DATE: versions[contract.RUN_DATE].values,
        "label": [VERSION_LABEL.format(int(v)) for v in versions[contract.VERSION]],
        "note": [f"{VERSION_LABEL.format(int(v))}: {int(j)} human judgments, {int(r)} relevant pairs, {int(q)} "
                 f"questions (recorded {c})" for v, j, r, q, c in zip(
                     versions[contract.VERSION], versions[contract.N_JUDGMENTS], versions[contract.N_RELEVANT],
                     versions[contract.N_QUESTIONS], versions[contract.CREATED])]})
